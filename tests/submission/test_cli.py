"""The ``pyterrier-tot`` command end to end on a tiny corpus (BM25, offline), and config errors naming the key."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from pyterrier_tot.submission import CONFIG_DIR, ConfigError, Fusion, example_config, load_config  # noqa: E402
from pyterrier_tot.submission.cli import main  # noqa: E402
from tests.helpers.books import TINY_BOOKS

TOPICS = ("q1\tI think it was about a young blacksmith and a dragon, not sure\n"
          "q2\tmaybe a ghost in an old lighthouse at night\n"
          "q3\tkittens that play all day while their brother naps\n")
QRELS = "q1 0 b2 1\nq2 0 b5 1\nq3 0 b1 1\n"
CONFIG = """\
run_tag = "tiny_bm25"
depth = 3

[dataset]
corpus = "corpus.jsonl"
topics = "topics.tsv"
qrels = "qrels.txt"

[index]
path = "index"

[[pipeline]]
stage = "HedgeRemover"

[[pipeline]]
stage = "bm25"
"""
# BM25 (PISA, k1=1.2, b=0.75) over title + text of the six tiny books, hedges removed, top 3; scores written at
# full precision (PISA's float32 scores as Python floats)
# BM25 over title + author + text: the tiny books have authors, which the default BM25 reads
EXPECTED_RUN = [("q1", "b2", 1, 4.148979), ("q2", "b5", 1, 3.600165), ("q2", "b1", 2, 0.573974),
                ("q3", "b1", 1, 6.832446)]


def run_lines(text: str):
    return [line.split() for line in text.splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A folder with a corpus JSONL, topics, qrels and a BM25 config (the index is built by the first test)."""
    d = tmp_path_factory.mktemp("cli")
    (d / "corpus.jsonl").write_text("".join(json.dumps(b) + "\n" for b in TINY_BOOKS))
    (d / "topics.tsv").write_text(TOPICS)
    (d / "qrels.txt").write_text(QRELS)
    (d / "bm25.toml").write_text(CONFIG)
    return d


def test_index_run_validate_evaluate(tiny, capsys):
    cfg, run = str(tiny / "bm25.toml"), tiny / "out" / "run.txt"
    assert main(["index", cfg]) == 0
    assert (tiny / "index" / "pt_meta.json").is_file()
    assert main(["run", cfg, "-o", str(run)]) == 0
    lines = run_lines(run.read_text())
    assert [(q, d, int(r)) for q, _, d, r, _, _ in lines] == [e[:3] for e in EXPECTED_RUN]
    assert [float(x[4]) for x in lines] == pytest.approx([e[3] for e in EXPECTED_RUN], abs=1e-6)
    assert {x[1] for x in lines} == {"Q0"} and {x[5] for x in lines} == {"tiny_bm25"}
    assert "tag 'tiny_bm25': OK" in capsys.readouterr().out
    assert main(["validate-run", str(run), "--config", cfg]) == 0
    assert main(["evaluate", str(run), "--config", cfg, "-o", str(tiny / "out" / "table.csv")]) == 0
    table = pd.read_csv(tiny / "out" / "table.csv")
    assert table.loc[0, "name"] == "run.txt"
    assert table.loc[0, "R@1"] == pytest.approx(1.0) and table.loc[0, "RR"] == pytest.approx(1.0)
    out = capsys.readouterr().out
    assert "R@1" in out and "nDCG@10" in out


def test_run_with_topics_file_and_overrides(tiny):
    (tiny / "more.jsonl").write_text('{"query_id": "x7", "query": "a haunted lighthouse"}\n')
    run = tiny / "x7.txt"
    assert main(["run", str(tiny / "bm25.toml"), "--topics", str(tiny / "more.jsonl"), "--tag", "other",
                 "--depth", "1", "-o", str(run)]) == 0
    lines = run.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("x7 Q0 b5 1 ") and lines[0].endswith(" other")


def test_module_entry_point(tiny):
    done = subprocess.run([sys.executable, "-m", "pyterrier_tot.submission.cli", "validate-run",
                           str(tiny / "missing.txt")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "missing.txt" in done.stderr


def test_evaluate_several_runs(tiny, capsys):
    run = tiny / "out" / "run.txt"
    if not run.is_file():
        pytest.skip("needs the end-to-end test's run file")
    worse = tiny / "worse.txt"
    worse.write_text("q1 Q0 b1 1 2.0 worse\nq1 Q0 b2 2 1.0 worse\nq2 Q0 b5 1 1.0 worse\n")
    assert main(["evaluate", str(run), str(worse), "--qrels", str(tiny / "qrels.txt")]) == 0
    out = capsys.readouterr().out
    assert "worse.txt" in out and "p-value" in out


def test_experiment_table_and_plot(tiny):
    (tiny / "plain.toml").write_text(CONFIG.replace('"tiny_bm25"', '"plain"').replace(
        '[[pipeline]]\nstage = "HedgeRemover"\n\n', ""))
    out = tiny / "exp"
    assert main(["experiment", str(tiny / "bm25.toml"), str(tiny / "plain.toml"), "--output-dir", str(out)]) == 0
    table = pd.read_csv(out / "experiment.csv")
    assert table["name"].tolist() == ["tiny_bm25", "plain"]
    assert "R@100" in table.columns and "R@1000" not in table.columns and "RR p-value" in table.columns
    assert (out / "recall_at_k.png").stat().st_size > 0


def test_fusion_stage(tiny):
    from pyterrier_tot.index import BookIndex

    index = BookIndex(tiny / "index")
    cfg = load_config({"pipeline": [{"stage": "fuse", "method": "rrf", "num_results": 2,
                                     "inputs": [["bm25"], [{"stage": "bm25", "fields": ["title"]}]]}]})
    pipe = cfg.build(index=index)
    assert isinstance(pipe, Fusion)
    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["dragon blacksmith", "lighthouse night"]})
    res = pipe(topics)
    assert res.groupby("qid").size().max() <= 2 and res.loc[res.qid == "q1", "docno"].iloc[0] == "b2"
    assert list(res["query"].unique()) == topics["query"].tolist()
    assert pipe(topics.iloc[:0]).empty


BAD = [
    ({"pipelines": []}, "pipelines", "unknown key"),
    ({"pipeline": [{"stage": "BM25"}]}, "pipeline[0]", "unknown stage 'BM25'"),
    ({"pipeline": [{"stage": "bm25", "k": 5}]}, "pipeline[0].k", "unknown parameter of bm25"),
    ({"pipeline": [{"stage": "bm25", "num_results": "ten"}]}, "pipeline[0].num_results", "wrong type"),
    ({"pipeline": [{"stage": "HedgeRemover", "count": 1}]}, "pipeline[0].count", "wrong type"),
    ({"pipeline": [{"stage": "DenseReranker", "index": "x"}]}, "pipeline[0].index", "filled in"),
    ({"pipeline": ["bm25", {"stage": "DenseReranker", "alpha": "high"}]}, "pipeline[1].alpha", "wrong type"),
    ({"pipeline": [{"stage": "decomposition_pipeline", "decomposer": {"stage": "Nope"}}]},
     "pipeline[0].decomposer", "unknown stage"),
    ({"pipeline": [{"stage": "fuse", "inputs": [["bm25"]]}]}, "pipeline[0].inputs", "at least two"),
    ({"pipeline": [{"stage": "fuse", "inputs": [["bm25"], [{"stage": "bm25", "x": 1}]]}]},
     "pipeline[0].inputs[1][0].x", "unknown parameter"),
    ({"pipeline": [{"stage": "fuse", "method": "max", "inputs": [["bm25"], ["dense"]]}]},
     "pipeline[0].method", "unknown fusion"),
    ({"run_tag": "has space", "pipeline": ["bm25"]}, "run_tag", "1-25"),
    ({"depth": 5000, "pipeline": ["bm25"]}, "depth", "1 to 1000"),
    ({"dataset": {"name": "x", "corpus": "y"}, "pipeline": ["bm25"]}, "dataset", "either"),
    ({"dataset": {"nmae": "x"}, "pipeline": ["bm25"]}, "dataset.nmae", "unknown key"),
    ({"llm": {"modle": "x"}, "pipeline": ["bm25"]}, "llm.modle", "unknown LLM parameter"),
    ({"llm": {"temperature": "hot"}, "pipeline": ["bm25"]}, "llm.temperature", "wrong type"),
    ({}, "pipeline", "missing"),
]


@pytest.mark.parametrize("config,key,why", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_config_names_the_key(config, key, why):
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.key == key and why in str(err.value)


def test_bad_config_from_the_command(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[pipeline]]\nstage = "bm25"\nnum_reslts = 10\n')
    assert main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: pipeline[0].num_reslts: unknown parameter of bm25" in err
    cfg.write_text('[[pipeline]\nstage = "bm25"\n')
    assert main(["index", str(cfg)]) == 2 and "not valid TOML" in capsys.readouterr().err


def test_errors_while_building_name_the_stage(tiny):
    from pyterrier_tot.index import BookIndex

    cfg = load_config({"pipeline": ["bm25", {"stage": "DenseReranker", "k": 0}]})
    with pytest.raises(ConfigError) as err:
        cfg.build(index=BookIndex(tiny / "index"))
    assert err.value.key == "pipeline[1]" and "k must be >= 1" in str(err.value)


@pytest.mark.parametrize("name", ["query_stage", "decomposition", "title_naming"])
def test_shipped_configs_are_valid(name):
    cfg = load_config(example_config(name))
    assert cfg.dataset_spec["name"] == "reddit-tomt-books" and cfg.pipeline
    assert sorted(p.stem for p in CONFIG_DIR.glob("*.toml")) == ["decomposition", "query_stage", "title_naming"]


def test_topics_files(tmp_path):
    from pyterrier_tot.errors import BadInputError
    from pyterrier_tot.submission import read_topics

    (tmp_path / "t.jsonl").write_text('{"query_id": 7, "title": "A book", "text": "with a dragon"}\n')
    assert read_topics(tmp_path / "t.jsonl").to_dict("records") == [{"qid": "7", "query": "A book\nwith a dragon"}]
    (tmp_path / "t.tsv").write_text("q1\ta dragon\tand a moon\nq2 no tab\n")
    with pytest.raises(BadInputError, match=r"line\(s\) \[2\]"):
        read_topics(tmp_path / "t.tsv")
    (tmp_path / "t.tsv").write_text("q1\ta dragon\tand a moon\n")
    assert read_topics(tmp_path / "t.tsv")["query"].tolist() == ["a dragon\tand a moon"]


def test_shipped_configs_by_name(capsys):
    """Issue 22.4: `pyterrier-tot index query_stage.toml` failed; shipped configs were reachable only from Python."""
    assert main(["configs"]) == 0
    listed = capsys.readouterr().out
    assert "query_stage" in listed and "decomposition" in listed and "HedgeRemover" in listed
    for name in ("query_stage", "query_stage.toml"):
        cfg = load_config(name)
        assert cfg.run_tag == "ptt_query_stage" and cfg.source == str(example_config("query_stage"))
    with pytest.raises(FileNotFoundError, match="neither a file nor a shipped example config.*query_stage"):
        load_config("no_such_config.toml")
    assert main(["validate-run", "x.run", "--config", "no_such_config"]) == 2


def test_evaluate_judges_what_it_says(tiny, capsys):
    """Issue 22.4: a run over part of the topics was silently scored over every judged query."""
    part = tiny / "part.txt"
    part.write_text("q1 Q0 b2 1 2.0 part\n")
    assert main(["evaluate", str(part), "--qrels", str(tiny / "qrels.txt"), "-o", str(tiny / "all.csv")]) == 0
    err = capsys.readouterr().err
    assert "answers 1 of the 3 judged queries" in err and "--topics" in err
    assert pd.read_csv(tiny / "all.csv").loc[0, "RR"] == pytest.approx(1 / 3, abs=1e-4)
    (tiny / "one.jsonl").write_text('{"qid": "q1", "query": "dragon"}\n')
    assert main(["evaluate", str(part), "--qrels", str(tiny / "qrels.txt"), "--topics", str(tiny / "one.jsonl"),
                 "-o", str(tiny / "one.csv")]) == 0
    assert "judging the 1 judged topics" in capsys.readouterr().err
    assert pd.read_csv(tiny / "one.csv").loc[0, "RR"] == pytest.approx(1.0)


def test_validate_run_explains_and_fixes_pyterrier_ranks(tiny, tmp_path, capsys):
    """Issue 22.4: a run written by pt.io.write_results (ranks from 0) was rejected with no way out."""
    import pyterrier as pt

    res = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["b2", "b1", "b5"], "score": [3.0, 1.0, 2.0]})
    run = tmp_path / "pt.run"
    pt.io.write_results(pt.model.add_ranks(res), str(run), format="trec", run_name="ptrun")
    assert main(["validate-run", str(run)]) == 1
    assert "ranks start at 0" in capsys.readouterr().out
    fixed = tmp_path / "fixed.run"
    assert main(["validate-run", str(run), "--fix", "-o", str(fixed)]) == 0
    assert [line.split()[3] for line in fixed.read_text().splitlines()] == ["1", "2", "1"]
    assert main(["validate-run", str(run), "--fix"]) == 0  # in place
    assert main(["validate-run", str(run)]) == 0
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 b2 0 1.0 t\nq1 Q0 b2 1 0.5 t\n")
    assert main(["validate-run", str(bad), "--fix"]) == 1  # a repeated docno is not a rank problem: refused


def test_search_prints_titles_authors_and_years(tiny, capsys):
    """``pyterrier-tot search`` shows people titles, not docnos: the retriever it used, then rank, title, author,
    year and docno per book."""
    assert main(["index", str(tiny / "bm25.toml")]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(tiny / "index"), "a ghost keeper climbing the stairs of a lighthouse",
                 "--retriever", "bm25", "-k", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "Searching with BM25 (--retriever bm25)." and 2 <= len(lines) <= 3
    assert lines[1] == "  1. The Haunted Lighthouse (Fay Lorne, 2001)  [b5]"
    assert main(["search", "nothing given"]) == 2


@pytest.fixture(scope="module")
def own_index(tmp_path_factory):
    import pyterrier_tot as ptt

    return ptt.BookIndex(pd.read_csv(ptt.example_catalogue(), dtype={"docno": str}), name="our-library",
                         path=tmp_path_factory.mktemp("own") / "index")


def test_a_cold_search_says_what_it_searches_with_and_builds_before_building_and_finds_the_author(
        own_index, capsys, monkeypatch):
    """The guide's example: ``search ... "the book by Celia Bright"`` missed her book (dense over title + text
    only), and a cold search showed a bar at 0 for minutes before naming its retriever. Now an index of one's own
    is searched with the training-free pipeline (BM25 and the author expert read the author), and the first lines
    say so and list what must be built, with an estimate, before anything is encoded."""
    from pyterrier_tot.index.encoding import SortedDocEncoder

    real = SortedDocEncoder.encode
    monkeypatch.setattr(SortedDocEncoder, "encode", lambda self, texts: print("<encoding>") or real(self, texts))
    assert main(["search", "--index", str(own_index.path), "the book by Celia Bright", "-k", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("Searching with the training-free pipeline (zero-shot ") and "author" in lines[0]
    assert lines[1].startswith("search, first call on this machine (")
    assert out.index("books/s timed here") < out.index("<encoding>")
    assert "cached already: nothing yet" in out and "in all about" in out
    ranked = [line for line in lines if line.endswith("]")]
    assert ranked[0] == "  1. The Lantern Keeper's Daughter (Celia Bright, 2009)  [bk01]" and len(ranked) == 3
    assert main(["search", "--index", str(own_index.path), "the book by Celia Bright", "-k", "1",
                 "--retriever", "training-free"]) == 0
    out = capsys.readouterr().out
    assert "first call" not in out and "<encoding>" not in out    # built once: nothing to say, nothing to encode
    assert "[bk01]" in out.splitlines()[-1]


def test_the_dense_index_bar_moves_with_the_books_encoded(own_index, monkeypatch):
    """It showed ``0/2679`` for the whole encoding: the books were handed over in one chunk, counted before."""
    from pyterrier_tot import console
    from pyterrier_tot.index import encoding

    monkeypatch.setattr(encoding, "PROGRESS_SLICE", 16)
    seen = []
    with console.observe(lambda desc, done, total: seen.append(done) if "dense title" in desc else None):
        own_index.flex_index(fields=("title",), max_chars=30)
    assert seen == [16, 32, 40]
