"""LLM failures (issue #13): a dead or misconfigured server fails within seconds, transient faults (timeouts,
429, 5xx, malformed or truncated answers) are retried, a run of failed requests trips the circuit breaker with
counts by qid, fault injection loses no query, and processes can share one cache file."""
import multiprocessing as mp
import socket
import time
import warnings

import pandas as pd
import pytest

from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS
from pyterrier_tot.llm.cache import LLMCache
from pyterrier_tot.llm.client import LLM, LLMConfigurationError, LLMUnavailableError
from tests.helpers.llm_script import TOPICS, TRUTH, make_llm, make_queries, responder
from tests.helpers.openai_stub import ALL_FAULTS, OpenAIStub

MANY, _truth = make_queries(60)
TRUTH.update(_truth)  # the stub's responder answers these too


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # closed again: nothing listens there


# -- dead or misconfigured servers -------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["closed port", "unresolvable host"])
@pytest.mark.parametrize("strategy", ["per_field", "joint"])
def test_unreachable_server_fails_fast(tmp_path, where, strategy):
    url = closed_port_url() if where == "closed port" else "http://no-such-host.invalid:1/v1"
    llm = LLM(model="m", base_url=url, api_key="k", cache=tmp_path / "c.sqlite3", verbose=False)
    t0 = time.monotonic()
    with pytest.raises(LLMConfigurationError, match="cannot reach the server") as err:
        ClueDecomposer(llm, strategy=strategy)(TOPICS.head(8))
    assert time.monotonic() - t0 < 8  # was ~11 s a query (per_field), then N/A for every field
    assert ("refused" if where == "closed port" else "does not resolve") in str(err.value)
    # one short retry per request in flight, and nothing sent after the error
    assert llm.usage.calls <= 2 * llm.concurrency and llm.usage.failures == 0


@pytest.mark.parametrize("status", [401, 403, 404])
def test_refused_credentials_fail_at_once(tmp_path, status):
    with OpenAIStub(responder, status=status) as stub:
        llm = make_llm(stub, tmp_path, concurrency=1)
        t0 = time.monotonic()
        with pytest.raises(LLMConfigurationError, match=f"status {status}"):
            ClueDecomposer(llm, strategy="per_field")(TOPICS)
    assert time.monotonic() - t0 < 8 and stub.requests == 1 and llm.usage.retries == 0


def test_max_retries_zero_still_names_an_unreachable_server(tmp_path):
    llm = LLM(model="m", base_url=closed_port_url(), api_key="k", cache=False, max_retries=0, verbose=False)
    with pytest.raises(LLMConfigurationError, match="refused"):
        llm.chat([{"role": "user", "content": "hi"}])
    assert llm.usage.calls == 1


# -- transient faults ------------------------------------------------------------------------------------------
def test_every_transient_fault_is_retried_truncation_included(tmp_path):
    """Timeouts, 429, 500, a non-JSON body, a body cut short and an answer cut by the token limit are all
    retried; the results equal a fault-free run's."""
    with OpenAIStub(responder) as clean:
        expected = ClueDecomposer(make_llm(clean, tmp_path, "clean.sqlite3"), strategy="joint")(MANY)
    with OpenAIStub(responder, fault_rate=0.3, seed=3, faults=ALL_FAULTS, slow_seconds=1.0) as faulty:
        llm = make_llm(faulty, tmp_path, "faulty.sqlite3", timeout=0.4, backoff=0.01, max_backoff=0.05,
                       max_retries=10)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = ClueDecomposer(llm, strategy="joint")(MANY)
    assert all(faulty.faults_served[f] > 0 for f in ALL_FAULTS), faulty.faults_served
    assert llm.usage.retries == sum(faulty.faults_served.values()) and llm.usage.failures == 0
    assert llm.usage.truncated == faulty.faults_served["length"]
    pd.testing.assert_frame_equal(got, expected)


def test_a_truncated_answer_is_asked_again_with_a_larger_budget(tmp_path):
    budgets = []
    with OpenAIStub(responder, fault_rate=1.0, faults=("length",)) as stub:
        llm = make_llm(stub, tmp_path, max_retries=3, backoff=0.01, max_tokens=100)
        orig = llm._client.chat.completions.create

        def spy(**kw):
            budgets.append(kw["max_tokens"])
            return orig(**kw)
        llm._client.chat.completions.create = spy
        with pytest.warns(UserWarning, match="token limit"):
            out = ClueDecomposer(llm, strategy="joint")(TOPICS.head(1))
    assert budgets == [100, 200, 400, 400] and llm.usage.truncated == 4 and llm.usage.failures == 1
    assert out[list(CLUE_COLUMNS)].isna().all(axis=None)
    assert len(LLMCache(tmp_path / "cache.sqlite3")) == 0  # an unusable answer is never cached


def test_a_cut_answer_in_the_cache_is_asked_again_when_validate_refuses_it(tmp_path):
    """An answer the token limit cut, cached by a call without ``validate`` (or by an older version), is not served
    to a caller whose ``validate`` refuses it: it is asked again with a larger budget and replaced. A usable cached
    answer, or a refused one that did not reach the limit (the model's own answer), is served as before."""
    from pyterrier_tot.llm.cache import request_key
    from pyterrier_tot.llm.templates import load_prompt

    messages = [{"role": "system", "content": load_prompt("rewrite").template[0]["content"]},
                {"role": "user", "content": "Request: a girl who trains a wild horse on a ranch"}]
    budgets = []
    with OpenAIStub(responder) as stub:
        llm = make_llm(stub, tmp_path, max_tokens=8)
        orig = llm._client.chat.completions.create

        def spy(**kw):
            budgets.append(kw["max_tokens"])
            return orig(**kw)
        llm._client.chat.completions.create = spy
        key = request_key(llm.identity, messages, llm.params(), None)
        usable = lambda a: a.startswith("REWRITTEN") and len(a.split()) > 2  # noqa: E731
        llm.cache.put(key, llm.identity, "REWRITTEN a", 30, 8)           # cut at the limit: asked again
        assert llm.chat(messages, validate=usable) == "REWRITTEN a girl who trains a"
        assert budgets == [16] and llm.usage.truncated == 1 and llm.usage.cache_hits == 0
        assert llm.cache.get(key)["answer"] == "REWRITTEN a girl who trains a"
        assert llm.chat(messages, validate=usable) == "REWRITTEN a girl who trains a" and budgets == [16]
        llm.cache.put(key, llm.identity, "REWRITTEN b", 30, 2)           # short of the limit: the model's answer
        assert llm.chat(messages, validate=usable) == "REWRITTEN b" and budgets == [16]
        llm.cache.put(key, llm.identity, "REWRITTEN c", 30, 8)           # no validate: served as it is
        assert llm.chat(messages) == "REWRITTEN c" and budgets == [16]


def test_fault_injection_loses_no_query_and_counts_the_rest(tmp_path):
    """30% faults, one retry: some requests still fail. Every qid comes back; every row whose request got
    through equals the fault-free run; the failed rows are exactly what the counters report."""
    topics, _ = make_queries(24)
    poison = {topics.loc[3, "query"], topics.loc[17, "query"]}  # at least two failures, whatever the draw
    with OpenAIStub(responder) as clean:
        expected = ClueDecomposer(make_llm(clean, tmp_path, "clean.sqlite3"), strategy="joint")(topics)
    with OpenAIStub(responder, fault_rate=0.3, seed=11, slow_seconds=1.0,
                    always_fail=lambda m: m[-1]["content"].removeprefix("Request: ") in poison) as faulty:
        llm = make_llm(faulty, tmp_path, "faulty.sqlite3", timeout=0.4, backoff=0.01, max_backoff=0.05,
                       max_retries=1)
        dec = ClueDecomposer(llm, strategy="joint")
        with pytest.warns(UserWarning, match="failed"):
            got = dec(topics)
    assert list(got["qid"]) == list(topics["qid"])  # 0 queries lost
    cols = list(CLUE_COLUMNS) + ["clue_year"]
    differs = [i for i in range(len(topics)) if not got.loc[i, cols].equals(expected.loc[i, cols])]
    for i in differs:  # a row that differs is a failed one: all N/A, never a wrong clue
        assert got.loc[i, list(CLUE_COLUMNS)].isna().all(), got.loc[i]
    assert {3, 17} <= set(differs)
    assert len(differs) == llm.usage.failures == dec.stats["plot"]["failed"] >= 2
    assert llm.usage.retries > 0 and len(differs) < len(topics)


# -- circuit breaker ---------------------------------------------------------------------------------------------
def test_circuit_breaker_stops_with_counts_and_a_rerun_resumes(tmp_path):
    broken = set(TOPICS["query"].iloc[6:])
    with OpenAIStub(responder, always_fail=lambda m: m[-1]["content"].removeprefix("Request: ") in broken) as stub:
        llm = make_llm(stub, tmp_path, concurrency=1, max_retries=1, backoff=0.01, max_consecutive_failures=5,
                       identity="stub-model")  # the healed server below stands for the same model restarted
        t0 = time.monotonic()
        with pytest.raises(LLMUnavailableError, match="5 requests in a row failed") as err:
            ClueDecomposer(llm, strategy="joint")(TOPICS)
    e = err.value
    assert isinstance(e, LLMConfigurationError) and time.monotonic() - t0 < 8
    assert (e.asked, e.answered, e.failed, e.not_sent) == (24, 6, 5, 13)
    assert e.qids_done == [f"q{i}" for i in range(6)] and e.qids_pending == [f"q{i}" for i in range(6, 24)]
    msg = str(e)
    assert "asked 24, answered 6, failed 5, not sent 13" in msg and "q0, q1" in msg and "q6, q7" in msg
    assert stub.requests == 6 + 5 * 2  # nothing sent after the breaker opened
    with OpenAIStub(responder) as healed:  # the rerun asks only what was not answered
        llm2 = make_llm(healed, tmp_path, concurrency=1, identity="stub-model")
        ClueDecomposer(llm2, strategy="joint")(TOPICS)
    assert healed.requests == 18 and llm2.usage.cache_hits == 6


def test_circuit_breaker_with_concurrency_and_per_field(tmp_path):
    with OpenAIStub(responder, always_fail=lambda m: True) as stub:
        llm = make_llm(stub, tmp_path, concurrency=4, max_retries=0)
        with pytest.raises(LLMUnavailableError) as err:
            ClueDecomposer(llm, strategy="per_field")(TOPICS)
    e = err.value
    assert e.answered == 0 and 10 <= e.failed <= 10 + 3 and e.not_sent == 24 * 6 - e.failed
    assert e.qids_done == [] and len(e.qids_pending) == 24 and stub.requests == e.failed


def test_breaker_off_and_isolated_failures_do_not_trip_it(tmp_path):
    with OpenAIStub(responder, always_fail=lambda m: True) as stub:
        llm = make_llm(stub, tmp_path, concurrency=2, max_retries=0, max_consecutive_failures=None)
        with pytest.warns(UserWarning, match="failed"):
            out = ClueDecomposer(llm, strategy="joint")(TOPICS)
    assert len(out) == len(TOPICS) and stub.requests == len(TOPICS)
    # every other query failing is never ten in a row
    odd = set(TOPICS["query"].iloc[1::2])
    with OpenAIStub(responder, always_fail=lambda m: m[-1]["content"].removeprefix("Request: ") in odd) as stub:
        llm = make_llm(stub, tmp_path, "c2.sqlite3", concurrency=1, max_retries=0)
        with pytest.warns(UserWarning, match="12 of 24"):
            ClueDecomposer(llm, strategy="joint")(TOPICS)


# -- one cache file, several processes ----------------------------------------------------------------------------
def _writer(path, barrier, tag, n, errors):
    barrier.wait()  # open and write at the same instant as the others
    try:
        cache = LLMCache(path)
        for i in range(n):
            cache.put(f"{tag}-{i}", "m", f"answer {tag} {i}", 1, 2)
            cache.put(f"shared-{i}", "m", f"shared {i}")
            cache.get(f"shared-{i}")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors.put(f"{tag}: {exc!r}")


@pytest.mark.parametrize("rounds,procs,n", [(40, 6, 20), (1, 4, 400)], ids=["racing opens", "many writes"])
def test_processes_sharing_one_cache_lose_nothing(tmp_path, rounds, procs, n):
    """Each round opens a fresh file from all processes at once (before the fix about 7% of such rounds
    crashed with "database is locked" while switching to WAL), then they all write."""
    # forked from a small server process that has imported this module once: forking the test session itself costs
    # more the more it has loaded (18 s at the end of the suite, 3 s alone), and spawn imports it all again per writer
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    for r in range(rounds):
        path = tmp_path / f"shared{r}.sqlite3"
        barrier, errors = ctx.Barrier(procs), ctx.Queue()
        ps = [ctx.Process(target=_writer, args=(path, barrier, f"p{k}", n, errors)) for k in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(timeout=120)
        assert all(p.exitcode == 0 for p in ps)
        assert errors.empty(), errors.get()
        cache = LLMCache(path)
        assert len(cache) == procs * n + n
        assert all(cache.get(f"p{k}-{i}")["answer"] == f"answer p{k} {i}" for k in range(procs) for i in range(n))
