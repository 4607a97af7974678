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

from pyterrier_tot._util import shared_data_dir  # noqa: E402

SHARED = shared_data_dir()


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


TINY_BOOKS = [
    {"docno": "b1", "title": "The Sleepy Kitten", "author": "Ann Marsh", "genres": "picture book, animals",
     "year": 1996, "text": "Four kittens play all day while their brother naps; at night he wakes and copies them."},
    {"docno": "b2", "title": "Dragons of the Red Moon", "author": "Carl Voss", "genres": "fantasy",
     "year": 2004, "text": "A young blacksmith befriends a dragon and flies to the red moon to save her village."},
    {"docno": "b3", "title": "Murder at Lakeside Manor", "author": "Dora Quill", "genres": "mystery",
     "year": 1988, "text": "A detective investigates a poisoning at a lakeside mansion during a thunderstorm."},
    {"docno": "b4", "title": "Spaceship Nine", "author": "Eli Grant", "genres": "science fiction",
     "year": 2012, "text": "Children stow away on a spaceship bound for Jupiter and must repair its engine."},
    {"docno": "b5", "title": "The Haunted Lighthouse", "author": "Fay Lorne", "genres": "horror, young adult",
     "year": 2001,
     "text": "Teenagers spend a night in an abandoned lighthouse where a ghost keeper still climbs the stairs."},
    {"docno": "b6", "title": "Summer of Horses", "author": "Gil Arden", "genres": "young adult, animals",
     "year": None, "text": "A girl spends her summer training a wild horse on her grandmother's ranch."},
]


@pytest.fixture
def tiny_frame():
    import pandas as pd
    return pd.DataFrame(TINY_BOOKS)


def tiny_ranking(query, docnos=("b1", "b3", "b4", "b6", "b5", "b2"), qid="q1"):
    """A result frame of TINY_BOOKS for one query, scores descending in the order given (the re-rankers' tests)."""
    import pandas as pd
    import pyterrier as pt

    n = len(docnos)
    return pt.model.add_ranks(pd.DataFrame({"qid": qid, "query": query, "docno": list(docnos),
                                            "score": [float(n - i) for i in range(n)]}))


def ranked_docnos(res, qid="q1"):
    """The docnos of one query of a result frame, by rank."""
    return res[res["qid"] == qid].sort_values("rank")["docno"].tolist()
