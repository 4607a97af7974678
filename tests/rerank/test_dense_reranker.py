import os

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pyterrier_tot.rerank.dense_reranker import DenseReranker  # noqa: E402

BOOKS = pd.DataFrame({
    "docno": [f"d{i}" for i in range(8)],
    "title": ["The Lighthouse Twins", "Dragon Recipes", "Orbit", "The Baker's Son", "Sea Glass",
              "Moon Kitten", "Winter Orchard", "The Quiet House"],
    "text": ["Two sisters keep a lighthouse on a stormy island and rescue sailors.",
             "A cookbook written by a dragon who loves soup.",
             "An astronaut is stranded on a space station orbiting Mars.",
             "A boy learns to bake bread in his father's shop in Paris.",
             "A girl collects sea glass on the beach after her mother dies.",
             "A kitten dreams of flying to the moon in a paper rocket.",
             "Apple trees, snow and a family secret in rural Vermont.",
             "A haunted house where the ghosts whisper at night."],
})


def bm25_like(query, docnos, qid="q"):
    """A fake first-stage run: descending scores in the given order."""
    return pt.model.add_ranks(pd.DataFrame({"qid": qid, "query": query, "docno": docnos,
                                            "score": np.arange(len(docnos), 0, -1, dtype=float) + 10}))


def with_text(res):
    return res.merge(BOOKS[["docno", "title", "text"]], on="docno")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from pyterrier_tot import BookIndex

    return BookIndex(BOOKS, path=tmp_path_factory.mktemp("dense_idx"))


def order(out, qid="q"):
    return out[out.qid == qid].sort_values("rank")["docno"].tolist()


def test_reranks_block_and_keeps_tail_below(index):
    docnos = ["d6", "d7", "d2", "d0", "d5", "d1", "d3", "d4"]  # the astronaut book is third by "BM25"
    res = bm25_like("an astronaut stuck in space near mars", docnos)
    out = DenseReranker(index, k=4)(res)
    ranked = order(out)
    assert ranked[0] == "d2"
    assert set(ranked[:4]) == set(docnos[:4])
    assert ranked[4:] == docnos[4:]  # tail order untouched
    block_min = out[out.docno.isin(docnos[:4])]["score"].min()
    assert (out[out.docno.isin(docnos[4:])]["score"] < block_min).all()
    assert sorted(out["rank"]) == list(range(len(docnos)))


def test_outside_k_cannot_move_up(index):
    docnos = ["d6", "d7", "d0", "d5", "d1", "d3", "d4", "d2"]  # the right book is last, outside k
    out = DenseReranker(index, k=3)(bm25_like("an astronaut stuck in space near mars", docnos))
    assert order(out)[-1] == "d2"


def test_stored_vectors_and_text_on_the_fly_agree(index):
    res = bm25_like("a dragon writes a cookbook of soups", BOOKS["docno"].tolist())
    stored = DenseReranker(index, k=8)(res).set_index("docno")["score"].sort_index()
    live = DenseReranker(index, k=8, stored=False)(res).set_index("docno")["score"].sort_index()
    from_column = DenseReranker(k=8)(with_text(res).assign(
        text=lambda d: d["title"] + "\n" + d["text"])).set_index("docno")["score"].sort_index()
    np.testing.assert_allclose(stored.to_numpy(), live.to_numpy(), atol=1e-4)
    np.testing.assert_allclose(live.to_numpy(), from_column.to_numpy(), atol=1e-4)
    assert stored.idxmax() == "d1"
    assert (stored.abs() <= 1.0001).all()  # cosines


def test_max_chars_limits_what_is_encoded(index):
    res = bm25_like("a haunted house with whispering ghosts", BOOKS["docno"].tolist())
    full = DenseReranker(index, k=8, stored=False)(res).set_index("docno")["score"]
    short = DenseReranker(index, k=8, stored=False, max_chars=5)(res).set_index("docno")["score"]
    assert full.idxmax() == "d7"
    assert not np.allclose(full.sort_index(), short.sort_index())


def test_alpha_interpolation(index):
    docnos = ["d6", "d7", "d2", "d0"]
    res = bm25_like("an astronaut stuck in space near mars", docnos)
    dense = DenseReranker(index, k=4)(res).set_index("docno")["score"]
    zero = DenseReranker(index, k=4, alpha=0.0)(res)
    assert order(zero) == docnos  # alpha=0 is BM25 order
    half = DenseReranker(index, k=4, alpha=0.5)(res).set_index("docno")["score"]
    sparse = pd.Series([1.0, 2 / 3, 1 / 3, 0.0], index=docnos)
    np.testing.assert_allclose(half[docnos], 0.5 * dense[docnos] + 0.5 * sparse[docnos], atol=1e-6)


def test_several_queries(index):
    a = bm25_like("an astronaut stuck in space near mars", ["d0", "d1", "d2"], qid="a")
    b = bm25_like("bread and baking in paris", ["d2", "d3", "d4"], qid="b")
    out = DenseReranker(index, k=2)(pd.concat([a, b], ignore_index=True))
    assert order(out, "a")[2] == "d2"  # outside k=2 although it is the right book
    assert order(out, "b")[0] == "d3"
    assert order(out, "b")[2] == "d4"


def test_empty_frame_bad_input_and_repr(index):
    empty = pd.DataFrame(columns=["qid", "query", "docno", "score", "rank"])
    out = DenseReranker(index)(empty)
    assert len(out) == 0 and {"qid", "docno", "score", "rank"} <= set(out.columns)
    with pytest.raises(KeyError, match="text"):
        DenseReranker()(bm25_like("x", ["d0"]))
    with pytest.raises(ValueError, match="alpha"):
        DenseReranker(alpha=2)
    with pytest.raises(ValueError, match="k"):
        DenseReranker(k=0)
    r = repr(DenseReranker(index, k=50, alpha=0.3))
    assert r == f"DenseReranker({index!r}, k=50, alpha=0.3)"  # reads as the call that makes it
    assert DenseReranker(index, k=50, alpha=0.3) == DenseReranker(index, k=50, alpha=0.3) != DenseReranker(index)
    assert repr(DenseReranker(model="minilm", k=5)) == "DenseReranker(model='minilm', k=5)"


def test_composes_in_experiment(index):
    from pyterrier_tot.query.hedge_remover import HedgeRemover

    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["I think maybe a kitten flying to the moon",
                                                       "if I recall, ghosts whispering in a house"]})
    qrels = pd.DataFrame({"qid": ["1", "2"], "docno": ["d5", "d7"], "label": [1, 1]})
    bm25 = index.bm25()
    pipe = HedgeRemover() >> bm25 >> DenseReranker(index, k=5)
    res = pt.Experiment([bm25, pipe], topics, qrels, eval_metrics=["recip_rank"], names=["bm25", "hybrid"])
    assert res.loc[1, "recip_rank"] == 1.0
