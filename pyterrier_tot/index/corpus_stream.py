"""A corpus streamed to disk: written once from a dataset's iterator, read back by docno without loading the others.

A large corpus (TREC ToT 2025: 6.4M Wikipedia pages) is never a frame in memory: its documents are streamed from
the dataset's iterator straight into ``corpus.jsonl`` (with a progress bar), and the folder gains three ``.npy``
files so that a page can be read back by docno::

    corpus.offsets.npy   byte offset of each line of corpus.jsonl (one more at the end: the file's size)
    corpus.docnos.npy    the docnos, sorted (bytes), searched by bisection
    corpus.order.npy     the corpus position of each sorted docno

All three are memory-mapped, so opening a streamed index costs nothing however large it is.
:class:`CorpusStore` answers ``books_of(docnos)`` and ``docnos`` from them and re-reads ``corpus.jsonl`` for
the PISA and dense indexes; :class:`LazyTextLoader` reads only the books of a result frame.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import pandas as pd

from pyterrier_tot.checks import unknown_docnos
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.datasets.books import BOOK_FIELDS, Book
from pyterrier_tot.errors import UnknownDocnoError
from pyterrier_tot.index.corpus import (
    COLUMNS,
    CORPUS_FILE,
    EXTRA_FIELDS,
    TextLoader,
    book_frame,
    filled_in,
    frame_fingerprint,
    joined_text,
    typed_frame,
)
from pyterrier_tot.index.corpus import cell as _cell

__all__ = ["CorpusStore", "LazyTextLoader", "streams", "stream_source", "write_stream"]

OFFSETS_FILE = "corpus.offsets.npy"
DOCNOS_FILE = "corpus.docnos.npy"
ORDER_FILE = "corpus.order.npy"

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
    (``n_docs``, ``fingerprint``, ``corpus_bytes``, and ``filled``: the book fields any document fills, which
    decide the default fields of its retrievers). Duplicate docnos raise ``ValueError`` naming some."""
    folder = Path(folder)
    tmp = folder / f".{CORPUS_FILE}.tmp"
    digest = hashlib.sha1()
    docnos: List[bytes] = []
    offsets = [0]
    filled = set()
    with open(tmp, "wb") as f:
        for doc in progress_bar(docs, total=total, desc=desc, unit="doc"):
            row = as_row(doc)
            docno = row["docno"].encode("utf8")
            digest.update(docno + b"\0" + row["title"].encode("utf8") + b"\0" + row["text"].encode("utf8") + b"\n")
            extra = [_cell(row.get(f), f) for f in EXTRA_FIELDS]
            if any(extra):  # the other book fields count where a book has any (as frame_fingerprint's)
                digest.update(b"\1" + "\0".join(extra).encode("utf8") + b"\n")
            f.write(json.dumps(row, ensure_ascii=False).encode("utf8") + b"\n")
            filled.update(filled_in(row))
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
    return {"n_docs": int(len(order)), "fingerprint": digest.hexdigest()[:16], "corpus_bytes": int(offsets[-1]),
            "filled": [f for f in BOOK_FIELDS if f in filled]}


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


class LazyTextLoader(TextLoader):
    """The :class:`~pyterrier_tot.index.retrievers.TextLoader` of a streamed index: it reads only the books in the
    results, in either form (one joined text, or one column per field)."""

    def _texts(self, docnos: pd.Series) -> pd.Series:
        wanted = pd.unique(docnos)
        store = self.index._store
        pos = store.positions(wanted)
        unknown_docnos(pd.DataFrame({"docno": wanted[pos < 0]}), pd.Index([]), repr(self))
        return pd.Series(joined_text(store.rows(pos), self.fields, self.max_chars), index=wanted).loc[docnos]
