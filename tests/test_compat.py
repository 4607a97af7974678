"""Module paths of version 0.1 keep importing (with a DeprecationWarning) and give the same objects."""
import importlib
import sys

import pytest

import pyterrier_tot as ptt
from pyterrier_tot._compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_still_import(old):
    name = f"pyterrier_tot.{old}"
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match="moved to"):
        mod = importlib.import_module(name)
    target = importlib.import_module(MOVED[old])
    public = [n for n in getattr(target, "__all__", dir(target)) if not n.startswith("_")]
    assert public and all(getattr(mod, n) is getattr(target, n) for n in public)


def test_old_names_from_the_readme():
    for old in ("retrieval", "cover_ranker"):
        sys.modules.pop(f"pyterrier_tot.{old}", None)
    with pytest.warns(DeprecationWarning):
        from pyterrier_tot.cover_ranker import ClipModel, CoverIndex
        from pyterrier_tot.retrieval import BookIndex
    assert BookIndex is ptt.BookIndex and CoverIndex is ptt.CoverIndex and ClipModel is ptt.ClipModel
