"""Retrieval backbones over a book corpus: BM25 (pyterrier-pisa) and dense (pyterrier-dr), on one field or
several, with indexes built once into a folder and re-opened afterwards.

    index = ptt.BookIndex(ptt.get_dataset("reddit-tomt-books"))  # under ~/.cache/pyterrier_tot/indexes/<name>
    bm25 = index.bm25()                           # title + text, and the author where books have one
    dense = index.dense()                         # title + text, MiniLM (offline package)
    scorers = index.bm25_scorer() ** index.dense_scorer()    # re-score a ranking (``**``, ``+``)
    readable = bm25 >> index.text_loader(["title", "author", "year"])  # one column per book field
    again = pt.Artifact.load(index.path)          # the same index, without the dataset

The folder is a ``pt.Artifact`` (type ``book_index``): ``pt_meta.json``, ``corpus.jsonl`` and one sub-folder per
backend + fields + model (:mod:`pyterrier_tot.index.parts`; built by :mod:`pyterrier_tot.index.bm25` and
:mod:`pyterrier_tot.index.dense`), each with a ``pt_meta.json`` recording its settings and corpus fingerprint.
Folders are written atomically under an OS lock (a second process waits and reuses the work; a killed build's
leftovers go). A large corpus is streamed (``stream=True``, the default for TREC ToT;
:mod:`pyterrier_tot.index.corpus_stream`): retrievers read only the pages asked for, and ``corpus`` / ``field_text``
raise ``StreamedCorpusError``.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing import artifact as art
from pyterrier_tot._plumbing.artifact import META_FILE, ToTArtifact, own_meta, read_meta
from pyterrier_tot._plumbing.util import cache_folder
from pyterrier_tot.checks import check_int
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.console import quiet_native_output
from pyterrier_tot.datasets.books import BOOK_FIELDS, TEXT_FIELDS
from pyterrier_tot.errors import CorruptArtifactError, StreamedCorpusError, UnknownDocnoError
from pyterrier_tot.index import bm25 as bm25_index
from pyterrier_tot.index import corpus_stream as cs
from pyterrier_tot.index import dense as dense_index
from pyterrier_tot.index.corpus import (
    BASE_FIELDS,
    COLUMNS,
    CORPUS_FILE,
    FieldsArg,
    TextLoader,
    book_frame,
    default_fields,
    fields_tuple,
    filled_fields,
    folder_of,
    frame_fingerprint,
    joined_text,
    loadable_fields,
    read_stored,
)
from pyterrier_tot.index.corpus_stream import CorpusStore, LazyTextLoader
from pyterrier_tot.index.encoding import encoder_for as _encoder
from pyterrier_tot.index.parts import IndexParts, slug
from pyterrier_tot.index.retrievers import BM25Scorer, DenseRetriever, DenseScorer, SafeRetriever

__all__ = ["BookIndex", "BookCorpus"]


# The document side: the corpus in memory (a frame) or streamed to disk, the same calls either way.

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


class BookIndex(BookCorpus, IndexParts, ToTArtifact):
    """Indexes over one book corpus, kept in ``path`` (one sub-folder per backend + field set + model).

    ``BookIndex(books, path=None, name=None)`` builds (or re-opens) the index of ``books``: a
    :class:`~pyterrier_tot.datasets.BookDataset`, a book frame (``docno`` + book fields), or an iterable of
    :class:`~pyterrier_tot.datasets.books.Book`; ``stream`` streams the corpus to disk (default: the dataset
    decides; the document-side methods are :class:`~pyterrier_tot.index.book_index.BookCorpus`'s). ``BookIndex(path)``
    and ``pt.Artifact.load(path)`` open a saved folder without the dataset. A folder or part built for another
    corpus is rebuilt with a warning, never silently reused; a damaged one raises ``CorruptArtifactError`` naming
    it (a damaged folder in the library's cache is rebuilt). Processes sharing ``path`` build each part once
    (the others wait up to ``lock_timeout`` s, default ``$PYTERRIER_TOT_LOCK_TIMEOUT`` or an hour).
    """

    ARTIFACT_TYPE = "book_index"
    ARTIFACT_FORMAT = "pyterrier_tot"

    def __init__(self, books, path: Optional[Union[str, Path]] = None, name: Optional[str] = None,
                 lock_timeout: Optional[float] = None, stream: Optional[bool] = None):
        self.lock_timeout = lock_timeout
        self._store: Optional[CorpusStore] = None
        self._source = None  # (open the documents, their number when known, corpus key) while streaming
        if isinstance(books, (str, os.PathLike)):
            if path is not None:
                raise ValueError("BookIndex(path) opens a saved index; to build one pass the books and path=")
            super().__init__(books)
            self._open(name)
            return
        if cs.streams(books, stream):
            docs, total, default_name, key = cs.stream_source(books)
            if not (path or key):
                raise ValueError("BookIndex(books, stream=True): pass path= for a stream of books (a dataset or a "
                                 "frame names its own folder; an iterable cannot be told from another one)")
            # a streamed corpus is known by its key (no fingerprint before reading it all): the folder is reused
            # for the same key without reading the dataset again
            super().__init__(Path(path) if path else cache_folder(f"{slug(key)}-stream", under="indexes"))
            self.name, self.fingerprint, self._source = name or default_name, None, (docs, total, key)
            self._save_corpus()
            return
        frame, default_name = book_frame(books)
        if len(frame) == 0:
            raise ValueError("BookIndex: the corpus is empty")
        if frame["docno"].duplicated().any():
            dups = frame.loc[frame["docno"].duplicated(), "docno"].tolist()[:5]
            raise ValueError(f"BookIndex: duplicate docnos in the corpus, e.g. {dups}")
        corpus = frame.reset_index(drop=True)
        name = name or default_name
        folder, fingerprint = folder_of(corpus, (lambda fp: Path(path)) if path else (
            lambda fp: cache_folder(f"{slug(name)}-{fp}", under="indexes")))
        super().__init__(folder)
        self._set_corpus(corpus, name, fingerprint)
        self._save_corpus()

    # ------------------------------------------------------------------ the folder
    def _open(self, name: Optional[str]) -> None:
        path = Path(self.path)
        self._await_build(self.lock_timeout, "build it again with BookIndex(books, path=...)")
        self._check_type()
        meta = self.meta()
        if meta.get("streamed"):
            self._attach_store(meta, name)
            return
        try:
            corpus = read_stored(path, meta.get("columns"))
        except (OSError, ValueError) as e:
            raise art.damaged(path, CORPUS_FILE, e, "ptt.BookIndex(dataset, path=...)") from None
        # what a folder built before the other book fields counted holds
        legacy = frame_fingerprint(corpus, legacy=True)
        fingerprint = legacy if legacy == meta.get("fingerprint") else frame_fingerprint(corpus)
        if fingerprint != meta.get("fingerprint"):
            raise art.damaged(path, CORPUS_FILE, f"its fingerprint {fingerprint} is not {meta.get('fingerprint')} "
                              f"of {META_FILE}", "ptt.BookIndex(dataset, path=...)")
        self._set_corpus(corpus, name or meta.get("name", path.name), fingerprint)

    def _write_corpus(self, folder: Path) -> None:
        if self._source is not None:
            docs, total, key = self._source
            info = cs.write_stream(docs(), folder, total, desc=f"{self.name}: corpus")
            self._write_meta(folder, name=self.name, **info, columns=COLUMNS, corpus_file=CORPUS_FILE,
                             streamed=True, source=key)
            return
        tmp = folder / f".{CORPUS_FILE}.tmp"
        self.corpus.to_json(tmp, orient="records", lines=True, force_ascii=False)
        os.replace(tmp, folder / CORPUS_FILE)
        # written last: a folder with pt_meta.json has its whole corpus
        self._write_meta(folder, name=self.name, fingerprint=self.fingerprint, n_docs=len(self),
                         columns=[str(c) for c in self.corpus.columns], corpus_file=CORPUS_FILE)

    def _matches(self) -> bool:
        found = own_meta(Path(self.path), self.ARTIFACT_TYPE)
        if self._source is not None:
            return (bool(found) and bool(found.get("streamed")) and found.get("source") == self._source[2]
                    and (Path(self.path) / CORPUS_FILE).is_file())
        return (bool(found) and found.get("fingerprint") == self.fingerprint
                and (Path(self.path) / CORPUS_FILE).is_file())

    def _save_corpus(self) -> None:
        """Write the corpus into the folder once; a folder holding another corpus is replaced (with a warning)."""
        path = Path(self.path)
        if not self._matches():
            with art.build_lock(path, self.lock_timeout):
                if not self._matches():  # else another process wrote it while this one waited
                    self._write_folder(path)
        if self._source is not None:
            self._attach_store(read_meta(path))

    def _write_folder(self, path: Path) -> None:
        try:
            kind = read_meta(path).get("type") if (path / META_FILE).is_file() else None
        except CorruptArtifactError:
            if not art.in_cache(path):  # a folder the user named: theirs to delete, never overwritten unasked
                raise
            warnings.warn(f"{path}: its {META_FILE} is damaged; rebuilding this cached index", stacklevel=4)
            kind = self.ARTIFACT_TYPE
        else:
            if kind is not None and kind != self.ARTIFACT_TYPE:
                raise FileExistsError(f"{path} holds a {kind!r} artifact, not a book index")
            if kind is not None:
                warnings.warn(f"{path} holds the index of another corpus; rebuilding it", stacklevel=4)
        if kind is None and path.is_dir() and any(path.iterdir()):
            # an index folder from version 0.1 (sub-indexes with manifests, no corpus): keep its sub-indexes
            self._write_corpus(path)
            return
        overwrite = path.is_dir()  # the old index, a damaged cached one, or an empty folder made by the caller
        with art.building(path, overwrite=overwrite) as tmp:
            self._write_corpus(tmp)

    def __repr__(self):
        kind = "pages, streamed" if self._store is not None else "books"
        return f"BookIndex({self.name!r}, {len(self)} {kind}, path={str(self.path)!r})"

    # ------------------------------------------------------------------ BM25 (PISA)
    def pisa_index(self, fields: Optional[FieldsArg] = None, stemmer: str = "porter2"):
        """The PISA index over ``fields`` (default :attr:`bm25_fields`; built on first use, re-opened
        afterwards)."""
        return bm25_index.pisa_index(self, self._bm25_fields(fields), stemmer)

    def bm25(self, fields: Optional[FieldsArg] = None, num_results: int = 1000, k1: float = 1.2,
             b: float = 0.75, query_algorithm: str = "maxscore", stemmer: str = "porter2") -> pt.Transformer:
        """BM25 over ``fields`` (default :attr:`bm25_fields`: title + text, and the author where the books have
        one; k1=1.2, b=0.75 follow the TREC ToT papers; ``maxscore`` suits long queries). Queries are tokenised
        safely first; the original text is kept in ``query``. ``(index.bm25() % k).compile()`` retrieves ``k``
        results directly."""
        check_int(num_results, "num_results", "BookIndex.bm25")
        fields = self._bm25_fields(fields)
        index = self.pisa_index(fields, stemmer)
        bm25_index.prepare_bm25(self, index, fields, stemmer, k1, b)
        with quiet_native_output():  # PISA builds the scored index on first use and reports progress
            retr = index.bm25(k1=k1, b=b, num_results=num_results, query_algorithm=query_algorithm)
            retr(pd.DataFrame({"qid": ["_warmup"], "query": ["the"]}))
        made_by = (self, "bm25", (), {"fields": fields, "k1": k1, "b": b, "query_algorithm": query_algorithm,
                                      "stemmer": stemmer})
        return SafeRetriever(retr, f"BM25({'+'.join(fields)}, k1={k1}, b={b})", num_results=num_results,
                             made_by=made_by)

    def bm25_scorer(self, fields: Optional[FieldsArg] = None, depth: Optional[int] = None,
                    unknown_docnos: str = "raise", **bm25_kwargs) -> pt.Transformer:
        """BM25 re-scoring of a result frame (:class:`~pyterrier_tot.index.retrievers.BM25Scorer`), for ``>>``, ``**``,
        ``+``, over the fields :meth:`bm25` reads. ``depth``: how deep each query is retrieved before the join
        (default the corpus: exact; streamed: 1,000)."""
        depth = depth or (1000 if self.streamed else len(self.docnos))
        retr = self.bm25(fields, num_results=depth, **bm25_kwargs)
        shown = retr.label if depth == 1000 else f"{retr.label[:-1]}, num_results={depth})"
        label = f"BM25Scorer({shown}, depth={depth})"  # the description its cache key has always held
        bm25_defaults = {"k1": 1.2, "b": 0.75, "query_algorithm": "maxscore", "stemmer": "porter2"}
        made_by = (self, "bm25_scorer", (), {**{k: v for k, v in retr.made_by[3].items()
                                                if k not in bm25_defaults or v != bm25_defaults[k]}, "depth": depth})
        return BM25Scorer(retr, self.docnos, label, unknown_docnos=unknown_docnos, made_by=made_by)

    def has_bm25(self, fields: Optional[FieldsArg] = None, stemmer: str = "porter2") -> bool:
        """Whether the PISA index over ``fields`` (default :attr:`bm25_fields`) is built; nothing is built."""
        fields = self._bm25_fields(fields)
        settings = {"backend": "pisa", "fields": list(fields), "stemmer": stemmer}
        return self._part(bm25_index.bm25_folder(fields, stemmer), settings, "index.pisa", warn=False)[1]

    # ------------------------------------------------------------------ dense (pyterrier-dr)
    def has_dense(self, model=None, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None,
                  precision: Optional[str] = None) -> bool:
        """Whether the dense index of ``model`` over ``fields`` is built (as :meth:`dense` would read it, at
        ``precision``, default fp32); nothing is loaded or encoded. A model folder that does not exist yet (a base
        still to train) has none."""
        from pyterrier_tot.models.loading import DEFAULT_MODEL

        model = dense_index.model_key(model) or DEFAULT_MODEL
        if Path(model).expanduser().is_absolute() and not Path(model).expanduser().exists():
            return False
        fields = fields_tuple(fields)
        books = dense_index.book_side(self, model, fields, max_chars, precision)
        if books is not None:  # a request encoder: its frozen catalogue's vectors (checked to be this index's)
            model, fields, max_chars, precision = books
        precision = precision or "fp32"
        settings = dense_index.part_settings(model, fields, max_chars, precision)
        return self._part(dense_index.dense_folder(model, fields, max_chars, precision), settings, "index.flex",
                          warn=False)[1] or dense_index.moved_part(self, model, fields, max_chars, precision,
                                                                   settings) is not None

    def flex_index(self, model=None, fields: FieldsArg = ("title", "text"),
                   max_chars: Optional[int] = None, encoder=None, workers: int = 1,
                   devices: Optional[Sequence[str]] = None, precision: Optional[str] = None):
        """The pyterrier-dr FlexIndex of ``model`` embeddings of ``fields`` (the first ``max_chars`` characters).
        ``model``: a sentence-transformers name or folder, or a :class:`~pyterrier_tot.models.BiEncoderModel`.
        ``precision``: ``"fp32"`` (default) or ``"bf16"`` (see the Speed page of the docs); it is part of the
        index's settings, so a bf16 index is never taken for an fp32 one (default: the precision of ``encoder``
        when given). ``workers`` / ``devices`` (e.g. ``["cuda:0",
        "cuda:1"]``) encode a new index with several processes
        (:class:`~pyterrier_tot.index.encoding.PooledDocEncoder`),
        ``workers=ptt.RayWorkers(n)`` with ``n`` actors on a Ray cluster (:mod:`pyterrier_tot.index.ray_encoding`); the
        index is the same, so either is ignored when it is already built. A request encoder trained against a frozen
        catalogue (:func:`~pyterrier_tot.recipe.frozen_catalogue.train_request_encoder`) has no book vectors of its
        own: its FlexIndex is that catalogue's (checked to be this index's), and nothing is encoded."""
        from pyterrier_tot.models.loading import DEFAULT_MODEL

        model = dense_index.model_key(model, encoder) or DEFAULT_MODEL
        books = dense_index.book_side(self, model, fields_tuple(fields), max_chars, precision)
        if books is not None:  # a request encoder's books are its frozen catalogue's vectors: nothing to encode
            model, fields, max_chars, precision = books
            encoder = None
        enc, precision = _encoder(model, encoder, precision)
        return dense_index.flex_index(self, model, fields_tuple(fields), max_chars, enc, precision, workers, devices)

    def _dense_parts(self, model, fields, max_chars, encoder, workers, devices, precision):
        """(the FlexIndex searched, the encoder of the requests, its precision): the model's own book vectors, or for
        a request encoder trained against a frozen catalogue that catalogue's (checked to be this index's)."""
        books = dense_index.book_side(self, model, fields, max_chars, precision)
        enc, precision = _encoder(model, encoder, precision if books is None else books[3])
        if books is None:
            return self.flex_index(model, fields, max_chars, encoder=enc, workers=workers, devices=devices,
                                   precision=precision), enc, precision
        book_model, book_fields, book_chars, precision = books
        return self.flex_index(book_model, book_fields, book_chars, workers=workers, devices=devices,
                               precision=precision), enc, precision

    def allow_transfer(self, model) -> "BookIndex":
        """Let ``model``, a request encoder trained against another corpus's frozen catalogue, search this corpus:
        its requests are searched against this index's vectors of the same book model (encoded here once, as for
        the zero-shot expert), as a fine-tuned model trained on one collection is applied to another. The book
        model is checked to be the one it was trained against (weights, configuration, fields, precision);
        nothing is fitted on these books, so say so when reporting. Without it a request encoder refuses every
        index but its own. :meth:`RecipeArtifact.transfer <pyterrier_tot.recipe.RecipeArtifact.transfer>` calls
        it for the recipe's request encoders. Returns this index."""
        books = dense_index.check_transfer(model)
        self.__dict__.setdefault(dense_index.TRANSFERRED, set()).add(books["digest"])
        return self

    def dense(self, model=None, fields: FieldsArg = ("title", "text"), num_results: int = 1000,
              max_chars: Optional[int] = None, backend: str = "numpy", encoder=None, workers: int = 1,
              devices: Optional[Sequence[str]] = None, precision: Optional[str] = None) -> pt.Transformer:
        """Dense retrieval with any sentence-transformers model name or local directory, or a trained
        :class:`~pyterrier_tot.models.BiEncoderModel` (``backend``: ``numpy`` exact search, or ``faiss`` flat
        inner-product index). ``fields``: title + text by default, also where books have authors (as the library's
        bi-encoders are trained; ``fields=("title", "author", "text")`` reads the author too).
        ``(index.dense() % k).compile()`` retrieves ``k`` results directly. ``precision="bf16"`` encodes books
        and queries in bfloat16; ``workers`` / ``devices``: encode the corpus with several processes (see
        :meth:`flex_index`)."""
        from pyterrier_tot.models.loading import DEFAULT_MODEL

        check_int(num_results, "num_results", "BookIndex.dense")
        fields = fields_tuple(fields)
        model = dense_index.model_key(model, encoder)
        flex, enc, precision = self._dense_parts(model, fields, max_chars, encoder, workers, devices, precision)
        if backend == "numpy":
            retr = flex.np_retriever(num_results=num_results)
        elif backend == "faiss":
            retr = flex.faiss_flat_retriever(drop_query_vec=True)
            retr.num_results = num_results  # the factory takes no num_results; the retriever honours it
        else:
            raise ValueError(f"backend must be 'numpy' or 'faiss', not {backend!r}")
        label = (f"Dense({Path(model or DEFAULT_MODEL).name}, {'+'.join(fields)}"
                 f"{dense_index.precision_label(precision)})")
        made_by = (self, "dense", (model or DEFAULT_MODEL,), {"fields": fields, "max_chars": max_chars,
                                                             "backend": backend, "precision": _shown(precision)})
        return SafeRetriever(DenseRetriever(enc.query_encoder(), retr, label, exact=True, made_by=made_by), label,
                             tokenise=False, num_results=num_results, made_by=made_by)

    def dense_scorer(self, model=None, fields: FieldsArg = ("title", "text"),
                     max_chars: Optional[int] = None, encoder=None, unknown_docnos: str = "raise",
                     workers: int = 1, devices: Optional[Sequence[str]] = None,
                     precision: Optional[str] = None) -> pt.Transformer:
        """Re-scores a result frame by cosine between query and stored book embeddings of ``fields`` (no
        re-encoding); a docno not in the corpus raises an error naming it
        (``unknown_docnos="nan"``: it scores NaN, with a warning). ``precision`` / ``workers`` / ``devices``: how
        the corpus is encoded (see :meth:`flex_index`)."""
        from pyterrier_tot.models.loading import DEFAULT_MODEL

        fields = fields_tuple(fields)
        model = dense_index.model_key(model, encoder)
        flex, enc, precision = self._dense_parts(model, fields, max_chars, encoder, workers, devices, precision)
        name = Path(model or DEFAULT_MODEL).name
        made_by = (self, "dense_scorer", (model or DEFAULT_MODEL,), {"fields": fields, "max_chars": max_chars,
                                                                    "precision": _shown(precision)})
        return DenseScorer(enc.query_encoder(), flex.np_scorer(), self.docnos,
                           f"DenseScorer({name}, {'+'.join(fields)}, max_chars={max_chars}"
                           f"{dense_index.precision_label(precision)})", unknown_docnos=unknown_docnos,
                           made_by=made_by)


def _shown(precision: Optional[str]) -> Optional[str]:
    """A precision as a repr shows it: the default (fp32) left out."""
    return None if precision in (None, "fp32") else precision
