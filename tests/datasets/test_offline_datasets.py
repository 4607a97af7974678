"""Offline is honest: an ir_datasets id (``trec-tot/<year>/<split>``) or WhatsThatBook with nothing on disk fails at
once with ``DatasetUnavailableError`` naming what to fetch and where to put it, without trying the network when the
library is offline and without more than the one short probe when the host cannot be reached; ``pyterrier-tot``
says so in one line and exits 2. The network is never touched: connections are refused in-process and offline
subprocesses have nothing to reach."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyterrier_tot as ptt
from pyterrier_tot._plumbing import util as _util
from pyterrier_tot.datasets import WhatsThatBook
from pyterrier_tot.datasets import registry as ptt_registry
from pyterrier_tot.errors import DatasetUnavailableError
from pyterrier_tot.submission.cli import main

ROOT = Path(__file__).resolve().parents[2]
URL_2023 = "https://surfdrive.surf.nl/files/index.php/s/FaEK4xc6Xp2JcAJ/download"


@pytest.fixture
def empty_home(tmp_path, monkeypatch):
    """The 2023 and 2024 TREC ToT ids registered again under an empty ``IR_DATASETS_HOME`` (ir_datasets fixes a data
    set's paths when it registers it), put back afterwards."""
    import ir_datasets
    from ir_datasets.datasets import trec_tot

    home = tmp_path / "irds"
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    reg = ir_datasets.registry._registered
    ours = lambda k: k.startswith("trec-tot") and not k.startswith("trec-tot/2025")  # noqa: E731
    saved = {k: reg.pop(k) for k in list(reg) if ours(k)}
    ptt_registry.forget_datasets()
    trec_tot._init()
    yield home
    for k in [k for k in reg if ours(k)]:
        del reg[k]
    reg.update(saved)
    ptt_registry.forget_datasets()


@pytest.fixture
def no_network(monkeypatch):
    """Every connection fails at once; ``requests`` (what ir_datasets downloads with) fails the test if used."""
    import requests

    calls = {"connect": [], "requests": 0}

    def refuse(address, *args, **kwargs):
        calls["connect"].append(address)
        raise OSError("network unreachable (test)")

    def no_requests(*args, **kwargs):
        calls["requests"] += 1
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(requests.Session, "send", no_requests)
    _util._reachable.cache_clear()
    yield calls
    _util._reachable.cache_clear()


def test_offline_with_nothing_on_disk_fails_at_once_without_probing(empty_home, no_network):
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as err:
        ptt.get_dataset("trec-tot/2023/train")
    message = str(err.value)
    assert time.monotonic() - t0 < 5 and no_network == {"connect": [], "requests": 0}  # no host probed offline
    assert "\n" not in message and "offline" in message and "topics, qrels and corpus are not on disk" in message
    assert URL_2023 in message and str(empty_home / "trec-tot" / "trec-tot.zip") in message  # what, and where
    assert "IR_DATASETS_HOME" in message


def test_unreachable_host_fails_after_one_short_probe(empty_home, no_network, monkeypatch):
    for var in _util.OFFLINE_ENV:
        monkeypatch.delenv(var, raising=False)
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="zenodo.org cannot be reached") as err:
        ptt.get_dataset("trec-tot/2024/test")
    assert time.monotonic() - t0 < 5 and no_network["requests"] == 0
    assert {host for host, _ in no_network["connect"]} == {"zenodo.org"}
    assert "trec-tot-2024-queries.zip" in str(err.value) and "trec-tot-2024-corpus.zip" in str(err.value)


def test_a_part_on_disk_is_read_and_a_missing_part_named_when_used(empty_home, no_network, tmp_path, capsys):
    train = empty_home / "trec-tot" / "2023" / "train"
    train.mkdir(parents=True)
    (train / "queries.jsonl").write_text(json.dumps({"id": "q1", "url": "u", "domain": "movie", "title": "Alien",
                                                     "text": "a blue alien", "sentence_annotations": []}) + "\n")
    (train / "qrel.txt").write_text("q1 0 7 1\n")
    ds = ptt.get_dataset("trec-tot/2023/train")
    assert ds.get_topics()["qid"].tolist() == ["q1"] and ds.get_qrels()["docno"].tolist() == ["7"]
    with pytest.raises(DatasetUnavailableError, match=r"the corpus is not on disk.*trec-tot\.zip"):
        ds.get_corpus_iter()
    assert no_network == {"connect": [], "requests": 0}
    # validate-run checks what it has, and says what it could not
    run = tmp_path / "x.run"
    run.write_text("q1 Q0 7 1 1.0 tag\n")
    assert main(["validate-run", str(run), "--dataset", "trec-tot/2023/train"]) == 0
    captured = capsys.readouterr()
    assert "(corpus not checked)" in captured.out and "the corpus is not on disk" in captured.err


def test_cli_and_config_say_it_in_one_line(empty_home, no_network, tmp_path, capsys):
    run = tmp_path / "x.run"
    run.write_text("q1 Q0 d1 1 1.0 tag\n")
    config = tmp_path / "trec.toml"
    config.write_text('[dataset]\nname = "trec-tot/2023/train"\n\n[[pipeline]]\nstage = "bm25"\n')
    for args in (["validate-run", str(run), "--dataset", "trec-tot/2023/train"],
                 ["validate-run", str(run), "--config", str(config)], ["run", str(config)]):
        assert main(args) == 2, args
        captured = capsys.readouterr()
        # validate-run checks the run's format first (its one line on stdout), then says why the data set is not here
        said = "" if args[0] == "run" else \
            f"{run}: 1 result, 1 query, tag 'tag': OK (format only: topics and corpus not checked)\n"
        assert captured.out == said and len(captured.err.strip().splitlines()) == 1, captured
        assert "DatasetUnavailable" not in captured.err and URL_2023 in captured.err
    assert no_network == {"connect": [], "requests": 0}


def test_the_command_offline_prints_one_line_and_exits_2(tmp_path):
    """What a person runs: a fresh process, offline, with an empty ir_datasets home."""
    run = tmp_path / "x.run"
    run.write_text("q1 Q0 d1 1 1.0 tag\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "IR_DATASETS_HOME": str(tmp_path / "irds"), "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pyterrier_tot.submission.cli", "validate-run", str(run),
                          "--dataset", "trec-tot/2023/train"], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stdout == f"{run}: 1 result, 1 query, tag 'tag': OK (format only: topics and corpus not checked)\n"
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyterrier-tot validate-run: error: trec-tot/2023/train: ")
    assert "Traceback" not in res.stderr and "requests" not in res.stderr and time.monotonic() - t0 < 60


def test_whatsthatbook_unreachable_names_the_folders(tmp_path, monkeypatch, no_network, capsys):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("PYTERRIER_TOT_WHATSTHATBOOK", raising=False)
    with pytest.raises(DatasetUnavailableError, match="offline") as err:
        WhatsThatBook()
    assert str(tmp_path / "data" / "whatsthatbook") in str(err.value) and no_network["connect"] == []
    for var in _util.OFFLINE_ENV:
        monkeypatch.delenv(var, raising=False)
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="huggingface.co cannot be reached") as err:
        WhatsThatBook()
    assert time.monotonic() - t0 < 5 and len(no_network["connect"]) == 1 and no_network["requests"] == 0
    assert str(tmp_path / "cache" / "whatsthatbook") in str(err.value)
    ptt_registry.forget_datasets()
    assert main(["validate-run", "x.run", "--dataset", "whatsthatbook"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
