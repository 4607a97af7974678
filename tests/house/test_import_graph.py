"""No import circles inside the package: a module never imports (not even lazily, inside a function) a module
that imports it back, directly or through others. A name that two modules share lives in the lower one (or in
``pyterrier_tot/errors.py``) and is re-exported where it used to be.

The graph is read from the source with ``ast``: every ``import pyterrier_tot...`` / ``from pyterrier_tot... import``
anywhere in a module (module level, functions, methods, ``if TYPE_CHECKING`` blocks) is an edge. What is left out,
and why:

- ``pyterrier_tot/__init__.py`` (the top-level re-exports): every public name is re-exported there, so a module that
  reads ``pyterrier_tot.__version__`` would look like a circle with everything. Subpackage ``__init__`` files are
  nodes like any module (``from pyterrier_tot.llm import LLM`` runs ``llm/__init__.py``).
- The deprecated old module paths (``pyterrier_tot.retrieval``, ``pyterrier_tot.bars`` ...) are no files: rows of
  ``pyterrier_tot._compat.MOVED``, whose module objects find their new module by name, at run time. An import of a
  name that is no module file is an edge to the module it is imported from.
- The parent packages that Python imports on the way to a submodule are not edges (each would close a circle
  through its own re-exports); only what a module names.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "pyterrier_tot"
TOP = "pyterrier_tot"


def _modules() -> Dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package modules it imports anywhere in its source (the top-level package left out)."""
    modules = _modules()
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        if name == TOP:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x / from ..y import z
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:  # from pkg import submodule -> the submodule itself
                    sub = f"{source}.{alias.name}"
                    targets.add(sub if sub in modules else source)
        graph[name] = {t for t in targets if t in modules and t not in (TOP, name)}
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _path(graph: Dict[str, Set[str]], component: List[str]) -> str:
    """One concrete circle inside a component, for the failure message (a -> b -> ... -> a)."""
    members, start = set(component), component[0]
    trail, seen = [start], {start}
    while True:
        nxt = sorted(t for t in graph[trail[-1]] if t in members)
        back = [t for t in nxt if t in seen]
        if back:
            i = trail.index(back[0])
            return " -> ".join(trail[i:] + [back[0]])
        trail.append(nxt[0])
        seen.add(nxt[0])


def test_the_graph_sees_lazy_and_relative_imports():
    """The reader finds imports inside functions (the lazy ones that hid the old circles)."""
    graph = import_graph()
    assert "pyterrier_tot.submission.config" in graph
    # config.py imports the index lazily inside a method; the reader must see it
    assert "pyterrier_tot.index" in graph["pyterrier_tot.submission.config"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import circles in pyterrier_tot (move the shared name into the lower module):\n" + "\n".join(
        _path(graph, c) for c in found)


def test_moved_names_still_import_from_their_old_homes():
    """The names moved down to break the circles are the same objects at their old paths."""
    from pyterrier_tot import errors
    from pyterrier_tot.clarinet import cards, questions
    from pyterrier_tot.covers import clip_model, clip_training, cover_index, cover_ranker
    from pyterrier_tot.submission import config, param_types

    assert config.ConfigError is errors.ConfigError is param_types.ConfigError
    assert issubclass(errors.ConfigError, errors.BadInputError)
    assert clip_training.ClipCheckpoint is clip_model.ClipCheckpoint
    assert cover_ranker.COVER_COLUMN == clip_model.COVER_COLUMN == "clue_cover"
    assert questions.book_card is cards.book_card
    assert cover_index.CoverIndex.ranker.__module__ == cover_ranker.__name__


def test_param_check_raises_config_error_naming_the_key():
    """param_types raises ConfigError without importing config (it used to import it inside the function)."""
    import inspect

    import pytest

    from pyterrier_tot.errors import ConfigError
    from pyterrier_tot.submission.param_types import _check_param

    def stage(k: int = 10):
        return k

    param = inspect.signature(stage).parameters["k"]
    with pytest.raises(ConfigError) as err:
        _check_param("pipeline[0].k", param, "ten", "run.toml")
    assert err.value.key == "pipeline[0].k" and "expected int" in str(err.value) and "run.toml" in str(err.value)
