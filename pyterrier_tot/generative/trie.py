"""A prefix trie over tokenised identifiers: which token may come next, so decoding emits only valid ids."""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Sequence, Tuple


class IdTrie:
    """Token-id sequences (each ending with the end token) as a trie of dicts.

    ``allowed(prefix)`` lists the tokens that continue ``prefix`` towards some identifier (empty when the
    prefix leaves the trie or is already complete); ``allowed(prefix, exclude=seqs)`` leaves out the tokens
    that lead only to sequences in ``exclude`` (a list of names already given). ``prefix in trie`` /
    ``trie.complete(seq)`` test membership.
    """

    def __init__(self, sequences: Iterable[Sequence[int]] = ()):
        self.root: Dict[int, dict] = {}
        self._n = 0
        self._sizes: Dict[int, int] = {}
        for seq in sequences:
            self.add(seq)

    def add(self, seq: Sequence[int]) -> None:
        self._sizes.clear()
        node = self.root
        for tok in seq:
            node = node.setdefault(int(tok), {})
        if None not in node:
            node[None] = True  # marks a complete sequence (a dict key no token can take)
            self._n += 1

    def _node(self, prefix: Sequence[int]):
        node = self.root
        for tok in prefix:
            node = node.get(int(tok))
            if node is None:
                return None
        return node

    def allowed(self, prefix: Sequence[int], exclude: Sequence[Sequence[int]] = ()) -> List[int]:
        node = self._node(prefix)
        if node is None:
            return []
        tokens = [t for t in node if t is not None]
        if not exclude:
            return tokens
        p, n = tuple(int(t) for t in prefix), len(prefix)
        blocked: Dict[int, int] = {}
        for seq in {tuple(int(t) for t in e) for e in exclude}:
            if len(seq) > n and seq[:n] == p and self.complete(seq):
                blocked[seq[n]] = blocked.get(seq[n], 0) + 1
        return [t for t in tokens if blocked.get(t, 0) < self._size(node[t])]

    def _size(self, node: dict) -> int:
        """How many complete sequences lie under ``node`` (memoised until the next ``add``)."""
        key = id(node)
        if key not in self._sizes:
            self._sizes[key] = sum(1 if t is None else self._size(child) for t, child in node.items())
        return self._sizes[key]

    def complete(self, seq: Sequence[int]) -> bool:
        node = self._node(seq)
        return node is not None and None in node

    def __contains__(self, prefix: Sequence[int]) -> bool:
        return self._node(prefix) is not None

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Tuple[int, ...]]:
        stack = [((), self.root)]
        while stack:
            prefix, node = stack.pop()
            for tok, child in node.items():
                if tok is None:
                    yield prefix
                else:
                    stack.append((prefix + (tok,), child))

    def __repr__(self):
        return f"IdTrie({self._n} sequences)"
