"""nomic-embed-text from its GGUF file, and the task prompts of a model in every encoding path.

A tiny random nomic-bert is written the way llama.cpp's converter writes the real file (its checkpoint names mapped
to GGUF names by the ``gguf`` package's own table, the same metadata keys, f16 matrices, the vocabulary in
llama.cpp's spelling); :func:`pyterrier_tot.models.nomic.convert_gguf` must give back the weights and the outputs of the
same checkpoint loaded by transformers itself. The converted model carries nomic's two prompts, so it is also the
model of the prompt tests: each fails when requests or books are encoded (or trained) without theirs.
"""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

from pyterrier_tot.models.nomic import DOCUMENT_PROMPT, QUERY_PROMPT, convert_gguf, wordpiece  # noqa: E402
from pyterrier_tot.models.prompts import model_prompts, prompted_examples  # noqa: E402

SPECIAL = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["search", "_", "query", "document", ":", "the", "a", "red", "book", "about", "dragon", "girl", "sea",
         "##s", "##ing", "read", ",", ".", "lost", "island", "boy", "old", "map"]
VOCAB = SPECIAL + WORDS
HIDDEN, LAYERS, HEADS, FFN = 32, 2, 4, 48
TEXTS = ["the red book about a dragon", "Lost island, old map.", "a girl reading about the sea"]


def _gguf_token(t: str) -> str:  # llama.cpp's spelling: word starts get "▁", continuations lose "##"
    return t if t.startswith("[") else (t[2:] if t.startswith("##") else "\u2581" + t)


def _checkpoint():
    """Random weights under nomic's own checkpoint names (as on the hub)."""
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):  # f16-representable, so the GGUF's f16 copy is exact
        return (torch.randn(*shape, generator=g) * 0.2).half().float()

    sd = {"embeddings.word_embeddings.weight": rnd(len(VOCAB), HIDDEN),
          "embeddings.token_type_embeddings.weight": rnd(2, HIDDEN),
          "emb_ln.weight": 1 + rnd(HIDDEN), "emb_ln.bias": rnd(HIDDEN)}
    for i in range(LAYERS):
        p = f"encoder.layers.{i}."
        sd.update({p + "attn.Wqkv.weight": rnd(3 * HIDDEN, HIDDEN), p + "attn.out_proj.weight": rnd(HIDDEN, HIDDEN),
                   p + "mlp.fc11.weight": rnd(FFN, HIDDEN), p + "mlp.fc12.weight": rnd(FFN, HIDDEN),
                   p + "mlp.fc2.weight": rnd(HIDDEN, FFN), p + "norm1.weight": 1 + rnd(HIDDEN),
                   p + "norm1.bias": rnd(HIDDEN), p + "norm2.weight": 1 + rnd(HIDDEN), p + "norm2.bias": rnd(HIDDEN)})
    return sd


def _write_gguf(path, sd):
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.NOMIC_BERT, LAYERS)
    w = gguf.GGUFWriter(str(path), "nomic-bert")
    w.add_block_count(LAYERS)
    w.add_context_length(2048)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_rope_freq_base(1000.0)
    w.add_tokenizer_model("bert")
    w.add_token_list([_gguf_token(t) for t in VOCAB])
    w.add_token_scores([0.0] * len(VOCAB))
    w.add_token_types([gguf.TokenType.CONTROL if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
                       else gguf.TokenType.NORMAL for t in VOCAB])
    w.add_token_type_count(1)
    w.add_bos_token_id(VOCAB.index("[CLS]"))
    w.add_eos_token_id(VOCAB.index("[SEP]"))
    w.add_unk_token_id(VOCAB.index("[UNK]"))
    w.add_sep_token_id(VOCAB.index("[SEP]"))
    w.add_pad_token_id(VOCAB.index("[PAD]"))
    for name, t in sd.items():
        arr = t.numpy()
        # as in the real file: matrices f16, norms and the token types f32
        keep32 = arr.ndim == 1 or name.endswith("token_type_embeddings.weight")
        w.add_tensor(names.get_name(name, try_suffixes=(".weight", ".bias")),
                     arr.astype(np.float32 if keep32 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(converted sentence-transformers folder, reference NomicBertModel loaded by transformers from the checkpoint
    names, the checkpoint)."""
    from safetensors.torch import save_file
    from transformers import NomicBertConfig, NomicBertModel

    root = tmp_path_factory.mktemp("nomic")
    sd = _checkpoint()
    _write_gguf(root / "tiny.gguf", sd)
    out = convert_gguf(root / "tiny.gguf", root / "st", max_seq_length=64)
    ref_dir = root / "checkpoint"
    ref_dir.mkdir()
    cfg = NomicBertConfig(vocab_size=len(VOCAB), hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=2048,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    cfg.save_pretrained(ref_dir)
    save_file(sd, str(ref_dir / "model.safetensors"))
    ref = NomicBertModel.from_pretrained(str(ref_dir)).eval()  # transformers' own renaming of nomic's names
    return out, ref, sd


@pytest.fixture(scope="module")
def st(tiny):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(tiny[0]), device="cpu")


def test_vocabulary_spelling_round_trips():
    assert [wordpiece(_gguf_token(t)) for t in VOCAB] == VOCAB


def test_converted_weights_equal_the_checkpoint(tiny, st):
    _, ref, _ = tiny
    mine = st[0].auto_model.state_dict()
    theirs = ref.state_dict()
    assert sorted(mine) == sorted(theirs)
    for name, t in theirs.items():
        assert mine[name].dtype == torch.float32, name
        assert torch.equal(mine[name], t), name


def test_converted_tokenizer_and_outputs_equal_the_checkpoint(tiny, st):
    _, ref, _ = tiny
    tok = st.tokenizer
    assert tok.tokenize("Search_Query: the Dragons") == ["search", "_", "query", ":", "the", "dragon", "##s"]
    assert tok.tokenize("reading")[:1] == ["read"] and tok.tokenize("zebra") == ["[UNK]"]
    texts = [QUERY_PROMPT + t for t in TEXTS]
    batch = tok(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0] == VOCAB.index("[CLS]")
    with torch.no_grad():
        hidden = ref(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    want = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    got = st.encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_converted_folder_has_nomics_prompts_and_no_remote_code(tiny, st):
    folder = tiny[0]
    cfg = json.loads((folder / "config_sentence_transformers.json").read_text())
    assert cfg["prompts"] == {"query": QUERY_PROMPT, "document": DOCUMENT_PROMPT}
    assert json.loads((folder / "config.json").read_text())["model_type"] == "nomic_bert"
    assert "auto_map" not in (folder / "config.json").read_text()
    assert model_prompts(st) == (QUERY_PROMPT, DOCUMENT_PROMPT)
    assert st.max_seq_length == 64


def test_wrong_architecture_is_refused(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "llama.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="llama"):
        convert_gguf(tmp_path / "llama.gguf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the prompts in every encoding path
def _close(a, b):
    return np.allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), atol=1e-5)


@pytest.fixture(scope="module")
def plain(st):
    """Vectors of TEXTS as they are, with the query prompt and with the document prompt."""
    return {k: st.encode([p + t for t in TEXTS], convert_to_numpy=True)
            for k, p in {"none": "", "query": QUERY_PROMPT, "document": DOCUMENT_PROMPT}.items()}


def test_biencoder_encodes_requests_and_books_with_their_prompts(tiny, plain):
    import pandas as pd

    from pyterrier_tot.models import load_biencoder

    enc = load_biencoder(str(tiny[0]))
    queries = enc.encode_queries(TEXTS)  # through the query memo
    docs = enc.encode_docs(TEXTS)
    assert _close(queries, plain["query"]) and not _close(queries, plain["none"])
    assert _close(docs, plain["document"]) and not _close(docs, plain["document"][::-1])
    assert not _close(queries, docs)
    frame = enc.query_encoder()(pd.DataFrame({"qid": ["1", "2", "3"], "query": TEXTS}))
    assert _close(np.stack(frame["query_vec"]), plain["query"])
    books = enc.doc_encoder()(pd.DataFrame({"docno": ["a", "b", "c"], "text": TEXTS}))
    assert _close(np.stack(books["doc_vec"]), plain["document"])
    assert repr(enc).startswith("SBertBiEncoder(")


def test_dense_index_encoder_uses_the_document_prompt(tiny, plain):
    from pyterrier_tot.index.encoding import SortedDocEncoder
    from pyterrier_tot.models import load_biencoder

    vecs = SortedDocEncoder(load_biencoder(str(tiny[0]))).encode(TEXTS)
    assert _close(vecs, plain["document"]) and not _close(vecs, plain["none"])


def test_a_model_without_prompts_is_encoded_as_before():
    from pyterrier_tot.models import load_biencoder

    enc = load_biencoder("minilm")
    assert model_prompts(enc) == ("", "")
    assert type(enc).__name__ == "SBertBiEncoder"
    assert _close(enc.encode_docs(TEXTS[:1]), enc.model.encode(TEXTS[:1]))


def test_training_examples_carry_the_prompts(tiny, st, monkeypatch):
    import pyterrier_tot.recipe.expert_training as et

    assert prompted_examples(st, [("q", "d", "n")]) == [[QUERY_PROMPT + "q", DOCUMENT_PROMPT + "d",
                                                         DOCUMENT_PROMPT + "n"]]
    seen = []

    class Stop(Exception):
        pass

    def record(examples, batch_size):
        seen.extend(ex.texts for ex in examples)
        raise Stop

    monkeypatch.setattr(et, "DistinctTextBatches", record)
    with pytest.raises(Stop):
        et.train_biencoder([(t, t.upper()) for t in TEXTS], tiny[0].parent / "trained", base_model=str(tiny[0]),
                           show_progress_bar=False)
    assert seen == [[QUERY_PROMPT + t, DOCUMENT_PROMPT + t.upper()] for t in TEXTS]
