"""The CLARINET generator: which questions are kept from training games (stub LLM), and (slow) a one-step
fine-tune of SmolLM2 that answers like an LLM, from its cache the second time."""
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import ClarificationGame, Clarifier, ExplicitPosterior, UserSimulator  # noqa: E402
from pyterrier_tot.clarinet.generator import QuestionGenerator, collect_questions, rank_gain, train_generator  # noqa: E402,E501
from tests.helpers.books import TINY_BOOKS
from tests.helpers.clarinet_script import QRELS, TOPICS, responder
from tests.helpers.openai_stub import OpenAIStub, stub_llm


def test_collect_questions_scores_every_pool_question(tmp_path):
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    with OpenAIStub(responder) as stub:
        llm = stub_llm(stub, tmp_path / "llm.sqlite3")
        game = ClarificationGame(index.bm25(num_results=6), Clarifier(llm, index, pool_size=3),
                                 UserSimulator(llm, index), QRELS, turns=1,
                                 posterior=ExplicitPosterior(index.dense_scorer(), tau=0.1), k=6, verbose=False)
        kept = collect_questions(game, TOPICS, top=1, gain=10)
    assert len(kept) == 6 and set(kept["qid"]) == {"q1", "q2"} and (kept["turn"] == 1).all()
    assert kept["rank_before"].between(1, 6).all() and kept["rank_after"].between(1, 6).all()
    assert (kept["keep"] == (kept["rank_after"] == 1)).all()  # in six books no rank can rise by ten
    assert kept["prompt"].str.contains("Request:").all()
    summary = rank_gain(kept)
    assert summary["questions"] == 6 and summary["kept"] == int(kept["keep"].sum())


@pytest.mark.slow
def test_a_one_step_generator_trains_saves_and_answers_from_its_cache(tmp_path):
    pytest.importorskip("gguf")
    pairs = pd.DataFrame({"prompt": ["Request: a boy and a dragon\n\nLikeliest books:\n(none yet)\n\n"
                                     "Questions already asked:\n(none)"] * 2,
                          "question": ["Was the dragon friendly?", "Did the boy live in a village?"],
                          "keep": [True, True]})
    path = train_generator(pairs, tmp_path / "gen", steps=1, batch_size=2, verbose=False)
    gen = QuestionGenerator(path, cache=tmp_path / "gen.sqlite3")
    assert gen.meta()["type"] == "clarinet_generator" and gen.meta()["n_pairs"] == 2
    assert (Path(path) / "model.safetensors").is_file()
    messages = Clarifier(gen, pool_size=1).messages(pairs["prompt"][0])
    first = gen.chat_many([messages])
    assert first[0].strip() and gen.calls == 1
    assert gen.chat_many([messages]) == first and gen.calls == 1 and gen.cache_hits == 1


def test_a_generator_folder_is_reused_only_for_its_own_pairs_and_settings(tmp_path, monkeypatch):
    """A folder holding a generator trained on other pairs or with other settings is refused, never handed back
    as if it were the one asked for; the same pairs and settings get it back without training."""
    import json

    import pyterrier_tot.clarinet.generator as g

    pairs = pd.DataFrame({"prompt": ["Request: a boy and a dragon"] * 2,
                          "question": ["Was the dragon friendly?", "Did the boy live in a village?"]})
    monkeypatch.setattr(g, "_load_base", lambda: pytest.fail("trained again"))
    folder = tmp_path / "gen"
    folder.mkdir()
    settings = {"type": "clarinet_generator", "format": "hf", "n_pairs": 2, "steps": 12, "batch_size": 4,
                "lr": 5e-5, "max_len": 640, "seed": 0}

    def holding(**meta):
        (folder / "pt_meta.json").write_text(json.dumps({**settings, **meta}))

    holding(pairs=g.pairs_digest(g.training_pairs(pairs)))
    assert train_generator(pairs, folder, verbose=False) == str(folder)
    holding()  # recorded before the pairs were: its settings agree
    assert train_generator(pairs, folder, verbose=False) == str(folder)
    with pytest.raises(ValueError, match="differing: steps"):
        train_generator(pairs, folder, steps=3, verbose=False)
    holding(pairs=g.pairs_digest(g.training_pairs(pairs)))
    other = pairs.assign(question=["Was it a red dragon?", "Did the boy live in a village?"])
    with pytest.raises(ValueError, match="differing: pairs"):
        train_generator(other, folder, verbose=False)
