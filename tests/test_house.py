"""The house stays readable: a short README, guides under 20,000 characters, no ticket numbers in what users read,
benchmarks grouped by question with an index naming every script, decomposition/ holding the pipeline's parts."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKET = re.compile(r"\bissues? ?#?[0-9]+(\.[0-9]+)?\b", re.IGNORECASE)


def test_the_readme_is_short_and_the_guides_are_pages_not_books():
    assert len((ROOT / "README.md").read_text()) <= 10_000
    long = {p.name: len(p.read_text()) for p in (ROOT / "docs").glob("*.rst") if len(p.read_text()) > 20_000}
    assert not long, long


def test_what_users_read_names_changes_not_tickets():
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.rst"),
             *(ROOT / "pyterrier_tot").rglob("*.py"), *(ROOT / "notebooks").glob("*.ipynb")]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
             if TICKET.search(line)]
    assert not found, found[:10]


def test_benchmarks_are_grouped_and_every_script_is_named_in_the_index():
    top = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert len(top) <= 8, top
    index = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = [p for p in (ROOT / "benchmarks").glob("*/*.py") if not p.name.startswith("_")]
    missing = [str(p.relative_to(ROOT)) for p in scripts if p.name not in index]
    assert not missing, missing


def test_decomposition_holds_the_pipeline_parts_and_modules_are_sized_by_concept():
    # the stub files of old module paths (``_compat.moved``: they warn and re-export) are not parts
    modules = [p for p in (ROOT / "pyterrier_tot" / "decomposition").glob("*.py") if p.name != "__init__.py"
               and "_compat.moved(__name__)" not in p.read_text()]
    assert len(modules) <= 12, sorted(p.name for p in modules)
    big = {str(p.relative_to(ROOT)): n for p in (ROOT / "pyterrier_tot").rglob("*.py")
           if (n := len(p.read_text().splitlines())) > 400}
    assert not big, big
