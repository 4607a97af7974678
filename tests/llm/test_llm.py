"""The LLM layer against a scripted OpenAI-compatible stub server: retries, faults, cache, resume after kill -9,
the clue decomposer (extractive / predictive, per-field / joint) and the rewriting baselines."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer, clean_answer, groundedness, parse_joint
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, CLUE_FIELDS, YEAR_COLUMN
from pyterrier_tot.llm.cache import LLMCache, request_key
from pyterrier_tot.llm.client import LLM, LLMConfigurationError, LLMUsage
from pyterrier_tot.llm.templates import Prompt, available_prompts, load_prompt
from pyterrier_tot.query.rewriters import ClueConcatenator, HyDE, LLMQueryRewriter
from tests.helpers.llm_script import PROMPT_KIND, TOPICS, TRUTH, make_llm, responder
from tests.helpers.openai_stub import OpenAIStub


# -- prompts ----------------------------------------------------------------------------------------------------
def test_every_packaged_prompt_parses():
    names = available_prompts()
    for mode in ("extractive", "predictive"):
        assert f"joint_{mode}" in names
        for f in CLUE_FIELDS:
            assert f"{mode}_{f}" in names
    for name in names:
        p = load_prompt(name)
        msgs = p.messages("a {curly} query")
        assert msgs[0]["role"] == "system" and msgs[-1]["role"] == "user"
        assert msgs[-1]["content"].endswith("a {curly} query")
        assert len(msgs) >= 5, f"{name} should carry few-shot examples"


def test_prompt_dir_overrides_and_bad_prompt(tmp_path):
    (tmp_path / "rewrite.txt").write_text("[system]\nBe brief.\n[user]\nQ: {query}\n")
    p = load_prompt("rewrite", tmp_path)
    assert p.messages("x")[-1]["content"] == "Q: x"
    assert p.version != load_prompt("rewrite").version
    with pytest.raises(ValueError, match="must end with a \\[user\\]"):
        Prompt("bad", "[system]\nno placeholder\n")


# -- parsing and grounding ----------------------------------------------------------------------------------------
def test_clean_answer_and_na_spellings():
    for na in ["N/A", "n/a.", " NA ", "None", "Not mentioned.", "'N/A'", "Cover clue: N/A", ""]:
        assert clean_answer(na) is None, na
    assert clean_answer('Title: "The Red Moon"') == "The Red Moon"
    assert clean_answer("The Red Moon\nblah blah more text", field="title") == "The Red Moon"
    assert clean_answer("para one\nline two\n\npara two", field="plot") == "para one\nline two"
    assert clean_answer(["fantasy", "N/A", "young adult"]) == "fantasy, young adult"


def test_parse_joint_variants():
    ok = parse_joint('Here you go:\n```json\n{"title": "Moon", "author": "N/A", "genres": ["a", "b"]}\n```')
    assert ok["title"] == "Moon" and ok["author"] is None and ok["genre"] == "a, b" and ok["plot"] is None
    broken = parse_joint('{"title": "Moon River", "date": "around 1999", "plot": "a fox who')  # truncated
    assert broken["title"] == "Moon River" and broken["date"] == "around 1999"
    assert parse_joint("I am sorry, I cannot do that.") is None
    assert parse_joint('{"scene": "x", "mood": "y"}') is None
    assert parse_joint("{'title': 'Single quotes'}")["title"] == "Single quotes"


def test_groundedness():
    q = "I think the cover was bright yellow with a fox, read it in the late 90s"
    assert groundedness("bright yellow with a fox", q) == 1.0
    assert groundedness("brigth yelow with a fox", q) == 1.0  # typos still match
    assert groundedness("Herman Melville", q) == 0.0
    assert 0 < groundedness("a yellow submarine", q) < 1


# -- LLM backend ------------------------------------------------------------------------------------------------
def test_chat_usage_cache_and_repr(tmp_path):
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path)
        msgs = load_prompt("rewrite").messages("a fox in a boat")
        assert llm.chat(msgs) == "REWRITTEN a fox in a boat"
        assert llm.usage.calls == 1 and llm.usage.completion_tokens == 6 and llm.usage.prompt_tokens > 0
        assert llm.chat(msgs) == "REWRITTEN a fox in a boat"
        assert stub.requests == 1 and llm.usage.cache_hits == 1 and llm.usage.requests == 2
        llm.chat(msgs, temperature=0.7)  # other sampling parameters: another cache entry
        assert stub.requests == 2
    assert "SECRET" not in repr(llm) and "stub" in repr(llm)
    assert b"SECRET" not in (tmp_path / "cache.sqlite3").read_bytes()
    assert stub.api_keys == {"Bearer sk-test-SECRET-42"}  # the key went to the server, and only there
    old = llm.reset_usage()
    assert isinstance(old, LLMUsage) and old.requests == 3 and llm.usage.requests == 0


def test_request_key_covers_model_messages_params_version():
    m = [{"role": "user", "content": "x"}]
    base = request_key("a", m, {"temperature": 0}, "v1")
    assert base == request_key("a", m, {"temperature": 0}, "v1")
    assert len({base, request_key("b", m, {"temperature": 0}, "v1"),
                request_key("a", [{"role": "user", "content": "y"}], {"temperature": 0}, "v1"),
                request_key("a", m, {"temperature": 1}, "v1"), request_key("a", m, {"temperature": 0}, "v2")}) == 5


def test_cache_identity_is_the_model_file_not_the_alias(tmp_path, monkeypatch):
    """Issue 22.1: two GGUF files served under the same alias never share answers; the same file on another
    port does."""
    from pyterrier_tot.llm.identity import gguf_identity
    from pyterrier_tot.llm.llama_server import LlamaServer

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    a, b = tmp_path / "a.gguf", tmp_path / "other.gguf"
    a.write_bytes(b"GGUF" + b"\x01" * 64)
    b.write_bytes(b"GGUF" + b"\x02" * 64)
    assert gguf_identity(a) == gguf_identity(a) != gguf_identity(b)
    assert LlamaServer(a).identity.startswith("gguf:a.gguf:sha256:")
    msgs = load_prompt("rewrite").messages("a fox in a boat")
    with OpenAIStub(responder) as stub:
        port = int(stub.base_url.rsplit(":", 1)[1].split("/")[0])
        first = LlamaServer(a, port=port).llm(cache=tmp_path / "llm.sqlite3", verbose=False)
        first.chat(msgs)
        other = LlamaServer(b, port=port).llm(cache=tmp_path / "llm.sqlite3", verbose=False)
        other.chat(msgs)
        assert (other.usage.calls, other.usage.cache_hits) == (1, 0) and stub.requests == 2
        again = LlamaServer(a, port=port).llm(cache=tmp_path / "llm.sqlite3", verbose=False)
        again.chat(msgs)
        assert (again.usage.calls, again.usage.cache_hits) == (0, 1)
    # the same file served on another port finds its answers (the port is not part of its identity)
    moved = LlamaServer(a, port=9).llm(cache=tmp_path / "llm.sqlite3", verbose=False)
    assert moved.chat(msgs) == "REWRITTEN a fox in a boat" and moved.usage.calls == 0


def test_cache_identity_of_a_remote_model_holds_its_endpoint(tmp_path):
    """Issue 22.1: an answer cached from one endpoint is not served for a dead one (which fails loudly)."""
    from pyterrier_tot.llm.endpoint import default_identity

    msgs = load_prompt("rewrite").messages("a fox in a boat")
    with OpenAIStub(responder) as stub:
        live = LLM(model="local", base_url=stub.base_url, cache=tmp_path / "c.sqlite3", verbose=False)
        live.chat(msgs)
    dead = LLM(model="local", base_url="http://127.0.0.1:9/v1", cache=tmp_path / "c.sqlite3", verbose=False)
    with pytest.raises(LLMConfigurationError, match="cannot reach"):
        dead.chat(msgs)
    assert dead.usage.cache_hits == 0
    assert default_identity("m", "HTTP://Host:8/v1/") == "m@http://host:8/v1"
    assert default_identity("gpt-4o-mini", None) == "gpt-4o-mini@https://api.openai.com/v1"
    assert "pw" not in default_identity("m", "http://user:pw@host/v1")
    pinned = LLM(model="local", base_url="http://127.0.0.1:9/v1", identity="snapshot-1", cache=False)
    assert pinned.identity == "snapshot-1"
    with pytest.raises(ValueError, match="identity"):
        LLM(model="local", base_url="http://127.0.0.1:9/v1", identity="  ", cache=False)


def test_configuration_errors_are_loud_and_fast(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTERRIER_TOT_LLM_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMConfigurationError, match="model"):
        LLM(cache=False)
    with pytest.raises(LLMConfigurationError, match="API key"):
        LLM(model="gpt-x", cache=False)
    with OpenAIStub(responder, status=401) as stub:
        llm = make_llm(stub, tmp_path)
        t0 = time.time()
        with pytest.raises(LLMConfigurationError, match="refused"):
            ClueDecomposer(llm, strategy="joint")(TOPICS.head(2))
        assert time.time() - t0 < 5 and stub.requests <= 4


def test_environment_variables(tmp_path, monkeypatch):
    with OpenAIStub(responder) as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        monkeypatch.setenv("PYTERRIER_TOT_LLM_MODEL", "stub-env")
        llm = LLM(cache=False, verbose=False)
        assert llm.model == "stub-env" and llm.base_url == stub.base_url
        assert llm.chat(load_prompt("rewrite").messages("owl")) == "REWRITTEN owl"


def test_concurrency_is_bounded(tmp_path):
    with OpenAIStub(responder, delay=0.05) as stub:
        llm = make_llm(stub, tmp_path, concurrency=3)
        ClueDecomposer(llm, "extractive", "per_field")(TOPICS.head(6))
    assert 1 < stub.max_in_flight <= 3
    assert stub.requests == 36


# -- decomposer --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["per_field", "joint"])
def test_extractive_clues_and_grounding(tmp_path, strategy):
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path)
        dec = ClueDecomposer(llm, "extractive", strategy)
        out = dec(TOPICS)
    assert stub.requests == len(TOPICS) * (6 if strategy == "per_field" else 1)
    assert list(out["qid"]) == list(TOPICS["qid"]) and "query" in out
    for col in CLUE_COLUMNS:
        assert col in out
    row = out.iloc[0]
    assert row["clue_title"] == "the title had the word Moon in it"
    assert row["clue_date"] == "around 1990" and row[YEAR_COLUMN] == 1990
    assert row["clue_author"] is None  # the model said N/A
    assert out[YEAR_COLUMN].dtype == "Int64"
    # the hallucinated author of every fifth query is dropped by the span check and counted
    assert out["clue_author"].isna().all()
    assert dec.stats["author"]["ungrounded"] == len(TOPICS) // 5
    assert dec.stats["plot"]["found"] == len(TOPICS) and dec.stats["genre"]["found"] == len(TOPICS[::3])
    frame = dec.stats_frame()
    assert frame.loc["plot", "pct_not_na"] == 100.0
    assert "strategy=" in repr(dec) and "extractive" in repr(dec)


def test_predictive_keeps_guesses(tmp_path):
    with OpenAIStub(responder) as stub:
        out = ClueDecomposer(make_llm(stub, tmp_path), "predictive", "joint")(TOPICS)
    assert (out["clue_author"] == "Herman Melville").sum() == len(TOPICS) // 5


def test_predictive_clues_that_copy_the_prompt_or_repeat_become_na(tmp_path):
    """Issue 22.7: SmolLM2 answered the prompt's own few-shot genre and author for most queries, and stats_frame()
    still reported 100% not-N/A."""
    example_genre = load_prompt("predictive_genre").example_answers()[0]
    topics = TOPICS.head(6).copy()
    topics.loc[5, "query"] = "A fantasy adventure about magic for children's book club readers, fantasy all along."

    def copier(messages):
        kind, query = PROMPT_KIND[messages[0]["content"]], messages[-1]["content"].removeprefix("Request: ")
        if kind == "genre":
            return "horror" if query == topics.loc[4, "query"] else example_genre
        return "Margaret Atwood" if query == topics.loc[0, "query"] else "Stephen King"

    with OpenAIStub(copier) as stub:
        dec = ClueDecomposer(make_llm(stub, tmp_path), "predictive", "per_field", fields=["genre", "author"])
        with pytest.warns(UserWarning, match="copied a few-shot example"):
            out = dec(topics)
    assert out["clue_genre"].tolist() == [None, None, None, None, "horror", example_genre]  # the last is grounded
    assert out["clue_author"].tolist() == ["Margaret Atwood"] + [None] * 5  # one author for 5 of 6 queries
    st = dec.stats_frame()
    assert st.loc["genre", "copied"] == 4 and st.loc["author", "repeated"] == 5
    assert st.loc["genre", "pct_not_na"] == pytest.approx(100 * 2 / 6)
    assert st.loc["author", "pct_not_na"] == pytest.approx(100 / 6)
    with OpenAIStub(copier) as stub:  # below the batch size the repeat check needs, a repeated answer stays
        few = ClueDecomposer(make_llm(stub, tmp_path, "c2.sqlite3"), "predictive", "per_field", fields=["author"])
        assert few(topics.head(3))["clue_author"].tolist() == ["Margaret Atwood", "Stephen King", "Stephen King"]
        assert ClueDecomposer(make_llm(stub, tmp_path, "c3.sqlite3"), "predictive", "per_field", fields=["author"],
                              max_repeat_share=None)(topics)["clue_author"].notna().all()
    with pytest.raises(ValueError, match="max_repeat_share"):
        ClueDecomposer(None, "predictive", max_repeat_share=1.5)


def test_reference_year_column_and_relative_dates(tmp_path):
    def years(messages):
        return json.dumps({"date": "about 15 years ago", "plot": "a fox"})
    topics = pd.DataFrame({"qid": ["a", "b"], "query": ["read it about 15 years ago, a fox"] * 2,
                           "asked": [2020, 2010]})
    with OpenAIStub(years) as stub:
        out = ClueDecomposer(make_llm(stub, tmp_path), strategy="joint", reference_year="asked")(topics)
        assert list(out[YEAR_COLUMN]) == [2005, 1995]
        with pytest.raises(KeyError, match="nope"):
            ClueDecomposer(make_llm(stub, tmp_path), strategy="joint", reference_year="nope")(topics)


def test_bad_input_and_empty_frames(tmp_path):
    with OpenAIStub(responder) as stub:
        dec = ClueDecomposer(make_llm(stub, tmp_path), strategy="joint")
        with pytest.raises(KeyError, match="query"):
            dec(pd.DataFrame({"qid": ["1"], "text": ["x"]}))
        with pytest.raises(ValueError, match="empty 'query'"):
            dec(pd.DataFrame({"qid": ["1", "2"], "query": ["fine", "  "]}))
        empty = dec(pd.DataFrame({"qid": pd.Series(dtype=str), "query": pd.Series(dtype=str)}))
        assert len(empty) == 0 and "clue_plot" in empty
        assert stub.requests == 0
    with pytest.raises(ValueError, match="mode"):
        ClueDecomposer(None, mode="creative")
    with pytest.raises(ValueError, match="strategy"):
        ClueDecomposer(None, strategy="both")
    with pytest.raises(ValueError, match="unknown clue field"):
        ClueDecomposer(None, fields=["isbn"])


@pytest.mark.parametrize("strategy", ["per_field", "joint"])
def test_faults_are_retried_and_results_equal_a_clean_run(tmp_path, strategy):
    with OpenAIStub(responder) as clean:
        expected = ClueDecomposer(make_llm(clean, tmp_path, "clean.sqlite3"), "extractive", strategy)(TOPICS)
    with OpenAIStub(responder, fault_rate=0.3, seed=7, slow_seconds=1.5) as faulty:
        llm = make_llm(faulty, tmp_path, "faulty.sqlite3", timeout=0.5, backoff=0.01, max_backoff=0.05,
                       max_retries=10)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no query may fail once retried
            got = ClueDecomposer(llm, "extractive", strategy)(TOPICS)
    assert all(faulty.faults_served[f] > 0 for f in ("timeout", "429", "500", "malformed")), faulty.faults_served
    assert llm.usage.retries == sum(faulty.faults_served.values()) and llm.usage.failures == 0
    pd.testing.assert_frame_equal(got, expected)


def test_persistent_failures_become_na_with_warning_and_counter(tmp_path):
    topics = TOPICS.head(6).copy()
    topics.loc[2, "query"] = "garbage request about a heron"
    poison = topics.loc[4, "query"]
    with OpenAIStub(responder, always_fail=lambda m: m[-1]["content"].endswith(poison)) as stub:
        # one identity for both servers: the healed one stands for the same model restarted elsewhere
        llm = make_llm(stub, tmp_path, max_retries=2, backoff=0.01, identity="stub-model")
        dec = ClueDecomposer(llm, "extractive", "joint")
        with pytest.warns(UserWarning, match="failed"):
            out = dec(topics)
    assert list(out["qid"]) == list(topics["qid"])  # no query lost
    assert out.loc[4, list(CLUE_COLUMNS)].isna().all() and out.loc[2, list(CLUE_COLUMNS)].isna().all()
    assert out.loc[0, "clue_plot"] is not None
    assert dec.stats["plot"]["failed"] == 1 and dec.stats["plot"]["unparsable"] == 1
    assert llm.usage.failures == 1 and llm.usage.retries == 2
    # failures are not cached: the next run asks again (and only for those)
    before = stub.requests
    with OpenAIStub(responder) as healed:
        llm2 = LLM(model="stub", base_url=healed.base_url, api_key="k", cache=tmp_path / "cache.sqlite3", verbose=False,
                   identity="stub-model")
        out2 = ClueDecomposer(llm2, "extractive", "joint")(topics)
    assert healed.requests == 1 and before > 0
    assert out2.loc[4, "clue_plot"] is not None


def test_repeated_experiment_makes_zero_calls(tmp_path):
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path)
        first = ClueDecomposer(llm, "predictive", "per_field")(TOPICS)
        n = stub.requests
        llm.reset_usage()
        again = ClueDecomposer(make_llm(stub, tmp_path), "predictive", "per_field")(TOPICS)
    assert stub.requests == n
    pd.testing.assert_frame_equal(first, again)


_KILL_SCRIPT = textwrap.dedent("""
    import sys
    import pandas as pd
    from pyterrier_tot.llm.client import LLM
    from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer
    base_url, cache, qfile = sys.argv[1:4]
    topics = pd.read_json(qfile, orient="records", dtype={"qid": str})
    llm = LLM(model="stub", base_url=base_url, api_key="sk-test", cache=cache, concurrency=1, verbose=False)
    ClueDecomposer(llm, "extractive", "per_field")(topics)
    print("finished")
""")


def test_kill_9_mid_run_resumes_from_cache(tmp_path):
    script, qfile, cache = tmp_path / "run.py", tmp_path / "topics.json", tmp_path / "kill.sqlite3"
    script.write_text(_KILL_SCRIPT)
    TOPICS.to_json(qfile, orient="records")
    total = len(TOPICS) * 6
    with OpenAIStub(responder) as clean:
        expected = ClueDecomposer(make_llm(clean, tmp_path, "ref.sqlite3"), "extractive", "per_field")(TOPICS)
    with OpenAIStub(responder, delay=0.05) as stub:
        proc = subprocess.Popen([sys.executable, str(script), stub.base_url, str(cache), str(qfile)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while stub.answered < 30 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        answered_before_kill, requests_before_kill = stub.answered, stub.requests
        stub.delay = 0.0   # slow answers were only there to kill the run midway
        kept = len(LLMCache(cache))
        # every answer the client got was stored (the last one may have been in flight when it died)
        assert answered_before_kill - 1 <= kept <= answered_before_kill < total and kept >= 25
        llm = LLM(model="stub", base_url=stub.base_url, api_key="sk-test", cache=cache, concurrency=1, verbose=False)
        resumed = ClueDecomposer(llm, "extractive", "per_field")(TOPICS)
        # only the missing answers were asked: no request at all repeats a finished one
        assert stub.requests - requests_before_kill == stub.answered - answered_before_kill == total - kept
        assert llm.usage.cache_hits == kept
    pd.testing.assert_frame_equal(resumed, expected)


# -- rewriting baselines -----------------------------------------------------------------------------------------
def test_llm_rewriter_and_hyde_push_queries(tmp_path):
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path)
        out = LLMQueryRewriter(llm)(TOPICS.head(3))
        assert list(out["query_0"]) == list(TOPICS.head(3)["query"])
        assert out["query"].str.startswith("REWRITTEN I read a").all()
        hy = HyDE(llm, combine="append")(TOPICS.head(2))
        assert hy.loc[0, "query"].startswith(TOPICS.loc[0, "query"]) and "A story about" in hy.loc[0, "query"]
        assert HyDE(llm)(TOPICS.head(1)).loc[0, "query"].startswith("A story about")
        assert "rewrite" in repr(LLMQueryRewriter(llm)) and "combine='append'" in repr(HyDE(llm, combine="append"))


def test_rewriter_failure_keeps_the_original_query(tmp_path):
    with OpenAIStub(responder, always_fail=lambda m: "otter" in m[-1]["content"]) as stub:
        rw = LLMQueryRewriter(make_llm(stub, tmp_path, max_retries=1, backoff=0.01))
        with pytest.warns(UserWarning):
            out = rw(TOPICS.head(4))
    assert out.loc[2, "query"] == TOPICS.loc[2, "query"] and rw.failures == 1
    assert out.loc[0, "query"].startswith("REWRITTEN")


def test_clue_concatenator():
    frame = pd.DataFrame({"qid": ["1", "2"], "query": ["orig one", "orig two"],
                          "clue_title": ["Moon", None], "clue_plot": ["a fox", None], "clue_cover": [None, "N/A"]})
    out = ClueConcatenator()(frame)
    assert list(out["query"]) == ["Moon. a fox", "orig two"] and list(out["query_0"]) == ["orig one", "orig two"]
    labelled = ClueConcatenator(fields=["plot", "title"], labels=True, separator=" | ")(frame)
    assert labelled.loc[0, "query"] == "plot: a fox | title: Moon"
    with pytest.raises(KeyError, match="clue columns"):
        ClueConcatenator()(frame[["qid", "query"]])


def test_decomposer_composes_in_a_pipeline_and_experiment(tmp_path, tiny_frame):
    import pyterrier_tot as ptt
    index = ptt.BookIndex(tiny_frame, path=tmp_path / "idx")
    topics = pd.DataFrame({"qid": ["1"],
                           "query": ["I read a book about a dragon and a blacksmith who fly to the red moon"]})
    qrels = pd.DataFrame({"qid": ["1"], "docno": ["b2"], "label": [1]})
    TRUTH[topics.loc[0, "query"]] = {"plot": "a dragon and a blacksmith who fly to the red moon"}
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path)
        pipe = ClueDecomposer(llm, "extractive", "joint") >> ClueConcatenator() >> index.bm25()
        res = pt.Experiment([pipe, HyDE(llm) >> index.bm25()], topics, qrels, ["recip_rank"],
                            names=["E", "H"])
    assert res.set_index("name")["recip_rank"].tolist() == [1.0, 1.0]
