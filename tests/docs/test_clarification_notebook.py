"""``notebooks/clarification.ipynb`` plays oracle games (no LLM), a short SmolLM2 game replayed from its cache,
and ``interactive_search`` with scripted answers, offline."""
import os

import pytest

from tests.helpers.notebooks import cell_outputs
from tests.helpers.paths import ROOT

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")


def test_clarification_notebook_executes(tmp_path, reddit):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "clarification.ipynb", as_version=4)
    assert "N_QUERIES = 20" in nb.cells[1].source
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's package, wherever it is installed
    outputs = cell_outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "20 queries; 2679 books" in text
    assert "LLM calls during the replay: 0" in text and "same scores: True" in text
    assert "cum_top1" in text and "gold_rank" in text and "p_wilcoxon" in text
    assert "Turn 1: the likeliest books now" in text
    png = tmp_path / "runs" / "clarification-turns.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
