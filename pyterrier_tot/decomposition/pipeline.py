"""The paper's decomposition pipeline in one call, with every stage kept for ablation.

    from pyterrier_tot.decomposition.pipeline import decomposition_pipeline
    dp = decomposition_pipeline(index, RuleClueExtractor(), weights="weights.json")
    dp.pipeline                   # decomposer >> candidates >> fuser, a pt.Transformer
    dp(topics)                    # same thing
    dp.decomposer, dp.candidates, dp.experts, dp.fuser, dp.base     # the stages
    dp.without("title")           # the same pipeline minus one expert (for ablations)

Stages: the decomposer adds ``clue_*`` / ``clue_year`` columns (any transformer: ``RuleClueExtractor``,
``ClueDecomposer`` or :class:`ClueLookup` over a cached clue frame); :class:`CandidateUnion` takes the base
retriever's top ``k`` and adds each expert's own top ``expert_k`` (retriever mode); the experts then score every
candidate (scorer mode) and the :class:`~pyterrier_tot.decomposition.weighted_fuser.WeightedFuser` sums their
normalised scores.

Default experts: the base retriever (dense, full query over title + text), BM25 over title + text on the full
query, dense title and plot experts on their clues, and the hard date expert.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.cache_key import settings_of
from pyterrier_tot._plumbing.reprs import Shown, code_repr, keyword_settings
from pyterrier_tot._plumbing.util import explain_columns, require_columns
from pyterrier_tot.checks import CheckedIndex, check_query_frame, report_missing_qids
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, YEAR_COLUMN, clues_na_as_none
from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.errors import NoResultsWarning


class ClueLookup(pt.Transformer):
    """A decomposer that reads clues from a precomputed frame (e.g. a cached LLM clue JSONL) by ``qid``.
    Queries absent from the frame get N/A clues (with a warning). Where the frame keeps the query text
    (``query``), a query of the same qid with another text (another dataset's qid, a differently cleaned query) is
    refused, naming it: its clues were read from another request."""

    @keyword_settings
    def __init__(self, clues: pd.DataFrame, *, label: str = "cache"):
        require_columns(clues, ["qid"], "ClueLookup")
        cols = [c for c in (*CLUE_COLUMNS, YEAR_COLUMN) if c in clues.columns]
        first = clues.assign(qid=clues["qid"].astype(str)).drop_duplicates("qid")
        self.texts = dict(zip(first["qid"], first["query"].astype(str))) if "query" in first.columns else {}
        self.clues = first[["qid", *cols]].set_index("qid")
        self.label = label

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp)
        check_query_frame(inp, repr(self), None)
        if self.texts and "query" in inp.columns:  # the text the decomposer saw, beside the text it is read for
            other = [q for q, t in zip(inp["qid"].astype(str), inp["query"].astype(str)) if self.texts.get(q, t) != t]
            if other:
                raise ValueError(f"{self!r}: the clues of {len(other)} qid(s), e.g. {other[:3]}, were extracted from "
                                 "another query text (another data set's qids, or the queries cleaned differently)")
        out = inp.drop(columns=[c for c in self.clues.columns if c in inp.columns]).copy()
        missing = set(out["qid"].astype(str)) - set(self.clues.index)
        if missing:
            warnings.warn(f"{self!r}: no clues for {len(missing)} query(ies), e.g. {sorted(missing)[:5]}; "
                          "using N/A", stacklevel=2)
        found = self.clues.reindex(out["qid"].astype(str).values)
        for c in self.clues.columns:
            out[c] = found[c].to_numpy()
        for c in (*CLUE_COLUMNS, YEAR_COLUMN):
            if c not in out.columns:
                out[c] = None
        return clues_na_as_none(out)

    def __repr__(self):
        return code_repr(self, [Shown(f"clues of {len(self.clues)} queries")], {"label": self.label})

    def settings(self) -> dict:
        """What changes its clues (:mod:`pyterrier_tot._plumbing.cache_key`): the clues themselves (a digest), never the
        repr."""
        import hashlib

        digest = hashlib.sha1(pd.util.hash_pandas_object(self.clues.astype(str), index=True).values.tobytes())
        texts = hashlib.sha1(repr(sorted(self.texts.items())).encode())
        return {"clues": digest.hexdigest()[:16], "texts": texts.hexdigest()[:16], "label": self.label}


class CandidateUnion(pt.Transformer):
    """Union of the top ``k`` of the base retriever and the top ``expert_k`` of each expert retriever.

    Output: the query frame's columns + ``docno``; ``score`` is the base retriever's score (0.0 for books only
    an expert found), so the frame is a valid ranking on its own. A query for which neither the base nor any
    expert finds a book has no rows: one ``NoResultsWarning`` names it (counted in ``empty_results``)."""

    @keyword_settings
    def __init__(self, base: pt.Transformer, retrievers: Sequence[pt.Transformer] = (), *, k: int = 100,
                 expert_k: int = 20, names: Optional[Sequence[str]] = None):
        bad = [i for i, r in enumerate([base, *retrievers]) if not isinstance(r, pt.Transformer)]
        if bad:
            raise TypeError(f"CandidateUnion: base and retrievers must be pt.Transformers; position(s) {bad} are not")
        for what, v in (("k", k), ("expert_k", expert_k)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"CandidateUnion: {what} must be a positive integer, not {v!r}")
        self.base = base
        self.retrievers = list(retrievers)
        self.names = list(names) if names is not None else None
        if self.names is not None and len(self.names) != len(self.retrievers):
            raise ValueError(f"CandidateUnion: {len(self.names)} names for {len(self.retrievers)} retrievers")
        self.k = k
        self.expert_k = expert_k
        self.empty_results = 0
        self._needs: Optional[List[str]] = None

    def needs(self) -> List[str]:
        """The columns (besides ``qid``) that the base and every expert retriever need, read from their own
        declarations (their first query-frame mode), so a missing clue fails here, before any retrieval runs."""
        if self._needs is None:
            needs: List[str] = []
            for t in [self.base, *self.retrievers]:
                modes = pt.inspect.transformer_inputs(t, strict=False) or [["qid", "query"]]
                mode = next((m for m in modes if "docno" not in m), modes[0])
                needs += [c for c in mode if c != "qid" and c not in needs]
            self._needs = needs
        return self._needs

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with explain_columns(repr(self), f"needs a query frame with {self.needs()} (for its base and expert "
                             "retrievers)"):
            pta.validate.query_frame(inp, extra_columns=self.needs())
        cols = [*inp.columns, "docno", "score", "rank"]
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        check_query_frame(inp, repr(self), "query" if "query" in self.needs() else None)
        with warnings.catch_warnings():
            # an expert finding nothing is normal (its clue found no book); only a query left with no candidate
            # at all is reported, once, below
            warnings.simplefilter("ignore", NoResultsWarning)
            base = self.base(inp)
            base = base[base["rank"] < self.k] if "rank" in base.columns else base
            found = [base[["qid", "docno", "score"]]]
            for r in self.retrievers:
                res = r(inp)
                if len(res):
                    res = pt.model.add_ranks(res[["qid", "docno", "score"]].copy())
                    found.append(res.loc[res["rank"] < self.expert_k, ["qid", "docno"]].assign(score=float("nan")))
        allres = pd.concat(found, ignore_index=True).drop_duplicates(["qid", "docno"], keep="first")
        allres["score"] = allres["score"].astype(float).fillna(0.0)
        report_missing_qids(inp, allres, repr(self), self)
        out = inp.merge(allres, on="qid")
        return pt.model.add_ranks(out)[cols]

    def settings(self) -> dict:
        """What changes its candidates (:mod:`pyterrier_tot._plumbing.cache_key`)."""
        return {"base": settings_of(self.base), "retrievers": settings_of(self.retrievers), "names": self.names,
                "k": self.k, "expert_k": self.expert_k}

    def __repr__(self):
        return code_repr(self, [self.base] + ([self.retrievers] if self.retrievers else []),
                         {"k": self.k, "expert_k": self.expert_k, "names": self.names})


def fill_to_depth(ranked: pd.DataFrame, tail: pd.DataFrame, depth: int, keep: Optional[int] = None) -> pd.DataFrame:
    """``ranked`` (each query's fused candidates; only its top ``keep`` when given) followed, per query, by the
    books of ``tail`` (a deeper first-stage ranking) that it does not hold, in the tail's order, up to ``depth``
    rows per query. The tail's books score below every fused book, so the top of the ranking is unchanged. Query
    columns of the tail rows come from the query's fused rows.

    ``keep``: cut the fused ranking there before the tail. Below the candidate depth ``k`` the fused ranking holds
    the experts' extra books, which would push the base's own books from ``k`` on further down (with ``k`` 100:
    a recipe below its base at R@200); cut at ``k``, the ranking from there on is the base's."""
    if keep is not None and len(ranked):
        ranked = pt.model.add_ranks(ranked.copy())
        ranked = ranked[ranked["rank"] < keep].sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)
    if len(tail) == 0 or len(ranked) == 0:
        return ranked
    tail = tail[tail["qid"].isin(ranked["qid"])]
    tail = pt.model.add_ranks(tail[["qid", "docno", "score"]].copy())
    tail = tail[tail["rank"] < depth]
    tail = tail.merge(ranked[["qid", "docno"]].assign(_seen=True), on=["qid", "docno"], how="left")
    tail = tail[tail["_seen"].isna()].drop(columns=["_seen", "score"]).sort_values(["qid", "rank"], kind="stable")
    if len(tail) == 0:
        return ranked
    floor = ranked.groupby("qid")["score"].min()
    counts = ranked.groupby("qid").size()
    pos = tail.groupby("qid").cumcount()
    tail = tail[(pos + tail["qid"].map(counts)) < depth].copy()
    pos = tail.groupby("qid").cumcount().to_numpy()
    tail["score"] = tail["qid"].map(floor).to_numpy() - 1.0 - pos / max(depth, 1)
    query_cols = [c for c in ranked.columns if c not in ("docno", "score", "rank", "features")]
    tail = tail.drop(columns="rank").merge(ranked[query_cols].drop_duplicates("qid"), on="qid", how="left")
    out = pd.concat([ranked, tail[[c for c in ranked.columns if c in tail.columns]]], ignore_index=True)
    return pt.model.add_ranks(out).sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)


class DecompositionPipeline(pt.Transformer):
    """decomposer >> CandidateUnion >> WeightedFuser, with the stages exposed as attributes.

    ``tail`` / ``depth``: a deeper first-stage ranking (e.g. the base retriever at 1000) whose books follow the
    fused ranking's top ``candidates.k``, up to ``depth`` per query (:func:`fill_to_depth`); the fused top ``k`` is
    unchanged."""

    def __init__(self, decomposer: Optional[pt.Transformer], candidates: CandidateUnion,
                 experts: Dict[str, pt.Transformer], fuser: WeightedFuser, tail: Optional[pt.Transformer] = None,
                 depth: Optional[int] = None):
        self.decomposer = decomposer
        self.candidates = candidates
        self.experts = experts
        self.fuser = fuser
        self.base = candidates.base
        if tail is not None and not isinstance(tail, pt.Transformer):
            raise TypeError(f"DecompositionPipeline: tail must be a pt.Transformer, not {type(tail).__name__}")
        if depth is not None and (not isinstance(depth, (int, np.integer)) or isinstance(depth, bool) or depth < 1):
            raise ValueError(f"DecompositionPipeline: depth must be a positive integer or None, not {depth!r}")
        self.tail = tail
        self.depth = None if depth is None else int(depth)

    @property
    def pipeline(self) -> pt.Transformer:
        stages = [s for s in (self.decomposer, self.candidates, self.fuser) if s is not None]
        pipe = stages[0]
        for s in stages[1:]:
            pipe = pipe >> s
        return pipe

    @property
    def weights_path(self):
        """The folder of the saved fuser weights (``pt.Artifact.load(dp.weights_path)``), or None when the
        weights were not loaded from disk."""
        return self.fuser.path

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # each stage validates its own columns: the decomposer's (or, without one, the candidates') declaration
        # is the pipeline's; the values are checked here, so a bad query fails before any LLM call or retrieval
        if len(inp) and "qid" in inp.columns:
            check_query_frame(inp, repr(self), "query" if "query" in inp.columns else None)
        out = self.pipeline(inp)
        if self.tail is None or self.depth is None or len(out) == 0:
            return out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoResultsWarning)  # the fused part already reported empty queries
            deeper = self.tail(inp)
        return fill_to_depth(out, deeper, self.depth, keep=self.candidates.k)

    def fit(self, topics: pd.DataFrame, qrels: pd.DataFrame, **fit_kwargs) -> "DecompositionPipeline":
        """Refit the fuser's weights on ``topics`` / ``qrels`` (held-out queries, never the ones you report):
        the decomposer and the candidates run once, then :meth:`WeightedFuser.fit` (``metric``, ``floor``, ...
        in ``fit_kwargs``). The refitted weights live in memory (``dp.fuser.save(path)`` keeps them)."""
        self.fuser.fit(topics, qrels, candidates=self.pipeline_to_candidates(), **fit_kwargs)
        self.fuser.path = None
        return self

    def pipeline_to_candidates(self) -> pt.Transformer:
        """decomposer >> candidates: the stage whose output the fuser scores."""
        return self.candidates if self.decomposer is None else self.decomposer >> self.candidates

    def transform_inputs(self) -> List[List[str]]:
        return pt.inspect.transformer_inputs(self.pipeline)

    def transform_outputs(self, inp_columns: List[str]) -> List[str]:
        return pt.inspect.transformer_outputs(self.pipeline, inp_columns)

    def without(self, *names: str, candidates: bool = True) -> "DecompositionPipeline":
        """The same pipeline without the named experts: their weights go, and (``candidates=True``, the default)
        so do the books only their retrievals added to the candidates. ``candidates=False`` keeps the candidate
        set as it is and drops the weights only. The base retriever's candidates always stay.

        The other experts keep the weights they were fitted with *beside* the dropped ones; nothing is refitted.
        For an ablation that refits, call :meth:`fit` on the tuning queries, e.g.
        ``dp.without("bm25").fit(*ptt.tuning_data(ds), metric=dp.fuser.fit_metric.split(","))``."""
        unknown = [n for n in names if n not in self.experts]
        if unknown:
            raise KeyError(f"no expert(s) {unknown}; experts are {list(self.experts)}")
        keep = [i for i, n in enumerate(self.fuser.names) if n not in names]
        if not keep:
            raise ValueError(f"without{names}: no expert would be left to score the candidates")
        fuser = WeightedFuser([self.fuser.experts[i] for i in keep], [self.fuser.weights[i] for i in keep],
                              normalise=[self.fuser.normalise[i] for i in keep],
                              neutral=[self.fuser.neutral[i] for i in keep], names=[self.fuser.names[i] for i in keep],
                              rr_k=self.fuser.rr_k)
        experts = {n: e for n, e in self.experts.items() if n not in names}
        cands = self.candidates
        if candidates:
            dropped = [self.experts[n] for n in names]
            kept = [i for i, r in enumerate(cands.retrievers) if not any(r is d for d in dropped)]
            cands = CandidateUnion(cands.base, [cands.retrievers[i] for i in kept], k=cands.k, expert_k=cands.expert_k,
                                   names=None if cands.names is None else [cands.names[i] for i in kept])
        return DecompositionPipeline(self.decomposer, cands, experts, fuser, tail=self.tail, depth=self.depth)

    def settings(self) -> dict:
        """What changes its ranking, stage by stage (:mod:`pyterrier_tot._plumbing.cache_key`: a model trained on this
        pipeline's ranking records its key)."""
        return {"decomposer": settings_of(self.decomposer), "candidates": settings_of(self.candidates),
                "experts": settings_of(self.experts), "fuser": settings_of(self.fuser),
                "tail": settings_of(self.tail) if self.depth else None, "depth": self.depth}

    def __repr__(self):
        # the experts by name: each is shown where it acts, in the candidates and in the fuser's names
        tail = {"tail": self.tail, "depth": self.depth} if self.tail is not None and self.depth else {}
        return code_repr(self, [self.decomposer, self.candidates],
                         {"experts": list(self.experts), "fuser": self.fuser, **tail}, defaults={})

    def subtransformers(self):
        return {"pipeline": self.pipeline}


def default_experts(index, model: Optional[str] = None, base_model: Optional[str] = None,
                    fields: Sequence[str] = ("title", "plot")) -> Dict[str, pt.Transformer]:
    """base (dense full query), bm25 (full query), one dense expert per clue field, and the date expert where the
    corpus has publication years (:meth:`DateExpert.acts`; on Reddit-TOMT it would score every book alike)."""
    experts: Dict[str, pt.Transformer] = {"base": base_expert(index, "dense", model=base_model or model),
                                          "bm25": base_expert(index, "bm25")}
    for f in fields:
        experts[f] = FieldExpert(index, f, "dense", model=model)
    if DateExpert.acts(index):
        experts["date"] = DateExpert(index)
    return experts


def decomposition_pipeline(index, decomposer: Optional[pt.Transformer] = None,
                           experts: Optional[Dict[str, pt.Transformer]] = None,
                           weights: Union[None, Dict[str, float], Sequence[float], str] = None,
                           base: Optional[pt.Transformer] = None, k: int = 100, expert_k: int = 20,
                           candidate_experts: Optional[Sequence[str]] = None, normalise="minmax",
                           neutral=0.0) -> DecompositionPipeline:
    """Build decomposer >> candidates >> experts >> fuser.

    :param experts: name → expert (default :func:`default_experts`); FieldExperts double as candidate retrievers
    :param weights: a dict name → weight (an expert it leaves out gets weight 0: scored, but not counted), a list
        in expert order, or the path of a fuser JSON (default: ``None``, every expert weight 1)
    :param base: the candidate retriever (default ``experts['base']`` in retriever mode)
    :param k: base retriever depth; ``expert_k``: depth of each expert retriever added to the candidates
    :param candidate_experts: names of the experts whose retrievals join the candidates (default: all
        FieldExperts on a clue field)
    """
    index = CheckedIndex.of(index, "decomposition_pipeline")  # checked here, or where it entered before
    experts = dict(experts) if experts is not None else default_experts(index)
    if not experts:
        raise ValueError("decomposition_pipeline needs at least one expert")
    names = list(experts)
    if base is None:
        base = experts.get("base") or base_expert(index, "dense")
    if candidate_experts is None:
        candidate_experts = [n for n, e in experts.items() if isinstance(e, FieldExpert) and e.field != "query"]
    unknown = [n for n in candidate_experts if n not in experts]
    if unknown:
        raise KeyError(f"candidate_experts {unknown} are not experts; experts are {names}")
    retrievers = [experts[n] for n in candidate_experts]
    candidates = CandidateUnion(base, retrievers, k=k, expert_k=expert_k, names=list(candidate_experts))
    if isinstance(weights, str) and set(WeightedFuser.load(weights).names) == set(names):
        fuser = WeightedFuser.load(weights, experts)  # matched by name, whatever the order
    elif isinstance(weights, str):
        fuser = WeightedFuser.load(weights, list(experts.values()))
        if fuser.names != names:
            warnings.warn(f"weights file names {fuser.names} differ from experts {names}; using the experts' "
                          "order", stacklevel=2)
            fuser.names = names
    else:
        if isinstance(weights, dict):
            unknown = set(weights) - set(names)
            if unknown:
                raise KeyError(f"weights for unknown expert(s) {sorted(unknown)}; experts are {names}")
            weights = [float(weights.get(n, 0.0)) for n in names]
        fuser = WeightedFuser(list(experts.values()), weights, normalise=normalise, neutral=neutral, names=names)
    return DecompositionPipeline(decomposer, candidates, experts, fuser)
