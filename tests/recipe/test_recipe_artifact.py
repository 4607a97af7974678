"""A trained recipe is one artifact: saved by ``dp.save(folder)``, loaded by ``pt.Artifact.load(folder)`` in a
fresh process with an empty cache, it ranks as the pipeline that was saved; a damaged or partial folder names
the missing part; another catalogue is reached only through ``transfer``; ``build_package`` / ``from_url`` (what
``to_hf`` / ``from_hf`` use) carry it through a package offline."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.errors import CorruptArtifactError
from pyterrier_tot.recipe import RecipeArtifact, TunedPipeline
from tests.helpers.books import TINY_BOOKS
from tests.helpers.paths import SHARED

N = 30  # the docs runner's sample of Reddit-TOMT (docs_runner.SAMPLE): its recipe is trained once for both


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The fast recipe (MiniLM base) trained on the 30-query sample, saved with and without its index, and its
    top 10 of the sample's validation queries."""
    if not (SHARED / "reddit-tomt-books").is_dir():
        pytest.skip("shared Reddit-TOMT data not found beside the checkout")
    ds = ptt.get_dataset("reddit-tomt-books", sample=N)
    dp = ptt.tuned_pipeline(ds, base="minilm", verbose=False)
    assert isinstance(dp, TunedPipeline)
    root = tmp_path_factory.mktemp("recipes")
    topics = ds.get_topics("validation")
    top = dp(topics).sort_values(["qid", "rank"]).groupby("qid").head(10)
    return {"plain": dp.save(root / "plain"), "with_index": dp.save(root / "with-index", index=True),
            "top": top[["qid", "docno"]].values.tolist(), "root": root, "dp": dp}


def _in_fresh_process(folder: Path, cache: Path) -> list:
    code = textwrap.dedent(f"""
        import json, pyterrier as pt, pyterrier_tot as ptt
        recipe = pt.Artifact.load({str(folder)!r})
        topics = ptt.get_dataset("reddit-tomt-books", sample={N}).get_topics("validation")
        top = recipe(topics).sort_values(["qid", "rank"]).groupby("qid").head(10)
        print("TOP " + json.dumps(top[["qid", "docno"]].values.tolist()))
    """)
    env = {**os.environ, "PYTERRIER_TOT_CACHE": str(cache)}
    env.pop("PYTERRIER_TOT_SAMPLE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("TOP "))[4:])


@pytest.mark.parametrize("which", ["with_index", "plain"])
def test_a_saved_recipe_ranks_the_same_top_10_in_a_fresh_process_with_an_empty_cache(saved, tmp_path, which):
    cache = tmp_path / "empty-cache"
    assert _in_fresh_process(Path(saved[which].path), cache) == saved["top"]
    if which == "with_index":  # nothing encoded or trained there: the saved index and models were read
        assert not (cache / "indexes").exists() and not (cache / "models").exists()


def test_the_folder_says_what_it_holds(saved):
    recipe = pt.Artifact.load(str(saved["with_index"].path))
    assert isinstance(recipe, RecipeArtifact) and isinstance(recipe, pt.Transformer)
    assert recipe.spec["dataset"] == f"reddit-tomt-books-sample{N}" and set(recipe.spec["bases"]) == {"dense_ft"}
    assert "index included" in repr(recipe) and all(Path(m).is_dir() for m in recipe.models().values())


def test_a_damaged_or_partial_folder_names_the_missing_part(saved, tmp_path):
    def broken(name, damage):
        copy = tmp_path / name
        shutil.copytree(saved["plain"].path, copy)
        damage(copy)
        return copy

    model = next((Path(saved["plain"].path) / "models").iterdir()).name
    cases = {
        "no-model": (lambda c: shutil.rmtree(c / "models" / model), f"models/{model}"),
        "no-weights": (lambda c: shutil.rmtree(next((c / "weights").iterdir())), "fitted weights"),
        "no-settings": (lambda c: (c / "recipe.json").unlink(), "recipe.json"),
        "bad-weights": (lambda c: next((c / "models" / model).glob("*.safetensors")).write_bytes(b"x" * 64),
                        "fingerprint differs"),
    }
    for name, (damage, says) in cases.items():
        with pytest.raises(CorruptArtifactError, match=says.replace(".", r"\.")):
            pt.Artifact.load(str(broken(name, damage)))
    with pytest.raises(FileNotFoundError):
        RecipeArtifact(tmp_path / "nothing-here")


def test_another_catalogue_only_through_transfer(saved, tmp_path):
    recipe = RecipeArtifact(saved["plain"].path)
    other = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "tiny")
    with pytest.raises(ValueError, match="transfer"):
        recipe.pipeline(other)
    with pytest.warns(UserWarning, match="nothing fitted on these books"):
        moved = recipe.transfer(other)
    # the tiny books have years and authors, but the weights know no date or author expert: they are left out
    assert set(moved.fuser.names) == set(saved["dp"].fuser.names)
    res = moved(pd.DataFrame({"qid": ["q"], "query": ["a ghost keeper in an abandoned lighthouse"]}))
    assert res.sort_values("rank")["docno"].iloc[0] == "b5"


def test_a_package_round_trip_offline(saved, tmp_path, monkeypatch):
    """What to_hf uploads and from_hf downloads (PyTerrier's package of the folder): the package is built here and
    from_hf's download is served from a local folder instead of the hub, so the round trip runs offline."""
    import contextlib

    import pyterrier.io

    hub = tmp_path / "hub"
    hub.mkdir()
    RecipeArtifact(saved["with_index"].path).build_package(str(hub / "artifact.tar.lz4"), verbose=False)
    asked = []

    @contextlib.contextmanager
    def from_the_local_hub(url, **kwargs):
        asked.append(url)
        local = hub / url.rsplit("/", 1)[-1]
        if not local.is_file():
            raise OSError(f"{url}: not on the local hub")
        with open(local, "rb") as f:
            yield f

    monkeypatch.setattr(pyterrier.io, "download_stream", from_the_local_hub)
    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path / "pt-home"))
    got = RecipeArtifact.from_hf("someone/tot-recipe")
    assert any(u.endswith("someone/tot-recipe/resolve/main/artifact.tar.lz4") for u in asked)
    assert isinstance(got, RecipeArtifact) and got.spec == RecipeArtifact(saved["with_index"].path).spec
    topics = ptt.get_dataset("reddit-tomt-books", sample=N).get_topics("validation").head(5)
    assert got(topics)[["qid", "docno"]].values.tolist() == saved["dp"](topics)[["qid", "docno"]].values.tolist()


def test_the_guide_says_what_the_folder_holds_and_weighs(saved):
    """The own-catalogue guide's save / load section named no part of the folder, no size, and not that without
    the index the other machine needs the data set and encodes it again."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "own_catalogue.rst").read_text()
    section = " ".join(guide[guide.index("Save a trained recipe"):].split())
    for folder in (saved["plain"].path, saved["with_index"].path):
        for part in Path(folder).iterdir():
            assert f"``{part.name}{'/' if part.is_dir() else ''}``" in section, part.name
    models = Path(saved["plain"].path) / "models"
    size = sum(f.stat().st_size for f in models.rglob("*") if f.is_file()) / 1e6
    assert abs(size - 92) < 3 and "a fine-tuned MiniLM is 92 MB" in section
    assert "Without ``index=True`` the receiving machine needs the data set" in section
    assert "builds the index again on first use" in section
