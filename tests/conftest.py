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
