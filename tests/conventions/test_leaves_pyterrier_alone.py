"""Importing and running pyterrier_tot changes nothing in PyTerrier or any other library: no patched operator, no
reassigned ``pt.tqdm``, no import finder. A notebook full of other PyTerrier work behaves the same after
``import pyterrier_tot``."""
import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pyterrier_tot"

_CHECK = """
import sys
import pyterrier as pt
import pyterrier._ops as ops
before = {"Sum.transform": ops.Sum.transform, "pt.tqdm": pt.tqdm, "pt.Transformer.__add__": pt.Transformer.__add__}
finders, hooks = list(sys.meta_path), list(sys.path_hooks)
import pyterrier_tot, pyterrier_tot.recipe, pyterrier_tot.rerank, pyterrier_tot.decomposition  # noqa: E401
after = {"Sum.transform": ops.Sum.transform, "pt.tqdm": pt.tqdm, "pt.Transformer.__add__": pt.Transformer.__add__}
changed = [k for k in before if before[k] is not after[k]]
assert not changed, changed
assert sys.meta_path == finders, [f for f in sys.meta_path if f not in finders]
assert sys.path_hooks == hooks
import pyterrier_tot.bars  # an old module path: a module object of the package's own namespace, no file, no finder
from pyterrier_tot.retrieval import BookIndex
assert BookIndex is pyterrier_tot.BookIndex and sys.meta_path == finders and sys.path_hooks == hooks
assert pyterrier_tot.bars.__spec__.loader is None and not hasattr(pyterrier_tot.bars, "__file__")
print("unchanged")
"""


def test_importing_the_plugin_changes_nothing_in_pyterrier():
    out = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", _CHECK], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("unchanged"), out.stderr[-3000:]


def _foreign_names(tree: ast.AST) -> dict:
    """Names a module binds to other libraries' modules and objects (``import pyterrier as pt``, ``from
    pyterrier._ops import Sum``), anywhere in it."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if not a.name.startswith("pyterrier_tot"):
                    names[a.asname or a.name.split(".")[0]] = a.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module != "__future__" \
                and not (node.module or "").startswith("pyterrier_tot"):
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _root(node: ast.AST):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def foreign_assignments(source: str) -> list:
    """``line: code`` of each assignment to (or deletion of) an attribute of another library's module or object,
    and each ``setattr`` / ``delattr`` on one."""
    tree = ast.parse(source)
    foreign = _foreign_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        flat = [e for group in targets for e in (group.elts if isinstance(group, (ast.Tuple, ast.List)) else [group])]
        for t in flat:
            if isinstance(t, ast.Attribute) and _root(t) in foreign:
                found.append(f"{node.lineno}: {ast.unparse(t)}")
        is_setattr = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("setattr", "delattr")
        if is_setattr and node.args and _root(node.args[0]) in foreign:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_sees_the_patches_it_forbids():
    src = ("import pyterrier as pt\nfrom pyterrier._ops import Sum\nimport pandas as pd\n"
           "def f(x):\n    from tqdm import auto\n    pt.tqdm = x\n    Sum.transform = x\n    setattr(pt, 'tqdm', x)\n"
           "    auto.tqdm.x, y = 1, 2\n    pd.options.mode.copy_on_write = True\n"
           "    own = {}\n    own.x = 1\n    x.tqdm = 1\n")
    assert sorted(int(line.split(":")[0]) for line in foreign_assignments(src)) == [6, 7, 8, 9, 10]


def test_no_module_reassigns_an_attribute_of_another_library():
    found = {str(p.relative_to(PACKAGE.parent)): hits for p in sorted(PACKAGE.rglob("*.py"))
             if (hits := foreign_assignments(p.read_text()))}
    assert not found, found
