"""The four defects that made clarification questions hurt, each pinned by a test that failed on the old code:
(a) the explicit posterior read "I don't remember." and "No." as evidence for what the question named, at a
temperature as sharp as the whole request; (b) the language posterior replaced the request by default; (c) the
leak check took every capitalised word for a character name and garbled answers by redaction; (d) the generator
kept rank-lowering questions and few-shot copies, and cut its training prompts from the left."""

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import (  # noqa: E402
    ClarificationGame,
    Clarifier,
    ConstantUser,
    ExplicitPosterior,
    FirstSelection,
    LanguagePosterior,
    NameStats,
    forbidden,
    leaked,
    read_answer,
    turn_table,
)
from pyterrier_tot.clarinet.generator import generator_prompt, keep_question, training_pairs  # noqa: E402
from pyterrier_tot.clarinet.posterior import DEFAULT_TAU  # noqa: E402
from pyterrier_tot.clarinet.questions import few_shot_questions  # noqa: E402
from tests.helpers.books import TINY_BOOKS
from tests.helpers.openai_stub import OpenAIStub, stub_llm

TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["a boy and a big flying lizard, read it in school",
                                                       "scary night in an old tower by the sea"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b2", "b5"], "label": [1, 1]})
DOCNOS = [b["docno"] for b in TINY_BOOKS]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("defects") / "index")


# -- (a) the explicit posterior -------------------------------------------------------------------------------------
def test_answers_are_read_as_null_negative_or_positive():
    assert read_answer("Was there a dragon?", "I don't remember.").kind == "null"
    assert read_answer("Was there a dragon?", "Hmm, not sure.").kind == "null"
    assert read_answer("Was there a dragon?", "No.") == ("negative", "Was there a dragon?")
    assert read_answer("Was there a dragon?", "No, there was no dragon at all.").kind == "negative"
    assert read_answer("Was there a dragon?", "Yes, I think so.") == ("positive", "Was there a dragon?")
    assert read_answer("Where was it set?", "No, it was set in a city.") == ("positive", "it was set in a city")
    assert read_answer("Where was it set?", "In London.") == ("positive", "Where was it set? In London.")


def test_i_dont_remember_and_no_leave_the_explicit_belief_alone(index):
    post = ExplicitPosterior(index.dense_scorer())
    prior = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    for answer in ("I don't remember.", "No.", "Not that I remember."):
        # the old likelihood, exp(s("Was there a dragon? No.", y) / 0.05), pushed the dragon book b2 up
        assert np.allclose(post.update("q", DOCNOS, prior, "Was there a dragon?", answer), prior)
    inverted = ExplicitPosterior(index.dense_scorer(), negative="invert")
    after = inverted.update("q", DOCNOS, prior, "Was there a dragon?", "No.")
    assert after[1] < prior[1] and (after / prior).argmin() == 1  # the dragon book loses most
    yes = post.update("q", DOCNOS, prior, "Was there a dragon?", "Yes, a dragon.")
    assert (yes / prior).argmax() == 1  # a real answer still moves the belief the right way


def test_the_answer_temperature_is_a_parameter_with_a_tuned_default(index):
    scorer = index.dense_scorer()
    assert ExplicitPosterior(scorer).tau == DEFAULT_TAU != 0.05
    prior = np.full(6, 1 / 6)
    sharp = ExplicitPosterior(scorer, tau=0.05).update("q", DOCNOS, prior, "Was there a dragon?", "Yes.")
    soft = ExplicitPosterior(scorer).update("q", DOCNOS, prior, "Was there a dragon?", "Yes.")
    assert sharp.max() > soft.max() > 1 / 6  # one short answer no longer weighs like a whole request
    with pytest.raises(ValueError, match="temperature"):
        ExplicitPosterior(scorer, tau=0)


@pytest.mark.parametrize("answer", ["I don't remember.", "No."])
def test_uninformative_answers_do_not_lower_mrr_in_a_game(index, answer):
    for posterior in (LanguagePosterior(), ExplicitPosterior(index.dense_scorer())):
        clarifier = Clarifier(None, index, pool=["Was there a dragon?", "Was it scary?", "Was there a horse?"],
                              selection=FirstSelection())
        game = ClarificationGame(index.bm25(num_results=6), clarifier, ConstantUser(answer), QRELS, turns=3,
                                 posterior=posterior, k=6, verbose=False)
        table = turn_table({"x": game}, TOPICS, QRELS)
        assert np.allclose(table["MRR"], table["MRR"].iloc[0]), (posterior, table)


# -- (b) the language posterior ---------------------------------------------------------------------------------------
def test_the_language_posterior_conditions_on_the_request_by_default():
    frame = TOPICS.assign(history=[[("Was there a dragon?", "Yes, a red one.")], [("Was it scary?", "No idea.")]])
    out = LanguagePosterior()(frame)  # no LLM: the informative answers, then the whole request
    assert out.loc[0, "query"] == f"Was there a dragon? Yes, a red one. {TOPICS.loc[0, 'query']}"
    assert out.loc[1, "query"] == TOPICS.loc[1, "query"]  # "No idea." adds nothing
    appended = LanguagePosterior(combine="append")(frame)
    assert appended.loc[0, "query"] == f"{TOPICS.loc[0, 'query']} Was there a dragon? Yes, a red one."
    with OpenAIStub(lambda m: "A fantasy about a red dragon.") as stub:
        llm = stub_llm(stub, False)
        out = LanguagePosterior(llm)(frame)
        assert out.loc[0, "query"] == f"A fantasy about a red dragon. {TOPICS.loc[0, 'query']}"
        assert stub.requests == 1  # the row with only a null answer costs no call
        assert LanguagePosterior(llm, combine="replace")(frame).loc[0, "query"] == "A fantasy about a red dragon."


# -- (c) the leak check ------------------------------------------------------------------------------------------------
def test_places_and_common_capitalised_words_are_not_names():
    description = ("Tom grows up in London. Tom's School is in a Victorian house full of Magic. In London he meets "
                   "Ada Black.")
    corpus = [description, "a school of magic", "magic at school", "london fog"] + [f"London {i}" for i in range(7)]
    stats = NameStats(corpus)
    names = forbidden("The Clockwork Boy", description, stats=stats)
    assert "tom" in names and "clockwork boy" in names
    for text in ("Was it set in London?", "Was it a Victorian boarding School?", "Was there Magic?"):
        assert not leaked(text, names), text  # the old check flagged London, Victorian, School and Magic
    assert not leaked("Was Ada in it?", names)  # named once: not a frequent name of the book
    assert leaked("Was the boy called Tom?", names) == ["tom"]


def test_a_leaking_question_is_dropped_and_set_in_london_passes(index):
    with OpenAIStub(lambda m: "Was it set in London?\nWas the blacksmith's dragon red?\nIs it Dragons of the Red "
                              "Moon?") as stub:
        clarifier = Clarifier(stub_llm(stub, False), index, retriever=index.bm25(num_results=3), pool_size=3)
        _, pools, _ = clarifier.ask(TOPICS.head(1))
    assert "Was it set in London?" in pools[0] and not any("Red Moon" in q for q in pools[0])


# -- (d) the generator ------------------------------------------------------------------------------------------------
def test_a_question_that_lowered_the_book_is_never_kept():
    assert not keep_question(1, 9)  # the old rule kept it: rank 9 is in the top 10
    assert keep_question(30, 15) and keep_question(12, 10) and keep_question(1, 1) and not keep_question(40, 35)
    pairs = pd.DataFrame({"prompt": ["p"] * 3, "question": ["Was the woman the one telling the story?",
                                                             "Was there a dragon?", "Did it rain?"],
                          "rank_before": [5, 5, 1], "rank_after": [1, 1, 9], "keep": [True, True, False]})
    kept = training_pairs(pairs)
    assert kept["question"].tolist() == ["Was there a dragon?"]  # the few-shot example is no target either


def test_few_shot_examples_never_enter_a_pool(index):
    example = few_shot_questions(ptt.load_prompt("clarinet_question"))[0]
    with OpenAIStub(lambda m: f"{example}\nWas there a dragon?") as stub:
        clarifier = Clarifier(stub_llm(stub, False), index, pool_size=2, min_pool=1)
        _, pools, _ = clarifier.ask(TOPICS.head(1))
    assert pools[0] == ["Was there a dragon?"] and clarifier.copied == 1


class WordTokenizer:
    """A whitespace tokenizer with a chat template, enough to check how prompts are built and cut."""
    eos_token, pad_token_id, eos_token_id = "</s>", 0, 0

    def __init__(self):
        self.vocab, self.inv = {}, {}

    def __call__(self, text, add_special_tokens=False, return_tensors=None):
        ids = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab) + 1
                self.inv[self.vocab[w]] = w
            ids.append(self.vocab[w])
        if return_tensors == "pt":
            import torch
            return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(self.inv.get(int(i), "?") for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages) + " <assistant>"


def test_training_and_inference_prompts_are_built_alike_and_keep_the_system_message_and_request(tmp_path):
    import torch

    from pyterrier_tot._plumbing.artifact import write_meta
    from pyterrier_tot.clarinet.generator import QuestionGenerator

    tok = WordTokenizer()
    text = ("Request: " + "long " * 400 + "request\n\nLikeliest books:\n(none yet)\n\n"
            "Questions already asked:\nQ: Was it old?\nA: yes")
    prompt = generator_prompt(tok, text, max_len=200)
    words = prompt.split()
    assert len(words) <= 200 - 48 and words[:3] == ["<system>", "You", "are"]  # the old code cut these away
    assert "Request:" in words and "Was" in words and "old?" in words
    write_meta(tmp_path, "clarinet_generator", "transformers", max_len=200)
    gen = QuestionGenerator(tmp_path, cache=False)
    seen = []

    class Model:
        def generate(self, input_ids, **_):
            seen.append(tok.decode(input_ids[0]))
            return torch.cat([input_ids, torch.tensor([[tok("Was it red?")["input_ids"][0]]])], dim=1)

    gen._tok, gen._model = tok, Model()
    gen.chat_many([Clarifier(gen, pool_size=1).messages(text)])
    assert seen == [prompt]  # what the generator saw at inference is what it was trained on
