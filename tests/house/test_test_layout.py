"""The tests mirror the package: every test module sits in a folder named for what it tests (``tests/index/``,
``tests/recipe/``, ... ``tests/house/`` for these rules), shared code lives in ``tests/helpers`` (imported as
``tests.helpers.<module>``, the checkout's root being on the path by ``pythonpath`` in setup.cfg), and no test
module changes ``sys.path``, imports ``conftest`` or imports another test module."""
import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"__init__.py", "conftest.py"}
#: a change of sys.path: a mutating method, an item or slice assignment, or a new value (not sys.path_hooks, not ==)
SYS_PATH = re.compile(r"\bsys\.path\b(?!_)\s*"
                      r"(\.\s*(insert|append|extend|remove|pop|clear)\b|\[[^\]]*\]\s*=|\s*\+?=(?!=))")


def _sources():
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_at_the_top_level_but_conftest():
    extra = sorted(p.name for p in TESTS.glob("*.py") if p.name not in TOP_LEVEL)
    assert not extra, f"move these into the folder of what they test (or tests/helpers): {extra}"


def test_every_folder_is_a_package():
    """Test modules of the same name in two folders stay two modules (tests.index.test_x, tests.models.test_x)."""
    folders = {p.parent for p in _sources()}
    missing = sorted(str(f.relative_to(TESTS)) for f in folders if not (f / "__init__.py").exists())
    assert not missing, f"folders without __init__.py: {missing}"


def test_no_sys_path_changes():
    found = [f"{p.relative_to(TESTS)}:{n}" for p in _sources() if p != Path(__file__).resolve()   # its examples
             for n, line in enumerate(p.read_text(encoding="utf8").splitlines(), 1) if SYS_PATH.search(line)]
    assert not found, (f"sys.path changed at {found}: import shared code as tests.helpers.<module>; a child "
                       "process gets the checkout on its path from tests.helpers.paths.child_env()")


def _imported_modules(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "")
            yield from (alias.name for alias in node.names)   # a test module, or a test function pytest runs twice


def _forbidden(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def test_no_imports_from_conftest_or_other_test_modules():
    bad = [f"{p.relative_to(TESTS)} imports {name}" for p in _sources() for name in _imported_modules(p)
           if _forbidden(name)]
    assert not bad, f"move what is shared into tests/helpers (or a fixture in a conftest.py): {bad}"


def test_the_sys_path_rule_finds_what_it_forbids():
    for line in ["sys.path.insert(0, str(Path(__file__).parent))", "sys.path[:0] = [here]",
                 "    sys.path.append('x')", "sys.path = old", "code = \"import sys; sys.path.insert(0, 'b')\""]:
        assert SYS_PATH.search(line), line
    for line in ["assert sys.path_hooks == hooks", "if sys.path == before:", "print(sys.path)"]:
        assert not SYS_PATH.search(line), line


def test_the_import_rule_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from conftest import TINY_BOOKS\nimport tests.index.test_retrieval\n"
                   "from tests.core import test_compat\nfrom .test_llm import TOPICS\n")
    found = [n for n in _imported_modules(bad) if _forbidden(n)]
    assert found == ["conftest", "tests.index.test_retrieval", "test_compat", ".test_llm"]
