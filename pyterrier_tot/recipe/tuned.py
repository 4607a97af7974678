"""The decomposition pipeline as the benchmark and the demo build it: a ready, offline pipeline in one call.

    from pyterrier_tot.recipe.tuned import tuned_pipeline
    dp = tuned_pipeline(ptt.get_dataset("reddit-tomt-books"))   # fine-tuned mpnet base; trains once, then cached
    dp(ds.get_topics("validation"))
    fast = tuned_pipeline(ds, base="minilm")                   # the fast base (make demo's): minutes on a CPU

The procedure (the numbers in ``benchmarks/recipe/results/decomposition_pipeline.md`` and ``bases.md`` come from it):

1. :func:`~pyterrier_tot.recipe.protocol.tuning_split`: 300 training queries
   (``train.sample(300, random_state=0)``) are set aside. Fuser weights and other choices are fitted on them;
   nothing is trained on them.
2. :func:`~pyterrier_tot.recipe.bases.fine_tuned_base`: each base model (:data:`DEFAULT_BASE`, mpnet, by
   default; MiniLM; or both) is fine-tuned as a base retriever on the *other* training queries (full query → gold
   title + text). The models are cached under ``cache_dir()/models`` and reused; a folder without a complete
   model counts as absent, one whose recorded training queries differ is refused.
3. :func:`recipe_experts`: the fine-tuned dense bases, zero-shot dense and BM25 on the full query, dense + BM25
   title experts and a dense plot expert on the rule clues, and the date expert; with mpnet, its fine-tuned MiniLM
   helper and its density prior (:mod:`~pyterrier_tot.recipe.density_prior`). With several bases, the
   candidates are the top ``k`` of the sum of their scores.
4. :func:`fitted_weights`: coordinate ascent over the tuning slice on the mean of R@1, R@5, R@10, R@20, R@100 and
   MRR (:data:`FIT_METRIC`), never below the base alone there (``floor``), bagged (:data:`FIT_BAGS`: the mean of
   the weights found on bootstrap resamples of the slice), weights cached through
   :meth:`WeightedFuser.save` / :meth:`WeightedFuser.load` under a key naming the bases and their weights.
5. Depth (:data:`DEPTH`, 1000): the fused ranking's top ``k``, then the rest of the base's own ranking.

Validation is only ever evaluated. Nothing here needs a network or an LLM: clues come from the rule extractor.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot._artifact import train_once
from pyterrier_tot._fingerprint import configs, model_fingerprint, record_configs, reuse_fit
from pyterrier_tot._util import cache_dir
from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline, decomposition_pipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.recipe.bases import (  # noqa: F401  (the recipe's public names, importable from here)
    BASE_SETTINGS,
    HELPERS,
    HN_DEPTH,
    HN_NEGATIVES,
    TrainingSet,
    as_bases,
    base_expert_name,
    base_grid,
    choose_base,
    choose_epoch,
    default_helpers,
    encoding_precision,
    fine_tuned_base,
    fine_tuned_bases,
    fine_tuned_hard,
    hard_negative_examples,
)
from pyterrier_tot.recipe.density_prior import recipe_priors
from pyterrier_tot.recipe.mined_cross_encoder import (  # noqa: F401  (re-exported)
    CE_MAX_LENGTH,
    CE_NEGATIVES,
    CE_QUERY_TOKENS,
    CE_STEPS,
    cross_encoder_groups,
    fine_tuned_cross_encoder,
)
from pyterrier_tot.recipe.protocol import (  # noqa: F401
    REDDIT_TUNING_FINGERPRINT,
    TRAIN_SPLIT,
    TUNING_QUERIES,
    TUNING_SEED,
    as_path,
    check_not_trained_on_slice,
    complete_model,
    qid_fingerprint,
    same_queries,
    text_fingerprint,
    train_data,
    training_info,
    training_rest,
    tuning_split,
)

#: Depth of the base retriever and of each expert / BM25 retrieval joining the candidates.
BASE_K, EXPERT_K = 100, 50
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
#: Books per query of the recipe's ranking: the fused candidates, then the rest of the base's ranking.
DEPTH = 1000
#: With several fine-tuned bases, how deep each retrieves before their scores are summed for the candidates.
MULTI_BASE_DEPTH = 1000
#: What ``fine_tuned`` may be: True (train / reuse the bases), a model folder, {expert name: folder}, or None.
FineTuned = Union[bool, str, Path, Dict[str, str], None]


def fine_tuned_models(fine_tuned: FineTuned) -> Dict[str, str]:
    """``fine_tuned`` as {expert name: model folder}: a folder (or a saved model) is the ``dense_ft`` base, a
    dict is taken as it is, None / False is no fine-tuned base."""
    if fine_tuned is None or fine_tuned is False:
        return {}
    if fine_tuned is True:
        raise ValueError("fine_tuned=True is resolved by tuned_pipeline; here pass the model folder(s)")
    if isinstance(fine_tuned, dict):
        return {str(name): as_path(path) for name, path in fine_tuned.items()}
    return {"dense_ft": as_path(fine_tuned)}


#: The base :func:`tuned_pipeline` fine-tunes when none is named: the one we recommend. On Reddit-TOMT validation its
#: recipe (with its helper, :data:`~pyterrier_tot.recipe.bases.HELPERS`, and its density prior) has R@5 .712 /
#: MRR .616 against MiniLM's .614 / .522 (``recipe_depth_mpnet_now.md``: bases trained as a new checkout trains
#: them; MiniLM: ``recipe_depth.md``). It costs more: a 420 MB model, two epochs of 28-64 minutes each on two CPU
#: cores in fp32 (14-32 with native bf16; 23 s in all on an H200) against MiniLM's ~19 for both (which the default
#: trains too, as its helper), and about 6x the encoding time. ``make demo`` passes ``base="minilm"`` and says so.
DEFAULT_BASE = "mpnet"


def recipe_experts(index, fine_tuned: FineTuned = None,
                   helpers: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, pt.Transformer], str, List[str]]:
    """The recipe's experts over ``index`` (same names on every corpus, so fitted weights transfer), the name of
    the base expert and the names of the experts whose retrievals join the candidates. ``fine_tuned``: a model
    folder or {expert name: folder} (several fine-tuned bases; the first is the base expert). ``helpers``:
    {expert name: folder} of fine-tuned models that score the candidates beside the base (:data:`HELPERS`)."""
    fts, helpers = fine_tuned_models(fine_tuned), dict(helpers or {})
    clash = sorted(set(fts) & set(helpers))
    if clash:
        raise ValueError(f"helpers {clash} are also bases; a model is a base or a helper, not both")
    taken = sorted(set(helpers) & {"dense", "bm25", "title", "title_bm25", "plot", "date"})
    if taken:
        raise ValueError(f"helpers {taken} have the names of the recipe's own experts; name them otherwise")
    experts: Dict[str, pt.Transformer] = {name: base_expert(index, "dense", model=path,
                                                            precision=encoding_precision(name))
                                          for name, path in {**fts, **helpers}.items()}
    experts.update(dense=base_expert(index, "dense"), bm25=base_expert(index, "bm25"),
                   title=FieldExpert(index, "title", "dense"), title_bm25=FieldExpert(index, "title", "bm25"),
                   plot=FieldExpert(index, "plot", "dense"))
    if _date_acts(index):
        experts["date"] = DateExpert(index)
    names = list(fts)
    base_name = names[0] if names else "dense"
    candidate_experts = ["bm25", "title", "title_bm25"] + names[1:] + (["dense"] if names else [])
    return experts, base_name, candidate_experts


def _date_acts(index) -> bool:
    """Whether the date expert tells books apart on ``index`` (not on a corpus without years, e.g. Reddit-TOMT)."""
    return DateExpert.acts(index)


def candidate_base(experts: Dict[str, pt.Transformer], names: Sequence[str], k: int = BASE_K) -> pt.Transformer:
    """The retriever whose top ``k`` seeds the candidates: the one base expert, or with several the sum of their
    raw (cosine) scores, each retrieving :data:`MULTI_BASE_DEPTH` deep."""
    if len(names) == 1:
        return experts[names[0]].retriever(k)
    summed = experts[names[0]].retriever(MULTI_BASE_DEPTH)
    for name in names[1:]:
        summed = summed + experts[name].retriever(MULTI_BASE_DEPTH)
    return summed % k


def _with_extra(experts: Dict[str, pt.Transformer],
                extra_experts: Optional[Dict[str, pt.Transformer]]) -> Dict[str, pt.Transformer]:
    for name, expert in (extra_experts or {}).items():
        if name in experts:
            raise ValueError(f"extra expert {name!r} has the name of a recipe expert; recipe experts are "
                             f"{list(experts)}")
        if not isinstance(expert, pt.Transformer):
            raise TypeError(f"extra expert {name!r} must be a pt.Transformer (scorer mode), "
                            f"not {type(expert).__name__}")
        experts[name] = expert
    return experts


def build_pipeline(index, fine_tuned: FineTuned = None, decomposer: Optional[pt.Transformer] = None,
                   weights=None, k: int = BASE_K, expert_k: int = EXPERT_K,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None,
                   depth: Optional[int] = DEPTH, helpers: Optional[Dict[str, str]] = None,
                   normalise: str = "minmax") -> DecompositionPipeline:
    """decomposer (default the rule extractor) >> candidates >> the recipe's experts >> fuser (``weights``: a
    dict, a list or a saved fuser; default all 1), then the rest of the base's ranking below the fused
    candidates up to ``depth`` books per query (``None``: the fused candidates only). ``fine_tuned``: a model
    folder or {expert name: folder}. ``extra_experts``: more name → scorer-mode experts (e.g. a generative
    retriever's scores) that the fuser weighs beside the recipe's own; they do not add candidates. ``helpers``:
    {expert name: folder} of fine-tuned second-opinion models (see :func:`recipe_experts`). ``normalise``: how the
    fuser puts the experts on one scale (``minmax``, the default, or ``zscore``, ``rr``; saved weights keep their
    own)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor

    experts, base_name, cands = recipe_experts(index, fine_tuned, helpers)
    experts = _with_extra(experts, extra_experts)
    weights = str(weights) if isinstance(weights, Path) else weights
    names = list(fine_tuned_models(fine_tuned)) or [base_name]
    dp = decomposition_pipeline(index, decomposer if decomposer is not None else RuleClueExtractor(),
                                experts=experts, base=candidate_base(experts, names, k), k=k, expert_k=expert_k,
                                candidate_experts=cands, weights=weights, normalise=normalise)
    if depth is not None and depth > k:
        dp.tail, dp.depth = candidate_base(experts, names, depth), int(depth)
    return dp


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


def base_names(fine_tuned: FineTuned) -> List[str]:
    """The names of the recipe's base expert(s): the fine-tuned bases, or zero-shot ``dense`` without one."""
    return list(fine_tuned_models(fine_tuned)) or ["dense"]


def tuning_data(dataset, n: int = TUNING_QUERIES) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(topics, qrels) of the tuning slice: the held-out training queries every weight of the recipe is fitted
    on (e.g. to refit an ablation: ``dp.without("bm25").fit(*tuning_data(ds), metric=..., floor=...)``)."""
    return train_data(dataset, "tuning", n)


def _weights_path(ds_name: str, index, fine_tuned: FineTuned, n: int, seed: int, k: int, expert_k: int,
                  extra_experts: Optional[Dict[str, pt.Transformer]] = None, bags: int = FIT_BAGS,
                  helpers: Optional[Dict[str, str]] = None, tuning_text: Optional[str] = None,
                  normalise: str = "minmax") -> Path:
    # the corpus fingerprint is part of the key: weights fitted on one corpus are not reused for another
    parts = [ds_name, getattr(index, "fingerprint", None), _models_key(fine_tuned), n, seed, k, expert_k, FIT_METRIC,
             {"floor": base_names(fine_tuned), "date": _date_acts(index), "floor_metric": FLOOR_METRIC},
             {"tuning_text": tuning_text}]
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
    if extra_experts:  # absent for the plain recipe
        parts.append({name: repr(e) for name, e in extra_experts.items()})
    if normalise != "minmax":  # absent for the default scale
        parts.append({"normalise": normalise})
    parts += [{"features_version": FEATURES_VERSION}] if FEATURES_VERSION != 1 else []
    key = json.dumps(parts)
    return cache_dir() / "models" / f"fuser-{ds_name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def fitted_weights(dataset, index, fine_tuned: FineTuned = None, n: int = TUNING_QUERIES,
                   seed: int = TUNING_SEED, k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = False, feats: Optional[pd.DataFrame] = None,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None, bags: int = FIT_BAGS,
                   helpers: Optional[Dict[str, str]] = None, normalise: str = "minmax") -> Path:
    """The saved fuser of the recipe: weights fitted (coordinate ascent on :data:`FIT_METRIC` with the base as a
    floor, the mean over ``bags`` bootstrap resamples; ``bags=0``: one ascent) on the tuning slice with rule
    clues, reused from the cache unless ``refit``. Returns the path for ``decomposition_pipeline(weights=...)``.
    ``fine_tuned``: a model folder or {expert name: folder}. ``feats``: the tuning slice's candidates with one
    min-max, neutral-0 column per expert (as :meth:`WeightedFuser.features` or :meth:`LearnedFuser.features`
    make them), so the experts need not run again. ``extra_experts``: as in :func:`build_pipeline`, fitted
    with the rest. ``n`` and ``seed`` draw the tuning slice (``seed``: a slice seed, not a training seed)."""
    tuning, qrels = train_data(dataset, "tuning", n, seed)
    models = {**fine_tuned_models(fine_tuned), **(helpers or {})}
    check_not_trained_on_slice(models, dataset, n, seed)
    path = _weights_path(dataset.name, index, fine_tuned, n, seed, k, expert_k, extra_experts, bags, helpers,
                         text_fingerprint(tuning), normalise)
    if refit:
        return train_once(path, lambda: None, lambda: _fit_weights(dataset, index, fine_tuned, path, models, tuning,
                                                                   qrels, n, seed, k, expert_k, verbose, feats,
                                                                   extra_experts, bags, helpers, normalise))
    # one process fits; another asking for the same weights waits for it, then reuses them
    return train_once(path, lambda: path if path.exists() and reuse_fit(path, models) else None,
                      lambda: _fit_weights(dataset, index, fine_tuned, path, models, tuning, qrels, n, seed, k,
                                           expert_k, verbose, feats, extra_experts, bags, helpers, normalise))


def _fit_weights(dataset, index, fine_tuned, path, models, tuning, qrels, n, seed, k, expert_k, verbose, feats,
                 extra_experts, bags, helpers, normalise) -> Path:
    found = configs(models)  # the configurations the fit is made with, recorded beside it
    dp = build_pipeline(index, fine_tuned, k=k, expert_k=expert_k, extra_experts=extra_experts, depth=None,
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


def tuned_pipeline(dataset, index=None, fine_tuned: FineTuned = True,
                   decomposer: Optional[pt.Transformer] = None, train: bool = True,
                   k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False, verbose: bool = True,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None,
                   base: Union[str, Sequence[str]] = DEFAULT_BASE, train_settings: Optional[dict] = None,
                   n: int = TUNING_QUERIES, depth: Optional[int] = DEPTH,
                   helpers: Union[None, Sequence[str], Dict[str, str]] = None, density: bool = True,
                   normalise: str = "minmax") -> DecompositionPipeline:
    """The recipe's decomposition pipeline over ``dataset`` (a ToT dataset with train topics and qrels), ready to
    run: fine-tuned base(s) (``True``: get or train ``base``, one model name or a list such as
    ``["minilm", "mpnet"]``; default :data:`DEFAULT_BASE`, mpnet, which offline needs
    ``benchmarks/fetch_models.py mpnet`` first; ``base="minilm"`` is the fast one; a path: that model; {expert
    name: path}; ``False``/``None``: zero-shot MiniLM), rule clues (or ``decomposer``), weights fitted on the tuning
    slice. Offline; cached after the first call.
    ``train_settings``: overrides for the base training (e.g. ``{"max_steps": 2}``; see
    :func:`~pyterrier_tot.recipe.bases.base_settings`). ``extra_experts``: name → scorer-mode expert
    fused beside the recipe's (weights fitted on the slice too). ``n``: size of the tuning slice. ``depth``: books
    per query (default 1000, what TREC ToT measures): the fused candidates first, then the rest of the base's
    ranking; ``None`` returns the fused candidates alone (about ``k`` + a few dozen). ``helpers``: model names
    fine-tuned (trained when missing) and weighed beside the base, or {expert name: folder}; default
    :func:`default_helpers` of ``base`` when the bases are trained here (``fine_tuned=True``), else none.
    ``density``: weigh the density prior of the base (:func:`~pyterrier_tot.recipe.density_prior.recipe_priors`:
    mpnet's) beside the experts; ``False`` leaves it out. ``normalise="zscore"``: the fuser on z-scores instead of
    min-max, fitted under its own key (``benchmarks/recipe/results/fuser_normalisation.md``: offered, not the
    default)."""
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    helpers = (default_helpers(base) if fine_tuned is True else ()) if helpers is None else helpers
    if fine_tuned is True:
        fine_tuned = fine_tuned_bases(dataset, index, base, train=train, verbose=verbose, n=n,
                                      **(train_settings or {}))
    if helpers and not isinstance(helpers, dict):  # each trained with its own BASE_SETTINGS, not train_settings
        helpers = fine_tuned_bases(dataset, index, helpers, train=train, verbose=verbose, n=n, role="helper") \
            if fine_tuned_models(fine_tuned) else {}  # no fine-tuned base: no helper beside the zero-shot one
    fine_tuned = fine_tuned_models(fine_tuned) or None
    extra_experts = {**(recipe_priors(index, base, fine_tuned) if density else {}), **(extra_experts or {})} or None
    weights = fitted_weights(dataset, index, fine_tuned, n=n, k=k, expert_k=expert_k, refit=refit, verbose=False,
                             extra_experts=extra_experts, helpers=helpers or None, normalise=normalise)
    return build_pipeline(index, fine_tuned, decomposer, weights=weights, k=k, expert_k=expert_k,
                          extra_experts=extra_experts, depth=depth, helpers=helpers or None, normalise=normalise)


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
    path = cache_dir() / "models" / f"learned-fuser-{dataset.name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
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
