"""Retrieval backbones over a book corpus: BM25 (pyterrier-pisa) and dense (pyterrier-dr), on one field or
several, with indexes built once into a folder and re-opened afterwards.

    index = ptt.BookIndex(ptt.get_dataset("reddit-tomt-books"))  # under ~/.cache/pyterrier_tot/indexes/<name>
    bm25, dense = index.bm25(), index.dense()     # title + text; BM25 k1=1.2, b=0.75; MiniLM (offline package)
    scorers = index.bm25_scorer() ** index.dense_scorer()    # re-score a ranking (``**``, ``+``)
    again = pt.Artifact.load(index.path)          # the same index, without the dataset

The folder is a ``pt.Artifact`` (type ``book_index``): ``pt_meta.json``, ``corpus.jsonl`` and one sub-folder per
backend + fields + model, each with a ``pt_meta.json`` recording its settings and corpus fingerprint. Folders are
written atomically under an OS lock (a second process waits and reuses the work; a killed build's leftovers go).
A large corpus is streamed (``stream=True``, the default for TREC ToT; :mod:`pyterrier_tot.corpus_store`):
retrievers read only the pages asked for, and ``corpus`` / ``field_text`` raise ``StreamedCorpusError``.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import warnings
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot import _artifact as art
from pyterrier_tot import corpus_store as cs
from pyterrier_tot._artifact import META_FILE, ToTArtifact, own_meta, read_meta, write_meta
from pyterrier_tot._fingerprint import config_setting, fingerprint_setting, stands_for
from pyterrier_tot._util import cache_dir, differing
from pyterrier_tot.corpus_store import CORPUS_FILE, BookCorpus, FieldsArg
from pyterrier_tot.corpus_store import book_frame as _book_frame
from pyterrier_tot.corpus_store import fields_tuple as _fields_tuple
from pyterrier_tot.corpus_store import frame_fingerprint as _fingerprint
from pyterrier_tot.encoding import PooledDocEncoder, SortedDocEncoder, encoder_model, pool_devices
from pyterrier_tot.encoding import encoder_for as _encoder
from pyterrier_tot.errors import CorruptArtifactError
from pyterrier_tot.policy import check_int
from pyterrier_tot.retrievers import (
    BM25Scorer,
    DenseRetriever,
    DenseScorer,
    SafeRetriever,
    quiet_native_output,
    tokenise_query,
)

__all__ = ["BookIndex", "SafeRetriever", "tokenise_query"]

PART_TYPE = "book_index_part"
_LEGACY_MANIFEST = "pyterrier_tot.json"  # sub-index manifest of version 0.1, still honoured


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[-60:]


def _model_key(model, encoder=None) -> Optional[str]:
    """A model argument as the index records it (an artifact or a Path: its folder; an encoder alone: its model)."""
    return encoder_model(str(model.path) if isinstance(model, pt.Artifact) else model and str(model), encoder)


def _c_float(x: float) -> str:
    """``x`` as PISA's C++ (fmt, single precision) writes it into file names: shortest form, no trailing ``.0``."""
    text = str(np.float32(x))
    return text[:-2] if text.endswith(".0") else text


def _with_defaults(found: Optional[dict]) -> Optional[dict]:
    """A sub-index manifest with the settings older versions left implicit (dense indexes were all fp32)."""
    if isinstance(found, dict) and found.get("backend") == "flex" and "precision" not in found:
        return {**found, "precision": "fp32"}
    return found


class BookIndex(BookCorpus, ToTArtifact):
    """Indexes over one book corpus, kept in ``path`` (one sub-folder per backend + field set + model).

    ``BookIndex(books, path=None, name=None)`` builds (or re-opens) the index of ``books``: a
    :class:`~pyterrier_tot.datasets.BookDataset`, a book frame (``docno`` + book fields), or an iterable of
    :class:`~pyterrier_tot.datasets.books.Book`; ``stream`` streams the corpus to disk (default: the dataset
    decides; the document-side methods are :class:`~pyterrier_tot.corpus_store.BookCorpus`'s). ``BookIndex(path)``
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
        self._store: Optional[cs.CorpusStore] = None
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
            super().__init__(Path(path) if path else cache_dir() / "indexes" / f"{_slug(key)}-stream")
            self.name, self.fingerprint, self._source = name or default_name, None, (docs, total, key)
            self._save_corpus()
            return
        frame, default_name = _book_frame(books)
        if len(frame) == 0:
            raise ValueError("BookIndex: the corpus is empty")
        if frame["docno"].duplicated().any():
            dups = frame.loc[frame["docno"].duplicated(), "docno"].tolist()[:5]
            raise ValueError(f"BookIndex: duplicate docnos in the corpus, e.g. {dups}")
        corpus = frame.reset_index(drop=True)
        name = name or default_name
        folder, fingerprint = cs.folder_of(corpus, (lambda fp: Path(path)) if path else (
            lambda fp: cache_dir() / "indexes" / f"{_slug(name)}-{fp}"))
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
            corpus = cs.read_stored(path, meta.get("columns"))
        except (OSError, ValueError) as e:
            raise art.damaged(path, CORPUS_FILE, e, "ptt.BookIndex(dataset, path=...)") from None
        legacy = _fingerprint(corpus, legacy=True)  # what a folder built before the other book fields counted holds
        fingerprint = legacy if legacy == meta.get("fingerprint") else _fingerprint(corpus)
        if fingerprint != meta.get("fingerprint"):
            raise art.damaged(path, CORPUS_FILE, f"its fingerprint {fingerprint} is not {meta.get('fingerprint')} "
                              f"of {META_FILE}", "ptt.BookIndex(dataset, path=...)")
        self._set_corpus(corpus, name or meta.get("name", path.name), fingerprint)

    def _write_corpus(self, folder: Path) -> None:
        if self._source is not None:
            docs, total, key = self._source
            info = cs.write_stream(docs(), folder, total, desc=f"{self.name}: corpus")
            self._write_meta(folder, name=self.name, **info, columns=cs.COLUMNS, corpus_file=CORPUS_FILE,
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

    # ------------------------------------------------------------------ sub-indexes
    def _part(self, sub: str, settings: dict, filename: str, warn: bool = True) -> Tuple[Path, bool]:
        """(where the index of ``settings`` lives, already built?). A sub-folder built for another corpus or
        other settings is reported (it is replaced when the new one is complete)."""
        folder = Path(self.path) / sub
        want = {**settings, "fingerprint": self.fingerprint, "n_docs": len(self)}
        found = _with_defaults(own_meta(folder, PART_TYPE))
        if stands_for(found, want, folder / META_FILE):
            return folder / filename, True
        legacy = folder / _LEGACY_MANIFEST
        if legacy.is_file():
            try:
                found = json.loads(legacy.read_text())
            except json.JSONDecodeError:
                found = None
            if _with_defaults(found) == want:  # 0.1 kept the PISA index in the sub-folder itself
                return (folder if settings["backend"] == "pisa" else folder / filename), True
        if folder.exists() and warn:  # name what differs: a changed setting should not read like a wrong corpus
            why = differing(_with_defaults(found), want)
            warnings.warn(f"index {folder} was built for another corpus or settings ({why}); rebuilding it",
                          stacklevel=4)
        return folder / filename, False

    def _ensure_part(self, sub: str, settings: dict, filename: str, build) -> Path:
        """The sub-index of ``settings``, built by ``build(target)`` into a temporary folder (renamed into place
        when complete) unless this or another process already built it."""
        where, built = self._part(sub, settings, filename, warn=False)
        if built:
            return where
        folder = Path(self.path) / sub
        with art.build_lock(folder, self.lock_timeout):
            where, built = self._part(sub, settings, filename)
            if built:  # another process built it while this one waited
                return where
            with art.building(folder, overwrite=folder.exists()) as tmp:
                build(tmp / filename)
                write_meta(tmp, PART_TYPE, settings["backend"], **settings, fingerprint=self.fingerprint,
                           n_docs=len(self))
        return folder / filename

    # ------------------------------------------------------------------ BM25 (PISA)
    def pisa_index(self, fields: FieldsArg = ("title", "text"), stemmer: str = "porter2"):
        """The PISA index over ``fields`` (built on first use, re-opened afterwards)."""
        from pyterrier_pisa import PisaIndex

        fields = _fields_tuple(fields)
        settings = {"backend": "pisa", "fields": list(fields), "stemmer": stemmer}

        def build(target: Path) -> None:
            docs = (d for d in self.docs_iter(fields) if d["text"].strip())
            if self._store is None:
                docs = iter(list(docs))
            first = next(docs, None)
            if first is None:
                raise ValueError(f"BookIndex: every book has empty {fields}; nothing to index")
            with cs.progress_to_stderr() as out:
                docs = self._progress(itertools.chain([first], docs), f"PISA {'+'.join(fields)}", out)
                with quiet_native_output():
                    PisaIndex(str(target), text_field="text", stemmer=stemmer, threads=1).index(docs)

        where = self._ensure_part(f"bm25-{'+'.join(fields)}-{stemmer}", settings, "index.pisa", build)
        return PisaIndex(str(where), threads=1)

    def _prepare_bm25(self, index, fields: Tuple[str, ...], stemmer: str, k1: float, b: float) -> None:
        """Make PISA's score files for (k1, b) safely: PISA writes them in place on first use, so a crash would leave
        a truncated file that it trusts later, and two processes would write one file together."""
        from pyterrier_pisa import PisaIndex

        where = Path(index.path).absolute()
        stem = f"bm25.k1-{_c_float(k1)}.b-{_c_float(b)}.q0.bmw.64"
        wanted = [where / stem, where / f"{stem}.{index.index_encoding.value}"]
        if all(f.is_file() for f in wanted):
            return
        sub = f"bm25-{'+'.join(fields)}-{stemmer}"
        with art.build_lock(Path(self.path) / sub, self.lock_timeout):
            if all(f.is_file() for f in wanted):
                return

            def make(stage: Path) -> None:
                with quiet_native_output():
                    PisaIndex(str(stage), threads=1).bm25(k1=k1, b=b, num_results=1)

            art.add_files(where, make, Path(self.path) / sub)

    def bm25(self, fields: FieldsArg = ("title", "text"), num_results: int = 1000, k1: float = 1.2,
             b: float = 0.75, query_algorithm: str = "maxscore", stemmer: str = "porter2") -> pt.Transformer:
        """BM25 over ``fields`` (defaults follow the TREC ToT papers: k1=1.2, b=0.75; ``maxscore`` suits long
        queries). Queries are tokenised safely first; the original text is kept in ``query``.
        ``(index.bm25() % k).compile()`` retrieves ``k`` results directly."""
        check_int(num_results, "num_results", "BookIndex.bm25")
        index = self.pisa_index(fields, stemmer)
        self._prepare_bm25(index, _fields_tuple(fields), stemmer, k1, b)
        with quiet_native_output():  # PISA builds the scored index on first use and reports progress
            retr = index.bm25(k1=k1, b=b, num_results=num_results, query_algorithm=query_algorithm)
            retr(pd.DataFrame({"qid": ["_warmup"], "query": ["the"]}))
        return SafeRetriever(retr, f"BM25({'+'.join(_fields_tuple(fields))}, k1={k1}, b={b})",
                             num_results=num_results)

    def bm25_scorer(self, fields: FieldsArg = ("title", "text"), depth: Optional[int] = None,
                    unknown_docnos: str = "raise", **bm25_kwargs) -> pt.Transformer:
        """BM25 re-scoring of a result frame (:class:`~pyterrier_tot.retrievers.BM25Scorer`), for ``>>``, ``**``, ``+``.
        ``depth``: how deep each query is retrieved before the join (default the corpus: exact; streamed: 1,000)."""
        depth = depth or (1000 if self.streamed else len(self.docnos))
        retr = self.bm25(fields, num_results=depth, **bm25_kwargs)
        return BM25Scorer(retr, self.docnos, f"BM25Scorer({retr!r}, depth={depth})", unknown_docnos=unknown_docnos)

    # ------------------------------------------------------------------ dense (pyterrier-dr)
    def flex_index(self, model=None, fields: FieldsArg = ("title", "text"),
                   max_chars: Optional[int] = None, encoder=None, workers: int = 1,
                   devices: Optional[Sequence[str]] = None, precision: Optional[str] = None):
        """The pyterrier-dr FlexIndex of ``model`` embeddings of ``fields`` (first ``max_chars`` characters).
        ``model``: a sentence-transformers name or folder, or a :class:`~pyterrier_tot.models.BiEncoderModel`.
        ``precision``: ``"fp32"`` (default) or ``"bf16"`` (see the Speed page of the docs); it is part of the index's
        settings, so a bf16 index is never taken for an fp32 one (default: the precision of ``encoder`` when
        given). ``workers`` / ``devices`` (e.g. ``["cuda:0", "cuda:1"]``) encode a new index with several
        processes (:class:`~pyterrier_tot.encoding.PooledDocEncoder`); the index is the same, so either is
        ignored when it is already built."""
        import pyterrier_dr

        from pyterrier_tot.models import DEFAULT_MODEL

        fields = _fields_tuple(fields)
        model = _model_key(model, encoder) or DEFAULT_MODEL
        enc, precision = _encoder(model, encoder, precision)
        # a local folder's weights and configuration are settings: a model retrained or reconfigured is encoded again
        settings = {"backend": "flex", "model": model, "fields": list(fields), "max_chars": max_chars,
                    "precision": precision, **fingerprint_setting(model), **config_setting(model)}
        key = hashlib.sha1(model.encode()).hexdigest()[:8]
        sub = f"dense-{_slug(Path(model).name)}-{key}-{'+'.join(fields)}-{max_chars or 'all'}"
        sub += "" if precision == "fp32" else f"-{precision}"  # fp32 keeps the folder name of version 0.2

        pool = pool_devices(workers, devices, str(getattr(enc, "device", "cpu")))

        def build(target: Path) -> None:
            flex = pyterrier_dr.FlexIndex(str(target), verbose=False)
            docs = self._progress(self.docs_iter(fields, max_chars), f"dense {'+'.join(fields)}")
            if pool is None:
                (SortedDocEncoder(enc) >> flex.indexer(mode="overwrite")).index(docs)
                return
            with PooledDocEncoder(enc, pool) as pooled:
                (pooled >> flex.indexer(mode="overwrite")).index(docs)

        # verbose=False: a bar per retrieval call (pyterrier-dr's "NumpyRetriever scoring") is noise in a pipeline
        return pyterrier_dr.FlexIndex(str(self._ensure_part(sub, settings, "index.flex", build)), verbose=False)

    def dense(self, model=None, fields: FieldsArg = ("title", "text"), num_results: int = 1000,
              max_chars: Optional[int] = None, backend: str = "numpy", encoder=None, workers: int = 1,
              devices: Optional[Sequence[str]] = None, precision: Optional[str] = None) -> pt.Transformer:
        """Dense retrieval with any sentence-transformers model name or local directory, or a trained
        :class:`~pyterrier_tot.models.BiEncoderModel` (``backend``: ``numpy`` exact search, or ``faiss`` flat
        inner-product index). ``(index.dense() % k).compile()`` retrieves ``k`` results directly.
        ``precision="bf16"`` encodes books and queries in bfloat16; ``workers`` / ``devices``: encode the
        corpus with several processes (see :meth:`flex_index`)."""
        from pyterrier_tot.models import DEFAULT_MODEL

        check_int(num_results, "num_results", "BookIndex.dense")
        model = _model_key(model, encoder)
        enc, precision = _encoder(model, encoder, precision)
        flex = self.flex_index(model, fields, max_chars, encoder=enc, workers=workers, devices=devices,
                               precision=precision)
        if backend == "numpy":
            retr = flex.np_retriever(num_results=num_results)
        elif backend == "faiss":
            retr = flex.faiss_flat_retriever(drop_query_vec=True)
            retr.num_results = num_results  # the factory takes no num_results; the retriever honours it
        else:
            raise ValueError(f"backend must be 'numpy' or 'faiss', not {backend!r}")
        label = f"Dense({Path(model or DEFAULT_MODEL).name}, {'+'.join(_fields_tuple(fields))}{_prec(precision)})"
        return SafeRetriever(DenseRetriever(enc.query_encoder(), retr, label, exact=True), label, tokenise=False,
                             num_results=num_results)

    def dense_scorer(self, model=None, fields: FieldsArg = ("title", "text"),
                     max_chars: Optional[int] = None, encoder=None, unknown_docnos: str = "raise",
                     workers: int = 1, devices: Optional[Sequence[str]] = None,
                     precision: Optional[str] = None) -> pt.Transformer:
        """Re-scores a result frame by cosine between query and stored book embeddings (no re-encoding); a docno
        not in the corpus raises an error naming it (``unknown_docnos="nan"``: it scores NaN, with a warning).
        ``precision`` / ``workers`` / ``devices``: how the corpus is encoded (see :meth:`flex_index`)."""
        from pyterrier_tot.models import DEFAULT_MODEL

        model = _model_key(model, encoder)
        enc, precision = _encoder(model, encoder, precision)
        flex = self.flex_index(model, fields, max_chars, encoder=enc, workers=workers, devices=devices,
                               precision=precision)
        name = Path(model or DEFAULT_MODEL).name
        return DenseScorer(enc.query_encoder(), flex.np_scorer(), self.docnos,
                           f"DenseScorer({name}, {'+'.join(_fields_tuple(fields))}, max_chars={max_chars}"
                           f"{_prec(precision)})", unknown_docnos=unknown_docnos)


def _prec(precision: str) -> str:
    return "" if precision == "fp32" else f", precision={precision!r}"
