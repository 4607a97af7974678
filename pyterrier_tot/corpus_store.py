"""How a :class:`~pyterrier_tot.index.BookIndex` holds its corpus: in memory (a frame) or streamed to disk.

A small corpus (Reddit-TOMT: 2,679 books) is a pandas frame, written once as ``corpus.jsonl``. A large one
(TREC ToT 2025: 6.4M Wikipedia pages) never is: its documents are streamed from the dataset's iterator
straight into ``corpus.jsonl`` (with a progress bar), and the folder gains three ``.npy`` files so that a page
can be read back by docno without loading the others::

    corpus.offsets.npy   byte offset of each line of corpus.jsonl (one more at the end: the file's size)
    corpus.docnos.npy    the docnos, sorted (bytes), searched by bisection
    corpus.order.npy     the corpus position of each sorted docno

All three are memory-mapped, so opening a streamed index costs nothing however large it is.
:class:`CorpusStore` answers ``books_of(docnos)`` and ``docnos`` from them and re-reads ``corpus.jsonl`` for
the PISA and dense indexes; a streamed index has no ``corpus`` frame (:class:`StreamedCorpusError` says so).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import require_columns
from pyterrier_tot.bars import bar as progress_bar
from pyterrier_tot.corpus_identity import EXTRA_FIELDS, frame_fingerprint  # noqa: F401  (re-exported)
from pyterrier_tot.corpus_identity import cell as _cell
from pyterrier_tot.datasets.books import BOOK_FIELDS, Book, books_to_frame, parse_year
from pyterrier_tot.errors import StreamedCorpusError, ToTError, UnknownDocnoError  # noqa: F401  (re-exported)
from pyterrier_tot.policy import unknown_docnos
from pyterrier_tot.retrievers import TextLoader

__all__ = ["BookCorpus", "CorpusStore", "LazyTextLoader", "streams", "stream_source",
           "write_stream"]

CORPUS_FILE = "corpus.jsonl"
OFFSETS_FILE = "corpus.offsets.npy"
DOCNOS_FILE = "corpus.docnos.npy"
ORDER_FILE = "corpus.order.npy"
COLUMNS = ["docno", *BOOK_FIELDS]
TEXT_FIELDS = ("title", "author", "text", "genres", "cover", "url")


# ---------------------------------------------------------------------- the in-memory corpus
FieldsArg = Union[str, Sequence[str]]


def fields_tuple(fields: FieldsArg) -> Tuple[str, ...]:
    fields = (fields,) if isinstance(fields, str) else tuple(fields)
    if not fields:
        raise ValueError("name at least one book field")
    bad = [f for f in fields if f not in BOOK_FIELDS or f in ("year", "cover", "url")]
    if bad:
        raise ValueError(f"cannot index field(s) {bad}; text fields are title, author, text, genres")
    return fields


def typed_frame(rows, columns=None) -> pd.DataFrame:
    """Corpus rows read back from JSON as a typed book frame (string fields, ``year`` as Int64)."""
    corpus = pd.DataFrame(rows, columns=columns)
    corpus["docno"] = corpus["docno"].astype(str)
    for f in TEXT_FIELDS:
        if f in corpus.columns:
            corpus[f] = corpus[f].fillna("").astype(str)
    if "year" in corpus.columns:
        corpus["year"] = pd.array([parse_year(y) for y in corpus["year"]], dtype="Int64")
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
        for f in TEXT_FIELDS:
            frame[f] = frame[f].fillna("").astype(str)
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


# ---------------------------------------------------------------------- choosing and reading a stream
def streams(books, stream: Optional[bool] = None) -> bool:
    """Whether ``BookIndex(books)`` streams: ``stream`` when given, else when the dataset asks for it
    (``streaming = True``, as :class:`~pyterrier_tot.datasets.TrecTot` does) or only offers a corpus iterator
    (any PyTerrier dataset without ``get_corpus_df``)."""
    if stream is not None:
        return bool(stream)
    if isinstance(books, pd.DataFrame):
        return False
    if getattr(books, "streaming", False):
        return True
    return hasattr(books, "get_corpus_iter") and not hasattr(books, "get_corpus_df")


def stream_source(books) -> Tuple[Callable[[], Iterable], Optional[int], str, str]:
    """(a function opening the documents, their number when known, a display name, the corpus key).
    The key names the corpus the folder holds; the splits of one collection share it."""
    if isinstance(books, pd.DataFrame):
        key = f"frame-{frame_fingerprint(book_frame(books)[0])}"
        return (lambda: books.to_dict("records")), len(books), "frame", key
    name = str(getattr(books, "name", None) or getattr(books, "_irds_id", None) or type(books).__name__)
    key = str(getattr(books, "corpus_id", name))
    if hasattr(books, "get_corpus_iter"):
        total = books.docs_count() if hasattr(books, "docs_count") else None
        return books.get_corpus_iter, total, name, key
    total = len(books) if hasattr(books, "__len__") else None
    return (lambda: books), total, "books", ""  # no key: the caller must name the folder


def as_row(doc: Any) -> Dict[str, Any]:
    """A corpus record (``docno`` + book fields) from a Book, a book dict or an ir_datasets-style record."""
    if isinstance(doc, Book):
        return {"docno": doc.docno, **{f: getattr(doc, f) for f in BOOK_FIELDS}}
    d = doc._asdict() if hasattr(doc, "_asdict") else dict(doc)
    d.setdefault("docno", d.get("doc_id", d.get("id")))
    if not d.get("title"):
        d["title"] = d.get("page_title") or ""
    book = Book.from_dict(d)
    return {"docno": book.docno, **{f: getattr(book, f) for f in BOOK_FIELDS}}


def write_stream(docs: Iterable, folder: Path, total: Optional[int] = None, desc: str = "corpus") -> Dict[str, Any]:
    """Stream ``docs`` into ``folder/corpus.jsonl`` plus the docno lookup; returns the metadata to record
    (``n_docs``, ``fingerprint``, ``corpus_bytes``). Duplicate docnos raise ``ValueError`` naming some."""
    folder = Path(folder)
    tmp = folder / f".{CORPUS_FILE}.tmp"
    digest = hashlib.sha1()
    docnos: List[bytes] = []
    offsets = [0]
    with open(tmp, "wb") as f:
        for doc in progress_bar(docs, total=total, desc=desc, unit="doc"):
            row = as_row(doc)
            docno = row["docno"].encode("utf8")
            digest.update(docno + b"\0" + row["title"].encode("utf8") + b"\0" + row["text"].encode("utf8") + b"\n")
            extra = [_cell(row.get(f), f) for f in EXTRA_FIELDS]
            if any(extra):  # the other book fields count where a book has any (as frame_fingerprint's)
                digest.update(b"\1" + "\0".join(extra).encode("utf8") + b"\n")
            f.write(json.dumps(row, ensure_ascii=False).encode("utf8") + b"\n")
            docnos.append(docno)
            offsets.append(f.tell())
    if not docnos:
        tmp.unlink()
        raise ValueError("BookIndex: the corpus is empty")
    keys = np.array(docnos, dtype=f"S{max(len(d) for d in docnos)}")
    del docnos
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    dup = ordered[1:] == ordered[:-1]
    if dup.any():
        tmp.unlink()
        raise ValueError(f"BookIndex: duplicate docnos in the corpus, e.g. "
                         f"{[d.decode() for d in ordered[1:][dup][:5]]}")
    np.save(folder / OFFSETS_FILE, np.array(offsets, dtype=np.int64))
    np.save(folder / DOCNOS_FILE, ordered)
    np.save(folder / ORDER_FILE, order.astype(np.int64))
    os.replace(tmp, folder / CORPUS_FILE)
    digest.update(str(len(order)).encode())
    return {"n_docs": int(len(order)), "fingerprint": digest.hexdigest()[:16], "corpus_bytes": int(offsets[-1])}


@contextlib.contextmanager
def progress_to_stderr():
    """A text stream on the real stderr, so that a progress bar shows while ``quiet_native_output`` silences
    fd 2 (PISA's own logs); None where stderr has no file descriptor."""
    try:
        sys.stderr.flush()
        fd = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        yield None
        return
    with os.fdopen(fd, "w") as f:
        yield f


# ---------------------------------------------------------------------- reading a streamed corpus back
class CorpusStore:
    """A streamed corpus on disk: ``corpus.jsonl`` read by docno through memory-mapped lookup arrays."""

    def __init__(self, folder, n_docs: int, corpus_bytes: Optional[int] = None):
        self.folder = Path(folder)
        self.n_docs = int(n_docs)
        size = (self.folder / CORPUS_FILE).stat().st_size
        if corpus_bytes is not None and size != corpus_bytes:
            raise ValueError(f"{self.folder}/{CORPUS_FILE} has {size} bytes, not the {corpus_bytes} recorded in "
                             "pt_meta.json; the folder was changed or damaged")
        self._offsets = np.load(self.folder / OFFSETS_FILE, mmap_mode="r")
        self._sorted = np.load(self.folder / DOCNOS_FILE, mmap_mode="r")
        self._order = np.load(self.folder / ORDER_FILE, mmap_mode="r")
        if len(self._offsets) != self.n_docs + 1 or len(self._sorted) != self.n_docs:
            raise ValueError(f"{self.folder}: the docno lookup does not match the {self.n_docs} documents recorded")
        self._docnos: Optional[pd.Index] = None

    def __len__(self):
        return self.n_docs

    @property
    def docnos(self) -> pd.Index:
        """Every docno in corpus order (built on first use: about 70 bytes per document in memory)."""
        if self._docnos is None:
            by_position = np.empty(self.n_docs, dtype=self._sorted.dtype)
            by_position[self._order] = self._sorted
            self._docnos = pd.Index(np.char.decode(by_position, "utf8").astype(object))
        return self._docnos

    def positions(self, docnos: Iterable[str]) -> np.ndarray:
        """The corpus position of each docno, -1 where the corpus has none."""
        keys = [str(d).encode("utf8") for d in docnos]
        out = np.full(len(keys), -1, dtype=np.int64)
        if not keys:
            return out
        width = self._sorted.dtype.itemsize
        fits = np.array([len(k) <= width for k in keys])  # a longer key would be cut to a false match
        query = np.array([k if ok else b"" for k, ok in zip(keys, fits)], dtype=self._sorted.dtype)
        at = np.minimum(np.searchsorted(self._sorted, query), self.n_docs - 1)
        hit = fits & (self._sorted[at] == query)
        out[hit] = self._order[at[hit]]
        return out

    def rows(self, positions: Iterable[int]) -> List[Dict[str, Any]]:
        with open(self.folder / CORPUS_FILE, "rb") as f:
            out = []
            for p in positions:
                f.seek(int(self._offsets[p]))
                out.append(json.loads(f.read(int(self._offsets[p + 1] - self._offsets[p]))))
            return out

    def books_of(self, docnos: Iterable[str], missing: str = "raise") -> pd.DataFrame:
        docnos = [str(d) for d in docnos]
        pos = self.positions(docnos)
        if (pos < 0).any() and missing == "raise":
            raise UnknownDocnoError(f"docno(s) not in the corpus: {[d for d, p in zip(docnos, pos) if p < 0][:5]}")
        return typed_frame(self.rows(pos[pos >= 0]), COLUMNS)

    def iter_rows(self) -> Iterator[Dict[str, Any]]:
        """Every record, in corpus order, one line at a time."""
        with open(self.folder / CORPUS_FILE, encoding="utf8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def joined_text(rows: Iterable[Dict[str, Any]], fields: Tuple[str, ...], max_chars: Optional[int]) -> List[str]:
    """``fields`` of each record joined by newlines and stripped, cut at ``max_chars`` (as ``field_text``)."""
    out = []
    for r in rows:
        text = "\n".join("" if r.get(f) is None else str(r.get(f)) for f in fields).strip()
        out.append(text[:max_chars] if max_chars else text)
    return out


class LazyTextLoader(TextLoader):
    """Adds the text of each result's book (``fields`` joined, cut at ``max_chars``) as ``column``, reading only
    the books in the results: the text loader of a streamed index."""

    def _texts(self, docnos: pd.Series) -> pd.Series:
        wanted = pd.unique(docnos)
        store = self.index._store
        pos = store.positions(wanted)
        unknown_docnos(pd.DataFrame({"docno": wanted[pos < 0]}), pd.Index([]), repr(self))
        return pd.Series(joined_text(store.rows(pos), self.fields, self.max_chars), index=wanted).loc[docnos]

    def __repr__(self):
        return f"TextLoader({'+'.join(self.fields)}, max_chars={self.max_chars}, streamed)"


class BookCorpus:
    """The document side of :class:`~pyterrier_tot.index.BookIndex`: the same calls whether the corpus is a frame
    in memory (``_corpus``) or streamed to disk (``_store``, a :class:`CorpusStore`)."""

    _corpus: Optional[pd.DataFrame] = None
    _store: Optional[CorpusStore] = None
    _source = None

    def _set_corpus(self, corpus: pd.DataFrame, name: str, fingerprint: str) -> None:
        self._corpus = corpus
        self.name = name
        self.fingerprint = fingerprint
        self._docno_pos = pd.Series(np.arange(len(corpus)), index=corpus["docno"].values)

    def _attach_store(self, meta: dict, name: Optional[str] = None) -> None:
        self._store = CorpusStore(self.path, meta["n_docs"], meta.get("corpus_bytes"))
        self._corpus, self._docno_pos = None, None
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

    @property
    def docnos(self) -> pd.Index:
        """Every docno, in corpus order (for a streamed index, read from disk on first use)."""
        return self._store.docnos if self._store is not None else self._docno_pos.index

    def __len__(self):
        return len(self._store) if self._store is not None else len(self._corpus)

    def field_text(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None) -> pd.Series:
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

    def docs_iter(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None) -> Iterator[dict]:
        """``{"docno", "text"}`` per book in corpus order (a streamed corpus is read from disk as it goes)."""
        if self._store is not None:
            fields = fields_tuple(fields)
            for row in self._store.iter_rows():
                yield {"docno": row["docno"], "text": joined_text((row,), fields, max_chars)[0]}
            return
        for docno, text in zip(self.corpus["docno"], self.field_text(fields, max_chars)):
            yield {"docno": docno, "text": text}

    def text_loader(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None,
                    column: str = "text") -> pt.Transformer:
        """A transformer adding the books' text (``fields`` joined, cut at ``max_chars``) to a result frame."""
        if self._store is not None:
            return LazyTextLoader(self, fields_tuple(fields), max_chars, column)
        return TextLoader(self, fields_tuple(fields), max_chars, column)

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
        """A streamed corpus shows its progress while an index is built (a small one is done in seconds)."""
        if self._store is None:
            return docs
        return progress_bar(docs, total=len(self), desc=f"{self.name}: {desc}", unit="doc", file=file)
