"""``make demo`` (``python -m pyterrier_tot.demo``) on the docs runner's data sample: the five systems in one table,
the Recall@k plot and the best system's run file, and the note that its base is the fast one, not the default."""

import pandas as pd


def test_the_demo_runs_and_says_which_base(reddit, tmp_path, monkeypatch, capsys):
    from pyterrier_tot import demo
    from pyterrier_tot.datasets.sample import SAMPLE_ENV
    from tests.helpers import docs_runner

    monkeypatch.setenv(SAMPLE_ENV, str(docs_runner.SAMPLE))   # the sample README.md's example trains its base on
    table = demo.main(["--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "base here is minilm, the fast one" in out and "default, the one we recommend, is mpnet" in out
    assert len(table) == 5 and table["name"].iloc[-1] == "Decomposition pipeline (fine-tuned minilm base)"
    assert len(list(tmp_path.glob("reddit-tomt-books*-validation-recall-at-k.png"))) == 1
    (run_file,) = tmp_path.glob("*-best.run")
    run = pd.read_csv(run_file, sep=r"\s+", header=None, names=["qid", "Q0", "docno", "rank", "score", "tag"])
    assert run["qid"].nunique() == docs_runner.SAMPLE
