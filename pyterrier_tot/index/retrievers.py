"""The transformers that :class:`~pyterrier_tot.index.BookIndex` hands out: a safe wrapper around any first-stage
retriever (BM25 or dense), the dense retriever and scorer over stored vectors, and the book-text loader.

Each declares its input with ``pta.validate`` (so ``pt.inspect`` reports it), returns the same columns for an
empty frame as for a real one, and the retrievers implement ``fuse_rank_cutoff``: ``(index.bm25() % 10)
.compile()`` is one retriever asked for 10 results, not a retriever followed by a ``RankCutoff``.
"""
from __future__ import annotations

import copy
import re
import warnings
from typing import List, Optional

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import method_repr
from pyterrier_tot._plumbing.util import empty_scored
from pyterrier_tot.checks import (
    add_ranks,
    check_query_frame,
    check_result_frame,
    check_unknown_docnos_arg,
    report_missing_qids,
    unknown_docnos,
)
from pyterrier_tot.errors import BadInputError, NoResultsWarning

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_RANKED = ("docno", "score", "rank")


def tokenise_query(text: str, max_terms: int = 1024, max_term_len: int = 64) -> str:
    """Lower-cased word tokens joined by spaces: safe for any query parser (no operators, quotes, emoji or
    control characters survive), with over-long tokens and queries cut."""
    toks = [t for t in _WORD_RE.findall(str(text).lower()) if len(t) <= max_term_len]
    return " ".join(toks[:max_terms])


def _ranked_columns(inp_columns) -> List[str]:
    return [*[c for c in inp_columns if c not in _RANKED], *_RANKED]


def _scored_columns(inp_columns) -> List[str]:
    return [*[c for c in inp_columns if c not in ("score", "rank")], "score", "rank"]


def _made_by_repr(made_by, label: str, **current) -> str:
    """The stage's repr: the ``BookIndex`` call that made it (``made_by``: the index, the method's name, its
    arguments by position and by name) with ``current`` settings, or ``label`` for one built by hand."""
    if made_by is None:
        return label
    owner, method, args, settings = made_by
    return method_repr(owner, method, args, {**settings, **current})


def _key_extra(made_by) -> dict:
    """Settings that change a ranking but that the description (``label``) never held, where not the default: BM25's
    stemmer, the characters of each book a dense index encodes. Defaults are left out, so a key made before stays."""
    settings = made_by[3] if made_by is not None else {}
    return {k: settings[k] for k, default in (("stemmer", "porter2"), ("max_chars", None))
            if k in settings and settings[k] != default}


class _MadeByEquality:
    """Two stages one ``BookIndex`` made by the same call compare equal (and hash alike); one built by hand is
    only equal to itself."""

    def _made_identity(self):
        if getattr(self, "made_by", None) is None:
            return id(self)
        return type(self), id(self.made_by[0]), repr(self)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self is other or self._made_identity() == other._made_identity()

    def __hash__(self):
        return hash(self._made_identity())


class SafeRetriever(_MadeByEquality, pt.Transformer):
    """Wraps a retriever: validates queries (no empty ones, each qid once), optionally hands it safely tokenised
    text, restores the user's query text in the output, and warns (``NoResultsWarning``, counted in
    ``empty_results``) when a query finds nothing.

    ``(retriever % k).compile()`` asks the wrapped retriever for ``k`` results (``fuse_rank_cutoff``). It prints
    as the ``BookIndex`` call that made it (``made_by``: the index, the method, its arguments); ``label``
    describes its settings for cache keys (:meth:`settings`)."""

    def __init__(self, retriever: pt.Transformer, label: str, tokenise: bool = True,
                 num_results: Optional[int] = None, made_by: Optional[tuple] = None):
        self.retriever = retriever
        self.label = label
        self.made_by = made_by
        self.tokenise = tokenise
        self.num_results = num_results if num_results is not None else getattr(retriever, "num_results", None)
        self.empty_results = 0

    def __getstate__(self):
        # PISA's native retrieval context cannot be pickled (``.parallel(n)``, joblib): the copy drops it and the
        # retriever opens its own on its first query (PisaRetrieve re-prepares when ``_ctxt_key`` is unset)
        state = self.__dict__.copy()
        inner = state.get("retriever")
        if getattr(inner, "_ctxt", None) is not None:
            inner = copy.copy(inner)
            inner._ctxt, inner._ctxt_key = None, None
            state["retriever"] = inner
        return state

    def fuse_rank_cutoff(self, k: int) -> Optional["SafeRetriever"]:
        if self.num_results is not None and k >= self.num_results:
            return None
        fuse = getattr(self.retriever, "fuse_rank_cutoff", None)  # plain transformers cannot fuse a cutoff
        inner = fuse(k) if fuse is not None else None
        if inner is None:
            return None
        return SafeRetriever(inner, self.label, tokenise=self.tokenise, num_results=k, made_by=self.made_by)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        cols = _ranked_columns(inp.columns)
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        check_query_frame(inp, repr(self))
        run = inp
        if self.tokenise:
            run = inp.copy()
            run["query"] = run["query"].map(tokenise_query)
            blank = run[run["query"] == ""]
            if len(blank):
                raise BadInputError(f"{self!r}: query has no searchable words for qid(s) "
                                    f"{blank['qid'].astype(str).tolist()[:5]}")
        res = self.retriever(run)
        if len(res) == 0:
            res = pd.DataFrame(columns=cols)
        elif self.tokenise:
            res["query"] = res["qid"].map(inp.drop_duplicates("qid").set_index("qid")["query"])
        report_missing_qids(inp, res, repr(self), self)
        return res[cols + [c for c in res.columns if c not in cols]]

    def settings(self) -> dict:
        """What changes its ranking (:mod:`pyterrier_tot._plumbing.cache_key`): the description the ``BookIndex`` method
        wrote from its arguments (model, fields, BM25's k1 and b, precision), never the repr, and the cut-off."""
        return {"label": self.label, "num_results": self.num_results, **_key_extra(self.made_by)}

    def __repr__(self):
        if self.made_by is not None:
            return _made_by_repr(self.made_by, self.label, num_results=self.num_results)
        if self.num_results is None or self.num_results == 1000 or not self.label.endswith(")"):
            return self.label
        return f"{self.label[:-1]}, num_results={self.num_results})"

    def subtransformers(self):
        return {"retriever": self.retriever}


class DenseRetriever(_MadeByEquality, pt.Transformer):
    """Query encoder, then a FlexIndex retriever (numpy or faiss); the query vectors and FlexIndex docids are
    dropped from the output. ``fuse_rank_cutoff`` goes to the FlexIndex retriever; ``exact`` says its search is
    exhaustive (numpy, faiss flat), so a copy asked for fewer results returns exactly the top of the longer list
    even where pyterrier-dr declines to fuse (it does for every faiss retriever, approximate ones included)."""

    def __init__(self, query_encoder: pt.Transformer, retriever: pt.Transformer, label: str, exact: bool = False,
                 made_by: Optional[tuple] = None):
        self.query_encoder = query_encoder
        self.retriever = retriever
        self.label = label
        self.exact = exact
        self.made_by = made_by

    @property
    def num_results(self) -> Optional[int]:
        return getattr(self.retriever, "num_results", None)

    def fuse_rank_cutoff(self, k: int) -> Optional["DenseRetriever"]:
        fuse = getattr(self.retriever, "fuse_rank_cutoff", None)
        inner = fuse(k) if fuse is not None else None
        if inner is None and self.exact and self.num_results is not None and k < self.num_results:
            inner = copy.copy(self.retriever)
            inner.num_results = k
        return None if inner is None else DenseRetriever(self.query_encoder, inner, self.label, self.exact,
                                                         self.made_by)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        if len(inp) == 0:
            return pd.DataFrame(columns=_ranked_columns(inp.columns))
        check_query_frame(inp, repr(self))
        from pyterrier_tot.decomposition.clues import clues_na_as_none  # pandas only; lazy: no package cycle

        res = self.retriever(self.query_encoder(inp))
        # pyterrier-dr rebuilds the frame: clue text columns come back as strings with NaN for N/A
        return clues_na_as_none(res.drop(columns=["query_vec", "docid"], errors="ignore"))

    def settings(self) -> dict:
        """What changes its ranking (:mod:`pyterrier_tot._plumbing.cache_key`): the ``BookIndex`` method's
        description."""
        return {"label": self.label, "num_results": getattr(self.retriever, "num_results", None),
                **_key_extra(self.made_by)}

    def __repr__(self):
        return _made_by_repr(self.made_by, self.label, num_results=self.num_results)

    def subtransformers(self):
        return {"query_encoder": self.query_encoder, "retriever": self.retriever}


class _IndexScorer(_MadeByEquality, pt.Transformer):
    """What the dense and BM25 scorers share: the docnos the index holds, their label, and the checks every call
    starts with."""

    def __init__(self, known: pd.Index, label: str, unknown_docnos: str = "raise", made_by: Optional[tuple] = None):
        self.known = known
        self.label = label
        self.made_by = made_by
        self.unknown_docnos = check_unknown_docnos_arg(unknown_docnos)

    def _checked(self, inp: pd.DataFrame):
        """A result frame with a ``query`` column: (its output columns, the empty scored frame when it has no rows,
        else ``None``, and which rows hold a docno the index does not)."""
        pta.validate.result_frame(inp, extra_columns=["query"])
        cols = _scored_columns(inp.columns)
        if len(inp) == 0:
            return cols, empty_scored(inp)[cols], None
        check_result_frame(inp, repr(self), "query")
        return cols, None, np.asarray(unknown_docnos(inp, self.known, repr(self), self.unknown_docnos))

    def __repr__(self):
        if self.made_by is not None:
            return _made_by_repr(self.made_by, self.label, unknown_docnos=self.unknown_docnos)
        if self.unknown_docnos != "raise":
            return f"{self.label[:-1]}, unknown_docnos={self.unknown_docnos!r})"
        return self.label


class DenseScorer(_IndexScorer):
    """Re-scores a result frame by cosine between the encoded query and the stored book vectors (no book is
    re-encoded). A docno the index does not hold raises :class:`UnknownDocnoError` naming it, or, with
    ``unknown_docnos="nan"``, scores NaN with an ``UnknownDocnoWarning``."""

    def __init__(self, query_encoder: pt.Transformer, scorer: pt.Transformer, known: pd.Index, label: str,
                 unknown_docnos: str = "raise", made_by: Optional[tuple] = None):
        super().__init__(known, label, unknown_docnos, made_by)
        self.query_encoder = query_encoder
        self.scorer = scorer

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols, empty, unknown = self._checked(inp)
        if empty is not None:
            return empty
        if unknown.any():
            known_rows = inp[~unknown]
            scored = self.transform(known_rows) if len(known_rows) else known_rows.assign(score=0.0, rank=0)
            out = inp.drop(columns=["score", "rank"], errors="ignore").merge(
                scored[["qid", "docno", "score"]], on=["qid", "docno"], how="left")
            return add_ranks(out)[cols + [c for c in out.columns if c not in cols]]
        out = self._score(self.query_encoder(inp))
        out = out.drop(columns=["query_vec", "docid"], errors="ignore")
        return out[cols + [c for c in out.columns if c not in cols]]

    def _score(self, encoded: pd.DataFrame) -> pd.DataFrame:
        """pyterrier-dr's scorer's own ``score(query_vecs, docids)`` per query, without its ``transform``: that
        draws an unlabelled bar on every call and takes no setting to turn it off."""
        flex = getattr(self.scorer, "flex_index", None)
        if flex is None or not hasattr(self.scorer, "score"):  # another scorer: it runs as it is
            return self.scorer(encoded)
        docnos = flex.payload(return_dvecs=False)[0]
        encoded = encoded.reset_index(drop=True)
        scores = np.empty(len(encoded), dtype=np.float64)
        for rows in encoded.groupby("qid", sort=False).indices.values():
            query_vec = np.asarray(encoded["query_vec"].iat[rows[0]]).reshape(1, -1)
            scores[rows] = np.asarray(self.scorer.score(query_vec, docnos.inv[encoded["docno"].to_numpy()[rows]]),
                                      dtype=np.float64).reshape(-1)
        out = add_ranks(encoded.drop(columns=["score", "rank"], errors="ignore").assign(score=scores))
        return out.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)

    def settings(self) -> dict:
        """What changes its scores (:mod:`pyterrier_tot._plumbing.cache_key`): the ``BookIndex`` method's
        description."""
        return {"label": self.label}

    def subtransformers(self):
        return {"query_encoder": self.query_encoder, "scorer": self.scorer}


class BM25Scorer(_IndexScorer):
    """Re-scores a result frame by BM25: each query's top ``depth`` books are retrieved once and joined onto its
    rows, so the frame keeps every row in its order (a scorer for ``>>``, ``**`` and ``+``). A book below the
    depth, or sharing no term with the query, scores 0.0: exact when ``depth`` covers the corpus (the default of
    :meth:`BookIndex.bm25_scorer` on an in-memory corpus). Unknown docnos raise (``unknown_docnos="nan"``:
    NaN with a warning)."""

    def __init__(self, retriever: pt.Transformer, known: pd.Index, label: str, unknown_docnos: str = "raise",
                 made_by: Optional[tuple] = None):
        super().__init__(known, label, unknown_docnos, made_by)
        self.retriever = retriever

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        cols, empty, unknown = self._checked(inp)
        if empty is not None:
            return empty
        with warnings.catch_warnings():  # a query sharing no term with any book scores 0.0 everywhere: not news
            warnings.simplefilter("ignore", NoResultsWarning)
            res = self.retriever(inp[["qid", "query"]].drop_duplicates("qid"))
        found = res[["qid", "docno", "score"]].drop_duplicates(["qid", "docno"])
        out = inp.drop(columns=["score", "rank"], errors="ignore").merge(found, on=["qid", "docno"], how="left")
        out["score"] = out["score"].astype(float).fillna(0.0)
        out.loc[unknown, "score"] = np.nan
        return add_ranks(out)[cols + [c for c in out.columns if c not in cols]]

    def settings(self) -> dict:
        """What changes its scores (:mod:`pyterrier_tot._plumbing.cache_key`): the ``BookIndex`` method's
        description."""
        return {"label": self.label, **_key_extra(self.made_by)}

    def subtransformers(self):
        return {"retriever": self.retriever}
