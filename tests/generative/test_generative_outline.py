"""Outline encoder (shapes, recurrence == unrolled, gate 0 == standard attention), outline ids and chapter
aggregation on a small synthetic corpus of outlined books."""
import math

import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.generative.outline_encoder import (  # noqa: E402
    BiLevelPositionalEncoding,
    OutlineEncoder,
    RetentiveAttention,
    local_positions,
)
from tests.helpers.generative_toy import NOUNS, PLACES, one_torch_thread  # noqa: F401 (the fixture is autouse)


def _segments(b=2, lengths=(5, 7, 4), d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    segs = [torch.randn(b, t, d, generator=g) for t in lengths]
    secs = [torch.tensor([[i * 2 + (j >= t // 2) for j in range(t)]] * b) for i, t in enumerate(lengths)]
    return segs, secs


def test_local_positions_restart_at_each_section():
    sec = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]])
    assert local_positions(sec).tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    pe = BiLevelPositionalEncoding(8, max_section_tokens=4)
    assert pe(torch.zeros(1, 9, 8), sec).shape == (1, 9, 8)


def test_rotary_section_encoding_is_relative():
    pe = BiLevelPositionalEncoding(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(n, m):
        return (pe.rotate(q, torch.tensor([[n]])) * pe.rotate(k, torch.tensor([[m]]))).sum()
    assert torch.allclose(score(3, 1), score(7, 5), atol=1e-5)
    assert not torch.allclose(score(3, 1), score(3, 3), atol=1e-3)


def test_shapes():
    torch.manual_seed(0)
    attn = RetentiveAttention(16, heads=4)
    segs, secs = _segments()
    out, (m, z) = attn(segs[0], secs[0])
    assert out.shape == segs[0].shape and m.shape == (2, 4, 4, 4) and z.shape == (2, 4, 4)
    enc = OutlineEncoder(vocab_size=50, d_model=16, heads=4, layers=2)
    ids = [torch.randint(0, 50, (2, t)) for t in (5, 7, 4)]
    hidden = enc(ids, secs)
    assert [h.shape for h in hidden] == [(2, 5, 16), (2, 7, 16), (2, 4, 16)]


def test_recurrence_equals_unrolled_computation():
    torch.manual_seed(1)
    attn = RetentiveAttention(16, heads=4)
    with torch.no_grad():
        attn.alpha.fill_(0.7)
    segs, secs = _segments(seed=2)
    for a, b in zip(attn.forward_segments(segs, secs), attn.unrolled(segs, secs)):
        assert torch.allclose(a, b, atol=1e-5)


def test_gate_closed_is_standard_attention():
    torch.manual_seed(2)
    attn = RetentiveAttention(16, heads=4)
    with torch.no_grad():
        attn.alpha.fill_(-math.inf)  # sigmoid(-inf) = 0: no memory
    segs, _ = _segments(seed=3)
    outs = attn.forward_segments(segs)  # one section per segment: rotary by section index is the identity
    for x, out in zip(segs, outs):
        b, t, d = x.shape
        q, k, v = attn.qkv(x).view(b, t, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
        ctx = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // 4), dim=-1) @ v
        ref = attn.out(ctx.transpose(1, 2).reshape(b, t, d))
        assert torch.allclose(out, ref, atol=1e-5)


def test_memory_changes_later_segments_when_gate_open():
    torch.manual_seed(3)
    attn = RetentiveAttention(16, heads=4)
    segs, secs = _segments(seed=4)
    with_memory = attn.forward_segments(segs, secs)
    alone = attn(segs[1], secs[1])[0]
    assert torch.allclose(attn(segs[0], secs[0])[0], with_memory[0], atol=1e-6)
    assert not torch.allclose(alone, with_memory[1], atol=1e-4)


# -- outline ids and aggregation ------------------------------------------------------------------------------
def outlined_books(n=6):
    books = []
    for i in range(n):
        chapters = [{"title": f"Part {c + 1}",
                     "text": f"The {NOUNS[(i + c) % 20]} travels to the {PLACES[(i * 3 + c) % 20]} on foot.",
                     "sections": [{"title": f"Scene {s + 1}", "text": f"{NOUNS[(i + c + s) % 20]} at dawn"}
                                  for s in range(2)]} for c in range(3)]
        books.append({"docno": f"o{i}", "title": f"Book {NOUNS[i].title()}", "author": "", "outline": chapters})
    return books


def test_outline_ids_extend_the_book_id():
    book = outlined_books(1)[0]
    bid = gen.book_id(book["title"])
    table = gen.outline_ids(bid, book["outline"])
    chapters, sections = table[table.level == "chapter"], table[table.level == "section"]
    assert len(chapters) == 3 and len(sections) == 6
    assert all(i.startswith(bid + " # Part ") for i in chapters["id"])
    for _, s in sections.iterrows():
        assert s["id"].startswith(chapters.iloc[s["chapter"]]["id"] + " # Scene ")
    assert table["id"].is_unique
    pairs = gen.outline_pairs(table, book["docno"])
    assert set(pairs["task"]) == {"index:chapter", "index:section"}


def test_aggregation_formulas():
    books = {"a": math.log(0.5), "b": math.log(0.25)}
    par = gen.parallel_scores(books, ["b", "b", "a", "c"])
    assert par == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.0})
    ser = gen.serial_scores(books, {"a": [math.log(0.2)], "b": [math.log(0.4), math.log(0.4)]})
    assert ser == pytest.approx({"a": 0.5 + 0.5 * 0.2, "b": 0.25 + 0.5 * 0.8})


def test_chapter_aggregation_on_outlined_books():
    books = outlined_books()
    ids = gen.book_ids(pd.DataFrame(books))
    chapters, pairs = {}, []
    for b in books:
        table = gen.outline_ids(ids[b["docno"]], b["outline"])
        table = table[table.level == "chapter"]
        chapters.update({i: b["docno"] for i in table["id"]})
        pairs.append(gen.outline_pairs(table, b["docno"]))
        pairs.append(pd.DataFrame({"source": [c["text"] for c in b["outline"]], "target": ids[b["docno"]],
                                   "task": "index:chapter-book", "docno": b["docno"]}))
    pairs = pd.concat(pairs, ignore_index=True)
    tok = gen.word_tokenizer(list(pairs["source"]) + list(pairs["target"]))
    backbone = gen.tiny_t5(tok, seed=0)
    gen.train(backbone, pairs, epochs=80, batch_size=16, lr=3e-3, verbose=False)
    queries = pd.DataFrame({"qid": [f"q{i}" for i in range(len(books))],
                            "query": [b["outline"][1]["text"] for b in books]})
    gold = {f"q{i}": b["docno"] for i, b in enumerate(books)}
    for aggregation in (None, "parallel", "serial"):
        r = gen.GenerativeRetriever(backbone, ids, num_results=3, num_beams=4, chapters=chapters,
                                    aggregation=aggregation)
        res = r(queries)
        top = res[res["rank"] == 0].set_index("qid")["docno"].to_dict()
        hits = sum(top.get(q) == d for q, d in gold.items())
        assert hits >= len(books) - 1, (aggregation, top)
        assert set(res["docno"]) <= set(ids)
    with pytest.raises(ValueError, match="chapter"):
        gen.GenerativeRetriever(backbone, ids, aggregation="serial")
