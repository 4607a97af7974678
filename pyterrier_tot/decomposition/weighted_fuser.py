"""Weighted fusion of expert scores: ``score = sum_j w_j * normalise_j(score_j)``, weights tuned on held-out
queries (for Recall@5, as the paper, or for the mean of several measures with a floor: :meth:`WeightedFuser.fit`).

Two ways to feed it:

    # 1. the fuser runs the experts itself on a candidate frame (missing rows are detected exactly)
    fuser = WeightedFuser([base, title, plot, date], weights=[1, .3, .5, .1])
    pipe = decomposer >> candidates >> fuser

    # 2. a PyTerrier feature union (``**``) upstream; the fuser reads the ``features`` column
    pipe = decomposer >> candidates >> (base ** title ** plot ** date) >> WeightedFuser(weights=[1, .3, .5, .1])

Normalisation (per query and expert, by :func:`pyterrier_tot.normalise.normalise_scores`): ``minmax``
(default), ``zscore``, ``rr`` (1 / (60 + rank)) or ``none``; one method for all experts or a list. A missing score
(the expert emitted no row for that book, or its clue was N/A) counts as ``neutral`` (default 0.0, after
normalisation: the bottom of the min-max scale, the mean of the z-scale, below every reciprocal rank); a list
gives one neutral per expert. In the ``**`` mode PyTerrier's feature union has already filled missing rows with
a raw 0, which the fuser cannot tell apart from a real 0.

``fit`` tunes the weights on held-out queries: the experts run once over the candidates (cached as a matrix of
normalised scores), then coordinate ascent over a grid of weights evaluates each setting in numpy (Recall@k,
Success@k and RR from the relevant books' ranks; nDCG@k and the rest through ir_measures). Ties on the target
measure go to the setting with the higher MRR. ``save(path)`` writes the weights as a ``pt.Artifact`` folder
(type ``fuser_weights``, format ``json``: ``pt_meta.json`` + ``weights.json``); ``WeightedFuser.load(path,
experts)`` and ``pt.Artifact.load(path).fuser(experts)`` read it back (``load`` also reads the single JSON file
that earlier versions wrote).

``+`` or WeightedFuser? ``candidates >> (e1 + e2)`` (experts emit min-max scores by default) is an
unweighted CombSUM: no training data needed, fine for two or three comparable experts. Prefer the
WeightedFuser when experts differ in quality (the plot and base experts carry most of the signal, dates and
genres very little), when some clues are often N/A, or when you have validation queries to fit weights on.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.artifact import ToTArtifact, building
from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import require_columns
from pyterrier_tot.checks import check_result_frame
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.decomposition._fast_eval import (
    FastEvaluator,
    bagged_weights,
    check_bags,
    coordinate_ascent,
    floor_check,
)
from pyterrier_tot.decomposition._fast_eval import parse_metric as _parse_metric
from pyterrier_tot.decomposition.fuser_io import WEIGHTS_FILE, WEIGHTS_TYPE, _holds_weights, _read_weights
from pyterrier_tot.normalise import METHODS, normalise_scores

#: Weight grid of the coordinate ascent.
DEFAULT_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


def _as_list(value, n: int, what: str) -> list:
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != n:
            raise ValueError(f"WeightedFuser: {len(value)} {what} given for {n} experts")
        return list(value)
    return [value] * n


def empty_fused(inp: pd.DataFrame) -> pd.DataFrame:
    """What a fuser returns for an empty frame: its columns, without the features, with an empty score and rank."""
    out = inp.drop(columns=["features", "score", "rank"], errors="ignore").copy()
    out["score"] = pd.Series(dtype=float)
    out["rank"] = pd.Series(dtype=int)
    return out


class WeightedFuser(pt.Transformer):
    """Weighted sum of normalised expert scores (see module docs).

    :param experts: transformers run as scorers on the candidate frame, as a list or a dict name → expert (or
        ``None`` to read ``features``)
    :param weights: one per expert / feature (default all 1.0)
    :param normalise: a method or one per expert: ``minmax``, ``zscore``, ``rr``, ``none``
    :param neutral: value of a missing score after normalisation (a float or one per expert)
    :param names: labels for the experts (default the dict's keys, or their ``repr``)
    """

    @keyword_settings
    def __init__(self, experts: Union[None, Sequence[pt.Transformer], Dict[str, pt.Transformer]] = None,
                 weights: Optional[Sequence[float]] = None, *, normalise: Union[str, Sequence[str]] = "minmax",
                 neutral: Union[float, Sequence[float]] = 0.0, names: Optional[Sequence[str]] = None,
                 rr_k: float = 60.0):
        if isinstance(experts, dict):
            if names is not None and list(names) != list(experts):
                raise ValueError(f"WeightedFuser: names {list(names)} differ from the experts' keys {list(experts)}")
            names, experts = list(experts), list(experts.values())
        self.experts = list(experts) if experts is not None else None
        for i, e in enumerate(self.experts or []):
            if not isinstance(e, pt.Transformer):
                raise TypeError(f"WeightedFuser: expert {i} ({names[i] if names else i!r}) must be a pt.Transformer, "
                                f"not {type(e).__name__} {str(e)[:60]!r}")
        n = len(self.experts) if self.experts is not None else (len(weights) if weights is not None else None)
        if n is None:
            raise ValueError("WeightedFuser needs experts or weights (one per feature)")
        if n == 0:
            raise ValueError("WeightedFuser needs at least one expert")
        self.n = n
        try:
            self.weights = np.asarray(weights if weights is not None else [1.0] * n, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"WeightedFuser: weights must be numbers, got {weights!r}") from None
        if self.weights.ndim != 1 or len(self.weights) != n:
            raise ValueError(f"WeightedFuser: {self.weights.size} weights for {n} experts")
        if not np.isfinite(self.weights).all():
            raise ValueError(f"WeightedFuser: weights must be finite, got {list(self.weights)}")
        if not (isinstance(rr_k, (int, float)) and rr_k > 0):
            raise ValueError(f"WeightedFuser: rr_k must be a positive number, not {rr_k!r}")
        self.normalise = _as_list(normalise, n, "normalisations")
        for m in self.normalise:
            if m not in METHODS:
                raise ValueError(f"unknown normalisation {m!r}; expected one of {METHODS}")
        self.neutral = [float(v) for v in _as_list(neutral, n, "neutral values")]
        self.names = list(names) if names is not None else (
            [repr(e) for e in self.experts] if self.experts is not None else [f"f{i}" for i in range(n)])
        if len(self.names) != n:
            raise ValueError(f"WeightedFuser: {len(self.names)} names for {n} experts")
        self.rr_k = rr_k
        self.fit_history: List[dict] = []
        #: the saved weights this fuser was loaded from (None when built in memory)
        self.path: Optional[Path] = None
        self._expert_inputs: Optional[List[str]] = None

    # ------------------------------------------------------------------ features
    def expert_inputs(self) -> List[str]:
        """Columns (besides qid and docno) that the experts' scorer modes declare, e.g. ``query``, ``clue_title``,
        ``clue_year``: the fuser declares them too, so a missing clue fails at its entry, naming the column."""
        if self._expert_inputs is None:
            cols: List[str] = []
            for e in self.experts or []:
                modes = pt.inspect.transformer_inputs(e, strict=False) or [["qid", "docno"]]
                mode = next((m for m in modes if "docno" in m), modes[0])
                cols += [c for c in mode if c not in ("qid", "docno", "score", "rank", "features") and c not in cols]
            self._expert_inputs = cols
        return self._expert_inputs

    def _validate(self, inp: pd.DataFrame) -> None:
        with pta.validate.any(inp) as v:
            if self.experts is not None:
                # the experts score the candidates themselves
                v.result_frame(extra_columns=self.expert_inputs(), mode="candidates")
            else:
                v.result_frame(extra_columns=["features"], mode="features")  # a ** feature union upstream
        # the experts check the query too, but the fuser is the stage the user called: fail here, naming it
        reads_query = self.experts is not None and "query" in self.expert_inputs()
        check_result_frame(inp, repr(self), "query" if reads_query else None)

    def features(self, inp: pd.DataFrame) -> pd.DataFrame:
        """``inp`` (qid, docno, ...) with one normalised, neutral-filled column per expert (``self.names``)."""
        self._validate(inp)
        base = inp.drop(columns=["features", "score", "rank"], errors="ignore").reset_index(drop=True)
        raw = self._raw_scores(inp, base)
        cols = {}
        for j, name in enumerate(self.names):
            s = raw[j]
            present = ~np.isnan(s)
            col = np.full(len(base), self.neutral[j])
            if present.any():
                part = pd.DataFrame({"qid": base["qid"].to_numpy()[present], "score": s[present]})
                col[present] = normalise_scores(part, self.normalise[j], rr_k=self.rr_k).to_numpy()
            cols[name] = col
        return pd.concat([base, pd.DataFrame(cols, index=base.index)], axis=1)

    def _raw_scores(self, inp: pd.DataFrame, base: pd.DataFrame) -> List[np.ndarray]:
        if self.experts is None:
            require_columns(inp, ["features"], f"{self!r} (no experts given: needs a ** feature union upstream)")
            feats = inp.reset_index(drop=True)["features"]
            mat = np.vstack([np.asarray(f, dtype=float) for f in feats]) if len(feats) else np.zeros((0, self.n))
            if mat.shape[1] != self.n:
                raise ValueError(f"WeightedFuser: {mat.shape[1]} features per row but {self.n} weights")
            return [mat[:, j] for j in range(self.n)]
        keys = base[["qid", "docno"]]
        out = []
        # experts differ a hundredfold in cost (a dense one encodes every query, BM25 looks terms up): the bar counts
        # them and shows the time spent, not a remaining time extrapolated from the cheap ones
        for expert in progress_bar(self.experts, desc="fuser: experts", unit="expert", min_items=4,
                                   disable=len(base) < 5000, bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}]"):
            res = expert(base.copy())
            if len(res):
                require_columns(res, ["qid", "docno", "score"], f"output of {expert!r}")
                res = res[["qid", "docno", "score"]].drop_duplicates(["qid", "docno"])
                s = keys.merge(res, on=["qid", "docno"], how="left")["score"].astype(float).to_numpy()
            else:
                s = np.full(len(base), np.nan)
            out.append(s)
        return out

    def fuse(self, feats: pd.DataFrame, weights: Optional[Sequence[float]] = None) -> pd.DataFrame:
        """Rank a :meth:`features` frame with ``weights`` (default the fuser's)."""
        w = np.asarray(self.weights if weights is None else weights, dtype=float)
        out = feats.drop(columns=list(self.names)).copy()
        out["score"] = feats[list(self.names)].to_numpy(dtype=float) @ w if len(feats) else np.zeros(0)
        out = pt.model.add_ranks(out)
        return out.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            return empty_fused(inp)
        return self.fuse(self.features(inp))

    # ------------------------------------------------------------------ fitting
    def fit(self, topics: pd.DataFrame, qrels: pd.DataFrame, metric="R@5", candidates=None,
            grid: Sequence[float] = DEFAULT_GRID, rounds: int = 3, init: Optional[Sequence[float]] = None,
            verbose: bool = False, floor=None, floor_metric=None, bags: int = 0, seed: int = 0) -> "WeightedFuser":
        """Tune the weights by coordinate ascent on ``metric`` (default Recall@5) over held-out queries.

        ``topics`` is a candidate frame (has ``docno``; or ``features`` in ``**`` mode), or a query frame with
        ``candidates`` the transformer that produces the candidates. Expert scores are computed once; each weight
        setting is then evaluated on the cached matrix. ``metric``: one measure, or several (a list or
        ``"R@5,R@100,RR"``) whose mean is the objective. ``floor``: an expert name, a list of names or a weight
        vector (e.g. the base retriever alone); a step is taken only if it keeps each of the ``metric`` measures at
        or above the floor's value on these queries, and the ascent starts from the floor when ``init`` is below it.
        ``floor_metric``: the measures the floor holds on (default the ``metric`` measures), e.g. every cut-off
        of the Recall@k curve while the objective is a few of them. ``bags`` > 0: the weights are the mean of the
        ascents on that many bootstrap resamples of the queries (``seed``), kept only if that mean holds the floor
        on the queries themselves (``fit_bagged``). Returns ``self``; ``fit_history``: each accepted step."""
        measure = _parse_metric(metric)
        cands = topics if candidates is None else candidates(topics)
        if "docno" not in cands.columns:
            raise ValueError("WeightedFuser.fit needs a candidate frame (with docno) or candidates=a retriever")
        held = [*np.atleast_1d(_parse_metric(floor_metric))] if floor_metric is not None else None
        bags = check_bags(bags, [*np.atleast_1d(measure), *(held or [])])
        feats = self.features(cands)
        evaluator = FastEvaluator(feats, qrels, self.names)
        parts = measure if isinstance(measure, list) else [measure]
        w = np.asarray(init if init is not None else self.weights, dtype=float).copy()
        if floor_metric is not None and floor is None:
            raise ValueError("WeightedFuser.fit: floor_metric needs a floor (the expert names or weights to hold)")
        fw = None if floor is None else self._floor_weights(floor)
        held = parts if held is None else held
        feasible = floor_check(evaluator, fw, held)
        if not feasible(w):
            w = fw
        self.fit_history = []

        def step(v, objective):
            self.fit_history.append({"weights": v.tolist(), "objective": objective})
            if verbose and len(self.fit_history) > 1:
                print(f"fit: {dict(zip(self.names, v.tolist()))} -> {objective:.4f}")

        plain = coordinate_ascent(evaluator, w, measure, grid, rounds, feasible, step)
        self.fit_bags, self.fit_bagged, self.fit_seed = bags, False, int(seed)
        if bags:
            bagged = bagged_weights(evaluator, w, fw, held, measure, grid, rounds, bags, seed)
            self.fit_bagged = feasible(bagged)
            if self.fit_bagged:
                plain = bagged
                self.fit_history.append({"weights": bagged.tolist(), "objective": evaluator.objective(bagged, measure),
                                         "bagged": True})
            if verbose:
                print(f"fit: mean of {bags} bootstrap fits {dict(zip(self.names, bagged.round(4).tolist()))} "
                      f"{'kept' if self.fit_bagged else 'below the floor on the queries: the plain fit kept'}")
        self.weights = plain
        self.fit_metric = ",".join(str(m) for m in parts)
        self.fit_score = float(np.mean(evaluator.measures(plain, parts)))
        self.fit_floor = None if floor is None else (floor if isinstance(floor, (str, list)) else
                                                     [float(x) for x in floor])
        self.fit_floor_metric = None if floor is None else ",".join(str(m) for m in held)
        return self

    def _floor_weights(self, floor) -> np.ndarray:
        if isinstance(floor, str):
            floor = [floor]
        if isinstance(floor, (list, tuple)) and all(isinstance(f, str) for f in floor):
            unknown = [f for f in floor if f not in self.names]
            if unknown:
                raise ValueError(f"WeightedFuser.fit: floor names unknown expert(s) {unknown}; experts are "
                                 f"{self.names}")
            return np.array([1.0 if n in floor else 0.0 for n in self.names])
        fw = np.asarray(floor, dtype=float)
        if fw.shape != (self.n,) or not fw.any():
            raise ValueError(f"WeightedFuser.fit: floor must be expert name(s) or {self.n} weights, not {floor!r}")
        return fw

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return {"names": list(self.names), "weights": [float(x) for x in self.weights],
                "normalise": list(self.normalise), "neutral": list(self.neutral), "rr_k": self.rr_k,
                "fit_metric": getattr(self, "fit_metric", None), "fit_score": getattr(self, "fit_score", None),
                "fit_floor": getattr(self, "fit_floor", None),
                "fit_floor_metric": getattr(self, "fit_floor_metric", None),
                "fit_bags": getattr(self, "fit_bags", 0), "fit_bagged": getattr(self, "fit_bagged", False),
                "fit_seed": getattr(self, "fit_seed", None)}

    def save(self, path: Union[str, Path], overwrite: bool = True) -> Path:
        """Write the weights (and normalisation settings) as a :class:`FuserWeights` artifact folder, atomically.
        Saved weights already at ``path`` (folder or old JSON file) are replaced unless ``overwrite=False``;
        anything else there is never touched."""
        path = Path(path).expanduser()
        replace = False
        if path.exists():
            if not overwrite:
                raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
            if not _holds_weights(path):
                raise FileExistsError(f"{path} exists and holds no saved fuser weights; choose another path")
            if path.is_file():
                path.unlink()  # building() swaps folders, not files
            else:
                replace = True
        d = self.to_dict()
        with building(path, overwrite=replace) as tmp:
            (tmp / WEIGHTS_FILE).write_text(json.dumps(d, indent=2))
            FuserWeights(tmp)._write_meta(tmp, names=d["names"], n_experts=len(d["names"]),
                                          fit_metric=d["fit_metric"], fit_score=d["fit_score"],
                                          weights_file=WEIGHTS_FILE)
        return path

    @classmethod
    def load(cls, path, experts: Union[None, Sequence[pt.Transformer], Dict[str, pt.Transformer]] = None
             ) -> "WeightedFuser":
        """A fuser from weights written by :meth:`save` (a folder, a :class:`FuserWeights`, or the single JSON
        file of earlier versions); ``experts``: a list in the saved order, or a dict name → expert holding every
        saved name (matched by name)."""
        d = _read_weights(path)
        if isinstance(experts, dict):
            missing = [n for n in d["names"] if n not in experts]
            extra = [n for n in experts if n not in d["names"]]
            if missing or extra:
                raise ValueError(f"{path}: weights are saved for experts {d['names']}; the experts given "
                                 f"lack {missing} and add {extra}")
            experts = [experts[n] for n in d["names"]]
        if experts is not None and len(experts) != len(d["weights"]):
            raise ValueError(f"{path}: {len(d['weights'])} weights saved for {d['names']}, "
                             f"{len(experts)} experts given")
        fuser = cls(experts, weights=d["weights"], normalise=d["normalise"], neutral=d["neutral"],
                    names=d["names"], rr_k=d.get("rr_k", 60.0))
        if d.get("fit_metric"):
            fuser.fit_metric, fuser.fit_score = d["fit_metric"], d.get("fit_score")
            fuser.fit_floor = d.get("fit_floor")
            fuser.fit_floor_metric = d.get("fit_floor_metric")
            fuser.fit_bags, fuser.fit_bagged = d.get("fit_bags") or 0, bool(d.get("fit_bagged"))
            fuser.fit_seed = d.get("fit_seed")
        # where the weights came from: ``pt.Artifact.load(fuser.path)`` opens them again
        fuser.path = Path(str(path.path) if isinstance(path, pt.Artifact) else os.fspath(path)).expanduser()
        return fuser

    def settings(self) -> dict:
        """What changes its fused scores (:mod:`pyterrier_tot._plumbing.cache_key`); its experts are keyed by the
        pipeline that holds them."""
        return {"names": list(self.names), "weights": [float(w) for w in self.weights],
                "normalise": list(self.normalise), "neutral": list(self.neutral), "rr_k": float(self.rr_k)}

    def __repr__(self):
        # the experts are shown by the pipeline that holds them; here their names, in the order of the weights
        one = len(set(self.normalise)) == 1
        neutral = self.neutral[0] if len(set(self.neutral)) == 1 else self.neutral
        return code_repr(self, [], {"names": list(self.names), "weights": [round(float(w), 6) for w in self.weights],
                                    "normalise": self.normalise[0] if one else list(self.normalise),
                                    "neutral": neutral, "rr_k": self.rr_k})


class FuserWeights(ToTArtifact):
    """Saved :class:`WeightedFuser` weights: a folder with ``pt_meta.json`` and ``weights.json``.

    >>> w = pt.Artifact.load("fuser-weights")      # written by WeightedFuser.save
    >>> w.weights()                                 # {"dense": 1.0, "title": 0.3, ...}
    >>> fuser = w.fuser(experts)                    # or w.fuser() for ``**`` feature-union mode
    """

    ARTIFACT_TYPE = WEIGHTS_TYPE
    ARTIFACT_FORMAT = "json"

    def to_dict(self) -> Dict[str, Any]:
        """Everything :meth:`WeightedFuser.to_dict` saved."""
        return _read_weights(Path(self.path))

    def weights(self) -> Dict[str, float]:
        d = self.to_dict()
        return dict(zip(d["names"], d["weights"]))

    def fuser(self, experts: Union[None, Sequence[pt.Transformer], Dict[str, pt.Transformer]] = None
              ) -> WeightedFuser:
        """The fuser with these weights over ``experts`` (a list in the saved order, a dict name → expert, or
        ``None``: it reads a ``features`` column); a mismatch raises here, naming the experts."""
        return WeightedFuser.load(Path(self.path), experts)
