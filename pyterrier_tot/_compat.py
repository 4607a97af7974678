"""Module paths of earlier versions keep importing, with a ``DeprecationWarning`` naming the new place when a name is
read from one: ``from pyterrier_tot.retrieval import BookIndex`` and ``from pyterrier_tot.bars import set_progress``
still work, and so do pickles, joblib files and entry points that name a class by an old path.

There are no stub files. :data:`MOVED` is the table old path → new module(s); :func:`register_old_paths` (run at the
end of ``pyterrier_tot/__init__.py``) puts one small module object per old path into ``sys.modules`` under its old
name (inside this package's namespace only) and onto its parent package. Its module-level ``__getattr__`` (PEP 562)
imports the new module when a name is first read, so nothing heavy is imported before it is asked for. Nothing is
installed into the import system (no finder, no hook) and nothing in another library changes. New code imports
from ``pyterrier_tot`` (every public name) or from the new module paths.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings
from typing import Dict, List, Tuple, Union

_PREFIX = "pyterrier_tot."

#: the families that moved into subpackages (version 0.2)
_FAMILIES = {
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
    "decomposition.recipe": ("pyterrier_tot.recipe", "pyterrier_tot.recipe.tuned"),
    **{f"decomposition.{m}": f"pyterrier_tot.recipe.{m}"
       for m in ("bases", "soup", "protocol", "hard_negatives", "second_stage", "expert_training")},
    # one cross-encoder trainer: recipe_cross_encoder(negatives="bm25+dense") is the old module's
    "decomposition.mined_cross_encoder": "pyterrier_tot.recipe.second_stage",
    "recipe.mined_cross_encoder": "pyterrier_tot.recipe.second_stage",
    # DensityPrior is an expert: back beside the others; the recipe's choice of bases for it went to assembly
    "recipe.density_prior": ("pyterrier_tot.decomposition.density_prior", "pyterrier_tot.recipe.assembly"),
}

#: the core that moved into ``index/``, ``models/`` and ``_plumbing/`` (a tuple: the old module's names now live in
#: several; each is looked up in order)
_CORE = {
    "bars": "pyterrier_tot.console",
    "policy": "pyterrier_tot.checks",
    "_util": ("pyterrier_tot._plumbing.util", "pyterrier_tot.errors"),
    "_repr": "pyterrier_tot._plumbing.reprs",
    "_cache_key": "pyterrier_tot._plumbing.cache_key",
    "_artifact": "pyterrier_tot._plumbing.artifact",
    "_fingerprint": "pyterrier_tot.models.fingerprint",
    "nomic": "pyterrier_tot.models.nomic",
    "model_prompts": "pyterrier_tot.models.prompts",
    "model_fetch": "pyterrier_tot.models.fetch",
    "index_parts": "pyterrier_tot.index.parts",
    "corpus_store": ("pyterrier_tot.index.book_index", "pyterrier_tot.index.corpus",
                     "pyterrier_tot.index.corpus_stream", "pyterrier_tot.errors"),
    "corpus_frame": "pyterrier_tot.index.corpus",
    "corpus_identity": "pyterrier_tot.index.corpus",
    "corpus_stream": "pyterrier_tot.index.corpus_stream",
    "bm25_index": "pyterrier_tot.index.bm25",
    "dense_index": "pyterrier_tot.index.dense",
    "retrievers": ("pyterrier_tot.index.retrievers", "pyterrier_tot.index.corpus", "pyterrier_tot.console",
                   "pyterrier_tot.errors"),
    "encoding": "pyterrier_tot.index.encoding",
    "ray_encoding": "pyterrier_tot.index.ray_encoding",
}

#: old module (under ``pyterrier_tot.``) → the module, or modules in order, that hold its names now
MOVED: Dict[str, Union[str, Tuple[str, ...]]] = {**_FAMILIES, **_CORE}

#: classes whose cache keys (:func:`pyterrier_tot._plumbing.cache_key.settings_of`) keep the name they were keyed by
#: before the core moved, so fuser weights and models cached for them are found again
KEYED_AS = {f"pyterrier_tot.index.{new}": f"pyterrier_tot.{old}" for new, old in (
    *((f"retrievers.{c}", f"retrievers.{c}") for c in ("SafeRetriever", "DenseRetriever", "DenseScorer", "BM25Scorer")),
    ("corpus.TextLoader", "retrievers.TextLoader"), ("corpus_stream.LazyTextLoader", "corpus_stream.LazyTextLoader"))}
# the density prior went back beside the other experts; fits over it were keyed while it lived in recipe/
KEYED_AS["pyterrier_tot.decomposition.density_prior.DensityPrior"] = "pyterrier_tot.recipe.density_prior.DensityPrior"


def targets(old: str) -> Tuple[str, ...]:
    """The modules that hold the names of the old module ``old`` (under ``pyterrier_tot.``), in lookup order."""
    found = MOVED[old]
    return (found,) if isinstance(found, str) else found


def _old_module(old: str) -> types.ModuleType:
    name = _PREFIX + old
    where = targets(old)
    module = types.ModuleType(name, f"Moved to :mod:`{where[0]}`; this old path warns and reads every name from there.")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=f"moved to {where[0]}")

    def __getattr__(attr: str):
        if attr.startswith("__") and attr.endswith("__") and attr != "__all__":
            raise AttributeError(attr)  # what the import system and tools probe for (__path__, __file__, ...)
        warnings.warn(f"{name} moved to {where[0]}; import from there or from pyterrier_tot", DeprecationWarning,
                      stacklevel=2)
        for target in where:
            mod = importlib.import_module(target)
            if hasattr(mod, attr):
                return getattr(mod, attr)
        raise AttributeError(f"module {name!r} (moved to {where[0]}) has no attribute {attr!r}")

    def __dir__() -> List[str]:
        return sorted({n for target in where for n in dir(importlib.import_module(target))})

    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    return module


def register_old_paths() -> None:
    """Make every old path of :data:`MOVED` importable: a module object under its old name in ``sys.modules`` and on
    its parent package (both this package's own). Run first thing in ``pyterrier_tot/__init__.py`` (so an old path
    imports even while the package loads) and again at its end, for the parents imported since."""
    for old in MOVED:
        name = _PREFIX + old
        if name not in sys.modules:
            sys.modules[name] = _old_module(old)
        parent, _, leaf = name.rpartition(".")
        package = sys.modules.get(parent)
        if package is not None and leaf not in vars(package):
            setattr(package, leaf, sys.modules[name])
