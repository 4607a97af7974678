"""Test-wide settings: offline model hubs, a cache folder inside the checkout, shared data location."""
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PYTERRIER_TOT_OFFLINE", "1")  # never try to download data sets from tests
_ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYTERRIER_TOT_CACHE", str(_ROOT / ".cache" / "test-cache"))

import pytest  # noqa: E402

from tests.helpers.books import TINY_BOOKS  # noqa: E402
from tests.helpers.paths import SHARED  # noqa: E402
from tests.helpers.trec_tot_2025 import irds_2025  # noqa: E402, F401 (a fixture: TREC ToT 2025 files in a temporary home)


def pytest_report_header(config):
    return (f"pyterrier_tot shared data: {SHARED} (exists: {SHARED.is_dir()}); "
            f"cache: {os.environ['PYTERRIER_TOT_CACHE']}")


@pytest.fixture(scope="session")
def reddit():
    if not (SHARED / "reddit-tomt-books").is_dir():
        pytest.skip("shared Reddit-TOMT data not found beside the checkout")
    import pyterrier_tot as ptt
    return ptt.get_dataset("reddit-tomt-books")


@pytest.fixture(scope="session")
def reddit_index(reddit):
    import pyterrier_tot as ptt
    return ptt.BookIndex(reddit)


@pytest.fixture
def tiny_frame():
    import pandas as pd
    return pd.DataFrame(TINY_BOOKS)


# ------------------------------------------------------------------ the docs pages, in the background of the session
#: the docs test whose pages start when the session starts (tests/docs/test_docs_blocks.py)
_DOCS_TEST = "test_docs_blocks_run"


@pytest.hookimpl(trylast=True)   # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(session, config, items):
    """When the session runs the docs pages, they start now in the background, at the lowest priority (the small
    tests keep one of two cores busy), and the docs tests move to the end of the session, where they collect the
    pages' results. ``PYTERRIER_TOT_DOCS_BACKGROUND=0`` runs them in their turn instead."""
    docs = [item for item in items if getattr(item, "originalname", None) == _DOCS_TEST]
    if not docs or os.environ.get("PYTERRIER_TOT_DOCS_BACKGROUND", "1") == "0" or config.option.collectonly:
        return
    if not (SHARED / "reddit-tomt-books").is_dir():
        return   # the docs test skips (its fixture needs the Reddit data)
    from tests.helpers import docs_runner

    pending = getattr(docs[0].module, "PENDING", {})
    paths = [item.callspec.params["path"] for item in docs]
    paths = [p for p in paths if str(p.relative_to(docs_runner.ROOT)) not in pending]
    config.stash[_DOCS_PAGES] = docs_runner.Background(paths, timeout=900, workers=2)
    items[:] = [item for item in items if item not in docs] + docs


_DOCS_PAGES = pytest.StashKey()


def pytest_sessionfinish(session, exitstatus):
    pages = session.config.stash.get(_DOCS_PAGES, None)
    if pages is not None and not pages.done():   # the session ended before the docs test collected them
        pages.stop()


@pytest.fixture(scope="session")
def docs_pages_in_background(request):
    """The docs pages started with the session (a ``docs_runner.Background``; ``None`` when not started)."""
    return request.config.stash.get(_DOCS_PAGES, None)
