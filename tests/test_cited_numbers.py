"""The headline numbers the README, the quickstart, the notebook and the recipe's docstring cite are the committed
benchmark results' numbers: re-running a benchmark and forgetting one of the places that quote it fails here,
instead of shipping a silently stale number."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "recipe" / "results"
#: The results file whose "the default" row is the number the docs give for ``tuned_pipeline(ds)``.
DEFAULT_RESULTS = "recipe_depth_mpnet_now"
#: The results file and row of ``tuned_pipeline(ds, base="minilm")`` (make demo's recipe).
MINILM_RESULTS, MINILM_ROW = "recipe_depth", "recipe minilm, after (current base, bagged floor fit, 1000 deep)"


def _rows(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())["results"]


def _default_row() -> dict:
    rows = [v for n, v in _rows(DEFAULT_RESULTS).items() if "(the default" in n]
    assert len(rows) == 1, f"{DEFAULT_RESULTS}.json should have one row named '(the default ...'"
    return rows[0]


def _bare(x: float) -> str:  # .708
    return f"{x:.3f}".lstrip("0")


def _text(rel: str) -> str:
    text = (ROOT / rel).read_text(encoding="utf8")
    if rel.endswith(".ipynb"):  # the markdown cells, as one text
        cells = json.loads(text)["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return " ".join(text.replace("#:", " ").split())  # reflow docstring and comment lines


def _default_citations():
    d = _default_row()
    m = _rows(MINILM_RESULTS)[MINILM_ROW]
    return [
        ("README.md", f"R@1 {_bare(d['R@1'])}, R@5 {_bare(d['R@5'])}, R@10 {_bare(d['R@10'])}, "
                      f"R@20 {_bare(d['R@20'])}, R@100 {_bare(d['R@100'])}, R@1000 {_bare(d['R@1000'])}, "
                      f"MRR {_bare(d['MRR'])}"),
        ("README.md", f"R@5 {_bare(m['R@5'])}, R@100 {_bare(m['R@100'])}, R@1000 {_bare(m['R@1000'])}, "
                      f"MRR {_bare(m['MRR'])}"),
        ("docs/quickstart.rst", f"R@5 {d['R@5']:.3f}, MRR {d['MRR']:.3f}, R@1000 {d['R@1000']:.3f}"),
        ("docs/quickstart.rst", f"R@5 {m['R@5']:.3f}, MRR {m['MRR']:.3f}, R@1000 {m['R@1000']:.3f}"),
        ("notebooks/quickstart.ipynb", f"R@5 {d['R@5']:.3f}, MRR {d['MRR']:.3f}, R@1000 {d['R@1000']:.3f}"),
        ("notebooks/quickstart.ipynb", f"R@5 {m['R@5']:.3f}, MRR {m['MRR']:.3f}, R@1000 {m['R@1000']:.3f}"),
        ("pyterrier_tot/recipe/tuned.py", f"R@5 {_bare(d['R@5'])} / MRR {_bare(d['MRR'])}"),
        ("pyterrier_tot/recipe/tuned.py", f"MiniLM's {_bare(m['R@5'])} / {_bare(m['MRR'])}"),
    ]


def _seed_citation():
    d = [v for n, v in _rows("recipe_depth_mpnet_seed43").items() if "(the default" in n][0]
    return " / ".join(_bare(d[c]) for c in ("R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR"))


def test_the_second_training_run_is_cited_as_measured():
    assert f"gave the recipe {_seed_citation()}" in _text("README.md"), "README should cite " \
        "recipe_depth_mpnet_seed43.json's default row"


@pytest.mark.parametrize("where, cited", _default_citations())
def test_headline_numbers_are_the_committed_results(where, cited):
    assert cited in _text(where), f"{where} should cite {cited!r} (benchmarks/recipe/results/{DEFAULT_RESULTS}.json, " \
                                  f"{MINILM_RESULTS}.json)"


def test_the_default_row_names_the_results_file_it_comes_from():
    for where in ("README.md", "docs/quickstart.rst", "pyterrier_tot/recipe/tuned.py"):
        assert f"{DEFAULT_RESULTS}.md" in _text(where), where
