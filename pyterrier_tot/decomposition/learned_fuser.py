"""Learned fusion: a LambdaMART ranker (lightgbm) over the experts' scores and a few simple features.

The :class:`~pyterrier_tot.decomposition.weighted_fuser.WeightedFuser` adds normalised expert scores with one
weight each. A tree ensemble can also learn interactions: trust the title expert when there is a title clue,
BM25 when the base retriever ranks the book low, and so on. Features per (query, book):

- per expert: its min-max normalised score (neutral 0 when it gave none), its rank among the query's
  candidates (BM25 rank, base rank, ...), and whether it scored the book at all;
- per query: which clues are present (``clue_title``, ``clue_author``, ``clue_cover``, ``clue_genre``,
  ``clue_year``), so the trees can condition on them;
- ``negation_hit`` (with ``negation=NegationPenalty(index)``): the book matches a concept the query negates;
- ``candidate_rank``: the rank the candidate stage gave the book.

The year match is the :class:`~pyterrier_tot.decomposition.date_expert.DateExpert`'s score when it is one of
the experts. Two ways to feed it, as for the WeightedFuser::

    fuser = LearnedFuser(list(experts.values()), names=list(experts))       # runs the experts itself
    fuser.fit(tuning_candidates, tuning_qrels)                              # the recipe's tuning slice
    pipe = decomposer >> candidates >> fuser

    pipe = candidates >> (e1 ** e2 ** e3) >> LearnedFuser(names=["e1", "e2", "e3"])   # a ** feature union

``save(path)`` writes an artifact folder (type ``learned_fuser``, format ``lightgbm``): lightgbm's own text
model file plus the feature names; ``LearnedFuser.load(path, experts)`` reads it back (no pickle).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.artifact import ToTArtifact, building, read_meta
from pyterrier_tot._plumbing.reprs import Shown, code_repr
from pyterrier_tot._plumbing.util import is_missing, require_columns
from pyterrier_tot.checks import check_result_frame
from pyterrier_tot.decomposition.clues import clue_column
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser, empty_fused
from pyterrier_tot.errors import BadInputError
from pyterrier_tot.normalise import normalise_scores

MODEL_FILE = "lightgbm.txt"
FEATURES_FILE = "features.json"
CLUE_FEATURES = ("title", "author", "cover", "genre")
#: lightgbm LambdaMART settings sized for a few hundred tuning queries of ~100-200 candidates.
DEFAULT_PARAMS = dict(objective="lambdarank", n_estimators=300, learning_rate=0.03, num_leaves=15,
                      min_child_samples=20, subsample=0.8, subsample_freq=1, colsample_bytree=0.8,
                      lambdarank_truncation_level=20, verbose=-1, n_jobs=1, random_state=0)


class LearnedFuser(pt.Transformer):
    """LambdaMART over expert scores and simple features (see the module docs).

    :param experts: scorer-mode transformers (or ``None`` to read a ``**`` ``features`` column)
    :param names: one label per expert / feature
    :param negation: an optional transformer adding ``negation_penalty`` (e.g. ``NegationPenalty(index)``)
    :param params: lightgbm ``LGBMRanker`` settings over :data:`DEFAULT_PARAMS`
    """

    def __init__(self, experts: Optional[Sequence[pt.Transformer]] = None, names: Optional[Sequence[str]] = None,
                 negation: Optional[pt.Transformer] = None, params: Optional[dict] = None):
        n = len(experts) if experts is not None else (len(names) if names is not None else 0)
        if n == 0:
            raise ValueError("LearnedFuser needs experts, or names for the ** features")
        # the WeightedFuser computes the normalised, neutral-filled expert matrix; its weights are unused
        self._scores = WeightedFuser(experts, names=names) if experts is not None else \
            WeightedFuser(None, weights=[1.0] * n, names=names)
        self.experts = self._scores.experts
        self.names = list(self._scores.names)
        self.negation = negation
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.booster = None
        self.feature_names: List[str] = []
        self.fit_info: Dict[str, object] = {}

    # ------------------------------------------------------------------ features
    def features(self, inp: pd.DataFrame) -> pd.DataFrame:
        """``inp`` (qid, docno, ...) with one column per learned feature (:attr:`feature_names` after fit)."""
        self._validate(inp)
        feats = inp.drop(columns=["features", "score", "rank"], errors="ignore").reset_index(drop=True)
        raw = self._scores._raw_scores(inp, feats)  # each expert runs once
        cols = {}
        qid = feats["qid"].to_numpy()
        for j, name in enumerate(self.names):
            present = ~np.isnan(raw[j])
            col = np.zeros(len(feats))
            if present.any():
                part = pd.DataFrame({"qid": qid[present], "score": raw[j][present]})
                col[present] = normalise_scores(part, "minmax").to_numpy()
            cols[name] = col
            cols[f"{name}:present"] = present.astype(float)
            ranks = pd.Series(np.where(present, raw[j], -np.inf)).groupby(qid).rank(ascending=False, method="min")
            cols[f"{name}:rank"] = np.where(present, ranks.to_numpy(), 1000.0)
        for field in CLUE_FEATURES:
            col = clue_column(field)
            cols[f"has_{field}_clue"] = (feats[col].map(lambda v: not is_missing(v)).astype(float).to_numpy()
                                         if col in feats.columns else np.zeros(len(feats)))
        year = "clue_year"
        cols["has_year_clue"] = (feats[year].map(lambda v: not is_missing(v)).astype(float).to_numpy()
                                 if year in feats.columns else np.zeros(len(feats)))
        cols["candidate_rank"] = (inp["rank"].to_numpy(dtype=float) if "rank" in inp.columns
                                  else np.zeros(len(feats)))
        if self.negation is not None and len(feats):
            neg = self.negation(inp.drop(columns=["features"], errors="ignore").reset_index(drop=True))
            key = neg[["qid", "docno", "negation_penalty"]].drop_duplicates(["qid", "docno"])
            hit = feats[["qid", "docno"]].merge(key, on=["qid", "docno"], how="left")["negation_penalty"]
            cols["negation_hit"] = (hit.fillna(0.0).to_numpy(dtype=float) > 0).astype(float)
        return pd.concat([feats, pd.DataFrame(cols, index=feats.index)], axis=1)

    def _matrix(self, feats: pd.DataFrame) -> np.ndarray:
        names = self.feature_names or self._feature_columns(feats)
        for c in names:
            if c not in feats.columns:
                feats[c] = 0.0  # e.g. negation_hit when the fuser was loaded without its negation stage
        return feats[names].to_numpy(dtype=float)

    def _feature_columns(self, feats: pd.DataFrame) -> List[str]:
        extra = [c for c in feats.columns if ":" in c or c.startswith("has_") or
                 c in ("candidate_rank", "negation_hit")]
        return list(self.names) + extra

    # ------------------------------------------------------------------ ranking
    def _validate(self, inp: pd.DataFrame) -> None:
        with pta.validate.any(inp) as v:
            if self.experts is not None:
                v.result_frame(extra_columns=self._scores.expert_inputs(), mode="candidates")
            else:
                v.result_frame(extra_columns=["features"], mode="features")
        reads_query = self.experts is not None and "query" in self._scores.expert_inputs()
        check_result_frame(inp, repr(self), "query" if reads_query else None)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self._validate(inp)
        if len(inp) == 0:
            return empty_fused(inp)
        if self.booster is None:
            raise BadInputError(f"{self!r} is not trained: call fit() on the tuning slice or load a saved fuser")
        return self.rank(self.features(inp))

    def rank(self, feats: pd.DataFrame) -> pd.DataFrame:
        """Score and rank a :meth:`features` frame (lets a benchmark compute the features once)."""
        out = feats.drop(columns=[c for c in feats.columns if c in self.names or c in self.feature_names
                                  or ":" in c]).copy()
        out["score"] = self.booster.predict(self._matrix(feats.copy())) if len(feats) else np.zeros(0)
        return pt.model.add_ranks(out).sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)

    def fit(self, topics: pd.DataFrame, qrels: pd.DataFrame, candidates: Optional[pt.Transformer] = None,
            feats: Optional[pd.DataFrame] = None) -> "LearnedFuser":
        """Train on held-out queries (the recipe's tuning slice): ``topics`` is a candidate frame, or a query
        frame with ``candidates`` the stage that makes one; ``feats`` a precomputed :meth:`features` frame.
        Labels are the qrels' ``label`` (1 when absent); queries with no relevant candidate teach nothing and are
        left out."""
        import lightgbm as lgb

        require_columns(qrels, ["qid", "docno"], "LearnedFuser.fit qrels")
        if feats is None:
            cands = topics if candidates is None else candidates(topics)
            feats = self.features(cands)
        q = qrels.assign(qid=qrels["qid"].astype(str), docno=qrels["docno"].astype(str))
        q = q.assign(label=q["label"].astype(int) if "label" in q.columns else 1)[["qid", "docno", "label"]]
        q = q.drop_duplicates(["qid", "docno"])
        data = feats.assign(qid=feats["qid"].astype(str), docno=feats["docno"].astype(str))
        data = data.merge(q, on=["qid", "docno"], how="left")
        data["label"] = data["label"].fillna(0).clip(lower=0).astype(int)
        useful = data.groupby("qid")["label"].transform("max") > 0
        data = data[useful].sort_values("qid", kind="stable")
        if data["qid"].nunique() < 2:
            raise ValueError("LearnedFuser.fit: fewer than 2 queries have a relevant book among the candidates")
        self.feature_names = self._feature_columns(data)
        groups = data.groupby("qid", sort=False).size().to_numpy()
        ranker = lgb.LGBMRanker(**self.params)
        ranker.fit(data[self.feature_names].to_numpy(dtype=float), data["label"].to_numpy(), group=groups)
        self.booster, self._loaded_from = ranker.booster_, None
        self.fit_info = {"n_queries": int(len(groups)), "n_rows": int(len(data)),
                         "dropped_queries": int(feats["qid"].nunique() - len(groups))}
        return self

    def cross_validate(self, feats: pd.DataFrame, qrels: pd.DataFrame, grid: Sequence[dict], folds: int = 5,
                       metric: str = "R@5", seed: int = 0):
        """Choose lightgbm settings by ``folds``-fold cross-validation over the queries of ``feats`` (a
        :meth:`features` frame of held-out queries, e.g. the tuning slice): each setting of ``grid`` (overrides of
        :attr:`params`) is trained on the other folds and ranks each fold; ``metric`` (ir_measures) is computed over
        all the held-out rankings. Returns the best overrides (the first on ties) and the table of all."""
        import ir_measures

        from pyterrier_tot.evaluation import parse_measure

        measure = parse_measure(metric)
        qids = np.array(sorted(feats["qid"].astype(str).unique()))
        np.random.default_rng(seed).shuffle(qids)
        fold_of = dict(zip(qids, np.arange(len(qids)) % folds))
        fold = feats["qid"].astype(str).map(fold_of).to_numpy()
        gold = qrels.assign(query_id=qrels["qid"].astype(str), doc_id=qrels["docno"].astype(str),
                            relevance=qrels["label"].astype(int) if "label" in qrels.columns else 1)
        rows = []
        for over in grid:
            runs = []
            for f in range(folds):
                model = LearnedFuser(names=self.names, params={**self.params, **over})
                model.fit(None, qrels, feats=feats[fold != f].copy())
                runs.append(model.rank(feats[fold == f].copy())[["qid", "docno", "score"]])
            run = pd.concat(runs, ignore_index=True)
            run = run.assign(query_id=run["qid"].astype(str), doc_id=run["docno"].astype(str))
            value = ir_measures.calc_aggregate([measure], gold[["query_id", "doc_id", "relevance"]],
                                               run[["query_id", "doc_id", "score"]])[measure]
            rows.append({"params": dict(over), metric: float(value)})
        best = max(range(len(rows)), key=lambda i: (rows[i][metric], -i))
        return rows[best]["params"], pd.DataFrame(rows)

    def importance(self) -> Dict[str, float]:
        """Total gain of each feature in the trained trees."""
        gain = self.booster.feature_importance(importance_type="gain")
        return {n: float(g) for n, g in zip(self.feature_names, gain)}

    # ------------------------------------------------------------------ persistence
    def save(self, path: Union[str, Path], overwrite: bool = True) -> Path:
        if self.booster is None:
            raise ValueError(f"{self!r} is not trained; nothing to save")
        path = Path(path)
        with building(path, overwrite=overwrite) as tmp:
            self.booster.save_model(str(tmp / MODEL_FILE))
            (tmp / FEATURES_FILE).write_text(json.dumps({"names": self.names, "features": self.feature_names,
                                                         "params": self.params, "fit": self.fit_info}, indent=2))
            LearnedFuserModel._write_meta(LearnedFuserModel, tmp, names=self.names, n_features=len(self.feature_names),
                                          model_file=MODEL_FILE)
        return path

    @classmethod
    def load(cls, path, experts: Optional[Sequence[pt.Transformer]] = None,
             negation: Optional[pt.Transformer] = None) -> "LearnedFuser":
        import lightgbm as lgb

        meta = read_meta(path)
        if meta.get("type") != LearnedFuserModel.ARTIFACT_TYPE:
            raise ValueError(f"{path} holds a {meta.get('type')!r} artifact, not a learned fuser")
        info = json.loads((Path(path) / FEATURES_FILE).read_text())
        fuser = cls(experts, names=info["names"], negation=negation, params=info["params"])
        fuser.booster = lgb.Booster(model_file=str(Path(path) / MODEL_FILE))
        fuser.feature_names = list(info["features"])
        fuser.fit_info = info.get("fit", {})
        fuser._loaded_from = str(path)
        return fuser

    def __repr__(self):
        """The call that makes it: ``LearnedFuser(names=[...], params={...})`` (the experts are shown by the pipeline
        that holds them; ``params`` where not the defaults), ``LearnedFuser.load('folder')`` for a saved one, and
        ``.fit(<N features>)`` after one trained here."""
        if getattr(self, "_loaded_from", None) is not None and self.booster is not None:
            return f"LearnedFuser.load({self._loaded_from!r})"
        changed = {k: v for k, v in self.params.items() if k not in DEFAULT_PARAMS or DEFAULT_PARAMS[k] != v}
        code = code_repr(self, [], {"names": list(self.names), "negation": self.negation, "params": changed or None})
        return code if self.booster is None else f"{code}.fit({Shown(f'{len(self.feature_names)} features')!r})"


class LearnedFuserModel(ToTArtifact):
    """A saved :class:`LearnedFuser` folder; :meth:`fuser` loads it with the given experts."""

    ARTIFACT_TYPE = "learned_fuser"
    ARTIFACT_FORMAT = "lightgbm"

    def fuser(self, experts: Optional[Sequence[pt.Transformer]] = None, negation=None) -> LearnedFuser:
        return LearnedFuser.load(self.path, experts, negation)
