"""The cross-encoder: a tiny random BERT learns from (query, gold, negatives) groups, is saved as an artifact
and re-ranks the top k of a result frame (the tail keeps its order)."""
import json

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.errors import UnknownDocnoError
from pyterrier_tot.rerank.cross_encoder import CrossEncoderModel, CrossEncoderReranker, train_cross_encoder

POS = ["a dragon over the red moon", "dragons guard a red castle", "the moon dragon sleeps", "a red dragon egg"]
NEG = ["a quiet farm in spring", "cooking soup with grandma", "a train to the city", "football on sunday",
       "a letter from the bank", "tax forms and paperwork"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A 2-layer random BERT with MiniLM's tokenizer: no download, trains in seconds."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from pyterrier_tot.models import resolve_model

    path = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(resolve_model(None))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, num_labels=1)
    BertForSequenceClassification(cfg).save_pretrained(str(path), safe_serialization=True)
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def trained(tiny_bert, tmp_path_factory):
    rng = np.random.default_rng(0)
    groups = [(f"I remember a book {i}", POS[i % 4], list(rng.choice(NEG, 3, replace=False))) for i in range(16)]
    out = tmp_path_factory.mktemp("ce") / "model"
    return train_cross_encoder(groups, out, base_model=tiny_bert, epochs=6, batch_queries=4, lr=2e-3,
                               max_length=64, max_query_tokens=16, show_progress_bar=False)


def test_training_learns_and_saves_an_artifact(trained):
    meta = json.loads((trained / "pt_meta.json").read_text())
    assert meta["type"] == "cross_encoder" and meta["format"] == "transformers"
    assert (trained / "model.safetensors").is_file() and not list(trained.glob("*.pkl"))
    info = CrossEncoderModel(trained).training()
    assert info["n_negatives"] == 3 and info["steps"] == 24 and info["last_loss"] < info["first_loss"]
    from pyterrier_tot.models import device_label, training_device
    assert info["device"] == device_label(training_device())  # where it trained (the GPU's name on a GPU)
    texts = POS + NEG
    res = pd.DataFrame({"qid": "q", "query": "which book was it", "docno": [f"d{i}" for i in range(len(texts))],
                        "text": texts, "score": np.arange(len(texts), dtype=float)})  # gold books ranked last
    out = CrossEncoderReranker(trained, k=len(texts))(res)
    top = out.sort_values("rank")["text"].head(4)
    assert set(top) == set(POS)                      # it learned what a gold book looks like


def test_reranker_top_k_and_tail(trained):
    res = pt.model.add_ranks(pd.DataFrame({"qid": "q", "query": "a book", "docno": ["a", "b", "c", "d"],
                                           "text": [NEG[0], POS[0], NEG[1], POS[1]], "score": [4.0, 3.0, 2.0, 1.0]}))
    out = CrossEncoderReranker(trained, k=2)(res)
    order = out.sort_values("rank")["docno"].tolist()
    assert order[:2] == ["b", "a"] and order[2:] == ["c", "d"]   # only the top 2 re-scored; tail order kept
    assert len(CrossEncoderReranker(trained)(res.head(0))) == 0
    assert "k=2" in repr(CrossEncoderReranker(trained, k=2))


def test_reranker_with_index(trained, tmp_path):
    from pyterrier_tot.index import BookIndex
    from tests.helpers.books import TINY_BOOKS

    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "idx")
    res = pt.model.add_ranks(pd.DataFrame({"qid": "q", "query": "dragon", "docno": ["b1", "b2"],
                                           "score": [2.0, 1.0]}))
    out = CrossEncoderModel(trained).reranker(index, k=5)(res)
    assert sorted(out["docno"]) == ["b1", "b2"] and out["score"].notna().all()
    with pytest.raises(UnknownDocnoError, match="nope"):
        CrossEncoderReranker(trained, index)(res.assign(docno=["b1", "nope"]))


def test_alpha_mixes_the_incoming_score_into_the_top_k(trained):
    texts = [NEG[0], POS[0], NEG[1], POS[1], NEG[2]]
    res = pt.model.add_ranks(pd.DataFrame({"qid": "q", "query": "a book", "docno": list("abcde"), "text": texts,
                                           "score": [5.0, 4.0, 3.0, 2.0, 1.0]}))
    keep = CrossEncoderReranker(trained, k=4, alpha=0.0)(res)
    assert keep.sort_values("rank")["docno"].tolist() == list("abcde")        # alpha 0: the first stage's order
    alone = CrossEncoderReranker(trained, k=4)(res).set_index("docno")["score"]
    half = CrossEncoderReranker(trained, k=4, alpha=0.5)(res).set_index("docno")
    ce = alone[list("abcd")]
    first = np.array([5.0, 4.0, 3.0, 2.0])
    want = 0.5 * (ce - ce.min()) / (ce.max() - ce.min()) + 0.5 * (first - 2.0) / 3.0
    assert np.allclose(half.loc[list("abcd"), "score"], want)
    assert half.loc["e", "rank"] == 4                                          # the tail stays below the block
    assert "alpha=0.5" in repr(CrossEncoderReranker(trained, k=4, alpha=0.5))
    with pytest.raises(ValueError, match="alpha"):
        CrossEncoderReranker(trained, alpha=1.5)


def test_head_learning_rate_moves_the_new_head_faster(tiny_bert, tmp_path):
    from safetensors.torch import load_file

    rng = np.random.default_rng(1)
    groups = [(f"I remember a book {i}", POS[i % 4], list(rng.choice(NEG, 2, replace=False))) for i in range(8)]
    start = load_file(str(tiny_bert / "model.safetensors"))
    moved = {}
    for name, head_lr in (("same", None), ("fast", 1e-2)):
        out = train_cross_encoder(groups, tmp_path / name, base_model=tiny_bert, batch_queries=4, lr=1e-4,
                                  max_length=64, max_query_tokens=16, show_progress_bar=False, head_lr=head_lr,
                                  warmup_ratio=0.0)
        w = load_file(str(out / "model.safetensors"))
        moved[name] = float((w["classifier.weight"] - start["classifier.weight"]).abs().max())
        assert CrossEncoderModel(out).training().get("head_lr") == head_lr
    assert moved["fast"] > 10 * moved["same"]
