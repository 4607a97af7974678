"""The decomposition pipeline as the benchmark and the demo build it: a ready, offline pipeline in one call.

    from pyterrier_tot.recipe import tuned_pipeline
    dp = tuned_pipeline(ptt.get_dataset("reddit-tomt-books"))   # fine-tuned mpnet + nomic; trains once, then cached
    dp(ds.get_topics("validation"))
    fast = tuned_pipeline(ds, base="minilm")                   # the fast base (make demo's): minutes on a CPU
    dp.save("my-recipe")                                       # the whole trained recipe as one artifact folder

The procedure (the numbers in ``benchmarks/recipe/results/decomposition_pipeline.md`` and ``bases.md`` come from it):

1. :func:`~pyterrier_tot.recipe.protocol.tuning_split`: 300 training queries
   (``train.sample(300, random_state=0)``) are set aside. Fuser weights and other choices are fitted on them;
   nothing is trained on them.
2. :func:`~pyterrier_tot.recipe.bases.fine_tuned_base`: each base model (:data:`~.bases.DEFAULT_BASE`, mpnet and
   nomic-embed-text-v1.5, by default; or one of them, or MiniLM) is fine-tuned as a base retriever on the *other*
   training queries (full query → gold title + text), with mpnet (alone or beside nomic) its MiniLM helper too; a
   base that encodes at another length than it trains at (nomic: 512 tokens) is used as a copy that says so
   (:func:`~pyterrier_tot.recipe.bases.at_length`). The models are cached under ``cache_dir()/models`` and
   reused; a folder without a complete model counts as absent, one whose recorded training queries differ is
   refused; two processes asking for one model train it once.
3. :func:`~pyterrier_tot.recipe.assembly.recipe_experts`: the fine-tuned dense bases, zero-shot dense and BM25 on the
   full query, dense + BM25 title experts and a dense plot expert on the rule clues, the date expert (corpora with
   years) and the author expert (corpora with authors); with mpnet (alone or in the default), its fine-tuned MiniLM
   helper and its density prior (:func:`~pyterrier_tot.recipe.assembly.recipe_priors`). With several bases, the
   candidates are the top ``k`` of the sum of their scores.
4. :func:`~pyterrier_tot.recipe.weights.fitted_weights`: coordinate ascent over the tuning slice on the mean of
   R@1, R@5, R@10, R@20, R@100 and MRR (:data:`~.weights.FIT_METRIC`), never below the base alone there
   (``floor``), bagged (:data:`~.weights.FIT_BAGS`), cached under a key naming the bases and their weights.
5. Depth (:data:`~.assembly.DEPTH`, 1000): the fused ranking's top ``k``, then the rest of the base's own ranking.

Before anything is trained, the call prints its plan (:func:`~pyterrier_tot.recipe.plan.recipe_plan`): each step,
what is cached, and an estimate timed on this machine; one progress bar follows. Validation is only ever evaluated.
Nothing here needs a network or an LLM: clues come from the rule extractor.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Optional, Sequence, Union

import pyterrier as pt

from pyterrier_tot.checks import CheckedIndex
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.errors import ModelUnavailableError
from pyterrier_tot.recipe import bases as _bases
from pyterrier_tot.recipe import plan as planning
from pyterrier_tot.recipe.assembly import (
    BASE_K,
    DEPTH,
    EXPERT_K,
    FineTuned,
    build_pipeline,
    fine_tuned_models,
    recipe_priors,
)
from pyterrier_tot.recipe.bases import (
    DEFAULT_BASE,
    as_bases,
    base_dir,
    base_expert_name,
    default_helpers,
    warn_untrained,
)
from pyterrier_tot.recipe.protocol import TUNING_QUERIES
from pyterrier_tot.recipe.weights import fitted_weights


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
    ``["minilm", "mpnet"]``; default :data:`DEFAULT_BASE`, mpnet and nomic, which offline need
    ``pyterrier-tot fetch mpnet`` and ``pyterrier-tot fetch nomic`` first; ``base="mpnet"`` is the default before
    nomic; ``base="minilm"`` is the fast one; a path: that model; {expert
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
    ``density``: weigh the density prior of the base (:func:`~pyterrier_tot.recipe.assembly.recipe_priors`:
    mpnet's, in the default too) beside the experts; ``False`` leaves it out. ``normalise="zscore"``: the fuser on
    z-scores instead of min-max, fitted under its own key (``benchmarks/recipe_rejected/results/
    fuser_normalisation.md``: offered, not the default). The pipeline returned saves as one artifact
    (:meth:`TunedPipeline.save`)."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.recipe.artifact import TunedPipeline

    index = index if index is not None else BookIndex(dataset)
    # checked once, where it enters; what the check learns (e.g. whether books have years) goes with it to every
    # part built over it, none of which checks it again
    checked = CheckedIndex.of(index, "tuned_pipeline")
    helpers = (default_helpers(base) if fine_tuned is True else ()) if helpers is None else helpers
    named = fine_tuned is True and not isinstance(helpers, dict)
    steps: Dict[str, object] = {}
    plan = None
    if verbose and train and fine_tuned is True:
        work = planning.Trainings(dataset, checked, base, helpers if named else (), train_settings, n, helper_settings)
        plan, steps = planning.recipe_steps(work, base, k, expert_k, density, normalise, "the recipe",
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
        priors = recipe_priors(checked, base, fine_tuned) if density else {}
        extra_experts = {**priors, **(extra_experts or {})} or None
        if plan is not None:  # the indexes the plan lists, in its order (without one: as the pipeline reads them)
            planning.build_steps(index, plan, prog)
        fit = dict(n=n, k=k, expert_k=expert_k, extra_experts=extra_experts, helpers=helpers or None,
                   normalise=normalise)
        weights = None if train else fitted_weights(dataset, checked, fine_tuned, fit=False, **fit)
        if not train and weights is None:  # asked before anything is built: a lookup fails at once
            raise ModelUnavailableError(
                f"the recipe's fuser weights over {getattr(index, 'name', index)!r} with bases "
                f"{sorted(fine_tuned or {'dense': None})} are not fitted and train=False fits nothing; call "
                "tuned_pipeline(..., train=True) once to fit them (minutes)")
        # built once: its experts score the tuning slice for the fit, then rank
        dp = build_pipeline(checked, fine_tuned, decomposer, weights=None, k=k, expert_k=expert_k,
                            extra_experts=extra_experts, depth=depth, helpers=helpers or None, normalise=normalise)
        if train:
            with step(steps.get("fit")):
                weights = fitted_weights(dataset, checked, fine_tuned, refit=refit, verbose=False,
                                         pipeline=dp if decomposer is None else None, **fit)
    dp.fuser = WeightedFuser.load(str(weights), dp.experts)  # as decomposition_pipeline(weights=path) loads them
    out = TunedPipeline.of(dp, dataset, index, fine_tuned, helpers or None, extra_experts, base, k, expert_k,
                           depth, density, normalise, n)
    out.first_call = plan if plan is not None and plan.todo else None  # .taken(): each step, estimated and taken
    return out


#: Names this module re-exported before :mod:`pyterrier_tot.recipe` became the recipe's one public surface, read from
#: their place with a DeprecationWarning: every public name of the recipe, the pipeline's parts (``pyterrier_tot``),
#: and these private helpers under their public names.
_RENAMED = {"_weights_path": ("weights", "weights_path"), "_hub_name": ("bases", "hub_name")}


def __getattr__(name: str):
    import importlib
    import warnings

    # found by name at run time, as the old paths of ``_compat.MOVED`` are: the package imports this module
    recipe, pyterrier_tot = importlib.import_module("pyterrier_tot.recipe"), importlib.import_module("pyterrier_tot")
    if name in _RENAMED:
        module, new = _RENAMED[name]
        found, where = getattr(importlib.import_module(f"pyterrier_tot.recipe.{module}"), new), f"recipe.{new}"
    elif name in recipe.__all__:
        found, where = getattr(recipe, name), f"recipe.{name}"
    elif name in pyterrier_tot.__all__:
        found, where = getattr(pyterrier_tot, name), name
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"pyterrier_tot.recipe.tuned.{name} moved to pyterrier_tot.{where}; import it from there "
                  "(pyterrier_tot.recipe is the recipe's public surface)", DeprecationWarning, stacklevel=2)
    return found
