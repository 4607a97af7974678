"""Every code block of README.md and docs/*.rst runs as written (on the tiny data sample the runner sets), or
says in the docs, on the line before it, why it cannot. The runner is ``tests/helpers/docs_runner.py``; the blocks that
ran or were skipped are listed at the end of the pytest output."""
from pathlib import Path

import pytest

from tests.helpers import docs_runner as dr

#: Pages other engineers are rewriting now (path: reason); their blocks join the runner when they land.
PENDING: dict = {}


def _rel(path: Path) -> str:
    return str(path.relative_to(dr.ROOT))


FILES = dr.docs_files()
RUNNABLE = [p for p in FILES if any(b.kind in ("python", "shell") for b in dr.blocks_of(p))]


class _Report:
    """Prints one table of every block (ran / skipped with its reason / failed) after the test session."""

    def __init__(self):
        self.blocks = []

    def pytest_terminal_summary(self, terminalreporter):
        if self.blocks:
            terminalreporter.write_sep("-", "docs runner: every code block of README.md and docs/*.rst")
            terminalreporter.write_line(dr.table(self.blocks))


@pytest.fixture(scope="module")
def ran(request, reddit, docs_pages_in_background):
    """Every page that is not pending, run once, two pages at a time (the runner's lanes): {path: blocks}. A whole
    session started them in the background when it started (tests/conftest.py), so this only waits for them."""
    import time

    t0 = time.time()
    if docs_pages_in_background is not None:
        results = docs_pages_in_background.result()
        print(f"docs runner: {len(results)} files, waited {time.time() - t0:.0f} s for the last ones")
        return results
    selected = {item.callspec.params["path"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_docs_blocks_run"}   # the pages -k kept
    results = dr.run_files([p for p in RUNNABLE if _rel(p) not in PENDING and p in selected], timeout=900, workers=2)
    print(f"docs runner: {len(results)} files in {time.time() - t0:.0f} s")
    return results


@pytest.fixture(scope="module")
def report(request):
    plugin = request.config.pluginmanager.get_plugin("docs-runner-report")
    if plugin is None:
        plugin = _Report()
        request.config.pluginmanager.register(plugin, "docs-runner-report")
    return plugin


def test_every_block_is_code_or_marked():
    """Static checks of every page (fast): a shell command hidden in a literal block, a TOML block that does not
    parse, a skip marker that is not right before a block, or a pending page that no longer exists, fails."""
    problems = []
    for path in FILES:
        blocks = dr.blocks_of(path)
        problems += [f"{b.where}: {b.error or '; '.join(b.notes)}" for b in blocks if b.status == "error"]
        problems += dr.stray_markers(path, blocks)
        problems += [f"{b.where}: skip marker with an empty reason" for b in blocks if b.skip is not None
                     and not b.skip.strip()]
    problems += [f"{p}: listed as pending but missing" for p in PENDING if not (dr.ROOT / p).exists()]
    assert not problems, "\n".join(problems)
    assert len(RUNNABLE) >= 10  # README + the pages with code: the runner did find them


@pytest.mark.parametrize("path", RUNNABLE, ids=_rel)
def test_docs_blocks_run(path, report, ran):
    rel = _rel(path)
    if rel in PENDING:
        blocks = dr.blocks_of(path)
        for b in blocks:
            if b.status == "pending":
                b.status, b.skip = "pending", PENDING[rel]
        report.blocks += blocks
        pytest.skip(f"{rel}: {PENDING[rel]}")
    blocks = ran[path]
    report.blocks += blocks
    bad = [b for b in blocks if b.status not in ("ran", "skipped", "not code")]
    assert not bad, "\n\n".join(f"{b.where} ({b.lang}) {b.status}:\n{b.error}" for b in bad)
    assert all(b.skip for b in blocks if b.status == "skipped")


# --------------------------------------------------------------------------------------------- the runner itself

RST = """Title
=====

.. code-block:: python

    x = 1

A literal block that is Python::

    y = x + len([1, 2])

.. docs-runner: skip -- needs a GPU
.. code-block:: python

    raise RuntimeError("never run")

A literal block that is text::

    topics (qid, query)
      |-- stage

.. code-block:: toml

    [dataset]
    name = "reddit-tomt-books"

.. code-block:: sh

    python -c "print('shell ok')" > out.txt
    test -s out.txt
"""


def test_runner_runs_python_and_shell_in_order_and_honours_markers(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(RST)
    blocks = dr.run_file(page, timeout=120)
    got = [(b.lang, b.status) for b in blocks]
    assert got == [("python", "ran"), ("python", "ran"), ("python", "skipped"), ("text", "not code"),
                   ("toml", "not code"), ("sh", "ran")], got
    assert blocks[2].skip == "needs a GPU"


def test_runner_fails_an_unmarked_block_that_raises(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(RST.replace(".. docs-runner: skip -- needs a GPU\n", ""))
    blocks = dr.run_file(page, timeout=120)
    failed = [b for b in blocks if b.status == "failed"]
    assert [b.line for b in failed] == [12] and "never run" in failed[0].error
    assert blocks[-1].status == "ran"  # one failure does not stop the blocks after it


def test_runner_flags_a_shell_command_in_a_literal_block_and_bad_toml(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text("Install::\n\n    make demo\n\n.. code-block:: toml\n\n    [dataset\n")
    blocks = dr.blocks_of(page)
    assert [b.status for b in blocks] == ["error", "error"]
    assert "code-block:: sh" in blocks[0].notes[0] and "TOML" in blocks[1].error


def test_readme_markers_and_stray_markers(tmp_path):
    md = tmp_path / "README.md"
    md.write_text("<!-- docs-runner: skip -- sets up .venv -->\n```sh\nmake demo\n```\n\n```python\nz = 3\n```\n"
                  "\n<!-- docs-runner: skip -- nothing follows -->\n\ntext\n")
    blocks = dr.blocks_of(md)
    assert [(b.lang, b.status, b.skip) for b in blocks] == [("sh", "skipped", "sets up .venv"),
                                                            ("python", "pending", None)]
    assert len(dr.stray_markers(md, blocks)) == 1


def test_console_blocks_drop_prompts_and_output():
    code = "$ pyterrier-tot index a.toml   # build\nbuilt 3 parts\n$ echo one \\\n    two\none two\n"
    assert dr.shell_script(code) == "pyterrier-tot index a.toml   # build\necho one \\\ntwo\n"


@pytest.mark.parametrize("own_session", [True, False], ids=["own session", "tests' session"])
def test_pages_started_in_the_background_are_collected_or_stopped(tmp_path, monkeypatch, own_session):
    """What the session does with the docs pages (tests/conftest.py): start them on a thread at the lowest
    priority, collect their blocks later; a session that ends first stops them, the blocks' own processes
    included. A page has a session of its own where its autogroup weight can be set, else it stays in the
    tests' session."""
    import os
    import time

    monkeypatch.setattr(dr, "_autogroup_settable", lambda: own_session)
    fast, slow = tmp_path / "fast.rst", tmp_path / "slow.rst"
    fast.write_text(".. code-block:: python\n\n    import os\n    assert os.nice(0) == 19\n"
                    f"    assert (os.getsid(0) == os.getpid()) is {own_session}\n")
    slow.write_text(".. code-block:: sh\n\n    sleep 120\n")
    pages = dr.Background([fast], timeout=120)
    assert [b.status for b in pages.result(timeout=120)[fast.resolve()]] == ["ran"] and pages.done()
    pages = dr.Background([slow], timeout=120)
    deadline = time.time() + 60
    while not pages.live and time.time() < deadline:
        time.sleep(0.05)
    (driver,) = pages.live
    time.sleep(1.5)   # the shell block's sleep has started
    t0 = time.time()
    pages.stop()
    (block,) = pages.result(timeout=30)[slow.resolve()]
    assert block.status == "failed" and time.time() - t0 < 10
    deadline = time.time() + 10   # nothing of the page's process group is left, once it is reaped
    while time.time() < deadline:
        try:
            os.killpg(driver.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the page's process group {driver.pid} outlived Background.stop()")
