"""One function names every folder of the cache (``_util.cache_folder``), from the dataset tag and the settings:
a dataset named ``trec-tot-local/<folder>`` (a local TREC ToT copy) gives one flat folder, never nested ones."""
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from pyterrier_tot import recipe
from pyterrier_tot._plumbing.util import cache_folder, dataset_tag, flat_name
from pyterrier_tot.index import BookIndex
from tests.helpers.books import TINY_BOOKS

PACKAGE = Path(__file__).resolve().parents[2] / "pyterrier_tot"
LOCAL = SimpleNamespace(name="trec-tot-local/my-books")


def test_a_dataset_name_with_a_slash_gives_one_flat_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    folders = {
        "base": recipe.base_dir(LOCAL),
        "base mpnet": recipe.base_dir(LOCAL, "mpnet"),
        "hard negatives": recipe.hard_negatives_dir(LOCAL, "minilm", 300, 3, 1, False, ("bm25", "dense")),
        "cross-encoder": recipe.cross_encoder_dir(LOCAL),
        "second stage": recipe.recipe_cross_encoder_dir(str(recipe.base_dir(LOCAL, "mpnet"))),
        "fuser weights": recipe.weights_path(LOCAL.name, index, None, 300, 0, 100, 50),
    }
    for what, folder in folders.items():
        assert folder.parent == tmp_path / "models", (what, folder)
        assert "trec-tot-local-my-books" in folder.name, (what, folder)
    assert dataset_tag(LOCAL) == "trec-tot-local-my-books" and dataset_tag("reddit-tomt-books") == "reddit"
    assert cache_folder("fuser", "a/b", "c\\d", under="indexes") == tmp_path / "indexes" / "fuser-a-b-c-d"
    with pytest.raises(ValueError, match="cannot name"):
        flat_name("..")


def test_names_without_a_slash_are_the_names_older_runs_made(tmp_path, monkeypatch):
    """Routing through one function changed no existing folder's name (a trained model is found again)."""
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    reddit = SimpleNamespace(name="reddit-tomt-books")
    assert recipe.base_dir(reddit).name == "base-minilm-reddit-train-minus-fit300-lr5e-05-e2of2"
    assert recipe.cross_encoder_dir(reddit).name == "ce-minilm-reddit-train-minus-fit300-neg3-L160-b4-s100"


def test_no_module_builds_a_cache_folder_name_itself():
    built = re.compile(r'cache_dir\(\)\s*/\s*"(models|indexes)"\s*/\s*[f(]')
    found = [f"{p.relative_to(PACKAGE.parent)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if built.search(line)]
    assert not found, found
