"""The sentence-encoder backbone (offline MiniLM + a small decoder): it learns its ids, decodes only valid ids,
scores on the scale it decodes on, caches a frozen encoder, trains only what it says, and survives a save."""

import numpy as np
import pandas as pd
import pytest
import torch

from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.generative.sentence_model import split_identifier  # noqa: E402
from tests.helpers.generative_toy import one_torch_thread, toy_books  # noqa: F401 (the fixture is autouse)


@pytest.fixture(scope="module")
def toy():
    books = toy_books()
    titles = gen.book_ids(books)
    rng = np.random.default_rng(0)
    sem = gen.semantic_ids(rng.normal(size=(len(books), 8)), list(books["docno"]), k=3, leaf=3)
    return books, titles, sem


def _trained(ids, books, codes, states="pooled", epochs=30):
    pairs = gen.indexing_pairs(books, ids, forms=("lead", "description"))
    bb = gen.sentence_backbone(ids, codes=codes, states=states)
    gen.train(bb, pairs, epochs=epochs, batch_size=16, lr=2e-3, max_source_tokens=64, verbose=False)
    return bb, pairs, gen.GenerativeRetriever(bb, ids, num_results=3, max_source_tokens=64)


@pytest.mark.parametrize("kind,states", [("semantic", "pooled"), ("title", "tokens")])
def test_learns_its_ids_and_scores_on_the_decoding_scale(toy, kind, states):
    books, titles, sem = toy
    ids = sem if kind == "semantic" else titles
    bb, pairs, retriever = _trained(ids, books, codes=kind == "semantic", states=states)
    assert gen.hits_at(retriever, pairs, k=1) == 1.0
    q = pd.DataFrame({"qid": ["a", "b"], "query": [pairs["source"].iloc[0], "a kitten on a glacier"]})
    res = retriever(q)
    assert set(res["docno"]) <= set(ids) and res.groupby("qid").size().max() <= 3
    scored = retriever(res[["qid", "query", "docno"]])
    assert scored["score"].tolist() == pytest.approx(res["score"].tolist(), abs=1e-4)


def test_decoding_never_leaves_the_trie(toy):
    books, titles, sem = toy
    bb = gen.sentence_backbone(titles)  # untrained: only the constraint keeps the output valid
    valid = {tuple(bb.target_ids(i)) for i in titles.values()}
    trie = gen.IdTrie(valid)
    rng = np.random.default_rng(1)
    words = " ".join(books["text"]).split()
    for trial in range(8):
        beams = int(rng.choice([1, 3, 7, 25]))
        sources = [bb.source_ids(" ".join(rng.choice(words, size=rng.integers(1, 30))), 64) for _ in range(3)]
        for hits in bb.search(sources, trie, num_beams=beams):
            assert 1 <= len(hits) <= min(beams, len(valid))
            assert all(seq in valid and score <= 0 for seq, score in hits), f"trial {trial}"
            assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_identifier_tokens():
    from pyterrier_tot.models import load_sentence_transformer, resolve_model

    tok = load_sentence_transformer(resolve_model(None)).tokenizer
    assert split_identifier("3-0-7", tok, codes=True) == ["<0:3>", "<1:0>", "<2:7>"]
    assert split_identifier("3-1 # The Hobbit", tok, codes=True) == ["<0:3>", "<1:1>", "#", "the", "ho", "##bb", "##it"]
    assert split_identifier("The Moon # Tolkien", tok, codes=False)[:3] == ["the", "moon", "#"]
    with pytest.raises(ValueError, match="does not start with a code"):
        split_identifier("The Hobbit", tok, codes=True)
    bb = gen.sentence_backbone(["The Hobbit"])
    with pytest.raises(ValueError, match="does not know"):
        bb.target_ids("Dune")


def test_frozen_encoder_is_cached_and_only_the_decoder_trains(toy):
    books, titles, _ = toy
    bb = gen.sentence_backbone(titles)
    assert not any(p.requires_grad for p in bb.model.encoder.parameters())
    assert len(bb.param_groups(1e-3)) == 1
    calls = []
    hook = bb.model.encoder.register_forward_hook(lambda *a: calls.append(1))
    pairs = gen.indexing_pairs(books, titles, forms=("lead",))
    before = {n: p.detach().clone() for n, p in bb.model.encoder.named_parameters()}
    gen.train(bb, pairs, epochs=3, batch_size=20, verbose=False)
    hook.remove()
    assert len(calls) == 1  # 20 distinct sources in one batch: encoded once, then read from the cache
    assert all(torch.equal(before[n], p) for n, p in bb.model.encoder.named_parameters())
    tuned = gen.sentence_backbone(titles, train_encoder=1, encoder_lr=1e-5)
    groups = tuned.param_groups(1e-3)
    assert [g["lr"] for g in groups] == [1e-3, 1e-5]
    top = set(id(p) for p in tuned.model.encoder.encoder.layer[-1].parameters())
    assert {id(p) for p in groups[1]["params"]} == top


def test_save_and_load_give_the_same_ranking(toy, tmp_path):
    import pyterrier as pt

    books, _, sem = toy
    _, pairs, retriever = _trained(sem, books, codes=True, epochs=15)
    q = pd.DataFrame({"qid": ["a", "b"], "query": [pairs["source"].iloc[3], pairs["source"].iloc[9]]})
    before = retriever(q)
    retriever.save(tmp_path / "model")
    try:
        model = pt.Artifact.load(str(tmp_path / "model"))
    except Exception:  # the entry point is not installed in this environment
        model = gen.GenerativeModel(tmp_path / "model")
    again = model.retriever(num_results=3)
    assert "label='model'" in repr(again) and f"weights={again.weights}" in repr(again) and len(again.weights) == 10
    # the repr names what changes a score (it keys fitted fuser weights): other settings, other weights
    assert repr(model.retriever(num_results=3, max_source_tokens=32)) != repr(again)
    retrained = _trained(sem, books, codes=True, epochs=2)[2]
    retrained.save(tmp_path / "model", overwrite=True)
    assert "label='model'" in repr(model.retriever(num_results=3)) and model.retriever(num_results=3).weights != \
        again.weights
    after = again(q)
    assert after["docno"].tolist() == before["docno"].tolist()
    assert after["score"].tolist() == pytest.approx(before["score"].tolist(), abs=1e-4)


def test_index_semantic_ids_follow_the_dense_vectors(tmp_path):
    from pyterrier_tot.index import BookIndex

    books = pd.DataFrame([{"docno": f"d{i}", "title": t, "text": x} for i, (t, x) in enumerate([
        ("Dragon Egg", "A dragon hatches from an egg in a castle."),
        ("Dragon Egg Two", "A dragon hatches from an egg in a castle tower."),
        ("Kitten Naps", "A kitten sleeps all day on a sunny windowsill."),
        ("Kitten Naps Again", "A kitten sleeps all day on a warm windowsill."),
        ("Space Robots", "Robots build a rocket and fly to Mars."),
        ("Space Robots Return", "Robots fly their rocket back from Mars."),
    ])])
    index = BookIndex(books, path=tmp_path / "index")
    sem = gen.index_semantic_ids(index, k=3, leaf=2)
    assert set(sem) == set(books["docno"]) and len(set(sem.values())) == len(books)
    for a, b in (("d0", "d1"), ("d2", "d3"), ("d4", "d5")):  # near-duplicates share their cluster
        assert sem[a].split("-")[0] == sem[b].split("-")[0]
    assert len({sem[d].split("-")[0] for d in ("d0", "d2", "d4")}) == 3
