"""Model soups: ``average_models`` is the element-wise mean of its ingredients (checked tensor by tensor), refuses
what cannot be averaged, and ``fine_tuned_base(soup=N)`` trains N seeds as bases of their own (cached, reused)
and averages them into a folder whose name and training record say so and which the recipe's checks accept."""
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from pyterrier_tot import recipe
from pyterrier_tot.index import BookIndex
from pyterrier_tot.recipe import bases
from pyterrier_tot.recipe.protocol import check_trained_on, train_data, training_info
from pyterrier_tot.recipe.soup import average_models
from tests.helpers.books import TINY_BOOKS
from tests.helpers.tiny_datasets import TinyDataset

SMALL = {"max_steps": 1, "batch_size": 4, "max_seq_length": 32, "verbose": False}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("soup_index"))


@pytest.fixture(scope="module")
def runs(index, tmp_path_factory):
    """Two one-step MiniLM bases of the tiny dataset, seeds 42 and 43, in a cache of their own."""
    cache = tmp_path_factory.mktemp("soup_cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTERRIER_TOT_CACHE", str(cache))
    paths = [bases.fine_tuned_base(TinyDataset(), 4, model="minilm", index=index, seed=s, **SMALL) for s in (42, 43)]
    yield cache, paths, mp
    mp.undo()


def _weights(path):
    return load_file(f"{path}/model.safetensors")


def test_the_soup_is_the_mean_of_its_ingredients(runs, tmp_path):
    from sentence_transformers import SentenceTransformer

    _, (a, b), _ = runs
    wa, wb = _weights(a), _weights(b)
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)  # two seeds, two models
    out = average_models([a, b], tmp_path / "soup")
    ws = _weights(out)
    assert ws.keys() == wa.keys()
    for k in wa:
        assert ws[k].dtype == wa[k].dtype
        assert torch.allclose(ws[k], (wa[k].float() + wb[k].float()) / 2, atol=1e-7), k
    record = training_info(out)
    assert record["soup"]["seeds"] == [42, 43] and record["soup"]["of"] == [a.split("/")[-1], b.split("/")[-1]]
    assert "seed" not in record and record["train_qids"] == training_info(a)["train_qids"]
    assert record["seconds"] == pytest.approx(training_info(a)["seconds"] + training_info(b)["seconds"], abs=0.11)
    assert record["steps"] == training_info(a)["steps"] + training_info(b)["steps"]
    # a complete model folder: it loads and encodes, and its tokenizer and pooling came with it
    vec = SentenceTransformer(str(out), device="cpu").encode(["a dragon on the moon"])
    assert vec.shape[1] == SentenceTransformer(a, device="cpu").encode(["x"]).shape[1]
    # an existing soup folder is replaced, not merged
    assert average_models([b, a], out) == out and torch.allclose(_weights(out)[k], ws[k], atol=1e-7)


def test_what_cannot_be_averaged_is_refused(runs, tmp_path):
    _, (a, b), _ = runs
    with pytest.raises(ValueError, match="at least two"):
        average_models([a], tmp_path / "one")
    with pytest.raises(ValueError, match="no model.safetensors"):
        average_models([a, tmp_path], tmp_path / "none")
    odd = tmp_path / "odd"
    odd.mkdir()
    w = _weights(b)
    name = next(k for k, v in w.items() if v.dim() == 2)
    w[name] = w[name][:-1]
    save_file(w, str(odd / "model.safetensors"))
    with pytest.raises(ValueError, match=f"tensor '{name}' has shape"):
        average_models([a, odd], tmp_path / "bad")
    del w[name]
    save_file(w, str(odd / "model.safetensors"))
    with pytest.raises(ValueError, match="other tensors"):
        average_models([a, odd], tmp_path / "bad")
    with pytest.raises(ValueError, match="soup >= 1"):
        bases.base_settings("minilm", soup=0)
    with pytest.raises(ValueError, match="one run per setting"):  # never a single run in a folder named as a soup
        bases.base_grid(TinyDataset(), "minilm", lrs=(1e-4,), epochs=1, n=4, soup=2)


def test_fine_tuned_base_soup_trains_each_seed_once_and_averages_them(runs, index, monkeypatch):
    from pyterrier_tot.recipe import expert_training

    cache, (a, b), _ = runs
    ds = TinyDataset()
    assert "soup" not in bases.base_dir(ds, "minilm", 4, **SMALL).name  # one run keeps its name
    # with the two seeds cached, nothing is trained again: the soup is their mean
    monkeypatch.setattr(expert_training, "train_base_retriever",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained again")))
    small = {k: v for k, v in SMALL.items() if k != "verbose"}
    soup = bases.fine_tuned_base(ds, 4, model="minilm", index=index, soup=2, verbose=False, **small)
    assert "-soup2-" in soup and soup.startswith(str(cache))
    wa, wb, ws = _weights(a), _weights(b), _weights(soup)
    assert all(torch.allclose(ws[k], (wa[k] + wb[k]) / 2, atol=1e-7) for k in ws)
    check_trained_on(soup, train_data(ds, "rest", 4)[0])  # it stands for the same training queries
    # reused from then on; a third seed is missing and train=False: no soup, no training
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, soup=2, verbose=False, **small) == soup
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, soup=3, train=False, **small) is None
    # the recipe takes it as its base through train_settings, and its fitted weights are its own
    dp = recipe.tuned_pipeline(ds, index, base="minilm", helpers=(), n=4, k=3, expert_k=2, verbose=False,
                               depth=None, train_settings={"soup": 2, **small})
    assert dp.fuser.names[0] == "dense_ft" and Path(soup).name in repr(dp.base)
