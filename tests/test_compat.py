"""Module paths of version 0.1 keep importing (stub files that warn with a DeprecationWarning) and give the same
objects."""
import importlib
import sys

import pandas as pd
import pyterrier as pt
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
