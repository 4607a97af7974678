"""Module paths of earlier versions keep importing, with a DeprecationWarning when a name is read from one, and give
the same objects; no stub files and no import hook (a table in ``pyterrier_tot._compat``)."""
import importlib
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot._compat import MOVED, targets

PACKAGE = Path(ptt.__file__).parent

#: every module path of the package before the core moved into index/, models/ and _plumbing/ (all must import)
OLD_PATHS = sorted(MOVED) + ["index", "models", "_compat"]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_still_import(old):
    name = f"pyterrier_tot.{old}"
    mod = importlib.import_module(name)
    public = [n for target in targets(old) for n in getattr(importlib.import_module(target), "__all__",
                                                             dir(importlib.import_module(target)))
              if not n.startswith("_")]
    assert public
    for n in public:
        with pytest.warns(DeprecationWarning, match=f"{name} moved to"):
            got = getattr(mod, n)
        assert any(got is getattr(importlib.import_module(t), n, None) for t in targets(old)), n
    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        mod.no_such_name  # noqa: B018


def test_every_old_path_imports_in_each_form():
    """``import pyterrier_tot.X``, ``from pyterrier_tot import X`` (both silent: a name read warns) and the same
    object either way, for every old path, in a fresh interpreter."""
    lines = ["import warnings; warnings.simplefilter('error', DeprecationWarning)", "import importlib, sys"]
    for old in OLD_PATHS:
        parent, _, leaf = f"pyterrier_tot.{old}".rpartition(".")
        lines += [f"import pyterrier_tot.{old}", f"from {parent} import {leaf}",
                  f"assert {leaf} is pyterrier_tot.{old} is sys.modules['pyterrier_tot.{old}'], '{old}'"]
    out = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_no_stub_files_are_left():
    """An old path is a row of the table, never a file that imports ``_compat``."""
    stubs = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "_compat.moved" in p.read_text()]
    assert not stubs
    assert not [old for old in MOVED if (PACKAGE / (old.replace(".", "/") + ".py")).exists()]


def test_old_paths_import_nothing_until_a_name_is_read():
    code = ("import sys; import pyterrier_tot.models.nomic as n\n"
            "import pyterrier_tot, pyterrier_tot.nomic, pyterrier_tot.model_fetch\n"
            "from pyterrier_tot import model_prompts\n"
            "assert 'pyterrier_tot.models.fetch' not in sys.modules, 'fetch'\n"
            "assert 'pyterrier_tot.models.prompts' in sys.modules\n")  # imported by the package itself
    out = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_pickles_and_entry_points_under_old_class_paths_load():
    """A pickle (or joblib file) or an entry point written when the class lived at its old path still loads."""
    from importlib.metadata import EntryPoint

    from pyterrier_tot.index.book_index import BookIndex

    saved = pickle.dumps(ptt.progress_enabled, protocol=0)  # protocol 0: module names as plain text
    by_old_path = saved.replace(b"pyterrier_tot.console", b"pyterrier_tot.bars")
    assert b"pyterrier_tot.bars" in by_old_path
    with pytest.warns(DeprecationWarning, match="pyterrier_tot.bars moved to pyterrier_tot.console"):
        assert pickle.loads(by_old_path) is ptt.progress_enabled
    with pytest.warns(DeprecationWarning):
        assert EntryPoint("book_index.pyterrier_tot", "pyterrier_tot.retrieval:BookIndex", "pyterrier.artifact"
                          ).load() is BookIndex


def test_moved_index_stages_keep_their_cache_keys():
    """The index's retrievers and scorers are keyed by the class names they had before the core moved, so fuser
    weights and models cached for them are found again."""
    from pyterrier_tot._plumbing.cache_key import settings_of

    assert ptt._compat.KEYED_AS["pyterrier_tot.index.corpus.TextLoader"] == "pyterrier_tot.retrievers.TextLoader"
    loader = ptt.TextLoader(None, ("title",), None)
    assert settings_of(loader)["class"] == "pyterrier_tot.retrievers.TextLoader"


def test_old_names_from_the_readme():
    with pytest.warns(DeprecationWarning):
        from pyterrier_tot.cover_ranker import ClipModel, CoverIndex
        from pyterrier_tot.retrieval import BookIndex
    assert BookIndex is ptt.BookIndex and CoverIndex is ptt.CoverIndex and ClipModel is ptt.ClipModel


class _Ranking(pt.Transformer):
    """A fixed ranking per qid, joined onto the input's query columns as a retriever would."""

    def __init__(self, docs):
        self.docs = docs

    def transform(self, inp):
        rows = pd.DataFrame([(q, d, s) for q, ranked in self.docs.items() for d, s in ranked],
                            columns=["qid", "docno", "score"])
        return pt.model.add_ranks(inp.merge(rows, on="qid"))


def test_linear_fusion_keeps_every_query_column():
    """PyTerrier's + keeps the left side's copy of each shared column, so a book only the right side returned has
    NaN in query, query_0 and the clue columns; the library's LinearFusion fills them per qid (raw scores summed)."""
    topics = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["red moon", "ghost", "kittens"],
                           "query_0": ["uh red moon?", "a ghost", "kittens i think"],
                           "clue_title": pd.Series(["Red Moon", None, None], dtype=object),
                           "clue_year": pd.array([2004, pd.NA, 1996], dtype="Int64")})
    left = _Ranking({"1": [("a", 2.0)], "2": [("a", 1.0), ("b", 0.5)]})          # nothing for qid 3
    right = _Ranking({"1": [("b", 1.0), ("c", 0.2)], "2": [("c", 3.0)], "3": [("a", 1.0)]})
    res = ptt.LinearFusion(left, right, normalise="none")(topics)
    assert sorted(zip(res.qid, res.docno)) == [("1", "a"), ("1", "b"), ("1", "c"), ("2", "a"), ("2", "b"),
                                               ("2", "c"), ("3", "a")]
    want = topics.set_index("qid")
    for col in ["query", "query_0", "clue_year"]:
        got = res.groupby("qid")[col].agg(list).to_dict()
        assert got == {q: [want.loc[q, col]] * len(v) for q, v in got.items()}, col
    assert res.set_index(["qid", "docno"])["score"].to_dict() == {
        ("1", "a"): 2.0, ("1", "b"): 1.0, ("1", "c"): 0.2, ("2", "a"): 1.0, ("2", "b"): 0.5, ("2", "c"): 3.0,
        ("3", "a"): 1.0}
    assert res.loc[res.qid == "1", "clue_title"].tolist() == ["Red Moon"] * 3
    assert all(v is None for v in res.loc[res.qid != "1", "clue_title"])  # N/A stays None, never NaN
    assert str(res["clue_year"].dtype) == "Int64"


def test_recipe_names_moved_out_of_decomposition_still_import():
    """The recipe's training left decomposition/ for recipe/: the names the old package re-exported keep working,
    with a DeprecationWarning naming the new place, and are the same objects."""
    import pyterrier_tot.decomposition as old
    import pyterrier_tot.recipe as new

    for name in old._MOVED_NAMES:
        with pytest.warns(DeprecationWarning, match=f"moved to pyterrier_tot.recipe.{name}"):
            assert getattr(old, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018
