"""A corpus held in memory: the book frame (``docno`` + the book fields, typed), its folder, and the fields it fills.

A :class:`~pyterrier_tot.index.BookIndex` of a small corpus keeps it as one pandas frame: strings for the text
fields (``""`` where a book has none) and ``year`` as ``Int64`` (``<NA>`` where unknown), however the books came
(a frame, a dataset, :class:`~pyterrier_tot.datasets.books.Book` objects, or ``corpus.jsonl`` read back). Which
fields the corpus fills decides what its BM25 reads by default (:func:`default_fields`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_tot._util import require_columns
from pyterrier_tot.corpus_identity import frame_fingerprint
from pyterrier_tot.datasets.books import BOOK_FIELDS, TEXT_FIELDS, Book, books_to_frame, parse_year

CORPUS_FILE = "corpus.jsonl"
COLUMNS = ["docno", *BOOK_FIELDS]
#: Book fields held as strings ("" where a book has none); ``year`` is the one number.
STRING_FIELDS = tuple(f for f in BOOK_FIELDS if f != "year")
#: What the retrievers read when no ``fields=`` is given: dense always, BM25 for a corpus without authors (every
#: folder built before the author counted, and every published number, used these).
BASE_FIELDS = ("title", "text")

FieldsArg = Union[str, Sequence[str]]


def fields_tuple(fields: FieldsArg) -> Tuple[str, ...]:
    """``fields`` (one name or several) as a tuple of text fields an index can be built over."""
    fields = (fields,) if isinstance(fields, str) else tuple(fields)
    if not fields:
        raise ValueError("name at least one book field")
    bad = [f for f in fields if f not in TEXT_FIELDS]
    if bad:
        raise ValueError(f"cannot index field(s) {bad}; text fields are {', '.join(TEXT_FIELDS)}")
    return fields


def loadable_fields(fields: Union[FieldsArg, None]) -> Tuple[str, ...]:
    """``fields`` as a tuple of book fields a text loader can add as columns: any of ``BOOK_FIELDS`` (``"*"``:
    all of them, PyTerrier's spelling)."""
    if fields is None or (isinstance(fields, str) and fields == "*"):
        return BOOK_FIELDS
    fields = (fields,) if isinstance(fields, str) else tuple(fields)
    if not fields:
        raise ValueError("name at least one book field")
    bad = [f for f in fields if f not in BOOK_FIELDS]
    if bad:
        raise ValueError(f"no book field(s) {bad}; book fields are {', '.join(BOOK_FIELDS)}")
    return fields


def default_fields(filled: Iterable[str]) -> Tuple[str, ...]:
    """The fields BM25 reads by default for a corpus that fills ``filled``: title and text, and the author where
    any book has one (a name is the rarest, surest word a user may remember)."""
    return ("title", "author", "text") if "author" in set(filled) else BASE_FIELDS


def filled_fields(corpus: pd.DataFrame) -> Tuple[str, ...]:
    """The book fields that at least one book of ``corpus`` fills (a non-blank string, a known year)."""
    out = []
    for f in BOOK_FIELDS:
        if f not in corpus.columns:
            continue
        col = corpus[f]
        filled = col.notna() if f == "year" else col.fillna("").astype(str).str.strip() != ""
        if filled.any():
            out.append(f)
    return tuple(out)


def filled_in(row: Dict[str, Any]) -> List[str]:
    """The book fields one corpus record fills (as :func:`filled_fields` counts them)."""
    return [f for f in BOOK_FIELDS if row.get(f) is not None and (f == "year" or str(row.get(f)).strip())]


def years(values: Iterable) -> pd.api.extensions.ExtensionArray:
    """Publication years as ``Int64`` (1996, 1996.0 and "1996" are one year; anything else is ``<NA>``)."""
    return pd.array([parse_year(y) for y in values], dtype="Int64")


def typed_frame(rows, columns=None) -> pd.DataFrame:
    """Corpus rows read back from JSON as a typed book frame (string fields, ``year`` as Int64)."""
    corpus = pd.DataFrame(rows, columns=columns)
    corpus["docno"] = corpus["docno"].astype(str)
    for f in STRING_FIELDS:
        if f in corpus.columns:
            corpus[f] = corpus[f].fillna("").astype(str)
    if "year" in corpus.columns:
        corpus["year"] = years(corpus["year"])
    return corpus


def book_frame(books) -> Tuple[pd.DataFrame, str]:
    """(the corpus frame of ``books``, a default name): a book frame, a dataset or an iterable of books."""
    if isinstance(books, pd.DataFrame):
        require_columns(books, ["docno"], "BookIndex")
        frame = books.copy()
        for f in BOOK_FIELDS:
            if f not in frame.columns:
                frame[f] = pd.NA if f == "year" else ""
        frame = frame[COLUMNS]
        frame["docno"] = frame["docno"].astype(str)
        for f in STRING_FIELDS:
            frame[f] = frame[f].fillna("").astype(str)
        # typed as a folder reads it back (the fingerprint reads a year the same either way)
        frame["year"] = years(frame["year"])
        return frame, "frame"
    if hasattr(books, "get_corpus_df"):
        return books.get_corpus_df(), getattr(books, "name", type(books).__name__)
    return books_to_frame(b if isinstance(b, Book) else Book.from_dict(b) for b in books), "books"


def read_stored(folder: Path, columns=None) -> pd.DataFrame:
    """The corpus frame an index folder holds (its ``corpus.jsonl``, typed)."""
    with open(Path(folder) / CORPUS_FILE, encoding="utf8") as f:
        return typed_frame([json.loads(line) for line in f if line.strip()], columns)


def folder_of(corpus: pd.DataFrame, folder_for: Callable[[str], Path]) -> Tuple[Path, str]:
    """(the index folder of ``corpus``, its fingerprint): ``folder_for(fingerprint)``, except that a folder built
    before the other book fields counted (recording the titles-and-texts fingerprint) that holds this very corpus,
    other fields included, is kept with the fingerprint it recorded, so its sub-indexes and fitted weights stay
    valid instead of being rebuilt."""
    fingerprint, legacy = frame_fingerprint(corpus), frame_fingerprint(corpus, legacy=True)
    old = folder_for(legacy)
    if legacy != fingerprint and (old / CORPUS_FILE).is_file() and (old / "pt_meta.json").is_file():
        try:
            meta = json.loads((old / "pt_meta.json").read_text(encoding="utf8"))
            if meta.get("fingerprint") == legacy:
                if frame_fingerprint(read_stored(old, meta.get("columns"))) == fingerprint:
                    return old, legacy
        except (OSError, ValueError, AttributeError):  # unreadable: built again as usual
            pass
    return folder_for(fingerprint), fingerprint


def joined_text(rows: Iterable[Dict[str, Any]], fields: Tuple[str, ...], max_chars: Optional[int]) -> List[str]:
    """``fields`` of each record joined by newlines and stripped, cut at ``max_chars`` (as ``field_text``)."""
    out = []
    for r in rows:
        text = "\n".join("" if r.get(f) is None else str(r.get(f)) for f in fields).strip()
        out.append(text[:max_chars] if max_chars else text)
    return out
