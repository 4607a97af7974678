"""BIRCO's WhatsThatBook rerank task (CC BY-NC 4.0), from its ``dev.json``."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.util import shared_data_dir
from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.errors import DatasetUnavailableError

__all__ = ["BircoWtb"]


class BircoWtb(BookDataset):
    """BIRCO's WhatsThatBook rerank task (CC BY-NC 4.0): 57 queries, each with its own candidate pool.

    ``get_results()`` gives the candidate pool as a result frame (to rerank), ``get_qrels()`` the labels, and
    the corpus holds the 2,404 candidate descriptions (``text`` only; BIRCO has no titles).
    """

    name = "birco-wtb"
    splits = ("dev",)

    def __init__(self, path: Optional[str] = None):
        p = Path(path) if path else shared_data_dir() / "birco-wtb" / "dev.json"
        if p.is_dir():
            p = p / "dev.json"
        if not p.exists():
            raise DatasetUnavailableError(f"BIRCO WhatsThatBook file not found at {p}; pass path=...")
        self.path = p

    @functools.cached_property
    def _raw(self) -> Dict[str, Any]:
        with open(self.path, encoding="utf8") as f:
            raw = json.load(f)
        for key in ("query", "corpus", "qrel"):
            if key not in raw:
                raise ValueError(f"{self.path}: missing top-level key {key!r}")
        return raw

    def _load_books(self) -> List[Book]:
        return [Book(docno=k, text=v) for k, v in self._raw["corpus"].items()]

    def _load_topics(self, split: str) -> pd.DataFrame:
        return pd.DataFrame([{"qid": str(k), "query": v} for k, v in self._raw["query"].items()],
                            columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        rows = [{"qid": q, "docno": d, "label": int(float(label))}
                for q, pool in self._raw["qrel"].items() for d, label in pool.items()]
        return pd.DataFrame(rows, columns=["qid", "docno", "label"])

    def get_results(self, variant: Optional[str] = None) -> pd.DataFrame:
        """The candidate pool of every query (``qid, query, docno, text``), in the file's order, score 0."""
        self._check_split(variant or "dev")
        topics = self.get_topics("dev").set_index("qid")["query"]
        corpus = self._raw["corpus"]
        rows = [{"qid": q, "query": topics[q], "docno": d, "text": corpus.get(d, "")}
                for q, pool in self._raw["qrel"].items() for d in pool]
        df = pd.DataFrame(rows)
        df["score"] = 0.0
        return pt.model.add_ranks(df)
