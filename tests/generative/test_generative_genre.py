"""Zero-shot, title-constrained LM decoding (GENRE-style retriever, constrained TitleNamer): whatever the model or
the request, only books of the corpus come out; both modes are truthful to pt.inspect; a real local LM
(SmolLM2) runs end to end, scoring candidates on the scale it decodes on."""
import random
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.index import BookIndex  # noqa: E402
from tests.helpers.generative_toy import NOUNS, PLACES, one_torch_thread, toy_books, toy_tokenizer  # noqa: F401


def test_trie_excludes_names_already_given():
    trie = gen.IdTrie([(5, 6, 9), (5, 7, 9), (8, 9)])
    assert sorted(trie.allowed((), exclude=[(5, 6, 9)])) == [5, 8]
    assert sorted(trie.allowed((), exclude=[(5, 6, 9), (5, 7, 9)])) == [8]
    assert trie.allowed((5,), exclude=[(5, 6, 9)]) == [7]
    assert sorted(trie.allowed((), exclude=[(5, 6), (4, 4, 4)])) == [5, 8]  # not complete names: no effect
    assert trie.allowed((), exclude=[(5, 6, 9), (5, 7, 9), (8, 9)]) == []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    books = toy_books()
    books.loc[3, "title"] = books.loc[0, "title"]  # two books share a title
    index = BookIndex(books, path=tmp_path_factory.mktemp("genre") / "index")
    tok = toy_tokenizer(books, extra=NOUNS + PLACES + [";", "title", "book"])
    return books, index, gen.tiny_causal(tok, seed=5)


def _random_queries(rng, n):
    vocab = NOUNS + PLACES + ["the", "a", "of", "zzz-unknown", "#", ";", "\n"]
    return pd.DataFrame({"qid": [f"r{i}" for i in range(n)],
                         "query": [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 25))) for _ in range(n)]})


def test_genre_and_constrained_namer_only_return_corpus_books(corpus):
    books, index, lm = corpus
    rng = random.Random(7)
    docnos = set(books["docno"])
    for trial in range(4):
        k = rng.choice([1, 3, 8, 25])  # 25 > 19 distinct titles: the beam must not pad with invented ones
        genre = gen.GenerativeRetriever.genre(gen.prompted(lm), books, num_results=k, num_beams=k)
        namer = ptt.TitleNamer(lm, index, num_titles=min(k, 6), constrained=True)
        q = _random_queries(rng, 3)
        for res in (genre(q), namer(q)):
            assert set(res["docno"]) <= docnos, f"trial {trial}"
            assert not res.duplicated(["qid", "docno"]).any()
        named = namer(q)
        assert named.groupby("qid").size().max() <= min(k, 6) + 1  # + the second book of a shared title
        assert named.groupby("qid")["score"].max().le(min(k, 6)).all()


def test_shared_title_returns_both_books_with_one_score(corpus):
    books, _, lm = corpus
    genre = gen.GenerativeRetriever.genre(gen.prompted(lm), books, num_results=25, num_beams=25)
    res = genre(pd.DataFrame({"qid": ["1"], "query": ["dragon"]}))
    twins = res[res["docno"].isin(["t00", "t03"])]
    assert len(twins) == 2 and twins["score"].nunique() == 1
    with pytest.raises(ValueError, match="same tokens"):
        gen.GenerativeRetriever(gen.prompted(lm), gen.title_ids(books))


def test_modes_are_truthful_to_inspect(corpus):
    books, index, lm = corpus
    genre = gen.GenerativeRetriever.genre(gen.prompted(lm), books, num_results=3)
    namer = ptt.TitleNamer(lm, index, num_titles=3, constrained=True)
    q = pd.DataFrame({"qid": ["1"], "query": ["a dragon near the harbour"]})
    cands = pd.DataFrame({"qid": ["1", "1"], "query": ["a dragon"] * 2, "docno": ["t01", "t02"]})
    for t in (genre, namer):
        modes = [sorted(m) for m in pt.inspect.transformer_inputs(t)]
        assert sorted(["qid", "query"]) in modes and sorted(["qid", "query", "docno"]) in modes
        assert {"docno", "score", "rank"} <= set(t(q).columns)
        scored = t(cands)
        assert len(scored) == 2 and set(scored["docno"]) == {"t01", "t02"}
        assert len(t(q.iloc[:0])) == 0
    assert "constrained=True" in repr(namer)
    with pytest.raises(ValueError, match="no trained weights"):
        genre.save(Path("unused"))


def test_constrained_mode_needs_an_in_process_lm(corpus):
    _, index, _ = corpus
    from tests.helpers.openai_stub import OpenAIStub, stub_llm

    with OpenAIStub(lambda m: "x") as stub:
        with pytest.raises(TypeError, match="in process"):
            ptt.TitleNamer(stub_llm(stub, None), index, constrained=True)


@pytest.fixture(scope="module")
def smollm2():
    try:
        return gen.smollm2()
    except Exception as exc:  # pragma: no cover - the offline model package is missing
        pytest.skip(f"SmolLM2 unavailable: {exc}")


def test_smollm2_names_only_corpus_titles_and_scores_on_its_scale(smollm2, tmp_path):
    books = pd.DataFrame([
        {"docno": "w", "title": "Charlotte's Web", "text": "A pig is saved by a clever spider."},
        {"docno": "h", "title": "The Hobbit", "text": "A hobbit goes on a journey with dwarves."},
        {"docno": "p", "title": "Harry Potter and the Philosopher's Stone", "text": "A boy learns he is a wizard."},
        {"docno": "m", "title": "Matilda", "text": "A girl with telekinetic powers and a cruel headmistress."},
        {"docno": "x", "title": "Zqx Vlorp", "text": "A title no model has seen."},
    ])
    q = pd.DataFrame({"qid": ["1", "2"], "query": ["a spider writes words in her web to save a pig on a farm",
                                                 "a boy wizard with a scar goes to a school of magic"]})
    genre = gen.GenerativeRetriever.genre(gen.prompted(smollm2), books, num_results=5)
    res = genre(q)
    assert set(res["docno"]) <= set(books["docno"]) and res.groupby("qid").size().min() >= 1
    rescored = genre(res[["qid", "query", "docno"]])
    merged = res.merge(rescored, on=["qid", "docno"], suffixes=("", "_tf"))
    assert merged["score"].tolist() == pytest.approx(merged["score_tf"].tolist(), abs=1e-3)
    namer = ptt.TitleNamer(smollm2, BookIndex(books, path=tmp_path / "ix"), num_titles=3, constrained=True)
    named = namer(q)
    assert set(named["docno"]) <= set(books["docno"]) and not named.duplicated(["qid", "docno"]).any()
    assert namer.named >= 1 and namer.unmatched == 0
