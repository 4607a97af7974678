"""Old module paths (before the families moved into subpackages, version 0.2) keep importing, with a
``DeprecationWarning`` naming the new place: ``from pyterrier_tot.retrieval import BookIndex`` still works.

Each old path is a small stub file (``pyterrier_tot/retrieval.py``, ``pyterrier_tot/decomposition/recipe.py``,
...) that calls :func:`moved`: its attributes are read from the new module (PEP 562 ``__getattr__``), so there is
one definition of everything. Nothing is installed into the import system or into other libraries. New code
imports from ``pyterrier_tot`` (every public name) or from the new module paths.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Callable, List, Tuple

#: old module (under ``pyterrier_tot.``) → the module that holds its names now (each has a stub file)
MOVED = {
    "retrieval": "pyterrier_tot.index",
    "books": "pyterrier_tot.datasets.books",
    "hedge_remover": "pyterrier_tot.query.hedge_remover",
    "negation_penalty": "pyterrier_tot.query.negation_penalty",
    "query_rewriters": "pyterrier_tot.query.rewriters",
    "rm3": "pyterrier_tot.query.rm3",
    "llm_cache": "pyterrier_tot.llm.cache",
    "llama_server": "pyterrier_tot.llm.llama_server",
    "prompt_templates": "pyterrier_tot.llm.templates",
    "clues": "pyterrier_tot.decomposition.clues",
    "clue_decomposer": "pyterrier_tot.decomposition.clue_decomposer",
    "rule_clue_extractor": "pyterrier_tot.decomposition.rule_clue_extractor",
    "date_resolver": "pyterrier_tot.decomposition.date_resolver",
    "field_expert": "pyterrier_tot.decomposition.field_expert",
    "date_expert": "pyterrier_tot.decomposition.date_expert",
    "weighted_fuser": "pyterrier_tot.decomposition.weighted_fuser",
    "expert_training": "pyterrier_tot.recipe.expert_training",
    "pipeline": "pyterrier_tot.decomposition.pipeline",
    "cover_ranker": "pyterrier_tot.covers",  # the old module held the CLIP wrapper, images, index and ranker
    "clip_training": "pyterrier_tot.covers.clip_training",
    "dense_reranker": "pyterrier_tot.rerank.dense_reranker",
    # the recipe's training moved out of decomposition/ (which keeps the pipeline's parts) into recipe/
    "decomposition.recipe": "pyterrier_tot.recipe.tuned",
    **{f"decomposition.{m}": f"pyterrier_tot.recipe.{m}"
       for m in ("bases", "soup", "protocol", "hard_negatives", "second_stage", "mined_cross_encoder", "density_prior",
                 "expert_training")},
}
_PREFIX = "pyterrier_tot."


def moved(name: str) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """For the stub file of the old module ``name``: warn that it moved, and return the module-level
    ``__getattr__`` and ``__dir__`` that read every attribute from its new module (:data:`MOVED`)."""
    target_name = MOVED[name[len(_PREFIX):]]
    # stacklevel 3: the line that imported the stub (this function, then the stub's body)
    warnings.warn(f"{name} moved to {target_name}; import from there or from pyterrier_tot", DeprecationWarning,
                  stacklevel=3)
    target = importlib.import_module(target_name)

    def __getattr__(attr: str):
        return getattr(target, attr)

    def __dir__() -> List[str]:
        return dir(target)

    return __getattr__, __dir__
