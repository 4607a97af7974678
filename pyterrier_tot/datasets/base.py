"""The plumbing every loader shares: :class:`BookDataset` and the JSONL / TREC qrels readers."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.datasets.books import Book, book_iter, books_to_frame
from pyterrier_tot.errors import BadInputError

__all__ = ["BookDataset", "read_jsonl", "read_trec_qrels", "read_topics"]


def read_jsonl(path: Path) -> Iterator[Dict[str, Any]]:
    """The records of a JSON-lines file; blank lines are skipped, a bad line raises naming file and line."""
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e


def read_trec_qrels(path: Path) -> pd.DataFrame:
    """TREC qrels (``qid iter docno label``) as a PyTerrier qrels frame with string ids and int labels."""
    df = pd.read_csv(path, sep=r"\s+", names=["qid", "iter", "docno", "label"], dtype=str, engine="python")
    df["label"] = df["label"].astype(int)
    return df[["qid", "docno", "label"]].reset_index(drop=True)


def read_topics(path: Union[str, Path]) -> pd.DataFrame:
    """Topics from a JSONL file (``qid``/``query_id``/``id`` + ``query``, or ``title``/``text``) or a TSV file
    (``qid<TAB>query``), as ``qid, query`` with string qids."""
    path = Path(path)
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for d in read_jsonl(path):
            qid = next((d[k] for k in ("qid", "query_id", "id") if k in d), None)
            text = d.get("query") or "\n".join(str(d[k]) for k in ("title", "text") if d.get(k))
            if qid is None:
                raise BadInputError(f"{path}: a topic without qid/query_id/id: {str(d)[:80]}")
            rows.append({"qid": str(qid), "query": text})
        return pd.DataFrame(rows, columns=["qid", "query"])
    rows = [line.split("\t", 1) for line in path.read_text(encoding="utf8").splitlines()]
    bad = [n for n, r in enumerate(rows, 1) if len(r) != 2 or not r[0].strip()]
    if bad:
        raise BadInputError(f"{path}: line(s) {bad[:5]} are not 'qid<TAB>query' (a query spanning lines needs "
                            "a JSONL topics file)")
    return pd.DataFrame([(q.strip(), text) for q, text in rows], columns=["qid", "query"])


class BookDataset(pt.datasets.Dataset):
    """Base class: a corpus of :class:`~pyterrier_tot.datasets.books.Book` plus topics and qrels per split.

    A subclass sets ``name`` and ``splits`` and implements ``_load_books``, ``_load_topics(split)`` and
    ``_load_qrels(split)``; this class adds de-duplication, split checking and the PyTerrier accessors.
    """

    name = "books"
    splits: Sequence[str] = ()

    def _load_books(self) -> List[Book]:
        raise NotImplementedError

    def _load_topics(self, split: str) -> pd.DataFrame:
        raise NotImplementedError

    def _load_qrels(self, split: str) -> pd.DataFrame:
        raise NotImplementedError

    @functools.cached_property
    def _books(self) -> List[Book]:
        # A book listed twice (say as gold and as a negative) must not be indexed twice; the first copy wins.
        seen = set()
        out = []
        for b in self._load_books():
            if b.docno in seen:
                continue
            seen.add(b.docno)
            out.append(b)
        return out

    def _check_split(self, split: Optional[str]) -> str:
        if split is None:
            if len(self.splits) == 1:
                return self.splits[0]
            raise ValueError(f"{self.name}: name a split, one of {list(self.splits)}")
        if split not in self.splits:
            raise KeyError(f"{self.name}: unknown split {split!r}; available: {list(self.splits)}")
        return split

    def get_books(self) -> List[Book]:
        """The corpus as :class:`~pyterrier_tot.datasets.books.Book` objects (a new list each call)."""
        return list(self._books)

    def get_corpus_df(self) -> pd.DataFrame:
        """All books as a frame: ``docno`` + title, author, text, genres, year (Int64), cover, url."""
        return books_to_frame(self._books)

    def get_corpus_iter(self, verbose: bool = False, fields: Optional[List[str]] = None):
        """PyTerrier corpus iterator: dicts with ``docno`` and the book fields (or only ``fields``)."""
        it = book_iter(self._books, fields)
        if verbose:
            it = progress_bar(it, total=len(self._books), desc=f"{self.name} books", unit="book")
        return pt.utils.GeneratorLen(it, len(self._books)) if hasattr(pt.utils, "GeneratorLen") else it

    def get_topics(self, variant: Optional[str] = None) -> pd.DataFrame:
        """Topics of a split (``qid``, ``query``); ``variant`` may be left out when there is one split."""
        return self._load_topics(self._check_split(variant)).reset_index(drop=True)

    def get_qrels(self, variant: Optional[str] = None) -> pd.DataFrame:
        """Qrels of a split (``qid``, ``docno``, ``label``)."""
        return self._load_qrels(self._check_split(variant)).reset_index(drop=True)

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"
