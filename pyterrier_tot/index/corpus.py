"""A corpus held in memory and what identifies it: the book frame (``docno`` + the book fields, typed), its folder,
the fields it fills, its fingerprint, and the loader that adds books' text to a result frame.

A :class:`~pyterrier_tot.index.BookIndex` of a small corpus keeps it as one pandas frame: strings for the text
fields (``""`` where a book has none) and ``year`` as ``Int64`` (``<NA>`` where unknown), however the books came
(a frame, a dataset, :class:`~pyterrier_tot.datasets.books.Book` objects, or ``corpus.jsonl`` read back). Which
fields the corpus fills decides what its BM25 reads by default (:func:`default_fields`). The fingerprint
(:func:`frame_fingerprint`) is what makes two corpora the same for the indexes, vectors and fitted weights kept for
them. :class:`TextLoader` reads books by docno through the index (a streamed corpus:
:class:`~pyterrier_tot.index.corpus_stream.LazyTextLoader`).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import SettingsEquality, method_repr
from pyterrier_tot._plumbing.util import require_columns
from pyterrier_tot.checks import check_unique_pairs, unknown_docnos
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


#: Book fields besides title and text that experts read (the url is a link, never scored): part of a corpus's
#: fingerprint wherever a corpus fills any of them.
EXTRA_FIELDS = tuple(f for f in BOOK_FIELDS if f not in ("title", "text", "url"))


def cell(value, field: str = "") -> str:
    """One book field as the fingerprint reads it: missing as "", a year as its four digits."""
    if field == "year":  # 1996, 1996.0 and "1996" are one year
        value = parse_year(value)
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)


def frame_fingerprint(corpus: pd.DataFrame, legacy: bool = False) -> str:
    """The corpus's identity: its docnos, titles and texts, and the other book fields experts read (author, genres,
    year, cover) where any book has one, so a loader that fixes an author or a year makes another corpus (its
    indexes and fitted weights are not reused). A corpus of titles and texts alone keeps the fingerprint it always
    had; ``legacy``: the fingerprint of titles and texts alone (what folders built before the other fields counted
    recorded)."""
    digest = hashlib.sha1(
        "\n".join(corpus["docno"]).encode() + str(len(corpus)).encode()
        + hashlib.sha1(pd.util.hash_pandas_object(corpus[["title", "text"]], index=False).values.tobytes()).digest())
    extra = pd.DataFrame({f: [cell(v, f) for v in corpus[f]] for f in EXTRA_FIELDS if f in corpus.columns})
    if not legacy and len(extra.columns) and (extra != "").to_numpy().any():
        digest.update(b"fields:" + ",".join(extra.columns).encode()
                      + pd.util.hash_pandas_object(extra, index=False).values.tobytes())
    return digest.hexdigest()[:16]


def check_docnos(inp: pd.DataFrame, known: pd.Index, who: str) -> None:
    """Raise :class:`UnknownDocnoError` naming the docnos of ``inp`` missing from ``known``."""
    unknown_docnos(inp, known, who, "raise")


class TextLoader(SettingsEquality, pt.Transformer):
    """Adds the books of a result frame to it: ``fields`` joined by newlines (stripped, cut at ``max_chars``) into
    one ``column`` (``join=True``, the default: what the re-rankers read), or each of ``fields`` as its own column
    named after it (``join=False``: PyTerrier's text-loader convention; text fields as strings, ``""`` where a book
    has none, each cut at ``max_chars``; ``year`` as ``Int64``, ``<NA>`` where unknown). Built by
    :meth:`BookIndex.text_loader <pyterrier_tot.index.BookIndex.text_loader>`, which picks the form."""

    def __init__(self, index, fields: Tuple[str, ...], max_chars: Optional[int], column: Optional[str] = "text",
                 join: bool = True):
        self.index = index
        self.fields = fields
        self.max_chars = max_chars
        self.join = join
        self.column = column if join else None
        self._text = None

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp)
        out = inp.copy()
        if len(inp) == 0:
            for name, dtype in self._added():
                out[name] = pd.Series(dtype=dtype)
            return out
        check_unique_pairs(inp, repr(self))
        docnos = out["docno"].astype(str)
        if self.join:
            out[self.column] = self._texts(docnos).values
            return out
        books = self._books(docnos)
        for f in self.fields:
            out[f] = books[f].array  # by position; the array keeps the dtype (a year stays Int64)
        return out

    def _added(self) -> List[Tuple[str, object]]:
        """(column, dtype) of each column this loader adds."""
        if self.join:
            return [(self.column, str)]
        return [(f, "Int64" if f == "year" else str) for f in self.fields]

    def _texts(self, docnos: pd.Series) -> pd.Series:
        """The text of each of ``docnos`` (an error names unknown ones); the whole corpus's text is kept once."""
        if self._text is None:
            self._text = pd.Series(self.index.field_text(self.fields, self.max_chars).values,
                                   index=self.index.corpus["docno"].values)
        check_docnos(pd.DataFrame({"docno": docnos}), self._text.index, repr(self))
        return self._text.loc[docnos]

    def _books(self, docnos: pd.Series) -> pd.DataFrame:
        """The loaded fields of each of ``docnos``, row for row (an error names unknown ones). Only these books
        are read, through ``index.books_of``: a streamed corpus is never loaded whole."""
        wanted = pd.unique(docnos)
        books = self.index.books_of(wanted, missing="skip").drop_duplicates("docno").set_index("docno")
        check_docnos(pd.DataFrame({"docno": wanted}), books.index, repr(self))
        books = books.loc[docnos.to_numpy()]
        out = pd.DataFrame(index=books.index)
        for f in self.fields:
            if f == "year":
                out[f] = years(books[f])
                continue
            text = books[f].fillna("").astype(str)
            out[f] = text.str.slice(0, self.max_chars) if self.max_chars else text
        return out

    def settings(self) -> dict:
        """What changes the text it adds (:mod:`pyterrier_tot._plumbing.cache_key`), never the repr."""
        return {"fields": list(self.fields), "max_chars": self.max_chars, "column": self.column, "join": self.join}

    def __repr__(self):
        """The ``text_loader`` call that makes it: a tuple of fields joins them (``column`` where not ``text``), a
        list adds each as its column."""
        if not self.join:
            return method_repr(self.index, "text_loader", [list(self.fields)], {"max_chars": self.max_chars})
        return method_repr(self.index, "text_loader", [tuple(self.fields)],
                           {"max_chars": self.max_chars, "column": None if self.column == "text" else self.column})
