"""Issue 30.5: ``pyterrier-tot validate-run`` says which rules it checked, and takes ``--dataset`` (with
``--split``) for the topics and corpus. A run missing a topic and naming a book ``BOGUS`` used to pass with a bare
OK when neither was given."""
import json
from pathlib import Path

import pytest

from pyterrier_tot.submission.cli import main  # noqa: E402
from tests.helpers.paths import SHARED


def broken_run(path: Path, qids, docnos) -> Path:
    """Results for every qid but the first, each a real book, and one line naming ``BOGUS``."""
    lines = [f"{q} Q0 {d} 1 2.0 broken" for q, d in zip(qids[1:], docnos[1:])]
    lines.append(f"{qids[1]} Q0 BOGUS 2 1.0 broken")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_without_topics_or_corpus_it_says_format_only(tmp_path, capsys):
    run = broken_run(tmp_path / "run.txt", ["q1", "q2", "q3"], ["b1", "b2", "b3"])
    assert main(["validate-run", str(run)]) == 0  # the format is right ...
    out = capsys.readouterr().out
    assert "OK (format only: topics and corpus not checked)" in out  # ... and it says that is all it checked
    assert not any(line.rstrip().endswith(": OK") for line in out.splitlines())
    assert "give --config CONFIG, --dataset NAME, --topics FILE, --corpus JSONL or --index DIR" in out


def test_a_local_dataset_without_a_corpus_checks_the_topics(tmp_path, capsys):
    folder = tmp_path / "tiny-tot"
    folder.mkdir()
    (folder / "queries.jsonl").write_text("".join(json.dumps({"query_id": q, "query": f"book {q}"}) + "\n"
                                                  for q in ("q1", "q2", "q3")))
    (folder / "qrel.txt").write_text("q1 0 b1 1\nq2 0 b2 1\nq3 0 b3 1\n")
    run = broken_run(tmp_path / "run.txt", ["q1", "q2", "q3"], ["b1", "b2", "b3"])
    assert main(["validate-run", str(run), "--dataset", f"trec-tot-local/{folder}"]) == 1
    captured = capsys.readouterr()
    assert "[topics] topic 'q1' has no results" in captured.out and "(corpus not checked)" in captured.out
    assert "no corpus" in captured.err and "--corpus JSONL or --index DIR to check it" in captured.out
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"docno": d, "title": d}) + "\n" for d in ("b1", "b2", "b3")))
    assert main(["validate-run", str(run), "--dataset", f"trec-tot-local/{folder}", "--corpus", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert "[corpus] docno 'BOGUS'" in out and "not checked" not in out


def test_bad_combinations_are_refused(tmp_path, capsys):
    run = broken_run(tmp_path / "run.txt", ["q1", "q2"], ["b1", "b2"])
    assert main(["validate-run", str(run), "--split", "validation"]) == 2
    assert "--split goes with --config or --dataset" in capsys.readouterr().err
    assert main(["validate-run", str(run), "--dataset", "reddit-tomt-books", "--config", "query_stage"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED / "reddit-tomt-books").is_dir(), reason="needs the shared Reddit-TOMT data")
def test_reddit_dataset_finds_the_missing_topic_and_the_bogus_book(tmp_path, capsys, monkeypatch):
    import pyterrier_tot as ptt

    monkeypatch.setenv("PYTERRIER_TOT_SAMPLE", "20")  # a 20-query slice of each split, and its books
    ds = ptt.get_dataset("reddit-tomt-books")
    qrels = ds.get_qrels("validation")
    run = broken_run(tmp_path / "run.txt", qrels["qid"].astype(str).tolist(), qrels["docno"].astype(str).tolist())
    missing = str(qrels["qid"].iloc[0])
    args = ["validate-run", str(run), "--dataset", "reddit-tomt-books"]
    assert main(args) == 2  # several splits: which one?
    assert "which split? Pass --split train or validation" in capsys.readouterr().err
    assert main(args + ["--split", "validation"]) == 1
    out = capsys.readouterr().out
    assert f"[topics] topic {missing!r} has no results" in out
    assert "[corpus] docno 'BOGUS'" in out and "not checked" not in out
    assert main(["validate-run", str(run)]) == 0 and "format only" in capsys.readouterr().out


def test_the_note_never_asks_for_what_was_given(tmp_path, capsys):
    """With --dataset given (a local folder: topics, no corpus) the note advised giving --dataset or --config."""
    folder = tmp_path / "tiny-tot"
    folder.mkdir()
    (folder / "queries.jsonl").write_text(json.dumps({"query_id": "q1", "query": "a book"}) + "\n")
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 b1 1 1.0 tag\n")
    assert main(["validate-run", str(run), "--dataset", f"trec-tot-local/{folder}"]) == 0
    note = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert note == ["note: corpus not checked; give --corpus JSONL or --index DIR to check it"]


def test_a_wrong_local_folder_names_where_it_looked(tmp_path, capsys, monkeypatch):
    """It said `no queries.jsonl under 2023` without the folders searched."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "shared"))
    (tmp_path / "shared" / "trec-tot" / "2023-train").mkdir(parents=True)
    (tmp_path / "shared" / "trec-tot" / "2023-train" / "queries.jsonl").write_text("")
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 b1 1 1.0 tag\n")
    assert main(["validate-run", str(run), "--dataset", "trec-tot-local/2023"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trec-tot-local/2023: no queries.jsonl in" in err
    assert f"{tmp_path / '2023'} (relative to the current directory)" in err
    assert f"{tmp_path / 'shared' / 'trec-tot' / '2023'} (the shared data's trec-tot folder" in err
    assert "the shared folders are 2023-train" in err


def test_an_unavailable_dataset_still_gets_the_format_checked_first(tmp_path, capsys, monkeypatch):
    """``--dataset trec-tot/2023/train`` offline: the malformed line went unreported (only the data set's error
    was printed), and the error did not name the ``trec-tot-local/2023-train`` copy on disk; "1 queries"."""
    pytest.importorskip("ir_datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds"))
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "shared"))
    (tmp_path / "shared" / "trec-tot" / "2023-train").mkdir(parents=True)
    (tmp_path / "shared" / "trec-tot" / "2023-train" / "queries.jsonl").write_text(
        json.dumps({"query_id": "q1", "query": "a book"}) + "\n")
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 b1 1 1.0 tag\nq1 Q0 b2 2\n")
    status = main(["validate-run", str(run), "--dataset", "trec-tot/2023/train"])
    captured = capsys.readouterr()
    assert status == 1                                   # the run breaks a rule: that is what it says first
    assert "1 result and 1 malformed line (line 2), 1 query, tag 'tag': 1 failure {'columns': 1}" in captured.out
    assert "its topics and qrels are on disk: --dataset trec-tot-local/2023-train" in captured.err
    assert main(["validate-run", str(run), "--dataset", "trec-tot-local/2023-train"]) == 1
    err = capsys.readouterr().err
    assert "no corpus" in err and "trec-tot/2023/train" not in err   # never sends the user back to what failed
