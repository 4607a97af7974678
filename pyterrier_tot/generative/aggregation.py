"""From chapter-level identifiers to books: the parallel and the serial aggregation of the paper.

Both start from the book-level decode: ``s_b(q, b)``, the likelihood (``exp`` of the summed log-probability) of
book ``b``'s book-id.

- **parallel** (:func:`parallel_scores`): a second, independent decode over the trie of *all* chapter-ids gives a
  list of chapter-ids; ``s_c(q, b)`` is how many of them belong to ``b``, and ``score = s_b * s_c``. A book
  that is only in one of the two lists scores 0 (the retriever ranks ties by ``s_b``).
- **serial** (:func:`serial_scores`): for each book of the book-level list, a decode over that book's own
  chapter trie; ``s_c(q, b)`` is the sum of the likelihoods of the chapter-ids found, and
  ``score = beta * s_b + gamma * s_c`` (``beta = 1``, ``gamma = 0.5`` by default).

The functions take plain dicts so they can be checked by hand; the generative retriever calls them when its
model holds chapter-ids and ``aggregation`` is set.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Dict, Iterable, Mapping

BETA, GAMMA = 1.0, 0.5


def parallel_scores(book_loglik: Mapping[str, float], chapter_hits: Iterable[str]) -> Dict[str, float]:
    """``s_b * s_c`` per book. ``book_loglik``: docno → log-likelihood of its book-id from the book decode;
    ``chapter_hits``: the docno of each chapter-id the chapter decode returned (repeats count)."""
    counts = Counter(chapter_hits)
    books = set(book_loglik) | set(counts)
    return {b: (math.exp(book_loglik[b]) if b in book_loglik else 0.0) * counts.get(b, 0) for b in books}


def serial_scores(book_loglik: Mapping[str, float], chapter_loglik: Mapping[str, Iterable[float]],
                  beta: float = BETA, gamma: float = GAMMA) -> Dict[str, float]:
    """``beta * s_b + gamma * s_c`` per book of the book-level list; ``chapter_loglik``: docno → the
    log-likelihoods of the chapter-ids its own decode returned."""
    return {b: beta * math.exp(ll) + gamma * sum(math.exp(c) for c in chapter_loglik.get(b, ()))
            for b, ll in book_loglik.items()}
