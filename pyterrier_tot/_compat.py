"""Compatibility, installed when ``pyterrier_tot`` is imported: old module paths, and one fix to PyTerrier.

Old module paths (before the families moved into subpackages, version 0.2) keep importing, with a
``DeprecationWarning`` naming the new place: ``from pyterrier_tot.retrieval import BookIndex`` still works.
Each old module is a thin proxy whose attributes are read from the new module, so there is one definition of
everything. New code imports from ``pyterrier_tot`` (every public name) or from the new module paths.

PyTerrier's ``+`` (``pyterrier._ops.Sum``, up to at least pyterrier 1.1) outer-merges the two rankings on
(qid, docno) and keeps the left side's copy of every shared column, so a book that only the right side returned
has no ``query`` (nor ``query_0``, nor clue columns): ``0.6 * (bm25 % 100 >> Normalise()) + 0.4 * (dense % 100
>> Normalise())`` leaves NaN queries on those rows, and a re-ranker after it fails. :func:`patch_pyterrier_sum`
wraps ``Sum.transform`` so that, after PyTerrier's own merge, each missing value of a query-level column is
taken from the qid's other rows (or the operator's input), and an N/A clue is ``None`` again on every row
(:func:`~pyterrier_tot.decomposition.clues.clues_na_as_none`): scores, rows and present values are untouched. It
is the documented way to fuse here (``ptt.linear_fusion`` is built on it), so the library fixes it once.
"""
from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

import pandas as pd

#: old module (under ``pyterrier_tot.``) → the module that holds its names now
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


class _Proxy(types.ModuleType):
    def __init__(self, name: str, target: types.ModuleType):
        super().__init__(name, f"moved to {target.__name__}")
        self._target = target

    def __getattr__(self, attr: str):
        return getattr(self._target, attr)

    def __dir__(self):
        return dir(self._target)


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.target}; import from there or from pyterrier_tot",
                      DeprecationWarning, stacklevel=3)
        return _Proxy(spec.name, importlib.import_module(self.target))

    def exec_module(self, module):
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_PREFIX) and fullname[len(_PREFIX):] in MOVED:
            return importlib.util.spec_from_loader(fullname, _MovedLoader(MOVED[fullname[len(_PREFIX):]]))
        return None


def _keeping_query_columns(transform):
    @functools.wraps(transform)
    def patched(self, topics_and_res):
        from pyterrier_tot.decomposition.clues import clues_na_as_none
        from pyterrier_tot.policy import fill_query_columns  # both import the package, which imports this module

        out = transform(self, topics_and_res)
        if not isinstance(out, pd.DataFrame):
            return out
        out = fill_query_columns(out, source=topics_and_res if isinstance(topics_and_res, pd.DataFrame) else None)
        return clues_na_as_none(out)  # a clue N/A on every row of its qid was NaN on the merged-in rows

    patched._pyterrier_tot_keeps_queries = True
    return patched


def patch_pyterrier_sum() -> bool:
    """Make PyTerrier's ``+`` keep each row's query columns (see the module docs); idempotent. Returns whether
    ``Sum.transform`` is patched (False when this PyTerrier has no ``pyterrier._ops.Sum``)."""
    try:
        from pyterrier._ops import Sum
    except ImportError:  # pragma: no cover - a PyTerrier without the class has its own +
        return False
    if not getattr(Sum.transform, "_pyterrier_tot_keeps_queries", False):
        Sum.transform = _keeping_query_columns(Sum.transform)
    return True


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    patch_pyterrier_sum()
