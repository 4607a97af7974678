"""Which retriever ``pyterrier-tot ask`` searches with: the best one already cached, never trained here.

The default recipe of the index's data set when its models and fitted weights are cached, else its fine-tuned
base, else zero-shot dense retrieval; ``--retriever`` picks one (:data:`RETRIEVERS`). One line says which and
why.
"""
from __future__ import annotations

import re
import warnings
from typing import Optional, Tuple

import pyterrier as pt

from pyterrier_tot.errors import BadInputError, ModelUnavailableError, ToTError

#: What ``ask --retriever`` takes; left out, the first one cached (``dense`` needs nothing).
RETRIEVERS = ("recipe", "base", "dense", "bm25")
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


def _recipe_models(dataset, index, base: str):
    """``(fine_tuned, helpers)`` of the default recipe of ``base`` over ``dataset`` as ``tuned_pipeline`` makes
    them, when every one is cached; else None. Nothing is trained."""
    from pyterrier_tot.recipe import bases

    found = {}
    for model in (base, *bases.default_helpers(base)):
        path = _cached_base(dataset, index, model)
        if path is None:
            return None
        found[bases.base_expert_name(model)] = path
    return {bases.base_expert_name(base): found.pop(bases.base_expert_name(base))}, found


def _cached_recipe(dataset, index, base: str) -> Optional[pt.Transformer]:
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


def ask_retriever(index, dataset=None, kind: Optional[str] = None, model: Optional[str] = None,
                  k: int = 100) -> Tuple[pt.Transformer, str]:
    """The retriever ``pyterrier-tot ask`` searches ``index`` with, and one line saying which and why. ``kind``
    (one of :data:`RETRIEVERS`); left out, the best one cached: the recipe of ``dataset`` (default: the one the
    index was built from), its fine-tuned models and fitted weights (``ptt.tuned_pipeline``), else its fine-tuned
    base (``ptt.fine_tuned_base``), else zero-shot dense (``model``, default MiniLM). Nothing is trained or fitted
    here: a ``recipe`` or ``base`` asked for that is not cached raises
    :class:`~pyterrier_tot.errors.ModelUnavailableError` saying how to make it."""
    from pyterrier_tot.recipe import DEFAULT_BASE
    from pyterrier_tot.recipe.bases import base_expert_name, encoding_precision

    tried = tuple(dict.fromkeys((DEFAULT_BASE, "minilm")))  # the default first, then make demo's fast one
    if kind not in (None, *RETRIEVERS):
        raise BadInputError(f"ask: retriever must be one of {list(RETRIEVERS)}, not {kind!r}")
    if model and kind in ("recipe", "base"):
        raise BadInputError(f"ask: --model goes with --retriever dense, not {kind}")
    kind = kind or ("dense" if model else None)
    if kind == "bm25":
        return index.bm25(num_results=k), "Searching with BM25 (--retriever bm25)."
    if kind == "dense":
        return index.dense(model, num_results=k), f"Searching with dense retrieval ({model or 'MiniLM'}, as asked)."
    dataset = dataset if dataset is not None else _dataset_of(index)
    name = getattr(dataset, "name", None)
    train = f"ptt.tuned_pipeline(ds) of {name} trains them once"
    if dataset is not None and kind in (None, "recipe"):
        for base in tried:
            found = _cached_recipe(dataset, index, base)
            if found is not None:
                return found, f"Searching with the recipe of {name} (fine-tuned {base} base, fitted weights)."
    why = f"the recipe's models for {name} are not cached ({train})" if dataset is not None else \
        f"the index names no dataset ({getattr(index, 'name', '?')!r}) whose fine-tuned models could be looked up"
    if kind == "recipe":
        raise ModelUnavailableError(f"ask: {why}; ask never trains (--retriever base, dense or bm25 need no recipe)")
    if dataset is not None:
        for base in tried:
            path = _cached_base(dataset, index, base)
            if path is not None:
                found = index.dense(path, num_results=k, precision=encoding_precision(base_expert_name(base)))
                return found, f"Searching with the fine-tuned {base} base of {name}" + ("." if kind else f": {why}.")
        why = f"no fine-tuned model of {name} is cached ({train})"
    if kind == "base":
        raise ModelUnavailableError(f"ask: {why}; ask never trains (--retriever dense or bm25 need no training)")
    return index.dense(None, num_results=k), f"Searching with dense retrieval (MiniLM, not fine-tuned): {why}."
