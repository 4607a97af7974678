"""Run-file checks: a good run passes; each broken TREC ToT rule is rejected, naming its line and rule."""
import pandas as pd
import pytest

from pyterrier_tot.errors import BadInputError
from pyterrier_tot.submission import RunFileError, check_run, validate_run
from pyterrier_tot.submission.cli import main

GOOD = """\
q1 Q0 b2 1 9.500000 my_run-1
q1 Q0 b1 2 7.250000 my_run-1
q1 Q0 b3 3 7.250000 my_run-1
q2 Q0 b5 1 3.000000 my_run-1
q2 Q0 b4 2 -1.000000 my_run-1
"""
TOPICS = ["q1", "q2"]
CORPUS = {"b1", "b2", "b3", "b4", "b5"}


def write(tmp_path, text, name="run.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def broken(tmp_path, old, new, **kwargs):
    """The failures of GOOD with one line (or text) replaced."""
    assert old in GOOD
    return check_run(write(tmp_path, GOOD.replace(old, new)), topics=TOPICS, corpus_docnos=CORPUS, **kwargs).failures


def only(failures, rule, line):
    assert [(f.rule, f.line) for f in failures] == [(rule, line)], failures
    return failures[0]


def test_good_run_passes(tmp_path):
    report = validate_run(write(tmp_path, GOOD), topics=TOPICS, corpus_docnos=CORPUS)
    assert report.ok and report.n_lines == 5 and report.n_queries == 2 and report.tag == "my_run-1"
    assert "OK" in report.summary()


def test_good_frame_passes():
    frame = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["b1", "b2", "b3"], "rank": [0, 1, 0],
                          "score": [2.0, 1.0, 5.0]})
    assert validate_run(frame, topics=["q1", "q2"]).ok  # PyTerrier's ranks from 0 are file ranks from 1


def test_wrong_number_of_columns(tmp_path):
    f = only(broken(tmp_path, "q1 Q0 b1 2 7.250000 my_run-1", "q1 Q0 b1 2 7.250000"), "columns", 2)
    assert "6 columns" in f.message and "line 2: [columns]" in str(f)


def test_q0_column(tmp_path):
    only(broken(tmp_path, "q2 Q0 b5", "q2 0 b5"), "columns", 4)


def test_rank_and_score_must_be_numbers(tmp_path):
    only(broken(tmp_path, "b4 2 -1.000000", "b4 second -1.000000"), "columns", 5)
    only(broken(tmp_path, "b4 2 -1.000000", "b4 2 nan"), "columns", 5)


def test_every_topic_present(tmp_path):
    failures = check_run(write(tmp_path, GOOD), topics=["q1", "q2", "q3"]).failures
    f = only(failures, "topics", None)
    assert "'q3'" in f.message and str(f).startswith("file: [topics]")


def test_qid_that_is_not_a_topic(tmp_path):
    failures = check_run(write(tmp_path, GOOD), topics=["q1"]).failures
    assert "'q2'" in only(failures, "topics", 4).message


def test_at_most_max_per_query(tmp_path):
    f = only(check_run(write(tmp_path, GOOD), max_per_query=2).failures, "depth", 3)
    assert "'q1'" in f.message and "2 results" in f.message
    lines = "".join(f"q1 Q0 d{i} {i} {2000 - i} tag\n" for i in range(1, 1002))
    only(check_run(write(tmp_path, lines, "deep.txt")).failures, "depth", 1001)


def test_unique_docnos_per_query(tmp_path):
    f = only(broken(tmp_path, "q1 Q0 b3 3", "q1 Q0 b2 3"), "unique", 3)
    assert "first on line 1" in f.message


def test_ranks_start_at_one_without_gaps(tmp_path):
    only(broken(tmp_path, "q1 Q0 b3 3", "q1 Q0 b3 4"), "ranks", 3)      # a gap
    only(broken(tmp_path, "q2 Q0 b5 1", "q2 Q0 b5 2"), "ranks", 4)      # from 2, and rank 2 twice
    only(broken(tmp_path, "q1 Q0 b3 3", "q1 Q0 b3 2"), "ranks", 3)      # a repeated rank


def test_scores_non_increasing_with_rank(tmp_path):
    f = only(broken(tmp_path, "b1 2 7.250000", "b1 2 9.750000"), "scores", 2)
    assert "rank 2" in f.message and "line 1" in f.message


def test_run_tag_pattern(tmp_path):
    only(broken(tmp_path, "b4 2 -1.000000 my_run-1", "b4 2 -1.000000 my.run"), "tag", 5)
    long_tag = "a" * 26
    failures = check_run(write(tmp_path, GOOD.replace("my_run-1", long_tag))).failures
    assert long_tag in only(failures, "tag", 1).message  # reported once, on the tag's first line


def test_one_run_tag_per_file(tmp_path):
    assert "differs" in only(broken(tmp_path, "b5 1 3.000000 my_run-1", "b5 1 3.000000 other"), "tag", 4).message


def test_docnos_exist_in_the_corpus(tmp_path):
    f = only(broken(tmp_path, "q2 Q0 b4", "q2 Q0 b9"), "corpus", 5)
    assert "'b9'" in f.message
    assert check_run(write(tmp_path, GOOD)).ok  # no corpus given: not checked


def test_empty_run(tmp_path):
    only(check_run(write(tmp_path, "")).failures, "empty", None)


def test_validate_raises_listing_every_failure(tmp_path):
    text = GOOD.replace("q1 Q0 b3 3", "q1 Q0 b2 3").replace("b4 2 -1.000000", "b4 2 4.0")
    with pytest.raises(RunFileError) as err:
        validate_run(write(tmp_path, text), topics=TOPICS)
    assert isinstance(err.value, BadInputError)
    assert [(f.line, f.rule) for f in err.value.report.failures] == [(3, "unique"), (5, "scores")]
    assert "line 3: [unique]" in str(err.value) and "line 5: [scores]" in str(err.value)


def test_validate_run_command(tmp_path, capsys):
    good, bad = write(tmp_path, GOOD), write(tmp_path, GOOD.replace("q2 Q0 b4", "q2 Q0 b9"), "bad.txt")
    (tmp_path / "topics.tsv").write_text("q1\tfirst\nq2\tsecond\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"docno": "{d}", "title": "t"}}\n' for d in sorted(CORPUS)))
    args = ["--topics", str(tmp_path / "topics.tsv"), "--corpus", str(corpus)]
    assert main(["validate-run", str(good), *args]) == 0
    assert main(["validate-run", str(good), str(bad), *args]) == 1
    out = capsys.readouterr().out
    assert "line 5: [corpus] docno 'b9'" in out


def test_the_report_says_which_rules_it_could_not_check(tmp_path):
    """Issue 30.5: a report without topics or corpus said a bare OK."""
    path = write(tmp_path, GOOD)
    report = check_run(path)
    assert report.ok and report.unchecked == ["topics", "corpus"]
    assert report.summary().splitlines()[0].endswith("OK (format only: topics and corpus not checked)")
    assert check_run(path, topics=TOPICS).summary().endswith("OK (corpus not checked)")
    assert check_run(path, corpus_docnos=CORPUS).summary().endswith("OK (topics not checked)")
    full = validate_run(path, topics=TOPICS, corpus_docnos=CORPUS)
    assert full.unchecked == [] and full.summary().endswith(": OK")


def test_malformed_lines_are_counted_and_named(tmp_path):
    """A 9-line file with one malformed line said "8 results" and nothing of the ninth in its head line."""
    lines = [f"q{q} Q0 b{d} {d} {4.0 - d} run" for q in (1, 2, 3) for d in (1, 2, 3)]
    lines[4] = "q2 Q0 b2 2.0 run"  # line 5: five columns
    report = check_run(write(tmp_path, "\n".join(lines) + "\n"))
    assert report.n_lines == 8 and report.malformed == [5] and report.by_rule() == {"columns": 1}
    head = report.summary().splitlines()[0]
    assert head.startswith(f"{tmp_path / 'run.txt'}: 8 results and 1 malformed line (line 5), 3 queries")
    lines[7] = "q3 Q0 b2 two 2.0 run"  # line 8: six columns, but no rank
    report = check_run(write(tmp_path, "\n".join(lines) + "\n"))
    assert report.n_lines == 7 and report.malformed == [5, 8]
    assert ": 7 results and 2 malformed lines (lines 5, 8), 3 queries" in report.summary()
    assert check_run(write(tmp_path, GOOD)).malformed == []
    only(check_run(write(tmp_path, "not a run\n")).failures, "columns", 1)  # no "empty" on top of it
