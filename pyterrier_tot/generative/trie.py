"""A prefix trie over tokenised identifiers: which token may come next, so decoding emits only valid ids."""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Sequence, Tuple


class IdTrie:
    """Token-id sequences (each ending with the end token) as a trie of dicts.

    ``allowed(prefix)`` lists the tokens that continue ``prefix`` towards some identifier (empty when the
    prefix leaves the trie or is already complete); ``prefix in trie`` / ``trie.complete(seq)`` test membership.
    """

    def __init__(self, sequences: Iterable[Sequence[int]] = ()):
        self.root: Dict[int, dict] = {}
        self._n = 0
        for seq in sequences:
            self.add(seq)

    def add(self, seq: Sequence[int]) -> None:
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

    def allowed(self, prefix: Sequence[int]) -> List[int]:
        node = self._node(prefix)
        return [] if node is None else [t for t in node if t is not None]

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
