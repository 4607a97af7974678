"""The prefix trie and constrained decoding: only valid identifiers come out, whatever the query or beam."""
import random

import pandas as pd
import pytest

from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.errors import UnknownDocnoError  # noqa: E402
from pyterrier_tot.generative.decoding import constrained_search  # noqa: E402
from tests.helpers.generative_toy import NOUNS, PLACES, one_torch_thread, toy_books, toy_tokenizer  # noqa: F401 (the fixture is autouse)


def test_trie_allows_exactly_the_continuations():
    trie = gen.IdTrie([(5, 6, 2), (5, 7, 2), (8, 2)])
    assert sorted(trie.allowed(())) == [5, 8]
    assert sorted(trie.allowed((5,))) == [6, 7]
    assert trie.allowed((5, 6, 2)) == [] and trie.complete((5, 6, 2)) and not trie.complete((5, 6))
    assert trie.allowed((9,)) == [] and (9,) not in trie and (5,) in trie
    assert len(trie) == 3 and sorted(trie) == [(5, 6, 2), (5, 7, 2), (8, 2)]


@pytest.fixture(scope="module")
def untrained():
    # untrained models put their mass anywhere: the constraint alone must keep the output valid
    books = toy_books()
    tok = toy_tokenizer(books, extra=NOUNS + PLACES)
    return books, gen.book_ids(books), {"t5": gen.tiny_t5(tok, seed=3), "causal": gen.tiny_causal(tok, seed=3)}


@pytest.mark.parametrize("kind", ["t5", "causal"])
def test_constrained_decoding_never_emits_an_invalid_id(untrained, kind):
    books, ids, models = untrained
    backbone = models[kind]
    valid = {tuple(backbone.target_ids(i)) for i in ids.values()}
    trie = gen.IdTrie(valid)
    rng = random.Random(kind)
    vocab = NOUNS + PLACES + ["the", "a", "of", "zzz-unknown", "#", "."]
    for trial in range(12):
        beams = rng.choice([1, 2, 3, 5, 8, 25])  # 25 > 20 books: the beam must not pad with junk
        queries = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(1, 3))]
        sources = [backbone.source_ids(q, 32) for q in queries]
        for hits in constrained_search(backbone, sources, trie, num_beams=beams, batch_size=2):
            assert 1 <= len(hits) <= min(beams, len(valid))
            for seq, score in hits:
                assert seq in valid, f"trial {trial}: invalid id {seq}"
                assert score <= 0
            assert len({s for s, _ in hits}) == len(hits)


def test_retriever_modes_and_inputs(untrained):
    books, ids, models = untrained
    r = gen.GenerativeRetriever(models["t5"], ids, num_results=4)
    q = pd.DataFrame({"qid": ["1", "2"], "query": ["a dragon in the harbour", "x" * 5000]})
    res = r(q)
    assert set(res["qid"]) == {"1", "2"} and res.groupby("qid").size().max() <= 4
    assert set(res["docno"]) <= set(ids)
    assert res.sort_values(["qid", "rank"]).groupby("qid")["score"].apply(lambda s: s.is_monotonic_decreasing).all()
    modes = pt_modes(r)
    assert ["qid", "query"] in modes and any("docno" in m for m in modes)
    with pytest.raises(UnknownDocnoError, match="no-such"):
        r(pd.DataFrame({"qid": ["1"], "query": ["dragon"], "docno": ["no-such"]}))
    assert len(r(q.iloc[:0])) == 0
    assert "GenerativeRetriever" in repr(r)


def pt_modes(t):
    import pyterrier as pt

    return [list(m) for m in pt.inspect.transformer_inputs(t)]


def test_duplicate_titles_get_distinct_ids():
    books = pd.DataFrame({"docno": ["b", "a", "c"], "title": ["Dune", "Dune", "Emma # Two"], "author": ["", "", None]})
    ids = gen.book_ids(books)
    assert ids == {"a": "Dune", "b": "Dune # 2", "c": "Emma - Two"}
    assert gen.book_id("  The  Hobbit ", "J. R. R. Tolkien", "Allen & Unwin") == \
        "The Hobbit # J. R. R. Tolkien # Allen & Unwin"
    assert gen.book_id(None, docno="x1") == "x1"


def test_semantic_ids_are_unique_and_hierarchical():
    import numpy as np

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)) * 10
    x = np.concatenate([c + rng.normal(size=(15, 8)) for c in centres])
    docnos = [f"d{i}" for i in range(len(x))]
    sem = gen.semantic_ids(x, docnos, k=3, leaf=5)
    assert len(set(sem.values())) == len(x)
    # books from one cluster share their first digit
    for c in range(3):
        firsts = {sem[f"d{i}"].split("-")[0] for i in range(c * 15, (c + 1) * 15)}
        assert len(firsts) == 1
