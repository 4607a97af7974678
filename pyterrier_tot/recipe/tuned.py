"""The decomposition pipeline as the benchmark and the demo build it: a ready, offline pipeline in one call.

    from pyterrier_tot.recipe import tuned_pipeline
    dp = tuned_pipeline(ptt.get_dataset("reddit-tomt-books"))   # fine-tuned mpnet base; trains once, then cached
    dp(ds.get_topics("validation"))
    fast = tuned_pipeline(ds, base="minilm")                   # the fast base (make demo's): minutes on a CPU
    dp.save("my-recipe")                                       # the whole trained recipe as one artifact folder

The procedure (the numbers in ``benchmarks/recipe/results/decomposition_pipeline.md`` and ``bases.md`` come from it):

1. :func:`~pyterrier_tot.recipe.protocol.tuning_split`: 300 training queries
   (``train.sample(300, random_state=0)``) are set aside. Fuser weights and other choices are fitted on them;
   nothing is trained on them.
2. :func:`~pyterrier_tot.recipe.bases.fine_tuned_base`: each base model (:data:`DEFAULT_BASE`, mpnet, by
   default; MiniLM; or both) is fine-tuned as a base retriever on the *other* training queries (full query → gold
   title + text), with mpnet its MiniLM helper too. The models are cached under ``cache_dir()/models`` and
   reused; a folder without a complete model counts as absent, one whose recorded training queries differ is
   refused; two processes asking for one model train it once.
3. :func:`~pyterrier_tot.recipe.assembly.recipe_experts`: the fine-tuned dense bases, zero-shot dense and BM25 on the
   full query, dense + BM25 title experts and a dense plot expert on the rule clues, the date expert (corpora with
   years) and the author expert (corpora with authors); with mpnet, its fine-tuned MiniLM helper and its density
   prior (:mod:`~pyterrier_tot.recipe.density_prior`). With several bases, the candidates are the top ``k`` of the
   sum of their scores.
4. :func:`~pyterrier_tot.recipe.weights.fitted_weights`: coordinate ascent over the tuning slice on the mean of
   R@1, R@5, R@10, R@20, R@100 and MRR (:data:`FIT_METRIC`), never below the base alone there (``floor``), bagged
   (:data:`FIT_BAGS`), cached under a key naming the bases and their weights.
5. Depth (:data:`DEPTH`, 1000): the fused ranking's top ``k``, then the rest of the base's own ranking.

Before anything is trained, the call prints its plan (:mod:`~pyterrier_tot.recipe.plan`): each step, what is
cached, and an estimate timed on this machine; one progress bar follows. Validation is only ever evaluated.
Nothing here needs a network or an LLM: clues come from the rule extractor.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Optional, Sequence, Tuple, Union

import pyterrier as pt

from pyterrier_tot.decomposition.date_expert import DateExpert  # noqa: F401  (re-exported)
from pyterrier_tot.decomposition.field_expert import FieldExpert
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.errors import ModelUnavailableError
from pyterrier_tot.recipe import bases as _bases
from pyterrier_tot.recipe import plan as planning
from pyterrier_tot.recipe.assembly import (  # noqa: F401  (the recipe's names, importable from here)
    BASE_K,
    DEPTH,
    EXPERT_K,
    MULTI_BASE_DEPTH,
    FineTuned,
    _author_acts,
    _date_acts,
    _with_extra,
    base_names,
    build_pipeline,
    candidate_base,
    fine_tuned_models,
    recipe_experts,
)
from pyterrier_tot.recipe.bases import (  # noqa: F401
    BASE_SETTINGS,
    HELPERS,
    TrainingSet,
    _corpus,
    _hub_name,
    as_bases,
    base_dir,
    base_expert_name,
    base_grid,
    base_settings,
    choose_base,
    choose_epoch,
    default_helpers,
    encoding_precision,
    fine_tuned_base,
    fine_tuned_bases,
    warn_untrained,
)
from pyterrier_tot.recipe.density_prior import recipe_priors
from pyterrier_tot.recipe.hard_negatives import HN_DEPTH, HN_NEGATIVES, fine_tuned_hard, hard_negative_examples  # noqa: F401
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
from pyterrier_tot.recipe.weights import (  # noqa: F401
    FEATURES_VERSION,
    FIT_BAGS,
    FIT_METRIC,
    FLOOR_METRIC,
    LAMBDAMART_GRID,
    _fingerprints,
    _models_key,
    _weights_path,
    fitted_learned_fuser,
    fitted_weights,
    load_fuser,
    tuning_data,
)

#: The base :func:`tuned_pipeline` fine-tunes when none is named: the one we recommend. On Reddit-TOMT validation its
#: recipe (with its helper, :data:`~pyterrier_tot.recipe.bases.HELPERS`, and its density prior) has R@5 .712 /
#: MRR .616 against MiniLM's .614 / .522 (``recipe_depth_mpnet.md``: bases trained as a new checkout trains
#: them; MiniLM: ``recipe_depth.md``). It costs more: a 420 MB model, two epochs of 28-64 minutes each on two CPU
#: cores in fp32 (14-32 with native bf16; 23 s in all on an H200) against MiniLM's ~19 for both (which the default
#: trains too, as its helper), and about 6x the encoding time. ``make demo`` passes ``base="minilm"`` and says so.
DEFAULT_BASE = "mpnet"


class _Trainings:
    """The models a call would train: each base and helper, its folder, settings and training examples."""

    def __init__(self, dataset, index, base, helpers, train_settings: Optional[dict], n: int,
                 helper_settings: Optional[dict] = None):
        from pyterrier_tot.recipe.expert_training import build_pairs

        self.dataset, self.index, self.n = dataset, index, n
        rest, qrels = train_data(dataset, "rest", n)
        pairs = build_pairs(rest, qrels, _corpus(dataset, index))
        sample = planning.frame_sample(pairs)

        def one(model, role, settings):
            cfg = base_settings(model, **settings)
            return planning.Training(role, model, str(base_dir(dataset, model, n, **settings)), cfg, len(pairs),
                                     sample, int(cfg["soup"]))

        self.bases = [one(m, "base", dict(train_settings or {})) for m in as_bases(base)]
        self.helpers = [one(m, "helper", dict(helper_settings or {})) for m in helpers]


def recipe_plan(dataset, index=None, base: Union[str, Sequence[str]] = DEFAULT_BASE,
                helpers: Union[None, Sequence[str]] = None, train_settings: Optional[dict] = None,
                n: int = TUNING_QUERIES, k: int = BASE_K, expert_k: int = EXPERT_K, density: bool = True,
                normalise: str = "minmax", title: str = "the recipe",
                helper_settings: Optional[dict] = None) -> planning.RecipePlan:
    """What ``tuned_pipeline(dataset, index, base=base, ...)`` would do on this machine and what is cached
    (:class:`~pyterrier_tot.recipe.plan.RecipePlan`); nothing is trained or encoded, but the models to train and
    encode are timed on a few steps here (a minute or so on a CPU when mpnet is to train)."""
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    helpers = default_helpers(base) if helpers is None else helpers
    return _plan(_Trainings(dataset, index, base, helpers, train_settings, n, helper_settings), base, k, expert_k,
                 density, normalise, title)[0]


def _plan(work: _Trainings, base, k: int, expert_k: int, density: bool, normalise: str,
          title: str, say=None) -> Tuple[planning.RecipePlan, Dict[str, object]]:
    index, dataset, n = work.index, work.dataset, work.n
    steps: Dict[str, object] = {}
    if say and not all(planning.folder_done(t.folder) for t in work.bases + work.helpers):
        say(f"{title}: timing a few training steps and a book sample here, to say what the first call costs...")
    for t in work.bases + work.helpers:  # a model to train that is not on this machine: fetching it comes first
        fetch = None if planning.folder_done(t.folder) else planning.fetch_step(_hub_name(t.model))
        if fetch is not None:
            steps.setdefault(("fetch", fetch.what), fetch)
    for t in work.bases + work.helpers:
        steps[t.folder] = planning.training_step(t, planning.folder_done(t.folder))
    fts = {base_expert_name(t.model): t.folder for t in work.bases}
    helpers = {base_expert_name(t.model): t.folder for t in work.helpers}
    experts, _, _ = recipe_experts(index, fts, helpers)
    if density:
        experts.update(recipe_priors(index, base, fts))
    labels = {**{t.folder: f"{t.model} base" for t in work.bases}, **{t.folder: f"{t.model} helper"
                                                                      for t in work.helpers}}
    bm25, parts = planning.expert_parts(experts, labels)
    steps["bm25"] = planning.bm25_step(index, bm25)
    timing = {t.folder: _hub_name(t.model) for t in work.bases + work.helpers}
    encodes = planning.encoding_steps(index, [(*key, label) for key, label in parts.items()], timing)
    for key, s in zip(parts, encodes):
        steps[("dense", *key)] = s
    weights = None
    if all(planning.folder_done(t.folder) for t in work.bases + work.helpers):
        weights = fitted_weights(dataset, index, fts, n=n, k=k, expert_k=expert_k, extra_experts=(
            recipe_priors(index, base, fts) if density else None) or None, helpers=helpers or None,
            normalise=normalise, fit=False)
    tuning = train_data(dataset, "tuning", n)[0]
    factor = planning.fit_cpu_factor() if weights is None else 1.0
    query_s = {}
    if weights is None:
        for name, e in experts.items():
            if isinstance(e, FieldExpert) and e.backend == "dense":
                model = timing.get(str(e.model), None if e.model is None else str(e.model))
                try:
                    per = planning.encoding_seconds(model, planning.query_sample(tuning), e.precision or "fp32")
                except ModelUnavailableError:  # still to fetch (a step of the plan): the reference's rate
                    continue
                query_s[name] = per * (1.0 if e.field == "query" else 0.3)  # a clue is a few words
    steps["fit"] = planning.fit_step(len(tuning), experts, FIT_BAGS, query_s, factor, weights is not None)
    return planning.RecipePlan(list(steps.values()), planning.machine(), title), steps


def tuned_pipeline(dataset, index=None, fine_tuned: FineTuned = True,
                   decomposer: Optional[pt.Transformer] = None, train: bool = True,
                   k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False, verbose: bool = True,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None,
                   base: Union[str, Sequence[str]] = DEFAULT_BASE, train_settings: Optional[dict] = None,
                   n: int = TUNING_QUERIES, depth: Optional[int] = DEPTH,
                   helpers: Union[None, Sequence[str], Dict[str, str]] = None, density: bool = True,
                   normalise: str = "minmax", helper_settings: Optional[dict] = None) -> DecompositionPipeline:
    """The recipe's decomposition pipeline over ``dataset`` (a ToT dataset with train topics and qrels), ready to
    run: fine-tuned base(s) (``True``: get or train ``base``, one model name or a list such as
    ``["minilm", "mpnet"]``; default :data:`DEFAULT_BASE`, mpnet, which offline needs
    ``benchmarks/fetch_models.py mpnet`` first; ``base="minilm"`` is the fast one; a path: that model; {expert
    name: path}; ``False``/``None``: zero-shot MiniLM), rule clues (or ``decomposer``), weights fitted on the tuning
    slice. Offline; cached after the first call, which prints its plan and cost first (``verbose=False``: silent).
    ``train=False``: nothing is trained or fitted (models not cached are left out with a warning; weights not
    cached raise :class:`~pyterrier_tot.errors.ModelUnavailableError`).
    ``train_settings``: overrides for the base training (e.g. ``{"max_steps": 2}``; see
    :func:`~pyterrier_tot.recipe.bases.base_settings`). ``extra_experts``: name → scorer-mode expert
    fused beside the recipe's (weights fitted on the slice too). ``n``: size of the tuning slice. ``depth``: books
    per query (default 1000, what TREC ToT measures): the fused candidates first, then the rest of the base's
    ranking; ``None`` returns the fused candidates alone (about ``k`` + a few dozen). ``helpers``: model names
    fine-tuned (trained when missing) and weighed beside the base, or {expert name: folder}; default
    :func:`default_helpers` of ``base`` when the bases are trained here (``fine_tuned=True``), else none;
    ``helper_settings``: overrides for the helpers' training (default their own :data:`BASE_SETTINGS`).
    ``density``: weigh the density prior of the base (:func:`~pyterrier_tot.recipe.density_prior.recipe_priors`:
    mpnet's) beside the experts; ``False`` leaves it out. ``normalise="zscore"``: the fuser on z-scores instead of
    min-max, fitted under its own key (``benchmarks/recipe_rejected/results/fuser_normalisation.md``: offered, not the
    default). The pipeline returned saves as one artifact (:meth:`TunedPipeline.save`)."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.recipe.artifact import TunedPipeline

    index = index if index is not None else BookIndex(dataset)
    helpers = (default_helpers(base) if fine_tuned is True else ()) if helpers is None else helpers
    named = fine_tuned is True and not isinstance(helpers, dict)
    steps: Dict[str, object] = {}
    plan = None
    if verbose and train and fine_tuned is True:
        work = _Trainings(dataset, index, base, helpers if named else (), train_settings, n, helper_settings)
        plan, steps = _plan(work, base, k, expert_k, density, normalise, "the recipe",
                            say=lambda line: print(line, flush=True))
        if plan.todo:
            print(plan, flush=True)
    with (plan.progress() if plan is not None else contextlib.nullcontext()) as prog:
        step = prog.step if prog is not None else (lambda s: contextlib.nullcontext())
        if fine_tuned is True:
            found, missing = {}, []
            for model in as_bases(base):
                with step(steps.get(str(base_dir(dataset, model, n, **(train_settings or {}))))):
                    path = _bases.fine_tuned_base(dataset, n=n, train=train, verbose=verbose, model=model,
                                                  index=index, **(train_settings or {}))
                (missing.append(model) if path is None else found.update({base_expert_name(model): path}))
            warn_untrained("base", missing, found)
            fine_tuned = found
        if helpers and not isinstance(helpers, dict):  # each trained with its own BASE_SETTINGS, not train_settings
            found, missing = {}, []
            for model in helpers if fine_tuned_models(fine_tuned) else ():  # no fine-tuned base: no helper
                with step(steps.get(str(base_dir(dataset, model, n, **(helper_settings or {}))))):
                    path = _bases.fine_tuned_base(dataset, n=n, train=train, verbose=verbose, model=model,
                                                  index=index, **(helper_settings or {}))
                (missing.append(model) if path is None else found.update({base_expert_name(model): path}))
            warn_untrained("helper", missing, found)
            helpers = found
        fine_tuned = fine_tuned_models(fine_tuned) or None
        extra_experts = {**(recipe_priors(index, base, fine_tuned) if density else {}), **(extra_experts or {})} or None
        _build_indexes(index, steps, step)
        fit = dict(n=n, k=k, expert_k=expert_k, extra_experts=extra_experts, helpers=helpers or None,
                   normalise=normalise)
        weights = None if train else fitted_weights(dataset, index, fine_tuned, fit=False, **fit)
        if not train and weights is None:  # asked before anything is built: a lookup fails at once
            raise ModelUnavailableError(
                f"the recipe's fuser weights over {getattr(index, 'name', index)!r} with bases "
                f"{sorted(fine_tuned or {'dense': None})} are not fitted and train=False fits nothing; call "
                "tuned_pipeline(..., train=True) once to fit them (minutes)")
        # built once: its experts score the tuning slice for the fit, then rank
        dp = build_pipeline(index, fine_tuned, decomposer, weights=None, k=k, expert_k=expert_k,
                            extra_experts=extra_experts, depth=depth, helpers=helpers or None, normalise=normalise)
        if train:
            with step(steps.get("fit")):
                weights = fitted_weights(dataset, index, fine_tuned, refit=refit, verbose=False,
                                         pipeline=dp if decomposer is None else None, **fit)
    dp.fuser = WeightedFuser.load(str(weights), dp.experts)  # as decomposition_pipeline(weights=path) loads them
    return TunedPipeline.of(dp, dataset, index, fine_tuned, helpers or None, extra_experts, base, k, expert_k,
                            depth, density, normalise, n)


def _build_indexes(index, steps: Dict[object, planning.Step], step) -> None:
    """The indexes the plan lists, built in its order, each a step of the progress display (what is built is left
    as it is; without a plan they are built as the pipeline first reads them)."""
    for key, s in steps.items():
        if s.cached or not (key == "bm25" or isinstance(key, tuple) and key[0] == "dense"):
            continue
        with step(s):
            if key == "bm25":
                for fields in s.args:
                    index.bm25(fields)  # the PISA index and its BM25 score files
            else:
                _, model, fields, max_chars, precision = key
                index.flex_index(model, fields, max_chars, precision=precision)
