"""A small, self-consistent slice of a book data set, for trying code out and for tests of the docs.

    ds = ptt.get_dataset("reddit-tomt-books", sample=30)   # 30 queries a split (train: 330), ~450 books
    ds.name                                                # 'reddit-tomt-books-sample30'

A sample keeps ``n`` seeded random queries of every split, except ``train``, which keeps ``n`` more than the
decomposition recipe's 300-query tuning slice so that :func:`~pyterrier_tot.tuned_pipeline` has queries to fit
its weights on and ``n`` to train on. Its corpus is the gold books of every kept query plus ``books`` other
books drawn at random (default ``2 * n``), so every kept query can still be answered. Everything a sample
builds is cached under its own name: the index folder (its corpus has its own fingerprint), the recipe's
fine-tuned base and fitted weights (their folders carry the data set's name), never under the full data's.

``$PYTERRIER_TOT_SAMPLE=n`` makes :func:`~pyterrier_tot.datasets.registry.get_dataset` sample every in-memory
book data set (not the streamed TREC ToT corpora): the docs runner of the test suite sets it, so the examples of
the documentation run as written on tiny data. A sampled data set says so in its name and its repr.
"""
from __future__ import annotations

import os
from typing import List, Optional

import pandas as pd

from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.books import Book

__all__ = ["SampledDataset", "sample_dataset", "env_sample", "SAMPLE_ENV"]

#: The environment variable that samples every data set :func:`get_dataset` returns.
SAMPLE_ENV = "PYTERRIER_TOT_SAMPLE"
#: Training queries a sample keeps beyond ``n``: the recipe's tuning slice
#: (:data:`pyterrier_tot.recipe.protocol.TUNING_QUERIES`; a test keeps the two equal).
TRAIN_EXTRA = 300


def env_sample() -> Optional[int]:
    """The sample size set by ``$PYTERRIER_TOT_SAMPLE`` (``None`` when unset or empty)."""
    raw = os.environ.get(SAMPLE_ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"${SAMPLE_ENV} must be a number of queries per split, not {raw!r}") from None
    if n < 1:
        raise ValueError(f"${SAMPLE_ENV} must be at least 1, not {n}")
    return n


class SampledDataset(BookDataset):
    """``n`` queries of each split of ``full`` (``train``: ``n + 300``), the gold books of those queries and
    ``books`` other books; named ``<full name>-sample<n>`` (plus ``-b<books>`` / ``-s<seed>`` when not the
    defaults), so nothing built on it is mistaken for the full data's."""

    def __init__(self, full: BookDataset, n: int, books: Optional[int] = None, seed: int = 0):
        if not isinstance(full, BookDataset):
            raise TypeError(f"sample: can only sample a BookDataset, not {type(full).__name__}")
        if getattr(full, "streaming", False):
            raise ValueError(f"sample: {full.name} streams its corpus; sampling it is not supported")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"sample: n must be a positive number of queries per split, not {n!r}")
        if books is not None and (not isinstance(books, int) or books < 0):
            raise ValueError(f"sample: books must be a number of books >= 0, not {books!r}")
        self.full, self.n, self.seed = full, n, seed
        self.extra_books = 2 * n if books is None else books
        self.splits = tuple(full.splits)
        suffix = "" if books is None else f"-b{books}"
        suffix += "" if seed == 0 else f"-s{seed}"
        self.name = f"{full.name}-sample{n}{suffix}"
        self._kept = {}

    def size(self, split: str) -> int:
        """How many queries the sample keeps of ``split``."""
        return self.n + TRAIN_EXTRA if split == "train" else self.n

    def _qids(self, split: str) -> set:
        if split not in self._kept:
            topics = self.full.get_topics(split)
            keep = topics.sample(n=min(self.size(split), len(topics)), random_state=self.seed)
            self._kept[split] = set(keep["qid"])
        return self._kept[split]

    def _load_topics(self, split: str) -> pd.DataFrame:
        topics = self.full.get_topics(split)
        return topics[topics["qid"].isin(self._qids(split))]  # in the full data set's order

    def _load_qrels(self, split: str) -> pd.DataFrame:
        qrels = self.full.get_qrels(split)
        return qrels[qrels["qid"].isin(self._qids(split))]

    def _gold(self) -> set:
        gold = set()
        for split in self.splits:
            qrels = self._load_qrels(split)
            if "label" in qrels.columns:
                qrels = qrels[qrels["label"] > 0]
            gold |= set(qrels["docno"].astype(str))
        return gold

    def _load_books(self) -> List[Book]:
        books = self.full.get_books()
        gold = self._gold()
        others = pd.Series([b.docno for b in books if b.docno not in gold], dtype=object)
        extra = set(others.sample(n=min(self.extra_books, len(others)), random_state=self.seed))
        return [b for b in books if b.docno in gold or b.docno in extra]  # in the full corpus's order

    def get_results(self, variant: Optional[str] = None) -> pd.DataFrame:
        """The full data set's candidate pools (BIRCO), cut to the kept queries and books."""
        if not hasattr(self.full, "get_results"):
            raise AttributeError(f"{self.full.name} has no get_results()")
        res = self.full.get_results(variant)
        docnos = {b.docno for b in self._books}
        keep = res["qid"].isin(self._qids(variant or self.splits[0])) & res["docno"].isin(docnos)
        return res[keep].reset_index(drop=True)

    def __repr__(self):
        return f"SampledDataset({self.full!r}, n={self.n}, books={self.extra_books}, seed={self.seed})"


def sample_dataset(full: BookDataset, n: int, books: Optional[int] = None, seed: int = 0) -> SampledDataset:
    """``n`` seeded random queries of each split of ``full`` (``train``: ``n + 300``), their gold books and
    ``books`` other books (default ``2 * n``): see :class:`SampledDataset`."""
    return SampledDataset(full, n, books, seed)
