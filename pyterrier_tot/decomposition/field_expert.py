"""Field experts: one retriever per book field, queried with the clue the decomposer extracted for that field.

    from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
    title = FieldExpert(index, "title")                       # dense MiniLM over book titles, query = clue_title
    plot = FieldExpert(index, "plot", backend="bm25")         # BM25 (PISA) over book text, query = clue_plot
    tuned = FieldExpert(index, "title", model="~/.cache/pyterrier_tot/models/expert-title-...")
    base = base_expert(index, "dense")                        # the whole query over title + text

    clue_frame >> title                     # retriever mode: a query frame in, a ranking out
    candidates >> title                     # scorer mode: a result frame (has ``docno``) in, its rows re-scored

Mode: like pyterrier-dr's ``BiEncoder``, the modes are declared with ``pta.validate.any``: a query frame with
the clue column is searched (``retrieve``), a result frame (with ``docno``) and the clue column is scored
(``score``); ``pt.inspect.transformer_inputs`` lists both.

Field mapping (``pyterrier_tot.decomposition.clues.FIELD_FOR_CLUE``): title → ``title``, author → ``author``,
genre → ``genres``, plot → ``text``; ``field="query"`` is the base retriever (the full ``query`` over
``title`` + ``text``). Dates are scored by :class:`~pyterrier_tot.decomposition.date_expert.DateExpert`, covers by
:class:`~pyterrier_tot.covers.cover_ranker.CoverRanker`.

N/A clues (None, NaN, blank, "N/A"): in retriever mode the query yields **no rows**; in scorer mode every
candidate of that query gets the neutral score **0.0**, a constant that leaves the query's ranking to the other
experts. In a :class:`~pyterrier_tot.decomposition.weighted_fuser.WeightedFuser` a missing row counts as the fuser's
neutral
value. Books whose field is empty are not in a BM25 field index: they get no row (retriever) or 0.0 (scorer).
A field that is empty for every book (author / genres on Reddit-TOMT) makes the expert a no-op with a warning.
A usable clue that finds nothing in retriever mode is named in a ``NoResultsWarning`` (counted in
``empty_results``); a docno not in the index raises ``UnknownDocnoError`` in scorer mode (``unknown_docnos="nan"``:
NaN, with a warning). The base expert (``field="query"``) refuses empty query text, naming the qid.

Scores: ``normalise="minmax"`` (default) rescales each query's scores to [0, 1] over the rows the expert emits
(so ``+`` of experts is a fair sum); ``normalise=None`` keeps raw BM25 / cosine scores. Retriever and scorer
modes give the same raw score for the same (query, book); normalised scores agree when both modes see the same
set of books. BM25 scorer mode retrieves the field's top ``scorer_depth`` books (default 1,000) and left-joins them
onto the candidates: candidates below that depth score 0.0 (exact when the corpus has at most ``scorer_depth``
books). Dense scorer mode scores every candidate from the stored vectors (no re-encoding of books).
"""
from __future__ import annotations

import warnings
from typing import List, Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import SettingsEquality, code_repr, keyword_settings
from pyterrier_tot._plumbing.util import empty_scored, explain_columns, is_missing
from pyterrier_tot.checks import (
    add_ranks,
    check_int,
    check_query_frame,
    check_result_frame,
    check_unknown_docnos_arg,
    index_of,
    report_missing_qids,
    unknown_docnos,
)
from pyterrier_tot.decomposition.clues import CLUE_FIELDS, FIELD_FOR_CLUE, clue_column
from pyterrier_tot.normalise import METHODS, normalise_scores

#: Score a scorer-mode expert gives to every candidate of a query whose clue is N/A.
NEUTRAL_SCORE = 0.0
BACKENDS = ("dense", "bm25")


def _missing_mask(values: pd.Series) -> pd.Series:
    return values.map(is_missing).astype(bool)


class FieldExpert(SettingsEquality, pt.Transformer):
    """Scores books on one field with that field's clue as the query (see the module docs).

    :param index: a :class:`~pyterrier_tot.index.BookIndex`
    :param field: a clue field (``title``, ``author``, ``genre``, ``plot``) or ``"query"`` for the base retriever
    :param backend: ``"dense"`` (any sentence-transformers model name or directory) or ``"bm25"`` (PISA)
    :param model: dense model (default all-MiniLM-L6-v2); ignored for BM25
    :param clue: the input column holding the clue (default ``clue_<field>``, or ``query``)
    :param book_fields: book field(s) indexed (default ``FIELD_FOR_CLUE[field]``; for the query ``title`` +
        ``text``, with BM25 also the author where books have one)
    :param num_results: depth of retriever mode
    :param normalise: ``minmax`` (default), ``zscore``, ``rr`` or ``None``
    :param scorer_depth: BM25 scorer mode: how deep to retrieve before joining onto the candidates
    :param unknown_docnos: scorer mode, a docno not in the index: ``"raise"`` (default,
        :class:`~pyterrier_tot.errors.UnknownDocnoError`) or ``"nan"`` (NaN score, with a warning)
    :param precision: dense encoding precision, ``"fp32"`` (default) or ``"bf16"`` (see ``BookIndex.dense``)
    """

    @keyword_settings
    def __init__(self, index, field: str, backend: str = "dense", *, model: Optional[str] = None,
                 clue: Optional[str] = None, book_fields: Optional[Sequence[str]] = None, num_results: int = 1000,
                 normalise: Optional[str] = "minmax", scorer_depth: int = 1000, max_chars: Optional[int] = None,
                 bm25_kwargs: Optional[dict] = None, unknown_docnos: str = "raise",
                 precision: Optional[str] = None):
        if field != "query" and (field not in CLUE_FIELDS or field in ("date", "cover")):
            raise ValueError(f"FieldExpert field must be 'query' or one of title, author, genre, plot; got {field!r} "
                             "(dates: DateExpert; covers: CoverRanker)")
        if backend not in BACKENDS:
            raise ValueError(f"FieldExpert backend must be one of {BACKENDS}, not {backend!r}")
        index = index_of(index, "FieldExpert")  # an entry that checked it passes a CheckedIndex
        num_results = check_int(num_results, "num_results", "FieldExpert")
        scorer_depth = check_int(scorer_depth, "scorer_depth", "FieldExpert")
        if max_chars is not None:
            check_int(max_chars, "max_chars", "FieldExpert")
        normalise = normalise or "none"
        if normalise not in METHODS:
            raise ValueError(f"unknown normalisation {normalise!r}; expected one of {METHODS}")
        self.index = index
        self.field = field
        self.backend = backend
        self.model = model
        self.clue = clue or ("query" if field == "query" else clue_column(field))
        if book_fields is None and field == "query":
            # the full query reads what BM25 reads by default (title + text, and the author where books have one;
            # BookIndex.bm25_fields); a dense model reads title + text, as the library's bi-encoders are trained
            book_fields = getattr(index, "bm25_fields", ("title", "text")) if backend == "bm25" else ("title", "text")
        elif book_fields is None:
            book_fields = (FIELD_FOR_CLUE[field],)
        self.book_fields = (book_fields,) if isinstance(book_fields, str) else tuple(book_fields)
        self.num_results = num_results
        self.normalise = normalise
        self.scorer_depth = scorer_depth
        self.max_chars = max_chars
        self.bm25_kwargs = dict(bm25_kwargs or {})
        self.unknown_docnos = check_unknown_docnos_arg(unknown_docnos)
        self.precision = precision
        self.empty_results = 0
        self._retriever = None
        self._scorer = None
        # a streamed (too large to hold) corpus is not scanned; an empty field then just finds nothing
        self.empty_field = not getattr(index, "streamed", False) and bool(
            (index.corpus[list(self.book_fields)].fillna("").astype(str).agg("".join, axis=1).str.strip() == "").all())
        if self.empty_field:
            warnings.warn(f"{self!r}: every book has an empty {'+'.join(self.book_fields)}; this expert scores "
                          "nothing", stacklevel=2)

    # ------------------------------------------------------------------ plumbing (shared with BookIndex)
    def retriever(self, num_results: Optional[int] = None) -> pt.Transformer:
        n = num_results or self.num_results
        if self.backend == "bm25":
            return self.index.bm25(fields=self.book_fields, num_results=n, **self.bm25_kwargs)
        return self.index.dense(self.model, fields=self.book_fields, num_results=n, max_chars=self.max_chars,
                                precision=self.precision)

    def _get_retriever(self):
        if self._retriever is None:
            self._retriever = self.retriever()
        return self._retriever

    def _get_scorer(self):
        if self._scorer is None:
            if self.backend == "bm25":
                self._scorer = self.index.bm25_scorer(self.book_fields, depth=self.scorer_depth, **self.bm25_kwargs)
            else:
                self._scorer = self.index.dense_scorer(self.model, fields=self.book_fields, max_chars=self.max_chars,
                                                       precision=self.precision)
        return self._scorer

    def _queries_with_clue(self, queries: pd.DataFrame) -> pd.DataFrame:
        """Query rows with a usable clue, with ``query`` set to the clue (the user's query kept aside)."""
        run = queries[~_missing_mask(queries[self.clue])].copy()
        if self.clue != "query":
            run["query"] = run[self.clue].astype(str)  # the caller's frame (and its query) is left untouched
        return run

    def _normalise(self, res: pd.DataFrame) -> pd.Series:
        return normalise_scores(res, self.normalise)

    # ------------------------------------------------------------------ modes
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        hint = (f"needs the clue column {self.clue!r}, in a query frame (retrieve) or a result frame (score)"
                + ("" if self.clue == "query" else "; put a ClueDecomposer or RuleClueExtractor before it"))
        with explain_columns(repr(self), hint), pta.validate.any(inp) as v:
            v.query_frame([self.clue], mode="retrieve")
            v.result_frame([self.clue], mode="score")
        # the base expert's clue is the user's query, which must be usable; a clue field may be N/A
        text = self.clue if self.clue == "query" else None
        if v.mode == "score":
            check_result_frame(inp, repr(self), text)
            return self._score(inp)
        check_query_frame(inp, repr(self), text)
        return self._retrieve(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        out_cols = [*inp.columns, "docno", "score", "rank"]
        run = self._queries_with_clue(inp.drop_duplicates("qid"))
        if len(run) == 0 or self.empty_field:
            return pd.DataFrame(columns=out_cols)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*no results for.*")
            res = self._get_retriever()(run[["qid", "query"]])
        res = res[["qid", "docno", "score"]]
        report_missing_qids(inp, res, repr(self), self, expected=set(run["qid"]))
        res = inp.drop_duplicates("qid").merge(res, on="qid")
        res["score"] = self._normalise(res).to_numpy()
        return pt.model.add_ranks(res)[out_cols]

    def _score(self, inp: pd.DataFrame) -> pd.DataFrame:
        if len(inp) == 0:
            return empty_scored(inp)
        unknown = unknown_docnos(inp, self.index.docnos, repr(self), self.unknown_docnos)
        out = inp.copy()
        queries = inp.drop(columns=["docno", "score", "rank"], errors="ignore").drop_duplicates("qid")
        run = self._queries_with_clue(queries)
        scored = pd.DataFrame(columns=["qid", "docno", "score"])
        if len(run) and not self.empty_field:
            cands = inp.loc[inp["qid"].isin(run["qid"]) & ~unknown, ["qid", "docno"]].merge(
                run[["qid", "query"]], on="qid")
            scored = self._get_scorer()(cands)[["qid", "docno", "score"]]
        out = out.drop(columns=["score", "rank"], errors="ignore").merge(
            scored.drop_duplicates(["qid", "docno"]), on=["qid", "docno"], how="left")
        out["score"] = out["score"].astype(float).fillna(0.0)
        out.loc[unknown, "score"] = np.nan  # asked for (unknown_docnos="nan"): never a made-up score
        has_clue = out["qid"].isin(run["qid"]) & (not self.empty_field)
        norm = self._normalise(out[has_clue]) if has_clue.any() else pd.Series(dtype=float)
        out["score"] = NEUTRAL_SCORE
        out.loc[has_clue, "score"] = norm.to_numpy()
        out.loc[unknown, "score"] = np.nan
        return add_ranks(out)

    def index_parts(self) -> List[tuple]:
        """What it reads from its index, for a plan that builds or times that first: ``("bm25", book_fields)``, or
        ``("dense", model, book_fields, max_chars, precision)`` (``model``: a str, None for the default MiniLM;
        ``precision``: ``"fp32"`` unless set), as ``BookIndex.has_bm25`` / ``has_dense`` take them."""
        if self.backend == "bm25":
            return [("bm25", self.book_fields)]
        model = None if self.model is None else str(self.model)
        return [("dense", model, self.book_fields, self.max_chars, self.precision or "fp32")]

    def settings(self) -> dict:
        """What changes its scores (the cache key of fits over them, :mod:`pyterrier_tot._plumbing.cache_key`); the
        index and the model's weights are keyed beside it."""
        dense = self.backend == "dense"
        return {"field": self.field, "backend": self.backend, "clue": self.clue, "book_fields": list(self.book_fields),
                "model": str(self.model or "minilm") if dense else None,
                "precision": (self.precision or "fp32") if dense else None, "normalise": self.normalise,
                "num_results": self.num_results, "scorer_depth": self.scorer_depth, "max_chars": self.max_chars,
                "bm25_kwargs": None if dense else dict(sorted(self.bm25_kwargs.items()))}

    def __repr__(self):
        default_fields = (getattr(self.index, "bm25_fields", ("title", "text")) if self.backend == "bm25"
                          else ("title", "text")) if self.field == "query" else (FIELD_FOR_CLUE[self.field],)
        default_clue = "query" if self.field == "query" else clue_column(self.field)
        return code_repr(self, [self.index, self.field], {
            "backend": self.backend, "model": self.model, "clue": None if self.clue == default_clue else self.clue,
            "book_fields": None if self.book_fields == tuple(default_fields) else self.book_fields,
            "num_results": self.num_results, "normalise": self.normalise, "scorer_depth": self.scorer_depth,
            "max_chars": self.max_chars, "bm25_kwargs": self.bm25_kwargs or None,
            "unknown_docnos": self.unknown_docnos, "precision": self.precision})

    def _legacy_repr(self):
        """The repr that keyed fitted weights before settings did (``recipe.weights._legacy_repr``)."""
        model = "" if self.backend == "bm25" else f", model={self.model or 'minilm'!r}"
        if self.backend == "dense" and self.precision not in (None, "fp32"):
            model += f", precision={self.precision!r}"
        unknown = "" if self.unknown_docnos == "raise" else f", unknown_docnos={self.unknown_docnos!r}"
        # every other setting that changes a score, where it is not the default
        default_clue = "query" if self.field == "query" else clue_column(self.field)
        rest = "".join(f", {k}={v!r}" for k, v, d in (
            ("clue", self.clue, default_clue), ("max_chars", self.max_chars, None),
            ("scorer_depth", self.scorer_depth, 1000), ("num_results", self.num_results, 1000),
            ("bm25_kwargs", self.bm25_kwargs or None, None)) if v != d)
        return (f"FieldExpert({self.field!r}, {self.backend}{model}, fields={'+'.join(self.book_fields)}, "
                f"normalise={self.normalise!r}{unknown}{rest})")


def base_expert(index, backend: str = "dense", model: Optional[str] = None, **kwargs) -> FieldExpert:
    """The paper's base retriever: the full user query over title + text, as a dual-mode expert."""
    return FieldExpert(index, "query", backend=backend, model=model, **kwargs)
