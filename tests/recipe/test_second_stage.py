"""The recipe's second stage (issue 31.4): a cross-encoder trained from the recipe's base on the recipe's own near
misses. Its negatives come from the miner's top ``depth`` of the training queries outside the tuning slice, never
the gold book; the model is an artifact cached under a name that says how it was trained, and re-ranks."""
import json
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot import recipe
from pyterrier_tot._plumbing.cache_key import cache_key
from pyterrier_tot.index import BookIndex
from pyterrier_tot.recipe import bases, second_stage, tuned  # where the trainers look their helpers up
from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker
from tests.helpers.books import TINY_BOOKS
from tests.helpers.tiny_datasets import TinyDataset


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("second_stage_index"))


def test_groups_are_the_miners_near_misses_on_the_training_rest(index):
    ds = TinyDataset()
    miner = index.dense()
    groups = recipe.recipe_groups(ds, index, miner, n_negatives=2, depth=3, n=4)
    rest, qrels = recipe.train_data(ds, "rest", 4)
    tuning, _ = recipe.train_data(ds, "tuning", 4)
    assert groups and len(groups) <= len(rest)
    assert not {q for q, _, _ in groups} & set(tuning["query"]) - set(rest["query"])
    top = (miner % 3)(rest).merge(rest[["qid"]], on="qid")
    title = {b["docno"]: b["title"] for b in TINY_BOOKS}
    gold = rest.merge(qrels, on="qid").groupby("query")["docno"].agg(set).to_dict()
    top_of = top.groupby("query")["docno"].agg(set).to_dict()
    for query, positive, negatives in groups:
        assert len(negatives) == 2
        assert any(positive.startswith(title[d]) for d in gold[query])
        for neg in negatives:
            docno = next(d for d, t in title.items() if neg.startswith(t))
            assert docno in top_of[query] and docno not in gold[query]


def test_recipe_cross_encoder_trains_from_the_base_and_is_cached(index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    kw = dict(base="minilm", pipeline=index.dense(), n=4,
              train_settings=dict(max_steps=1, batch_size=4, max_seq_length=32),
              n_negatives=1, mine_depth=3, max_steps=1, max_length=64, max_query_tokens=16, verbose=False)
    assert recipe.recipe_cross_encoder(ds, index, train=False, **kw) is None
    path = recipe.recipe_cross_encoder(ds, index, **kw)
    base = recipe.fine_tuned_bases(ds, index, "minilm", train=False, n=4, verbose=False,
                                   **kw["train_settings"])["dense_ft"]
    assert path == str(recipe.recipe_cross_encoder_dir(base, n_negatives=1, mine_depth=3, max_steps=1, max_length=64,
                                                 max_query_tokens=16))
    info = json.loads((tmp_path / "models" / path.rsplit("/", 1)[-1] / "pyterrier_tot_training.json").read_text())
    assert info["init"] == str(base) and info["mined_from"] == "recipe top 3" and info["steps"] == 1
    assert recipe.recipe_cross_encoder(ds, index, train=False, **kw) == path      # cached, not retrained
    assert info["mined_by"] == repr(kw["pipeline"]) and info["mined_by_default"] is False
    assert info["mined_by_key"] == cache_key(kw["pipeline"])  # compared by settings, not by how it prints
    assert recipe.recipe_cross_encoder(ds, index, train=False, **{**kw, "pipeline": index.dense()}) == path
    for other in (index.bm25(), None):  # another miner (or the default) never gets this one's model back
        with pytest.raises(ValueError, match="learnt from negatives ranked by"):
            recipe.recipe_cross_encoder(ds, index, train=False, **{**kw, "pipeline": other})
    res = (index.bm25() % 4)(pd.DataFrame({"qid": ["q"], "query": ["a dragon and the moon"]}))
    out = CrossEncoderReranker(path, index, k=3, alpha=0.5)(res)
    assert len(out) == len(res) and sorted(out["rank"]) == list(range(len(res)))
    with pytest.raises(ValueError, match="unknown settings"):
        recipe.recipe_cross_encoder(ds, index, base="minilm", epoch=2)
    with pytest.raises(ValueError, match="one model"):
        recipe.recipe_cross_encoder(ds, index, base=["minilm", "mpnet"])


def test_the_bm25_dense_cross_encoder_names_every_training_setting(tmp_path, monkeypatch):
    """``negatives="bm25+dense"``: a cross-encoder trained with head_lr (or any other setting) lives in its own
    folder: the one trained without it is never handed back for it, nor the other way round. Its old name,
    fine_tuned_cross_encoder, still gives the same model, with a DeprecationWarning."""
    from pyterrier_tot.rerank import cross_encoder

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    made = []

    def fake_train(groups, out, **kw):
        (tmp_path / "models" / Path(out).name).mkdir(parents=True)
        (Path(out) / "pt_meta.json").write_text("{}")
        made.append((Path(out).name, kw.get("head_lr")))
        return out

    monkeypatch.setattr(cross_encoder, "train_cross_encoder", fake_train)
    monkeypatch.setattr(second_stage, "cross_encoder_groups", lambda *a, **k: [("q", "gold", ["other"])])
    ds = TinyDataset()

    def ce(**kw):
        return recipe.recipe_cross_encoder(ds, object(), negatives="bm25+dense", verbose=False, **kw)

    plain, head = ce(), ce(head_lr=1e-3)
    assert head != plain and head.endswith("-headlr0.001") and "headlr" not in plain
    assert plain == str(recipe.cross_encoder_dir(ds)) and Path(plain).name.startswith("ce-minilm-")
    assert ce(train=False) == plain and ce(head_lr=1e-3) == head
    assert [h for _, h in made] == [None, 1e-3]                      # each trained once
    shorter = ce(max_query_tokens=160)
    assert shorter.endswith("-Q160") and shorter not in (plain, head) and len(made) == 3  # max_query_tokens too
    with pytest.warns(DeprecationWarning, match="negatives='bm25\\+dense'"):
        assert recipe.fine_tuned_cross_encoder(ds, object(), 3, verbose=False, train=False) == plain
    with pytest.raises(ValueError, match="apply to negatives='recipe' only"):
        ce(base="minilm")
    with pytest.raises(ValueError, match="negatives must be one of"):
        recipe.recipe_cross_encoder(ds, object(), negatives="random")


def test_reranker_negatives_are_the_runs_first_non_gold_books():
    """The bi-encoder re-ranker's negatives come from the first ``depth`` books of the run that are not the gold
    one (a gold book ranked inside them never becomes a negative); extra anchors share their query's negatives."""
    books = pd.DataFrame(TINY_BOOKS)
    queries = pd.DataFrame({"qid": ["a", "b"], "query": ["first request", "second request"]})
    qrels = pd.DataFrame({"qid": ["a", "b"], "docno": ["b1", "b4"], "label": [1, 1]})
    run = pd.DataFrame({"qid": ["a"] * 5 + ["b"] * 5, "docno": ["b2", "b1", "b3", "b5", "b6"] * 2,
                        "score": [5, 4, 3, 2, 1] * 2})
    title = {b["docno"]: b["title"] for b in TINY_BOOKS}
    for seed in range(4):
        ex = recipe.reranker_examples(queries, qrels, books, run, n_negatives=2, depth=2, seed=seed)
        assert [e[0] for e in ex] == ["first request", "second request"]
        assert ex[0][1].startswith(title["b1"]) and ex[1][1].startswith(title["b4"])
        negs = [{d for d, t in title.items() if n.startswith(t)} for n in ex[0][2:]]
        assert {d for n in negs for d in n} == {"b2", "b3"}         # b1 (gold) skipped; b5 is beyond depth
        assert {d for n in [{d for d, t in title.items() if n.startswith(t)} for n in ex[1][2:]] for d in n} \
            == {"b2", "b1"}                                           # the run's first two for b (its gold: b4)
    forms = pd.DataFrame({"qid": ["a"], "query": ["title: a dragon"]})
    both = recipe.reranker_examples(queries, qrels, books, run, 2, 2, 0, forms)
    assert len(both) == 3 and both[2][0] == "title: a dragon" and both[2][1:] == both[0][1:]


def test_recipe_reranker_trains_from_the_base_is_cached_and_reranks(index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    rest, _ = recipe.train_data(ds, "rest", 4)
    kw = dict(base="minilm", n=4, train_settings=dict(max_steps=1, batch_size=4, max_seq_length=32), verbose=False,
              n_negatives=1, mine_depth=3, epochs=1)
    assert recipe.recipe_reranker(ds, index, train=False, **kw) is None
    assert recipe.reranker_stage(ds, index, train=False, **kw) is None
    run = (index.dense() % 5)(rest)
    path = recipe.recipe_reranker(ds, index, run=run, device="cpu", **kw)
    base = recipe.fine_tuned_bases(ds, index, "minilm", train=False, n=4, verbose=False,
                                   **kw["train_settings"])["dense_ft"]
    assert path == str(recipe.reranker_dir(base, n_negatives=1, mine_depth=3, epochs=1))
    info = json.loads((Path(path) / "pyterrier_tot_training.json").read_text())
    assert info["kind"] == "reranker" and info["init"] == str(base) and info["mined_from"] == ["recipe top 3"]
    from pyterrier_tot.recipe import expert_training

    def refuse(*a, **k):
        raise AssertionError("retrained a cached re-ranker")

    monkeypatch.setattr(expert_training, "train_biencoder", refuse)
    assert recipe.recipe_reranker(ds, index, run=(index.dense() % 5)(rest), **kw) == path  # cached
    assert info["train_text"] == recipe.text_fingerprint(rest)
    assert info["train_qid_list"] == sorted(rest["qid"].astype(str))  # what a fit checks its slice against
    stage = recipe.reranker_stage(ds, index, train=False, k=3, alpha=0.5, run=run, **kw)
    assert stage.model == path and stage.k == 3 and stage.alpha == 0.5 and stage.max_chars is None
    res = (index.bm25() % 5)(pd.DataFrame({"qid": ["q"], "query": ["a dragon and the moon"]}))
    out = stage(res)
    assert len(out) == len(res) and sorted(out["rank"]) == list(range(len(res)))
    assert set(out.nsmallest(2, "rank")["docno"]) <= set(res.nsmallest(3, "rank")["docno"])  # only the top 3 move
    assert list(out.nlargest(2, "rank")["docno"]) == list(res.nlargest(2, "rank")["docno"])
    record = Path(path) / "pyterrier_tot_training.json"
    record.write_text(json.dumps({**info, "train_text": "other"}))
    with pytest.raises(ValueError, match="other texts"):                     # trained on other query texts
        recipe.recipe_reranker(ds, index, train=False, **kw)
    with pytest.raises(ValueError, match="unknown settings"):
        recipe.recipe_reranker(ds, index, base="minilm", epoch=2)
    with pytest.raises(ValueError, match="unknown settings"):          # k and alpha are the stage's, not the model's
        recipe.recipe_reranker(ds, index, base="minilm", alpha=0.3)
    with pytest.raises(ValueError, match="one model"):
        recipe.recipe_reranker(ds, index, base=["minilm", "mpnet"])


def test_reranker_folder_names_every_training_setting():
    """Each setting that changes the re-ranker's model changes its folder; the stage's k and alpha do not."""
    base = "/models/base-mpnet-x"
    plain = recipe.reranker_dir(base)
    changed = {"n_negatives": 4, "mine_depth": 20, "epochs": 3, "lr": 3e-5, "clue_forms": False, "seed": 1}
    assert set(changed) == set(recipe.RERANKER_TRAINING)
    names = {k: recipe.reranker_dir(base, **{k: v}).name for k, v in changed.items()}
    assert plain.name.startswith("rr-on-base-mpnet-x-") and plain.name not in names.values()
    assert len(set(names.values())) == len(names)
    assert recipe.reranker_dir("/other/base-mpnet-y").name != plain.name


def _fake_reranker_training(tmp_path, monkeypatch) -> list:
    """recipe_reranker with its base and its training patched out (the base a folder name; training writes the
    record train_biencoder would): the folders trained, in order."""
    from pyterrier_tot.recipe import expert_training

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    monkeypatch.setattr(bases, "fine_tuned_bases", lambda *a, **k: {"dense_ft": str(tmp_path / "base-x")})
    made = []

    def fake_train(examples, out, kind=None, extra_metadata=None, **kw):
        assert examples
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "model.safetensors").write_text("")
        (Path(out) / "pyterrier_tot_training.json").write_text(json.dumps({"kind": kind, **extra_metadata}))
        made.append(str(out))
        return out

    monkeypatch.setattr(expert_training, "train_biencoder", fake_train)
    return made


RR_KW = dict(base="minilm", n=4, verbose=False, n_negatives=1, mine_depth=3, clue_forms=False)


def test_recipe_reranker_refuses_a_model_mined_from_another_ranking(index, tmp_path, monkeypatch):
    """A cached re-ranker records the near misses it learnt from: one learnt from another ranking's (a run passed
    in, or the default recipe's) is refused, never handed back nor trained over (as the cross-encoder's)."""
    made = _fake_reranker_training(tmp_path, monkeypatch)
    ds = TinyDataset()
    rest, qrels = recipe.train_data(ds, "rest", 4)
    mine = (index.dense() % 5)(rest)
    other = mine.assign(score=-mine["score"])  # the same books the other way round: other near misses
    digest = {n: recipe.run_digest(r, qrels, rest["qid"], 3) for n, r in (("mine", mine), ("other", other))}
    assert digest["mine"] != digest["other"]
    path = recipe.recipe_reranker(ds, index, run=mine, **RR_KW)
    info = json.loads((Path(path) / "pyterrier_tot_training.json").read_text())
    assert info["mined_run"] == digest["mine"] and info["mined_by_default"] is False
    for train in (False, True):
        with pytest.raises(ValueError, match="learnt from negatives ranked by"):
            recipe.recipe_reranker(ds, index, run=other, train=train, **RR_KW)
    default = pt.Transformer.from_df(other)
    monkeypatch.setattr(tuned, "tuned_pipeline", lambda *a, **k: default)
    with pytest.raises(ValueError, match="learnt from negatives ranked by"):  # the default recipe ranks otherwise
        recipe.recipe_reranker(ds, index, train=False, **RR_KW)
    assert made == [path]
    for f in Path(path).iterdir():
        f.unlink()
    assert recipe.recipe_reranker(ds, index, **RR_KW) == path  # now learnt from the default's ranking
    info = json.loads((Path(path) / "pyterrier_tot_training.json").read_text())
    assert info["mined_run"] == digest["other"] and info["mined_by_default"] is True
    assert info["mined_by"] == repr(default)
    with pytest.raises(ValueError, match="learnt from negatives ranked by"):  # a run from elsewhere never gets it
        recipe.recipe_reranker(ds, index, run=mine, **RR_KW)
    assert made == [path, path]


def test_recipe_reranker_reuses_a_model_mined_from_the_same_ranking(index, tmp_path, monkeypatch):
    """The same near misses (the same ranking, cut deeper, over more queries or in another row order; the default's
    ranking when that is what it learnt from) get the cached re-ranker back, never trained again; a record written
    before the near misses were recorded is reused, as the cross-encoder's."""
    made = _fake_reranker_training(tmp_path, monkeypatch)
    ds = TinyDataset()
    rest, qrels = recipe.train_data(ds, "rest", 4)
    mine = (index.dense() % 5)(rest)
    path = recipe.recipe_reranker(ds, index, run=mine, **RR_KW)
    record = Path(path) / "pyterrier_tot_training.json"
    assert json.loads(record.read_text())["mined_run"] == recipe.run_digest(mine, qrels, rest["qid"], 3)
    everyone = recipe.train_data(ds, "all", 4)[0]
    for same in (mine.copy(), mine.sample(frac=1, random_state=0), (index.dense() % 6)(everyone)):
        assert recipe.recipe_reranker(ds, index, run=same, **RR_KW) == path
    monkeypatch.setattr(tuned, "tuned_pipeline", lambda *a, **k: pt.Transformer.from_df(mine))
    assert recipe.recipe_reranker(ds, index, **RR_KW) == path  # the default's ranking is that ranking
    for f in Path(path).iterdir():
        f.unlink()
    assert recipe.recipe_reranker(ds, index, **RR_KW) == path  # learnt from the default's ranking

    def unbuilt(*a, **k):
        raise AssertionError("built the default recipe to check a model it mined")

    monkeypatch.setattr(tuned, "tuned_pipeline", unbuilt)
    assert recipe.recipe_reranker(ds, index, **RR_KW) == path
    assert recipe.recipe_reranker(ds, index, run=mine, **RR_KW) == path
    info = json.loads(record.read_text())
    record.write_text(json.dumps({k: v for k, v in info.items() if not k.startswith("mined_by") and k != "mined_run"}))
    other = mine.assign(score=-mine["score"])
    assert recipe.recipe_reranker(ds, index, run=other, **RR_KW) == path  # older record: not checked
    assert made == [path, path]
