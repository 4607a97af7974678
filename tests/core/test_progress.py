"""Issue 22.5: one switch for progress output. Pipelines printed nested unlabelled bars, one per retriever call, and
"Loading weights 0/103" for every model; nothing silenced a whole pipeline. Each test fails on 0.2's behaviour."""
import subprocess
import sys
import textwrap

import pytest

import pyterrier_tot as ptt
from pyterrier_tot import console as prog
from tests.helpers.paths import child_env

SCRIPT = textwrap.dedent("""
    import sys
    import pandas as pd
    from tests.helpers.books import TINY_BOOKS
    import pyterrier_tot as ptt
    {switch}
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path={path!r})
    topics = pd.DataFrame({{"qid": [str(i) for i in range(12)], "query": ["a dragon and a blacksmith"] * 12}})
    for _ in range(3):                                   # three pipeline calls: no bar for each
        res = (index.bm25() % 5 >> ptt.DenseReranker(index))(topics)
        res = (index.dense() % 5 >> (index.bm25_scorer() ** index.dense_scorer()))(topics)
    print("rows", len(res))
""")


def _run(tmp_path, switch="", env=None):
    code = SCRIPT.format(switch=switch, path=str(tmp_path / "idx"))
    full = child_env(**(env or {}), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=full)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows" in done.stdout
    return done.stderr


def _bars(stderr: str) -> list:
    return [line for line in stderr.replace("\r", "\n").splitlines() if "%|" in line or "it/s]" in line]


def test_a_whole_pipeline_is_silent_with_the_switch_off(tmp_path):
    assert _bars(_run(tmp_path, env={"PYTERRIER_TOT_PROGRESS": "0"})) == []
    assert _bars(_run(tmp_path, switch="ptt.set_progress(False)")) == []


def test_no_bar_per_retrieval_call_nor_per_model_load(tmp_path):
    err = _run(tmp_path, env={"PYTERRIER_TOT_PROGRESS": "1"})
    assert "NumpyRetriever scoring" not in err and "Loading weights" not in err
    assert all(line.split(":")[0].strip() for line in _bars(err))  # whatever bar shows has a label


def test_switch_env_context_and_bar_settings(monkeypatch):
    monkeypatch.setenv(prog.ENV, "off")
    prog.set_progress(None)
    assert not ptt.progress_enabled()
    monkeypatch.setenv(prog.ENV, "1")
    assert ptt.progress_enabled()
    with ptt.progress(False):
        assert not ptt.progress_enabled() and prog.bar(range(10), desc="x").disable
    assert ptt.progress_enabled()
    b = prog.bar(range(10), desc="training", training=True)
    assert not b.disable and b.mininterval == prog.TRAINING_INTERVAL and b.leave is False
    assert prog.bar(range(1), desc="one item").disable  # a single item needs no bar
    with pytest.raises(ValueError, match="label"):
        prog.bar(range(10))
    with pytest.raises(TypeError):
        ptt.set_progress("no")
