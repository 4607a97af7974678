"""Which retriever ``pyterrier-tot ask`` and ``search`` search with: the best one already cached, never trained here.

The default recipe of the index's data set when its models and fitted weights are cached, else its fine-tuned
base, else (``ask``) zero-shot dense retrieval or (``search``) the training-free pipeline; ``--retriever`` picks
one (:data:`RETRIEVERS`). One line says which and why. :func:`choose_retriever` decides without building
anything, so a command can say what it will search with, and what that must build first, before it builds it.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pyterrier as pt

from pyterrier_tot.errors import BadInputError, ModelUnavailableError, ToTError

#: What ``ask --retriever`` takes; left out, the first one cached (``dense`` and ``training-free`` train nothing).
RETRIEVERS = ("recipe", "base", "training-free", "dense", "bm25")
_LOOKUP_ERRORS = (ToTError, KeyError, ValueError, NotImplementedError, FileNotFoundError)


def _dataset_of(index):
    """The dataset an index was built from, by the name it recorded (a sample's name too), or None."""
    from pyterrier_tot.datasets import get_dataset

    name = str(getattr(index, "name", ""))
    sampled = re.fullmatch(r"(.+)-sample(\d+)", name)
    try:
        return get_dataset(sampled[1], sample=int(sampled[2])) if sampled else get_dataset(name)
    except _LOOKUP_ERRORS:
        return None


def _cached_base(dataset, index, model: str) -> Optional[str]:
    from pyterrier_tot.recipe import bases

    try:  # train=False: the folder when cached, else None; a lookup never trains
        return bases.fine_tuned_base(dataset, train=False, verbose=False, model=model, index=index)
    except _LOOKUP_ERRORS:
        return None


def _recipe_models(dataset, index, base):
    """``(fine_tuned, helpers)`` of the default recipe of ``base`` (one model or several) over ``dataset`` as
    ``tuned_pipeline`` makes them, when every one is cached; else None. Nothing is trained."""
    from pyterrier_tot.recipe import bases

    models = bases.as_bases(base)
    found = {}
    for model in (*models, *bases.default_helpers(models)):
        path = _cached_base(dataset, index, model)
        if path is None:
            return None
        found[bases.base_expert_name(model)] = path
    return {bases.base_expert_name(m): found.pop(bases.base_expert_name(m)) for m in models}, found


def _named(base) -> str:
    """How a message names the base(s) ``base``: ``mpnet`` or ``mpnet + nomic``."""
    return base if isinstance(base, str) else " + ".join(base)


def _cached_recipe(dataset, index, base) -> Optional[pt.Transformer]:
    """The recipe of ``base`` when its models and fitted weights are all cached (the weights looked up as
    ``tuned_pipeline`` files them, ``fitted_weights(..., fit=False)``), else None; never trains or fits."""
    from pyterrier_tot.recipe import build_pipeline, fitted_weights, recipe_priors

    try:
        made = _recipe_models(dataset, index, base)
        if made is None:
            return None
        fine, helpers = made
        extra = recipe_priors(index, base, fine) or None
        with warnings.catch_warnings():  # a lookup: "fitting it again" warnings are not what happens here
            warnings.simplefilter("ignore")
            path = fitted_weights(dataset, index, fine, extra_experts=extra, helpers=helpers or None, fit=False)
        if path is None:
            return None
        return build_pipeline(index, fine, weights=str(path), extra_experts=extra, depth=None,
                              helpers=helpers or None)
    except _LOOKUP_ERRORS:
        return None


@dataclass
class RetrieverChoice:
    """A retriever chosen but not built: the line that says which and why, ``make()`` builds it (encoding or
    indexing what it needs on first use), ``experts()`` the stages whose index parts it reads (for a plan of what
    must be built first; empty when all of it is cached)."""

    line: str
    make: Callable[[], pt.Transformer]
    experts: Callable[[], Dict[str, pt.Transformer]] = field(default=lambda: {})


def ask_retriever(index, dataset=None, kind: Optional[str] = None, model: Optional[str] = None,
                  k: int = 100) -> Tuple[pt.Transformer, str]:
    """The retriever ``pyterrier-tot ask`` searches ``index`` with, and one line saying which and why. ``kind``
    (one of :data:`RETRIEVERS`); left out, the best one cached: the recipe of ``dataset`` (default: the one the
    index was built from), its fine-tuned models and fitted weights (``ptt.tuned_pipeline``), else its fine-tuned
    base (``ptt.fine_tuned_base``), else zero-shot dense (``model``, default MiniLM). Nothing is trained or fitted
    here: a ``recipe`` or ``base`` asked for that is not cached raises
    :class:`~pyterrier_tot.errors.ModelUnavailableError` saying how to make it."""
    choice = choose_retriever(index, dataset, kind, model, k)
    return choice.make(), choice.line


def training_free_base() -> str:
    """The training-free pipeline's base here: nomic (its default, chosen by its rule) when its weights are on this
    machine, else mpnet (the one BIRCO measured), else MiniLM, which every install has."""
    from pyterrier_tot.models.loading import resolve_model

    for base in ("nomic", "mpnet"):
        try:
            resolve_model(base)
            return base
        except ModelUnavailableError:
            pass
    return "minilm"


def _training_free(index, why: str) -> RetrieverChoice:
    from pyterrier_tot.recipe.assembly import recipe_experts, training_free_experts, training_free_pipeline

    base = training_free_base()
    fine_tuned, names = training_free_experts(index, base)
    others = ", ".join(n for n in names if n not in fine_tuned)
    missing = "" if base == "nomic" else \
        "; nomic, the training-free default, is not fetched: `pyterrier-tot fetch nomic`"
    line = (f"Searching with the training-free pipeline (zero-shot {base} + the experts {others}, weights 1)"
            + (f": {why}" if why else "") + missing + ".")
    return RetrieverChoice(line, lambda: training_free_pipeline(index, base),
                           lambda: {n: e for n, e in recipe_experts(index, fine_tuned)[0].items() if n in names})


def _saved_recipe(index, folder: str) -> RetrieverChoice:
    """A recipe saved with ``TunedPipeline.save(folder)``: over the books it was fitted on, or transferred."""
    from pyterrier_tot.recipe.artifact import RecipeArtifact

    recipe = RecipeArtifact(folder)
    fitted = recipe.spec.get("dataset")
    same = getattr(index, "fingerprint", None) == recipe.spec.get("corpus")
    how = "fitted on these books" if same else \
        "transferred: its models and weights unchanged, nothing fitted on these books"
    return RetrieverChoice(f"Searching with the recipe saved in {folder} (fitted on {fitted}; {how}).",
                           lambda: _quiet_transfer(recipe, index))


def _quiet_transfer(recipe, index):
    with warnings.catch_warnings():  # the line printed first already says it is transferred
        warnings.simplefilter("ignore")
        return recipe.transfer(index)


def choose_retriever(index, dataset=None, kind: Optional[str] = None, model: Optional[str] = None,
                     k: int = 100, fallback: str = "dense") -> RetrieverChoice:
    """:func:`ask_retriever`'s choice, not built yet (:class:`RetrieverChoice`). ``fallback``: what is searched
    with when neither the recipe nor a fine-tuned base is cached, ``dense`` (``ask``) or ``training-free``
    (``search``: :func:`~pyterrier_tot.recipe.assembly.training_free_pipeline`, zero-shot mpnet where it is here,
    else MiniLM)."""
    from pyterrier_tot.decomposition.field_expert import base_expert
    from pyterrier_tot.recipe import DEFAULT_BASE
    from pyterrier_tot.recipe.bases import base_expert_name, encoding_precision

    # the default recipe first, then each of its bases alone (mpnet's recipe came before), then make demo's fast one
    tried = tuple(dict.fromkeys((tuple(DEFAULT_BASE), *DEFAULT_BASE, "minilm")))
    alone = [b for b in tried if isinstance(b, str)]  # a fine-tuned base searched with on its own
    if kind not in (None, *RETRIEVERS) and Path(str(kind)).expanduser().is_dir():
        return _saved_recipe(index, str(Path(str(kind)).expanduser()))
    if kind not in (None, *RETRIEVERS):
        raise BadInputError(f"ask: retriever must be one of {list(RETRIEVERS)} or a saved recipe's folder, "
                            f"not {kind!r}")
    if model and kind in ("recipe", "base", "training-free"):
        raise BadInputError(f"ask: --model goes with --retriever dense, not {kind}")
    kind = kind or ("dense" if model else None)
    if kind == "bm25":
        return RetrieverChoice("Searching with BM25 (--retriever bm25).", lambda: index.bm25(num_results=k),
                               lambda: {"bm25": base_expert(index, "bm25")})
    if kind == "dense":
        return RetrieverChoice(f"Searching with dense retrieval ({model or 'MiniLM'}, as asked).",
                               lambda: index.dense(model, num_results=k),
                               lambda: {"dense": base_expert(index, "dense", model=model)})
    if kind == "training-free":
        return _training_free(index, "")
    dataset = dataset if dataset is not None else _dataset_of(index)
    name = getattr(dataset, "name", None)
    train = f"ptt.tuned_pipeline(ds) of {name} trains them once"
    if dataset is not None and kind in (None, "recipe"):
        for base in tried:
            found = _cached_recipe(dataset, index, base)
            if found is not None:
                bases_named = f"fine-tuned {_named(base)} base" + ("s" if not isinstance(base, str) else "")
                return RetrieverChoice(f"Searching with the recipe of {name} ({bases_named}, fitted weights).",
                                       lambda found=found: found)
    why = f"the recipe's models for {name} are not cached ({train})" if dataset is not None else \
        f"the index names no dataset ({getattr(index, 'name', '?')!r}) whose fine-tuned models could be looked up"
    if kind == "recipe":
        raise ModelUnavailableError(f"ask: {why}; ask never trains (--retriever base, dense or bm25 need no recipe)")
    if dataset is not None:
        for base in alone:
            path = _cached_base(dataset, index, base)
            if path is not None:
                precision = encoding_precision(base_expert_name(base))
                return RetrieverChoice(
                    f"Searching with the fine-tuned {base} base of {name}" + ("." if kind else f": {why}."),
                    lambda path=path, precision=precision: index.dense(path, num_results=k, precision=precision),
                    lambda path=path, precision=precision: {"base": base_expert(index, "dense", model=path,
                                                                                precision=precision)})
        why = f"no fine-tuned model of {name} is cached ({train})"
    if kind == "base":
        raise ModelUnavailableError(f"ask: {why}; ask never trains (--retriever dense or bm25 need no training)")
    if fallback == "training-free":  # an index of one's own names no data set: nothing of it is trained
        return _training_free(index, why if dataset is not None else "no recipe or fine-tuned model is trained "
                              f"for {getattr(index, 'name', 'these books')!r}, and this needs none")
    return RetrieverChoice(f"Searching with dense retrieval (MiniLM, not fine-tuned): {why}.",
                           lambda: index.dense(None, num_results=k), lambda: {"dense": base_expert(index, "dense")})
