"""The numbers the README, the guides, the research record, the notebook and the recipe's docstring cite are the
committed benchmark results' numbers: re-running a benchmark and forgetting one of the places that quote it fails
here, instead of shipping a silently stale number."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "recipe" / "results"
#: The results of the studies that rejected an idea for the recipe.
REJECTED = ROOT / "benchmarks" / "recipe_rejected" / "results"
#: The results file whose "the default" row is the number the docs give for ``tuned_pipeline(ds)``.
DEFAULT_RESULTS = "recipe_default"
#: The results file and row of ``tuned_pipeline(ds, base="minilm")`` (make demo's recipe).
MINILM_RESULTS, MINILM_ROW = "recipe_depth_minilm", "recipe minilm, after (current base, bagged floor fit, 1000 deep)"
#: The fine-tuned bases alone, in the same files.
MPNET_ROW = "mpnet fine-tuned alone (lr 3e-05, epoch 2 of 3)"
MINILM_BASE_ROW = "minilm fine-tuned alone, now (lr 5e-05, epoch 2 of 2)"
BM25_ROW = "BM25 (title+text)"
ALL_CUTS = ("R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR")


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
        ("docs/quickstart.rst", f"R@5 {d['R@5']:.3f}, MRR {d['MRR']:.3f}, R@1000 {d['R@1000']:.3f}"),
        ("docs/quickstart.rst", f"R@5 {m['R@5']:.3f}, MRR {m['MRR']:.3f}, R@1000 {m['R@1000']:.3f}"),
        ("notebooks/quickstart.ipynb", f"R@5 {d['R@5']:.3f}, MRR {d['MRR']:.3f}, R@1000 {d['R@1000']:.3f}"),
        ("notebooks/quickstart.ipynb", f"R@5 {m['R@5']:.3f}, MRR {m['MRR']:.3f}, R@1000 {m['R@1000']:.3f}"),
        ("pyterrier_tot/recipe/bases.py", f"R@5 {_bare(d['R@5'])} / MRR {_bare(d['MRR'])}"),
        ("pyterrier_tot/recipe/bases.py", f"MiniLM's {_bare(m['R@5'])} / {_bare(m['MRR'])}"),
        ("docs/research.rst", " / ".join(_bare(d[c]) for c in ALL_CUTS)),
    ]


#: README's headline table: the start of each row's first cell -> (results file, row of its "results").
README_ROWS = {
    "BM25": (DEFAULT_RESULTS, BM25_ROW),
    "fine-tuned base": (DEFAULT_RESULTS, MPNET_ROW),
    "the default recipe": (DEFAULT_RESULTS, None),  # None: the row named "(the default ..."
    "the fast recipe": (MINILM_RESULTS, MINILM_ROW),
}
#: docs/strong_retrievers.rst's table of the bases and recipes: the row's first words -> (file, row).
GUIDE_ROWS = {
    "fine-tuned mpnet alone": (DEFAULT_RESULTS, MPNET_ROW),
    "the default recipe": (DEFAULT_RESULTS, None),
    "fine-tuned MiniLM alone": (MINILM_RESULTS, MINILM_BASE_ROW),
    "the fast recipe": (MINILM_RESULTS, MINILM_ROW),
}


def _row(name: str, row) -> dict:
    return _default_row() if row is None else _rows(name)[row]


def _readme_table() -> dict:
    """{first cell: [cells]} of README.md's headline table (the one with an R@5 column)."""
    lines = (ROOT / "README.md").read_text(encoding="utf8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| system | R@5 |"))
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]  # noqa: E731
    columns = cells(lines[head])
    table = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(columns, cells(line)))
        table[row["system"]] = row
    return table


def test_readme_headline_table_is_the_committed_results():
    table = _readme_table()
    assert len(table) == len(README_ROWS), f"README's headline table has rows {list(table)}"
    for label, (name, row) in README_ROWS.items():
        (system,) = [s for s in table if s.startswith(label)]
        cited, r = table[system], _row(name, row)
        for measure in ("R@5", "R@100", "MRR"):
            assert cited[measure] == _bare(r[measure]), f"README's {system!r} {measure}: {cited[measure]} is not " \
                                                        f"{name}.json's {_bare(r[measure])}"
        assert f"benchmarks/recipe/results/{name}.md" in cited["result file"], system


def test_the_recipe_guide_table_is_the_committed_results():
    text = (ROOT / "docs" / "strong_retrievers.rst").read_text(encoding="utf8")
    for label, (name, row) in GUIDE_ROWS.items():
        r = _row(name, row)
        want = "  ".join(_bare(r[m]) for m in ("R@1", "R@5", "R@20", "R@100", "R@1000", "MRR"))
        (line,) = [line for line in text.splitlines() if line.startswith(label)]
        assert re.sub(r"\s+", "  ", line.split("  ", 1)[1].strip()) == want, f"{line!r} should read {want}"


def _seed_citation():
    d = [v for n, v in _rows("recipe_depth_mpnet_seed43").items() if "(the default" in n][0]
    return " / ".join(_bare(d[c]) for c in ALL_CUTS)


def test_the_second_training_run_is_cited_as_measured():
    assert f"gave the recipe {_seed_citation()}" in _text("docs/research.rst"), "docs/research.rst should cite " \
        "recipe_depth_mpnet_seed43.json's default row"


@pytest.mark.parametrize("where, cited", _default_citations())
def test_headline_numbers_are_the_committed_results(where, cited):
    assert cited in _text(where), f"{where} should cite {cited!r} (benchmarks/recipe/results/{DEFAULT_RESULTS}.json, " \
                                  f"{MINILM_RESULTS}.json)"


def test_the_default_row_names_the_results_file_it_comes_from():
    for where in ("README.md", "docs/quickstart.rst", "docs/strong_retrievers.rst", "docs/research.rst",
                  "pyterrier_tot/recipe/bases.py"):
        assert f"{DEFAULT_RESULTS}.md" in _text(where), where


def test_the_training_cost_study_is_cited_as_measured():
    """The research record's sentence on cheaper training quotes training_cost.json (tuning objective and R@5 of
    the default and of the 128-token profile, and the rule's outcome)."""
    study = json.loads((REJECTED / "training_cost.json").read_text())
    rows = {r["name"]: r for r in study["rows"]}
    d, s = rows["default"]["tuning"], rows["seq128"]["tuning"]
    cited = f"lowered the objective {_bare(d['objective'])} to {_bare(s['objective'])}"
    assert cited in _text("docs/research.rst") and f"R@5 {_bare(d['R@5'])} to {_bare(s['R@5'])}" in \
        _text("docs/research.rst"), f"docs/research.rst should cite {cited!r} (training_cost.json)"
    assert study["adopted"] is None and not any(r.get("passes") for r in study["rows"]), \
        "the record says no profile passed; training_cost.json now adopts one"
