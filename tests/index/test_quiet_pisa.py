"""PISA's own logs (``[info] ...`` lines on fd 1, ``Storing terms statistics: 5%`` bars on fd 2) stay out of the
user's output while a BM25 index is built and its scores are prepared, unless asked for (``ptt.bars.native_logs``
or ``$PYTERRIER_TOT_NATIVE_LOGS=1``). The silencing must hold where ``sys.stdout.fileno()`` is not fd 1: pytest's
``capfd`` and Jupyter's kernel both replace ``sys.stdout`` with a stream whose ``fileno()`` is another descriptor,
and redirecting that one let every line through (into the notebook cell)."""
import os

import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.console import native_logs, quiet_native_output
from tests.helpers.books import TINY_BOOKS

PISA_MARKS = ("[info]", "Storing terms statistics", "Create index", "Processed documents")


def _build_and_search(path) -> int:
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=path, name="tiny")
    return len(index.bm25()(pd.DataFrame({"qid": ["1"], "query": ["dragons red moon"]})))


def _pisa_lines(text: str):
    return [line for line in text.splitlines() if any(m in line for m in PISA_MARKS)]


def test_index_build_and_bm25_write_no_pisa_logs(tmp_path, capfd):
    assert _build_and_search(tmp_path / "idx") > 0
    out, err = capfd.readouterr()
    assert not _pisa_lines(out) and not _pisa_lines(err), (out + err)[:2000]


def test_pisa_logs_show_when_asked_for(tmp_path, capfd):
    with native_logs():
        assert _build_and_search(tmp_path / "idx") > 0
    out, err = capfd.readouterr()
    assert any("[info]" in line for line in out.splitlines() + err.splitlines())


def test_environment_variable_asks_for_them(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_NATIVE_LOGS", "1")
    assert _build_and_search(tmp_path / "idx") > 0
    out, err = capfd.readouterr()
    assert _pisa_lines(out + err)


def test_silenced_output_comes_back_when_the_block_fails(capfd):
    with pytest.raises(RuntimeError):
        with quiet_native_output():
            os.write(2, b"native said why\n")
            raise RuntimeError("boom")
    assert "native said why" in capfd.readouterr().err


def test_notebook_cell_shows_no_pisa_logs(tmp_path, monkeypatch):
    """A real Jupyter kernel: fds 1 and 2 are the pipes that feed the cell."""
    # ipykernel leaves fds 1 and 2 alone when it sees pytest's variable: without it, the kernel behaves as in Jupyter
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = ("import pandas as pd, pyterrier_tot as ptt\n"
            f"books = pd.DataFrame({TINY_BOOKS!r})\n"
            f"index = ptt.BookIndex(books, path={str(tmp_path / 'idx')!r}, name='tiny')\n"
            "print('found', len(index.bm25()(pd.DataFrame({'qid': ['1'], 'query': ['dragons red moon']}))))\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert "found" in shown
    assert not _pisa_lines(shown), shown[:2000]
