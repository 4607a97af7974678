"""Your own books and requests as a data set, in Python: a catalogue from a DataFrame, a JSONL or a CSV file, and
requests with or without relevance judgements.

    books = pd.DataFrame({"docno": [...], "title": [...], "author": [...], "year": [...], "text": [...]})
    ds = ptt.own_catalogue(books, name="our-library")                            # books alone
    ds = ptt.own_catalogue("books.csv", topics={"test": requests})               # + requests, no judgements
    ds = ptt.own_catalogue("books.jsonl", topics={"train": t, "test": u}, qrels={"train": q})

A catalogue's columns are the book fields of :class:`~pyterrier_tot.datasets.books.Book`: ``docno`` (required:
a unique identifier), ``title``, ``text`` (a description or blurb), ``author``, ``year`` (a number, or text
holding one: "1996", "c. 1996"), ``genres`` (a string, or a list joined with commas), ``cover`` (an image URL or
path, for the cover ranker) and ``url``; any other column is ignored. Books need some text in ``title`` or
``text`` to be found. ``doc_id`` or ``id`` stand for ``docno`` in a file.

Requests are a DataFrame (or a JSONL / TSV file, as the CLI's configs read them) with ``qid`` and ``query``;
judgements are a DataFrame (``qid``, ``docno``, ``label``) or a TREC qrels file. Splits are yours to name;
the recipe's training reads ``train`` (see docs/own_catalogue.rst).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Union

import pandas as pd

from pyterrier_tot._plumbing.util import require_columns
from pyterrier_tot.datasets.base import BookDataset, read_jsonl, read_topics, read_trec_qrels
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.errors import BadInputError

__all__ = ["own_catalogue", "OwnCatalogue", "read_books", "example_catalogue"]


def example_catalogue() -> Path:
    """The example catalogue shipped with the package: 40 invented books (``docno``, ``title``, ``author``,
    ``year``, ``text``) as a CSV file, for the own-catalogue guide and notebook (``ptt.own_catalogue(
    ptt.example_catalogue())``)."""
    return Path(__file__).resolve().parent.parent / "resources" / "own_books.csv"

Frameish = Union[pd.DataFrame, str, Path]


def read_books(books: Frameish) -> pd.DataFrame:
    """A catalogue as a frame: a DataFrame as it is, a ``.jsonl`` / ``.json`` file (one book a line) or a
    ``.csv`` / ``.tsv`` file (a header row naming the columns)."""
    if isinstance(books, pd.DataFrame):
        frame = books.copy()
    else:
        path = Path(books).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"own_catalogue: no catalogue file {path}")
        if path.suffix in (".jsonl", ".json"):
            frame = pd.DataFrame(list(read_jsonl(path)))
        elif path.suffix in (".csv", ".tsv"):
            frame = pd.read_csv(path, sep="\t" if path.suffix == ".tsv" else ",", dtype={"docno": str})
        else:
            raise BadInputError(f"own_catalogue: {path} is neither .jsonl, .json, .csv nor .tsv")
    for alias in ("doc_id", "id"):
        if "docno" not in frame.columns and alias in frame.columns:
            frame = frame.rename(columns={alias: "docno"})
    require_columns(frame, ["docno"], "own_catalogue (the books)")
    return frame


def _topics(value: Frameish) -> pd.DataFrame:
    if isinstance(value, pd.DataFrame):
        require_columns(value, ["qid", "query"], "own_catalogue (the requests)")
        return value.astype({"qid": str}).reset_index(drop=True)
    return read_topics(Path(value).expanduser())


def _qrels(value: Frameish) -> pd.DataFrame:
    if isinstance(value, pd.DataFrame):
        require_columns(value, ["qid", "docno"], "own_catalogue (the judgements)")
        out = value.astype({"qid": str, "docno": str}).reset_index(drop=True)
        return out if "label" in out.columns else out.assign(label=1)
    return read_trec_qrels(Path(value).expanduser())


class OwnCatalogue(BookDataset):
    """A data set of your own books, requests and judgements (see the module docs and :func:`own_catalogue`)."""

    def __init__(self, books: Frameish, topics: Optional[Dict[str, Frameish]] = None,
                 qrels: Optional[Dict[str, Frameish]] = None, name: str = "my-books"):
        self.name = str(name)
        self._frame = read_books(books)
        self._topics = {str(k): _topics(v) for k, v in (topics or {}).items()}
        self._qrels = {str(k): _qrels(v) for k, v in (qrels or {}).items()}
        unknown = sorted(set(self._qrels) - set(self._topics))
        if unknown:
            raise BadInputError(f"own_catalogue: judgements for split(s) {unknown} that have no requests")
        self.splits = tuple(self._topics)
        docnos = set(self._frame["docno"].astype(str))
        for split, q in self._qrels.items():
            missing = sorted(set(q["docno"]) - docnos)
            if missing:
                raise BadInputError(f"own_catalogue: the {split!r} judgements name books not in the catalogue: "
                                    f"{missing[:5]}")

    def _load_books(self) -> List[Book]:
        return [Book.from_dict(d) for d in self._frame.to_dict("records")]

    def _load_topics(self, split: str) -> pd.DataFrame:
        return self._topics[split]

    def _load_qrels(self, split: str) -> pd.DataFrame:
        if split not in self._qrels:
            raise BadInputError(f"{self.name}: the {split!r} requests have no judgements (qrels={{{split!r}: ...}})")
        return self._qrels[split]


def own_catalogue(books: Frameish, topics: Optional[Union[Frameish, Dict[str, Frameish]]] = None,
                  qrels: Optional[Union[Frameish, Dict[str, Frameish]]] = None,
                  name: str = "my-books") -> OwnCatalogue:
    """Your books (a DataFrame, a JSONL or a CSV file), your requests and, when you have them, judgements, as a
    data set every stage and ``ptt.BookIndex`` take. ``topics`` / ``qrels``: one frame or file (the split
    ``test``), or ``{split: frame or file}``. ``name`` names the index folder and what is trained on it."""
    if topics is not None and not isinstance(topics, dict):
        topics = {"test": topics}
    if qrels is not None and not isinstance(qrels, dict):
        qrels = {"test": qrels}
    return OwnCatalogue(books, topics, qrels, name)
