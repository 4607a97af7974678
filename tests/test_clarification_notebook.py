"""``notebooks/clarification.ipynb`` plays and plots a clarification game offline (local SmolLM2 server)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_notebooks_docs import ROOT, _outputs  # noqa: E402

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")


def test_clarification_notebook_executes(tmp_path, reddit):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "clarification.ipynb", as_version=4)
    assert "N_QUERIES = 1" in nb.cells[1].source
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "1 queries; 2679 books" in text
    assert "LLM calls during the replay: 0" in text and "same scores: True" in text
    assert "cum_top1" in text and "gold_rank" in text
    png = tmp_path / "runs" / "clarification-turns.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
