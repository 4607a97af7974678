"""The house stays readable: a short README, guides under 20,000 characters, no ticket numbers in what users read,
benchmarks grouped by question with an index naming every script, decomposition/ holding the pipeline's parts."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    # a folder answers one question in a dozen scripts at most, and the index names each under its folder's heading
    sections = {s.split("`", 1)[0].rstrip("/"): s for s in index.split("\n## `")[1:]}
    for folder in {p.parent for p in scripts}:
        mine = [p.name for p in scripts if p.parent == folder]
        assert len(mine) <= 12, (folder.name, sorted(mine))
        unnamed = [n for n in mine if f"**`{n}`**" not in sections.get(folder.name, "")]
        assert not unnamed, f"benchmarks/README.md's section of {folder.name}/ should name {unnamed}"


def test_decomposition_holds_the_pipeline_parts_and_the_top_level_is_small():
    """Modules are sized by concept (DEVELOPERS.md: one concept a module, reviewed, not counted in lines); what is
    counted is how many rooms a reader meets: at most 12 modules at the package's top level and in decomposition/,
    the core in index/, models/ and _plumbing/, and no stub file for an old path (a row of ``_compat.MOVED``)."""
    package = ROOT / "pyterrier_tot"
    modules = [p for p in (package / "decomposition").glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 12, sorted(p.name for p in modules)
    top = sorted(p.name for p in package.glob("*.py"))
    assert len(top) <= 12, top
    assert all((package / room / "__init__.py").exists() for room in ("index", "models", "_plumbing"))
    stubs = [str(p.relative_to(ROOT)) for p in package.rglob("*.py") if "_compat.moved(" in p.read_text()]
    assert not stubs, stubs
