"""Tiny random T5 and causal LM trained on a 20-book toy corpus until they return the right book (Hits@1)."""

import pandas as pd
import pyterrier as pt
import pytest
import torch

from pyterrier_tot import generative as gen  # noqa: E402
from tests.helpers.generative_toy import one_torch_thread, toy_books, toy_tokenizer  # noqa: F401 (the fixture is autouse)


def _train_until_hits1(backbone, pairs, ids, lr, max_rounds=12, epochs=20):
    retriever = gen.GenerativeRetriever(backbone, ids, num_results=3)
    for _ in range(max_rounds):
        gen.train(backbone, pairs, epochs=epochs, batch_size=16, lr=lr, verbose=False)
        if gen.hits_at(retriever, pairs, k=1) == 1.0:
            return retriever
    return retriever


@pytest.fixture(scope="module")
def toy():
    books = toy_books()
    ids = gen.book_ids(books)
    pairs = gen.indexing_pairs(books, ids, forms=("lead", "description"))
    return books, ids, pairs, toy_tokenizer(books)


@pytest.mark.parametrize("make,lr", [(gen.tiny_t5, 3e-3), (gen.tiny_causal, 3e-3)], ids=["t5", "causal"])
def test_tiny_model_learns_its_indexing_inputs(toy, make, lr, tmp_path):
    books, ids, pairs, tok = toy
    backbone = make(tok)
    assert backbone.model.config.d_model == 64 if make is gen.tiny_t5 else backbone.model.config.hidden_size == 64
    retriever = _train_until_hits1(backbone, pairs, ids, lr)
    assert gen.hits_at(retriever, pairs, k=1) == 1.0
    # the saved artifact (model + id map, trie rebuilt on load) retrieves the same books with the same scores
    q = pd.DataFrame({"qid": ["a", "b"], "query": [pairs["source"].iloc[0], pairs["source"].iloc[5]]})
    before = retriever(q)
    retriever.save(tmp_path / "model")
    loaded = pt.Artifact.load(str(tmp_path / "model")) if _entry_point() else gen.GenerativeModel(tmp_path / "model")
    again = loaded.retriever(num_results=3)(q)
    assert again["docno"].tolist() == before["docno"].tolist()
    assert again["score"].tolist() == pytest.approx(before["score"].tolist(), abs=1e-4)
    # score mode gives the same log-likelihood as the decode for the retrieved books
    scored = retriever(before[["qid", "query", "docno"]])
    assert scored["score"].tolist() == pytest.approx(before["score"].tolist(), abs=1e-3)


def _entry_point() -> bool:
    from importlib.metadata import entry_points

    return any(e.name == "generative_retriever.pyterrier_tot" for e in entry_points(group="pyterrier.artifact"))


def test_training_resumes_from_its_checkpoint(toy, tmp_path):
    books, ids, pairs, tok = toy
    ckpt = tmp_path / "ckpt"
    a = gen.tiny_t5(tok, seed=1)
    first = gen.train(a, pairs, epochs=4, batch_size=8, checkpoint_dir=ckpt, checkpoint_every=3, max_seconds=0,
                      verbose=False)
    assert first["stopped_on_time"] and first["step_reached"] == 1
    b = gen.tiny_t5(tok, seed=2)  # other initial weights: the checkpoint must replace them
    second = gen.train(b, pairs, epochs=4, batch_size=8, checkpoint_dir=ckpt, verbose=False)
    assert second["resumed"] and second["step_reached"] == second["steps"] == 20  # 40 pairs x 4 epochs / 8
    c = gen.tiny_t5(tok, seed=1)
    gen.train(c, pairs, epochs=4, batch_size=8, verbose=False)
    for (n, p), (_, q) in zip(b.model.named_parameters(), c.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-5), n
    # a finished checkpoint of other pairs (as many) or another learning rate is never "resumed" as this run
    other = pairs.assign(target=pairs["target"].iloc[::-1].to_numpy())
    d = gen.tiny_t5(tok, seed=3)
    before = {n: p.detach().clone() for n, p in d.model.named_parameters()}
    for kwargs in ({"pairs": other}, {"pairs": pairs, "lr": 1e-3}):
        with pytest.raises(ValueError, match="another run .*differing: run"):
            gen.train(d, epochs=4, batch_size=8, checkpoint_dir=ckpt, verbose=False, **kwargs)
    assert all(torch.equal(p, before[n]) for n, p in d.model.named_parameters())  # nothing loaded


def test_label_smoothing_is_the_default():
    assert gen.training.LABEL_SMOOTHING == 0.1


def test_linear_schedule_warms_up_and_decays(toy):
    books, ids, pairs, tok = toy
    bb = gen.tiny_t5(tok, seed=4)
    seen = []
    real_step = torch.optim.AdamW.step

    def spy(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **k)

    torch.optim.AdamW.step = spy
    try:
        gen.train(bb, pairs, epochs=5, batch_size=8, lr=1e-3, schedule="linear", warmup=0.2, verbose=False)
    finally:
        torch.optim.AdamW.step = real_step
    assert len(seen) == 25 and seen[0] == pytest.approx(1e-3 / 5) and max(seen) == pytest.approx(1e-3)
    assert seen[-1] < 1e-4 and seen == sorted(seen[:5]) + sorted(seen[5:], reverse=True)
    with pytest.raises(ValueError, match="schedule"):
        gen.train(bb, pairs, schedule="cosine", verbose=False)
