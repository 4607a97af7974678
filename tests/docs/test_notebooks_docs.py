"""The notebooks run offline, and the Sphinx docs build."""
import subprocess
import sys

import pytest

from tests.helpers.notebooks import execute_notebook
from tests.helpers.paths import ROOT


def test_quickstart_notebook_executes(tmp_path, reddit, monkeypatch):
    """The notebook as a reader gets it (the fine-tuned base), run on the data sample the docs runner uses
    ($PYTERRIER_TOT_SAMPLE=30): the sample's base and weights are the ones README.md's example trains and fits,
    so after the docs runner nothing is trained again. On the full data the same cells train for 19 minutes."""
    import re

    from pyterrier_tot.datasets.sample import SAMPLE_ENV

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    assert nb.cells[1].source.startswith("FINE_TUNE = True")
    from tests.helpers import docs_runner

    monkeypatch.setenv(SAMPLE_ENV, str(docs_runner.SAMPLE))   # the kernel inherits it
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                      for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert re.search(rf"\b{docs_runner.SAMPLE} queries; \d+ books", outputs)
    assert "R@100" in outputs and (tmp_path / "runs" / "quickstart-hybrid.run").exists()
    assert "TunedPipeline(RuleClueExtractor()" in outputs  # the tuned pipeline, printed
    assert "dense_ft" in outputs                                    # ... on the fine-tuned base
    for row in ["BM25 + dense", "clues >> BM25 top 100 >> experts", "Tuned pipeline", "Tuned without BM25"]:
        assert row in outputs, row  # the hand-composed ablation table
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_own_catalogue_notebook_executes(tmp_path, reddit, monkeypatch):
    """The guide's notebook: 40 books of one's own from a CSV, search with titles, requests with judgements, the
    training-free pipeline and a Reddit recipe transferred (the recipe trained on the docs runner's 30-query
    sample, so nothing heavy trains here)."""
    from pyterrier_tot.datasets.sample import SAMPLE_ENV

    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "own_catalogue.ipynb", as_version=4)
    from tests.helpers import docs_runner

    monkeypatch.setenv(SAMPLE_ENV, str(docs_runner.SAMPLE))
    assert "TRAIN = False" in nb.cells[12].source and "15-70 minutes" in nb.cells[11].source   # opt-in, said
    assert "parents[1]" not in "".join(c.source for c in nb.cells)    # the CSV comes with the package
    outputs, text = execute_notebook(nb, tmp_path)
    assert "Celia Bright" in text and "The Lantern Keeper's Daughter" in text   # titles and authors shown
    assert "first call on this machine" not in text and "fine-tuning" not in text   # Run all trained nothing
    for row in ["BM25 + dense", "training-free recipe"]:
        assert row in text, row
    assert "Reddit recipe, transferred" in text or "TRAIN = False, so it is skipped" in text
    tables = [o["data"]["text/plain"] for o in outputs if "RR" in str(o.get("data", {}).get("text/plain", ""))]
    scores = [tuple(line.split()[-3:]) for line in tables[0].splitlines()[1:]]   # R@1, R@5, RR per system
    assert len(scores) == 3 and len(set(scores)) == 3, tables[0]     # the requests tell the systems apart


def test_ablation_notebook_executes(tmp_path, reddit, monkeypatch):
    """Every stage added or removed once, one row per removed expert, on the docs runner's data sample
    ($PYTERRIER_TOT_SAMPLE=30, whose indexes the docs have built by then; on the full data the first run builds the
    title and plot indexes of 2,679 books)."""
    import re

    from pyterrier_tot.datasets.sample import SAMPLE_ENV
    from tests.helpers import docs_runner

    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "ablation.ipynb", as_version=4)
    assert "N_QUERIES = 40" in nb.cells[1].source  # the subset size is the first thing a reader can change
    monkeypatch.setenv(SAMPLE_ENV, str(docs_runner.SAMPLE))   # the kernel inherits it
    outputs, text = execute_notebook(nb, tmp_path)
    assert re.search(rf"\b{docs_runner.SAMPLE} queries; \d+ books", text)   # the sample's validation split, whole
    for row in ["HedgeRemover >> BM25", "BM25 >> NegationPenalty", "BM25 >> DenseReranker",
                "Decomposition (all experts)", "Decomposition without title", "Decomposition without plot",
                "R@5 p-value"]:
        assert row in text, row
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("Decomposition without plot" in t for t in tables)  # the ablation table
    assert any("removed" in t and "R@5" in t for t in tables)     # the per-expert deltas
    png = tmp_path / "runs" / "ablation-recall-at-k.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_sphinx_docs_build(tmp_path):
    out = tmp_path / "html"
    # -W: a warning (a broken reference, a docstring autodoc cannot parse, a module that moved) fails the build
    res = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html",
                          str(ROOT / "docs"), str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "index.html").exists() and (out / "api.html").exists()
    api = (out / "api.html").read_text()
    for name in ["pyterrier_tot.index.BookIndex", "pyterrier_tot.datasets.reddit_tomt.RedditTomtBooks",
                 "pyterrier_tot.query.hedge_remover.HedgeRemover", "pyterrier_tot.llm.client.LLM",
                 "pyterrier_tot.decomposition.pipeline.DecompositionPipeline",
                 "pyterrier_tot.covers.cover_ranker.CoverRanker", "pyterrier_tot.rerank.dense_reranker.DenseReranker",
                 "pyterrier_tot.evaluation.plot_recall_at_k", "pyterrier_tot.errors.ToTError"]:
        assert f'id="{name}"' in api, name
    assert "ERROR" not in res.stderr, res.stderr[-3000:]
