"""FieldExpert: retriever and scorer modes, N/A clues, field mapping, agreement between modes."""
import numpy as np
import pandas as pd
import pytest

from pyterrier_tot.decomposition.field_expert import NEUTRAL_SCORE, FieldExpert, base_expert
from pyterrier_tot.index import BookIndex


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("fe_index"))


@pytest.fixture
def clues():
    return pd.DataFrame({
        "qid": ["q1", "q2", "q3"],
        "query": ["I read a book about a dragon", "some cats sleeping", "a ghost story by the sea"],
        "clue_title": ["dragons of the red moon", None, "haunted lighthouse"],
        "clue_plot": ["blacksmith befriends a dragon", "kittens play while brother naps", "N/A"],
        "clue_genre": [None, "picture book", "horror"],
    })


@pytest.mark.parametrize("backend", ["bm25", "dense"])
def test_retriever_finds_the_book_and_skips_na(index, clues, backend):
    res = FieldExpert(index, "title", backend)(clues)
    assert set(res["qid"]) == {"q1", "q3"}  # q2 has no title clue: no rows
    top = res[res["rank"] == 0].set_index("qid")["docno"]
    assert top["q1"] == "b2" and top["q3"] == "b5"
    # the user's query comes back, not the clue
    assert res.loc[res.qid == "q1", "query"].iloc[0] == "I read a book about a dragon"
    assert res["score"].between(0, 1).all()  # min-max normalised by default
    assert {"qid", "docno", "score", "rank"} <= set(res.columns)


@pytest.mark.parametrize("backend", ["bm25", "dense"])
@pytest.mark.parametrize("normalise", [None, "minmax"])
def test_retriever_and_scorer_agree(index, clues, backend, normalise):
    expert = FieldExpert(index, "plot", backend, normalise=normalise)
    ret = expert(clues)
    assert len(ret) > 0
    scored = expert(ret[["qid", "query", "clue_plot", "docno"]])
    m = ret.merge(scored, on=["qid", "docno"], suffixes=("_r", "_s"))
    assert len(m) == len(ret)
    np.testing.assert_allclose(m["score_r"], m["score_s"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["bm25", "dense"])
def test_scorer_gives_neutral_to_na_clues(index, clues, backend):
    cands = clues.merge(pd.DataFrame({"docno": ["b1", "b2", "b3", "b5"]}), how="cross")
    out = FieldExpert(index, "title", backend)(cands)
    assert len(out) == len(cands)
    assert (out.loc[out.qid == "q2", "score"] == NEUTRAL_SCORE).all()
    q1 = out[out.qid == "q1"].set_index("docno")["score"]
    assert q1.idxmax() == "b2" and q1["b2"] == 1.0
    assert out.loc[out.qid == "q1", "query"].iloc[0] == "I read a book about a dragon"


def test_bm25_scorer_zero_for_unmatched_candidates(index, clues):
    cands = clues[clues.qid == "q1"].merge(pd.DataFrame({"docno": ["b2", "b4"]}), how="cross")
    out = FieldExpert(index, "title", "bm25", normalise=None)(cands).set_index("docno")["score"]
    assert out["b2"] > 0 and out["b4"] == 0.0  # b4's title shares no word with the clue


def test_field_mapping_and_base(index):
    assert FieldExpert(index, "genre", "bm25").book_fields == ("genres",)
    assert FieldExpert(index, "plot", "bm25").book_fields == ("text",)
    assert FieldExpert(index, "genre", "bm25").clue == "clue_genre"
    base = base_expert(index, "bm25")
    assert base.clue == "query" and base.book_fields == ("title", "author", "text")  # the books have authors
    res = base(pd.DataFrame({"qid": ["1"], "query": ["wild horse ranch grandmother"]}))
    assert res.iloc[0]["docno"] == "b6"


def test_bad_inputs(index, clues):
    with pytest.raises(ValueError, match="date"):
        FieldExpert(index, "date")
    with pytest.raises(ValueError, match="backend"):
        FieldExpert(index, "title", backend="tfidf")
    with pytest.raises(KeyError, match="clue_author"):
        FieldExpert(index, "author", "bm25")(clues)


@pytest.mark.parametrize("backend", ["bm25", "dense"])
def test_empty_frames(index, clues, backend):
    e = FieldExpert(index, "title", backend)
    r = e(clues.iloc[:0])
    assert len(r) == 0 and {"qid", "docno", "score", "rank"} <= set(r.columns)
    s = e(clues.iloc[:0].assign(docno=[]))
    assert len(s) == 0 and "score" in s.columns


def test_all_na_and_empty_field(tmp_path, clues):
    frame = pd.DataFrame({"docno": ["a", "b"], "title": ["One", "Two"], "text": ["x y", "y z"]})
    idx = BookIndex(frame, path=tmp_path)
    with pytest.warns(UserWarning, match="empty author"):
        e = FieldExpert(idx, "author", "bm25")
    q = clues.assign(clue_author=["Carl Voss", None, "x"])
    assert len(e(q)) == 0
    cands = q.merge(pd.DataFrame({"docno": ["a", "b"]}), how="cross")
    assert (e(cands)["score"] == NEUTRAL_SCORE).all()
    # a query frame whose clues are all N/A yields an empty (but well-formed) ranking
    t = FieldExpert(idx, "title", "bm25")
    assert len(t(q.assign(clue_title=None))) == 0


def test_the_repr_reads_as_code_and_names_every_setting_that_changes_a_score(index):
    """The repr is the call that makes the expert, with every setting that is not its default; the settings (which
    key the recipe's fitted weights) of an expert with another clue column, text budget, BM25 parameters or depth
    differ from the default one's; equal settings compare equal; settings after the backend are keyword-only."""
    plain = FieldExpert(index, "title", "bm25")
    assert repr(plain) == f"FieldExpert({index!r}, 'title', backend='bm25')"
    assert plain == FieldExpert(index, "title", "bm25") and hash(plain) == hash(FieldExpert(index, "title", "bm25"))
    assert plain._legacy_repr() == "FieldExpert('title', bm25, fields=title, normalise='minmax')"  # the old key
    with pytest.warns(DeprecationWarning, match="pass model by keyword"):
        old_style = FieldExpert(index, "title", "dense", "minilm")
    assert old_style == FieldExpert(index, "title", "dense", model="minilm") != plain
    others = [FieldExpert(index, "title", "bm25", clue="clue_plot"),
              FieldExpert(index, "title", "bm25", bm25_kwargs={"k1": 0.5}),
              FieldExpert(index, "title", "bm25", scorer_depth=50), FieldExpert(index, "title", "bm25", num_results=10),
              FieldExpert(index, "title", "dense", max_chars=200)]
    reprs = {repr(e) for e in others}
    assert len(reprs) == len(others) and repr(plain) not in reprs
    assert len({e.settings()["clue"] + str(sorted(e.settings().items())) for e in others + [plain]}) == 6
    assert "bm25_kwargs={'k1': 0.5}" in repr(others[1]) and "max_chars=200" in repr(others[4])
