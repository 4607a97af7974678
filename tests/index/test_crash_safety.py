"""Index builds are safe across processes and crashes: two processes building the same folder build each part once
and get the same results, and a build killed with SIGKILL is detected, tidied up and rebuilt by the next open."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot._plumbing.artifact import lock_path
from pyterrier_tot._plumbing.util import file_lock
from pyterrier_tot.errors import LockTimeoutError
from tests.helpers.books import TINY_BOOKS

ROOT = Path(__file__).resolve().parents[2]
QUERIES = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["a ghost keeper in an old lighthouse",
                                                          "blacksmith befriends a dragon", "children on a spaceship"]})
BM25 = "bm25-title+author+text-porter2"  # the tiny books have authors: the default BM25 reads them

# Run in a child process. It records every folder build that completed its contents (BUILD_LOG), and can be slowed
# down or paused at a chosen point so that the test can overlap two builds or kill one midway.
CHILD = r'''
import contextlib, json, os, sys, time
from pathlib import Path
import pandas as pd
import pyterrier_tot as ptt
import pyterrier_tot._plumbing.artifact as art

env = os.environ
real_building = art.building

def pause_here(what):
    if env.get("PAUSE") == what:
        Path(env["PAUSED"]).write_text(what)
        time.sleep(600)  # the test kills us here

@contextlib.contextmanager
def observed_building(path, **kw):
    with real_building(path, **kw) as tmp:
        yield tmp
        with open(env["BUILD_LOG"], "a") as f:
            f.write(f"{os.getpid()} {Path(path).name}\n")
        time.sleep(float(env.get("DELAY", "0")))  # widen the window in which another process could interfere
        pause_here(Path(path).name.split("-")[0])  # contents complete, not yet renamed into place

art.building = observed_building
real_docs_iter = ptt.BookIndex.docs_iter

phase = []

def slow_docs_iter(self, *a, **kw):
    for i, doc in enumerate(real_docs_iter(self, *a, **kw)):
        if i == 3 and phase:
            pause_here("docs")  # half-way through writing a sub-index
        yield doc

ptt.BookIndex.docs_iter = slow_docs_iter
Path(env["READY"]).write_text(str(os.getpid()))
while env.get("GO") and not Path(env["GO"]).exists():
    time.sleep(0.01)
books = pd.DataFrame(json.loads(Path(env["BOOKS"]).read_text()))
index = ptt.BookIndex(books, path=env["INDEX"])
queries = pd.DataFrame(json.loads(env["QUERIES"]))
out = {"bm25": index.bm25()(queries).to_dict("records")}
if env.get("DENSE"):
    phase.append("dense")
    out["dense"] = index.dense()(queries).to_dict("records")
Path(env["OUT"]).write_text(json.dumps(out))
'''


def _child(tmp, name, index, **env):
    script = tmp / "child.py"
    script.write_text(CHILD)
    books = tmp / "books.json"
    books.write_text(json.dumps(TINY_BOOKS))
    full = {**os.environ, "BOOKS": str(books), "INDEX": str(index), "BUILD_LOG": str(tmp / "builds.log"),
            "READY": str(tmp / f"ready-{name}"), "OUT": str(tmp / f"out-{name}.json"),
            "PAUSED": str(tmp / f"paused-{name}"), "QUERIES": QUERIES.to_json(orient="records"), **env}
    return subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(*files, proc=(), timeout=120.0):
    end = time.monotonic() + timeout
    while not all(f.exists() for f in files):
        for p in proc:
            if p.poll() is not None:
                pytest.fail(f"child exited early ({p.returncode}):\n{p.stdout.read()[-3000:]}")
        assert time.monotonic() < end, f"timed out waiting for {files}"
        time.sleep(0.05)


def _frame(records):
    return pd.DataFrame(records).astype({"qid": str, "docno": str})


def _leftovers(root):
    return [str(p) for p in Path(root).rglob("*") if ".building." in p.name or ".old." in p.name]


def _parts(index_dir):
    return sorted(p.name.split("-")[0] for p in Path(index_dir).iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("ref") / "index")
    return {"bm25": index.bm25()(QUERIES), "dense": index.dense()(QUERIES)}


def _check(results, reference, kinds=("bm25", "dense")):
    for kind in kinds:
        got = _frame(results[kind]) if isinstance(results[kind], list) else results[kind]
        pd.testing.assert_frame_equal(got.reset_index(drop=True), reference[kind].reset_index(drop=True),
                                      check_dtype=False)


def test_two_processes_building_one_index_build_each_part_once(tmp_path, reference):
    index = tmp_path / "index"
    go = tmp_path / "go"
    procs = [_child(tmp_path, n, index, GO=str(go), DELAY="0.5", DENSE="1") for n in ("a", "b")]
    try:
        _wait_for(tmp_path / "ready-a", tmp_path / "ready-b", proc=procs)
        go.touch()  # both start building at the same moment
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    builds = [line.split()[1] for line in (tmp_path / "builds.log").read_text().splitlines()]
    assert sorted(b.split("-")[0] for b in builds) == ["bm25", "dense", "index"], builds  # each built once
    results = [json.loads((tmp_path / f"out-{n}.json").read_text()) for n in ("a", "b")]
    assert results[0] == results[1]
    _check(results[0], reference)
    assert _parts(index) == ["bm25", "dense"] and _leftovers(tmp_path) == []
    _check({"bm25": ptt.BookIndex(str(index)).bm25()(QUERIES)}, reference, ["bm25"])


@pytest.mark.parametrize("stage", ["index", "bm25", "docs"])
def test_build_killed_midway_is_rebuilt_on_next_open(tmp_path, reference, stage):
    """``index``: killed writing the corpus folder; ``bm25``: the PISA index complete in its temporary folder but
    not yet renamed; ``docs``: half-way through encoding the books for the dense index."""
    index = tmp_path / "index"
    proc = _child(tmp_path, "k", index, PAUSE=stage, DENSE="1" if stage == "docs" else "")
    try:
        _wait_for(tmp_path / "paused-k", proc=[proc])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert _leftovers(tmp_path), "the killed build should have left its temporary folder"
    if stage == "index":
        with pytest.raises(FileNotFoundError, match="interrupted"):
            ptt.BookIndex(str(index))
        opened = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=index)
    else:
        opened = ptt.BookIndex(str(index))  # the corpus was complete: open without the books
    _check({"bm25": opened.bm25()(QUERIES), "dense": opened.dense()(QUERIES)}, reference)
    assert _parts(index) == ["bm25", "dense"] and _leftovers(tmp_path) == []


def test_live_builder_is_waited_for_then_fails_clearly(tmp_path):
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index", lock_timeout=0.3)
    staging = tmp_path / "index" / f".{BM25}.building.live"
    staging.mkdir()  # another process's build in progress: not to be touched while its lock is held
    held, release = threading.Event(), threading.Event()

    def other_builder():
        with file_lock(lock_path(tmp_path / "index" / BM25)):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=other_builder)
    thread.start()
    try:
        assert held.wait(10)
        start = time.monotonic()
        with pytest.raises(LockTimeoutError, match=f"{re.escape(BM25)}.*still being built by another process"):
            index.bm25()
        assert time.monotonic() - start < 5 and staging.is_dir()
    finally:
        release.set()
        thread.join()
    assert len(index.bm25()(QUERIES)) and not staging.exists()  # lock free: the stale folder is removed


def test_bm25_score_files_are_added_atomically(tmp_path, monkeypatch):
    """PISA writes its files for each (k1, b) into the index on first use; they are staged and renamed in."""
    import pyterrier_tot._plumbing.artifact as art

    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    index.bm25()
    staged = []
    real = art.add_files
    monkeypatch.setattr(art, "add_files", lambda *a: staged.append(real(*a)) or staged[-1])
    index.bm25()
    assert staged == []  # files present: nothing to stage, no lock taken
    fresh = index.bm25(k1=0.9, b=0.4)(QUERIES)
    assert staged == [["bm25.k1-0.9.b-0.4.q0.bmw.64", "bm25.k1-0.9.b-0.4.q0.bmw.64.block_simdbp"]]
    pd.testing.assert_frame_equal(ptt.BookIndex(str(index.path)).bm25(k1=0.9, b=0.4)(QUERIES), fresh)
    assert len(staged) == 1 and _leftovers(tmp_path) == []


def test_open_waits_for_a_first_build_in_progress(tmp_path):
    path = tmp_path / "index"
    held = threading.Event()

    def first_builder():
        with file_lock(lock_path(path)):
            (tmp_path / ".index.building.x").mkdir()
            held.set()
            time.sleep(0.5)
            ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=path)

    thread = threading.Thread(target=first_builder)
    thread.start()
    try:
        assert held.wait(10)
        assert len(ptt.BookIndex(str(path), lock_timeout=30)) == len(TINY_BOOKS)  # not "no such artifact"
    finally:
        thread.join()
