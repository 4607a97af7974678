"""How a :class:`~pyterrier_tot.index.BookIndex` holds its corpus: in memory (a frame) or streamed to disk.

A small corpus (Reddit-TOMT: 2,679 books) is a pandas frame (:mod:`pyterrier_tot.corpus_frame`), written once as
``corpus.jsonl``. A large one (TREC ToT 2025: 6.4M Wikipedia pages) never is: it is streamed into the folder and
read back by docno (:mod:`pyterrier_tot.corpus_stream`). :class:`BookCorpus` is the document side of the index,
the same calls either way: ``books_of(docnos)``, ``docnos``, ``docs_iter()``, ``text_loader()``, and the fields
its BM25 reads by default (``bm25_fields``); a streamed index has no ``corpus`` frame
(:class:`StreamedCorpusError` says so).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot.bars import bar as progress_bar
from pyterrier_tot.corpus_frame import (  # noqa: F401  (the names other modules import from here: re-exported)
    BASE_FIELDS,
    COLUMNS,
    CORPUS_FILE,
    FieldsArg,
    book_frame,
    default_fields,
    fields_tuple,
    filled_fields,
    folder_of,
    joined_text,
    loadable_fields,
    read_stored,
    typed_frame,
)
from pyterrier_tot.corpus_identity import EXTRA_FIELDS, frame_fingerprint  # noqa: F401  (re-exported)
from pyterrier_tot.corpus_stream import (  # noqa: F401  (re-exported)
    DOCNOS_FILE,
    OFFSETS_FILE,
    ORDER_FILE,
    CorpusStore,
    LazyTextLoader,
    as_row,
    progress_to_stderr,
    stream_source,
    streams,
    write_stream,
)
from pyterrier_tot.datasets.books import BOOK_FIELDS, TEXT_FIELDS
from pyterrier_tot.errors import StreamedCorpusError, ToTError, UnknownDocnoError  # noqa: F401  (re-exported)
from pyterrier_tot.retrievers import TextLoader

__all__ = ["BookCorpus", "CorpusStore", "LazyTextLoader", "streams", "stream_source",
           "write_stream"]


def _joins(fields, column: Optional[str]) -> bool:
    """Whether ``text_loader(fields, column=column)`` without ``join=`` joins the fields into one column."""
    if column is not None or fields is None or isinstance(fields, tuple):
        return True
    return isinstance(fields, str) and fields != "*"


class BookCorpus:
    """The document side of :class:`~pyterrier_tot.index.BookIndex`: the same calls whether the corpus is a frame
    in memory (``_corpus``) or streamed to disk (``_store``, a :class:`CorpusStore`)."""

    _corpus: Optional[pd.DataFrame] = None
    _store: Optional[CorpusStore] = None
    _source = None
    _filled: Optional[Tuple[str, ...]] = None  # the book fields some book fills (None: not known yet)

    def _set_corpus(self, corpus: pd.DataFrame, name: str, fingerprint: str) -> None:
        self._corpus = corpus
        self._filled = None
        self.name = name
        self.fingerprint = fingerprint
        self._docno_pos = pd.Series(np.arange(len(corpus)), index=corpus["docno"].values)

    def _attach_store(self, meta: dict, name: Optional[str] = None) -> None:
        self._store = CorpusStore(self.path, meta["n_docs"], meta.get("corpus_bytes"))
        self._corpus, self._docno_pos = None, None
        # a folder streamed before the fields were recorded keeps the defaults it was built with
        self._filled = tuple(meta.get("filled", BASE_FIELDS))
        if name or not self._source:  # a build keeps the name it was given; an opened folder has its own
            self.name = name or meta.get("name", Path(self.path).name)
        self.fingerprint = meta["fingerprint"]

    @property
    def streamed(self) -> bool:
        """Whether the corpus is streamed to disk rather than held in memory as :attr:`corpus`."""
        return self._store is not None

    @property
    def corpus(self) -> pd.DataFrame:
        """The corpus frame (``docno`` + book fields); a streamed index has none (:class:`StreamedCorpusError`)."""
        if self._store is not None:
            raise StreamedCorpusError(f"{self!r} streams its {len(self)} documents from {CORPUS_FILE} and holds no "
                                      "corpus frame; use books_of(docnos), docnos, docs_iter() or text_loader()")
        return self._corpus

    @corpus.setter
    def corpus(self, value: pd.DataFrame) -> None:
        self._corpus = value
        self._filled = None

    @property
    def bm25_fields(self) -> Tuple[str, ...]:
        """The book fields that ``bm25()``, ``bm25_scorer()`` and ``pisa_index()`` read when given no ``fields=``:
        title and text, and the author too where any book has one (so "the book by ..." finds it). A corpus without
        authors (Reddit-TOMT, TREC ToT) keeps title + text, the index folders and the scores it always had; so does
        a streamed folder written before the fields it fills were recorded. Dense retrieval reads title + text
        unless told otherwise (the bi-encoders the library trains learn books as title + text)."""
        if self._filled is None:
            self._filled = filled_fields(self._corpus)
        return default_fields(self._filled)

    def _bm25_fields(self, fields: Optional[FieldsArg]) -> Tuple[str, ...]:
        """``fields`` as a tuple to index; None: :attr:`bm25_fields`."""
        return self.bm25_fields if fields is None else fields_tuple(fields)

    @property
    def docnos(self) -> pd.Index:
        """Every docno, in corpus order (for a streamed index, read from disk on first use)."""
        return self._store.docnos if self._store is not None else self._docno_pos.index

    def __len__(self):
        return len(self._store) if self._store is not None else len(self._corpus)

    def field_text(self, fields: FieldsArg = BASE_FIELDS, max_chars: Optional[int] = None) -> pd.Series:
        """The indexed text of every book (fields joined by newlines), by corpus order (not for a streamed index:
        its ``text_loader`` reads only the books in a result frame)."""
        fields = fields_tuple(fields)
        if self._store is not None:
            raise StreamedCorpusError(f"{self!r}: field_text would load every document into memory; use "
                                      "text_loader(), books_of(docnos) or docs_iter()")
        text = self.corpus[list(fields)].astype(str).agg("\n".join, axis=1).str.strip()
        if max_chars:
            text = text.str.slice(0, max_chars)
        return text

    def docs_iter(self, fields: FieldsArg = BASE_FIELDS, max_chars: Optional[int] = None) -> Iterator[dict]:
        """``{"docno", "text"}`` per book in corpus order (a streamed corpus is read from disk as it goes)."""
        if self._store is not None:
            fields = fields_tuple(fields)
            for row in self._store.iter_rows():
                yield {"docno": row["docno"], "text": joined_text((row,), fields, max_chars)[0]}
            return
        for docno, text in zip(self.corpus["docno"], self.field_text(fields, max_chars)):
            yield {"docno": docno, "text": text}

    def text_loader(self, fields: Union[FieldsArg, None] = None, max_chars: Optional[int] = None,
                    column: Optional[str] = None, *, join: Optional[bool] = None,
                    verbose: bool = False) -> pt.Transformer:
        """A transformer adding the books' text to a result frame, in one of two forms.

        - **One column per field** (PyTerrier's text-loader convention, what ``pt.text.get_text(index, ["title",
          "author"])`` asks for): ``fields`` a list, e.g. ``index.text_loader(["title", "author", "year"])``, or
          ``"*"`` for every book field. Text fields are strings (``""`` where a book has none, each cut at
          ``max_chars``), ``year`` is ``Int64`` (``<NA>`` where unknown).
        - **One joined text** (what the re-rankers read): ``fields`` joined by newlines, stripped and cut at
          ``max_chars``, in ``column`` (default ``text``). This is the form of the default call (title + text),
          of one field given as a string, of a tuple of fields (as ``bm25(fields=...)`` names the text an index
          reads), and of any call naming ``column=``.

        ``join=True`` / ``join=False`` picks the form explicitly. Only the books in the frame are read (a streamed
        corpus too); a docno not in the corpus raises :class:`UnknownDocnoError` naming it. ``verbose`` is taken
        for PyTerrier's ``HasTextLoader`` protocol; loading is a lookup, with no progress bar."""
        join = _joins(fields, column) if join is None else bool(join)
        if join:
            fields = BASE_FIELDS if fields is None else fields
            names = (fields,) if isinstance(fields, str) else tuple(fields)
            bad = [f for f in names if f in BOOK_FIELDS and f not in TEXT_FIELDS]
            if bad:
                raise ValueError(f"text_loader: cannot join field(s) {bad} into one text (text fields are "
                                 f"{', '.join(TEXT_FIELDS)}); a list of fields (or join=False) adds each as its own "
                                 "column")
            args = (fields_tuple(fields), max_chars, column or "text")
        elif column is not None:
            raise ValueError("text_loader: column= names the one joined column; with join=False each field is a "
                             "column named after it")
        else:
            args = (loadable_fields(fields), max_chars, None, False)
        return (LazyTextLoader if self._store is not None else TextLoader)(self, *args)

    def books_of(self, docnos: Iterable[str], missing: str = "raise") -> pd.DataFrame:
        """Rows of the corpus frame for ``docnos`` (unknown docnos raise :class:`UnknownDocnoError`, a KeyError;
        ``missing="skip"`` leaves them out instead)."""
        if missing not in ("raise", "skip"):
            raise ValueError(f"books_of: missing must be 'raise' or 'skip', not {missing!r}")
        if self._store is not None:
            return self._store.books_of(docnos, missing)
        docnos = list(docnos)
        unknown = [d for d in docnos if d not in self._docno_pos.index]
        if unknown and missing == "raise":
            raise UnknownDocnoError(f"docno(s) not in the corpus: {unknown[:5]}")
        docnos = [d for d in docnos if d in self._docno_pos.index] if unknown else docnos
        return self.corpus.iloc[self._docno_pos[docnos].values].reset_index(drop=True)

    def _progress(self, docs: Iterable, desc: str, file=None) -> Iterable:
        """The progress of an index build over the books (encoding a few thousand books with a large model takes
        minutes on a CPU; a streamed corpus takes hours)."""
        return progress_bar(docs, total=len(self), desc=f"{self.name}: {desc}", unit="doc", file=file)
