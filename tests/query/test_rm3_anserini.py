"""Lucene BM25 and RM3 through Anserini (issue 17 item 6): offline, with the jar from pyserini's source package
and a Java 21+ runtime; skipped where either is missing. The JVM runs in a child process so that this test
session stays free of Java (one JVM per process, and its class path is fixed at start)."""
import json
import subprocess
import sys
import time

import pandas as pd
import pytest

from pyterrier_tot.errors import TerrierUnavailableError
from pyterrier_tot.query import rm3
from tests.helpers.paths import child_env

SCRIPT = r'''
import json, sys, warnings
import pandas as pd
from tests.helpers.books import TINY_BOOKS
import pyterrier_tot as ptt
from pyterrier_tot.query.rm3 import anserini_rm3, lucene_bm25, rm3_pipeline

index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=sys.argv[1])
topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["a DRAGON & the red moon?!", "ghost in a lighthouse"]})
bm25, rm3 = lucene_bm25(index, num_results=3), anserini_rm3(index, fb_docs=2, fb_terms=5)
out = {"bm25": bm25(topics).to_dict("records"), "rm3": rm3(topics).to_dict("records"),
       "empty": list(bm25(topics.head(0)).columns), "repr": [repr(bm25), repr(rm3)],
       "cut": int((lucene_bm25(index) % 1).compile()(topics).groupby("qid").size().max()),
       "cut_repr": repr((lucene_bm25(index) % 1).compile())}
try:
    bm25(topics.assign(query=["", "ghost"]))
except ptt.BadInputError as e:
    out["bad"] = str(e)
unique = lucene_bm25(index, unique_terms=True)
out["unique"] = [repr(unique), unique(topics).groupby("qid")["docno"].first().to_dict()]
pb, pr = rm3_pipeline(index, engine="anserini", return_bm25=True)
out["pipeline"] = [repr(pb), repr(pr)]
with warnings.catch_warnings():
    warnings.simplefilter("error")  # the second use re-opens the built index, it does not rebuild it
    out["again"] = lucene_bm25(index)(topics.head(1))["docno"].iloc[0]
print("RESULT" + json.dumps(out, default=str))
'''


def test_status_is_fast_and_explains_itself():
    rm3.anserini_status.cache_clear()
    t0 = time.perf_counter()
    ok, reason = rm3.anserini_status()
    assert time.perf_counter() - t0 < 10 and isinstance(ok, bool) and reason
    assert rm3.anserini_available() == ok


def test_missing_jar_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(rm3.ANSERINI_JAR_ENV, str(tmp_path / "no-such.jar"))
    rm3.anserini_status.cache_clear()
    try:
        ok, reason = rm3.anserini_status()
        assert not ok and "Anserini jar" in reason and rm3.ANSERINI_JAR_ENV in reason
        with pytest.raises(TerrierUnavailableError, match="need Anserini"):
            rm3.lucene_bm25(pd.DataFrame({"docno": ["d1"], "title": ["x"], "text": ["y"]}), )
    finally:
        rm3.anserini_status.cache_clear()


def test_engine_is_checked():
    with pytest.raises(ValueError, match="engine"):
        rm3.rm3_pipeline(pd.DataFrame({"docno": ["d1"], "title": ["x"], "text": ["y"]}), engine="lucene")


def test_lucene_bm25_and_rm3_on_tiny_corpus(tmp_path):
    ok, reason = rm3.anserini_status()
    if not ok:
        pytest.skip(f"Anserini unavailable here: {reason}")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "index")], capture_output=True,
                          text=True, timeout=300, env=child_env())
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    out = json.loads(line[0][len("RESULT"):])
    bm25 = pd.DataFrame(out["bm25"])
    assert bm25.groupby("qid")["docno"].first().to_dict() == {"q1": "b2", "q2": "b5"}
    assert bm25.groupby("qid").size().max() <= 3
    assert bm25["query"].iloc[0] == "a DRAGON & the red moon?!"  # the user's text comes back, not the tokens
    assert (bm25.groupby("qid")["rank"].min() == 0).all()
    assert pd.DataFrame(out["rm3"]).groupby("qid")["docno"].first()["q1"] == "b2"
    assert {"qid", "query", "docno", "score", "rank"} <= set(out["empty"])
    assert "q1" in out["bad"]
    assert out["repr"][0].startswith("LuceneBM25(") and "fb_docs=2" in out["repr"][1]
    assert out["cut"] == 1 and "num_results=1" in out["cut_repr"]  # the cutoff is fused into the searcher
    assert out["pipeline"][0].startswith("LuceneBM25(") and out["pipeline"][1].startswith("AnseriniRM3(")
    assert out["again"] == "b2"
    assert "unique_terms=True" in out["unique"][0] and out["unique"][1] == {"q1": "b2", "q2": "b5"}
    meta = json.loads((tmp_path / "index" / "lucene-title+text" / "pt_meta.json").read_text())
    assert meta["backend"] == "lucene" and meta["fields"] == ["title", "text"] and meta["jar"].endswith(".jar")
