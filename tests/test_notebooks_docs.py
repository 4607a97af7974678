"""The quickstart notebook runs offline, and the Sphinx docs build."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_notebook_executes(tmp_path, reddit):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                      for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "233 queries; 2679 books" in outputs
    assert "R@100" in outputs and (tmp_path / "runs" / "quickstart-hybrid.run").exists()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_sphinx_docs_build(tmp_path):
    out = tmp_path / "html"
    res = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "index.html").exists() and (out / "api.html").exists()
    assert "BookIndex" in (out / "api.html").read_text()
    assert "ERROR" not in res.stderr, res.stderr[-3000:]
