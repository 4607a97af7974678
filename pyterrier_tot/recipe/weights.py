"""The recipe's fitted weights: the fuser's weights fitted on the tuning slice, cached under a key that names
everything they were fitted with, and the LambdaMART fuser fitted the same way.

The key (:func:`weights_path`) holds the data set, the corpus fingerprint, the bases' and helpers' weights
fingerprints, the slice, the objective, the bags, the extra experts' settings (their
:func:`~pyterrier_tot._plumbing.cache_key.cache_key`, never their reprs) and, where it acts, the date and author
experts: weights fitted for one setting are never read back for another (docs/robustness.rst). Weights fitted before the
extra experts were keyed by settings (keyed by their reprs) are found under their old key and copied to the new
one, with a warning naming both.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.artifact import building, train_once
from pyterrier_tot._plumbing.cache_key import cache_key
from pyterrier_tot._plumbing.util import cache_folder
from pyterrier_tot.checks import CheckedIndex
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.models.fingerprint import configs, model_fingerprint, record_configs, reuse_fit
from pyterrier_tot.recipe.assembly import (
    BASE_K,
    EXPERT_K,
    MULTI_BASE_DEPTH,
    FineTuned,
    _author_acts,
    _date_acts,
    base_names,
    build_pipeline,
    fine_tuned_models,
    recipe_experts,
)
from pyterrier_tot.recipe.protocol import (
    TUNING_QUERIES,
    TUNING_SEED,
    check_not_trained_on_slice,
    same_queries,
    text_fingerprint,
    train_data,
)

#: The fuser's objective on the tuning slice: the mean of the measures the recipe is reported at, from the first
#: book to the hundredth (R@5 alone bought the top at the cost of recall further down), fitted with the base
#: alone as a floor: a weight step is kept only if none of these measures falls below the base's on the slice.
FIT_METRIC = "R@1,R@5,R@10,R@20,R@100,RR"
#: The measures the floor holds on: every Recall@k cut-off up to the fused depth, and MRR (the six alone let R@50 slip).
FLOOR_METRIC = "R@1,R@2,R@3,R@5,R@10,R@20,R@30,R@50,R@100,RR"
#: Bump when code changes the fuser's features (rule clues, experts' defaults); 1 adds nothing to the weights' key.
FEATURES_VERSION = 1
#: Bootstrap resamples of the slice the fuser is fitted on, their weights averaged (0: one ascent). Chosen inside
#: the slice (60 random halves, fit on one, measured on the other; mpnet): one ascent fell below the base somewhere
#: on 35% of the held-out halves, the bagged mean on 30%, a small edge (benchmarks/recipe/results/fuser_bagging.md).
FIT_BAGS = 30


def _models_key(fine_tuned: FineTuned):
    fts = fine_tuned_models(fine_tuned)
    if not fts:
        return None
    if list(fts) == ["dense_ft"]:  # one MiniLM-named base: the part older runs used (the key also has fingerprints)
        return Path(fts["dense_ft"]).name
    return {name: Path(path).name for name, path in fts.items()}


def _fingerprints(models: Dict[str, str]) -> Dict[str, Optional[str]]:
    # a model with no weights file to hash (a hub name) is keyed by its name
    return {name: model_fingerprint(path) or str(path) for name, path in models.items()}


def tuning_data(dataset, n: int = TUNING_QUERIES) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(topics, qrels) of the tuning slice: the held-out training queries every weight of the recipe is fitted
    on (e.g. to refit an ablation: ``dp.without("bm25").fit(*tuning_data(ds), metric=..., floor=...)``)."""
    return train_data(dataset, "tuning", n)


def weights_path(ds_name: str, index, fine_tuned: FineTuned = None, n: int = TUNING_QUERIES, seed: int = TUNING_SEED,
                 k: int = BASE_K, expert_k: int = EXPERT_K, extra_experts: Optional[Dict[str, pt.Transformer]] = None,
                 bags: int = FIT_BAGS, helpers: Optional[Dict[str, str]] = None, tuning_text: Optional[str] = None,
                 normalise: str = "minmax", legacy: bool = False) -> Path:
    """Where the fuser weights fitted with these settings live (the folder :func:`fitted_weights` reads and
    writes; it need not exist): a cache folder named by a digest of everything they were fitted with (the module
    docs). The arguments are :func:`fitted_weights`'s, with ``ds_name`` the data set's name and ``tuning_text``
    the :func:`~pyterrier_tot.recipe.protocol.text_fingerprint` of the tuning slice's topics, as
    :func:`fitted_weights` passes it (None: a key with no tuning text, which :func:`fitted_weights` never uses).
    ``legacy``: the folder the same fit had when extra experts were keyed by their reprs."""
    learnt = index  # a CheckedIndex carries what its entry learnt about the corpus (the date expert acts or not)
    index = index.index if isinstance(index, CheckedIndex) else index
    # the corpus fingerprint is part of the key: weights fitted on one corpus are not reused for another
    parts = [ds_name, getattr(index, "fingerprint", None), _models_key(fine_tuned), n, seed, k, expert_k, FIT_METRIC,
             {"floor": base_names(fine_tuned), "date": _date_acts(learnt), "floor_metric": FLOOR_METRIC},
             {"tuning_text": tuning_text}]
    if _author_acts(index):  # absent where books have no authors (every key made before the author expert)
        parts.append({"author": True})
    fts = fine_tuned_models(fine_tuned)
    if len(fts) > 1:
        parts.append({"candidates": "sum", "depth": MULTI_BASE_DEPTH})
    # the bases' weights, not only their folder names: a folder retrained, or another run's folder of the same
    # name, never finds weights fitted for the model it held before
    if fts:
        parts.append({"model_fingerprints": _fingerprints(fts)})
    if helpers:
        parts.append({"helpers": _fingerprints(helpers)})
    if bags:  # absent for one ascent
        parts.append({"bags": int(bags), "bag_seed": 0})
    if extra_experts and legacy:
        parts.append({name: _legacy_repr(e) for name, e in extra_experts.items()})
    elif extra_experts:  # absent for the plain recipe
        parts.append({"extra_experts": {name: cache_key(e) for name, e in extra_experts.items()}})
    if normalise != "minmax":  # absent for the default scale
        parts.append({"normalise": normalise})
    parts += [{"features_version": FEATURES_VERSION}] if FEATURES_VERSION != 1 else []
    key = json.dumps(parts)
    return cache_folder("fuser", ds_name, hashlib.sha1(key.encode()).hexdigest()[:10])


def fitted_weights(dataset, index, fine_tuned: FineTuned = None, n: int = TUNING_QUERIES,
                   seed: int = TUNING_SEED, k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = False, feats: Optional[pd.DataFrame] = None,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None, bags: int = FIT_BAGS,
                   helpers: Optional[Dict[str, str]] = None, normalise: str = "minmax", fit: bool = True,
                   pipeline: Optional[DecompositionPipeline] = None) -> Optional[Path]:
    """The saved fuser of the recipe: weights fitted (coordinate ascent on :data:`FIT_METRIC` with the base as a
    floor, the mean over ``bags`` bootstrap resamples; ``bags=0``: one ascent) on the tuning slice with rule
    clues, reused from the cache unless ``refit``. Returns the path for ``decomposition_pipeline(weights=...)``.
    ``fine_tuned``: a model folder or {expert name: folder}. ``feats``: the tuning slice's candidates with one
    min-max, neutral-0 column per expert (as :meth:`WeightedFuser.features` or :meth:`LearnedFuser.features`
    make them), so the experts need not run again. ``extra_experts``: as in :func:`build_pipeline`, fitted
    with the rest. ``n`` and ``seed`` draw the tuning slice (``seed``: a slice seed, not a training seed).
    ``fit=False``: a lookup that never fits (None when no fitted weights are cached). ``pipeline``: the recipe's
    pipeline over the same experts, already built (its decomposer and candidates score the slice; nothing is
    built twice). Two processes asking for the same weights fit them once: the second waits, then reuses them.
    ``index``: a book index, or a :class:`~pyterrier_tot.checks.CheckedIndex` (checked where it entered)."""
    tuning, qrels = train_data(dataset, "tuning", n, seed)
    models = {**fine_tuned_models(fine_tuned), **(helpers or {})}
    check_not_trained_on_slice(models, dataset, n, seed)
    key = (dataset.name, index, fine_tuned, n, seed, k, expert_k, extra_experts, bags, helpers,
           text_fingerprint(tuning), normalise)
    path = weights_path(*key)
    if extra_experts and not refit and not path.exists():
        _migrate_legacy(weights_path(*key, legacy=True), path, models)
    if not fit:
        return path if path.exists() and reuse_fit(path, models) else None
    if refit:
        return train_once(path, lambda: None, lambda: _fit_weights(dataset, index, fine_tuned, path, models, tuning,
                                                                   qrels, n, seed, k, expert_k, verbose, feats,
                                                                   extra_experts, bags, helpers, normalise,
                                                                   pipeline))
    # one process fits; another asking for the same weights waits for it, then reuses them
    return train_once(path, lambda: path if path.exists() and reuse_fit(path, models) else None,
                      lambda: _fit_weights(dataset, index, fine_tuned, path, models, tuning, qrels, n, seed, k,
                                           expert_k, verbose, feats, extra_experts, bags, helpers, normalise,
                                           pipeline))


def _legacy_repr(expert) -> str:
    """What keyed an extra expert before settings did: its repr as it then read (``_legacy_repr`` where a class's
    repr has changed since)."""
    old = getattr(expert, "_legacy_repr", None)
    return old() if callable(old) else repr(expert)


def _migrate_legacy(old: Path, new: Path, models: Dict[str, str]) -> None:
    """Copy weights fitted under the repr-based key ``old`` to the settings-based key ``new`` (the old folder stays
    for older versions of the library), with a warning naming both; nothing when there is no such fit, or when it
    was fitted with models configured otherwise (it is fitted again)."""
    if old == new or not old.is_dir() or not reuse_fit(old, models):
        return
    try:
        with building(new) as tmp:
            shutil.copytree(old, tmp, dirs_exist_ok=True)
    except FileExistsError:  # another process copied it meanwhile
        return
    warnings.warn(f"fitted weights {old.name} were keyed by the extra experts' reprs; copied to {new.name}, keyed "
                  "by their settings (cache_key), and read from there", stacklevel=3)


def _fit_weights(dataset, index, fine_tuned, path, models, tuning, qrels, n, seed, k, expert_k, verbose, feats,
                 extra_experts, bags, helpers, normalise, pipeline=None) -> Path:
    found = configs(models)  # the configurations the fit is made with, recorded beside it
    dp = pipeline if pipeline is not None else build_pipeline(index, fine_tuned, k=k, expert_k=expert_k,
                                                              extra_experts=extra_experts, depth=None,
                                                              helpers=helpers, normalise=normalise)
    same_queries(feats, tuning, "fitted_weights", lambda t: dp.fuser.features((dp.decomposer >> dp.candidates)(t)),
                 dp.fuser.names)
    if feats is not None:
        names = dp.fuser.names
        frame = feats.drop(columns=names).assign(features=list(feats[names].to_numpy(dtype=float)))
        # the columns are already normalised: fit on them as they are, then keep the recipe's normalisation
        on_matrix = WeightedFuser(None, weights=dp.fuser.weights, names=names, normalise="none")
        in_slice = frame["qid"].astype(str).isin(tuning["qid"].astype(str))
        on_matrix.fit(frame[in_slice], qrels, metric=FIT_METRIC, verbose=verbose,
                      floor=base_names(fine_tuned), floor_metric=FLOOR_METRIC, bags=bags)
        dp.fuser.weights = on_matrix.weights
        dp.fuser.fit_bags, dp.fuser.fit_bagged = on_matrix.fit_bags, on_matrix.fit_bagged
        dp.fuser.fit_metric, dp.fuser.fit_score = on_matrix.fit_metric, on_matrix.fit_score
        dp.fuser.fit_floor, dp.fuser.fit_floor_metric = on_matrix.fit_floor, on_matrix.fit_floor_metric
        return record_configs(dp.fuser.save(path), found)
    dp.fuser.fit(tuning, qrels, metric=FIT_METRIC, candidates=dp.decomposer >> dp.candidates,
                 verbose=verbose, floor=base_names(fine_tuned), floor_metric=FLOOR_METRIC, bags=bags)
    return record_configs(dp.fuser.save(path), found)


#: LambdaMART settings tried by 5-fold cross-validation on the tuning slice (300 queries over-fit easily).
LAMBDAMART_GRID = [{}, {"n_estimators": 100, "num_leaves": 7, "min_child_samples": 50},
                   {"n_estimators": 200, "num_leaves": 7, "min_child_samples": 100, "reg_lambda": 5.0},
                   {"n_estimators": 50, "learning_rate": 0.05, "num_leaves": 4, "min_child_samples": 200},
                   {"n_estimators": 100, "num_leaves": 4, "min_child_samples": 100, "colsample_bytree": 0.5}]


def fitted_learned_fuser(dataset, index, fine_tuned: FineTuned = None, n: int = TUNING_QUERIES,
                         k: int = BASE_K, expert_k: int = EXPERT_K, negation: bool = True, refit: bool = False,
                         feats: Optional[pd.DataFrame] = None, grid: Optional[List[dict]] = None):
    """The recipe's LambdaMART fuser over the recipe's experts (+ negation hit), trained on the tuning slice with
    rule clues and cached as an artifact. ``feats``: the tuning slice's precomputed features (a benchmark that
    has them saves the expert runs); ``grid``: lightgbm settings to choose from by 5-fold cross-validation on the
    slice (default :data:`LAMBDAMART_GRID`). Returns the fitted :class:`LearnedFuser`."""
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser
    from pyterrier_tot.query.negation_penalty import NegationPenalty

    grid = list(LAMBDAMART_GRID if grid is None else grid)
    experts, _, _ = recipe_experts(index, fine_tuned)
    neg = NegationPenalty(index) if negation else None
    key = json.dumps([dataset.name, getattr(index, "fingerprint", None), _models_key(fine_tuned),
                      n, k, expert_k, negation, grid, "lambdamart-v2", _fingerprints(fine_tuned_models(fine_tuned)),
                      text_fingerprint(train_data(dataset, "tuning", n)[0])])
    path = cache_folder("learned-fuser", dataset.name, hashlib.sha1(key.encode()).hexdigest()[:10])
    fts = fine_tuned_models(fine_tuned)

    def cached():
        if (path / "pt_meta.json").is_file() and not refit and reuse_fit(path, fts, "pt_meta.json"):
            return LearnedFuser.load(path, list(experts.values()), neg)
        return None

    # one process fits; another asking for the same fuser waits for it, then loads it
    return train_once(path, cached, lambda: _fit_learned(dataset, index, fine_tuned, experts, neg, path, n, k,
                                                         expert_k, feats, grid))


def _fit_learned(dataset, index, fine_tuned, experts, neg, path, n, k, expert_k, feats, grid):
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser

    found = configs(fine_tuned_models(fine_tuned))
    fuser = LearnedFuser(list(experts.values()), names=list(experts), negation=neg)
    tuning, qrels = train_data(dataset, "tuning", n)
    check_not_trained_on_slice(fine_tuned_models(fine_tuned), dataset, n)
    dp = build_pipeline(index, fine_tuned, k=k, expert_k=expert_k, depth=None)
    same_queries(feats, tuning, "fitted_learned_fuser", lambda t: fuser.features((dp.decomposer >> dp.candidates)(t)),
                 list(experts))
    if feats is None:
        feats = fuser.features((dp.decomposer >> dp.candidates)(tuning))
    best, table = fuser.cross_validate(feats, qrels, grid) if len(grid) > 1 else (grid[0] if grid else {}, None)
    fuser.params.update(best)
    fuser.fit(None, qrels, feats=feats)
    if table is not None:
        fuser.fit_info["cross_validation"] = table.to_dict("records")
    record_configs(fuser.save(path), found)
    return fuser


def load_fuser(path: Union[str, Path]) -> WeightedFuser:
    """The fitted weights alone (names, weights, fit score) of a saved fuser, e.g. for a results table."""
    return WeightedFuser.load(path)
