"""Base retrievers of the recipe: the training loop is old_fit's, checkpoints per epoch re-create the epoch they
save, bf16 autocast trains, and tuned_pipeline fuses several fine-tuned bases (MiniLM + mpnet, 2 steps each on a
tiny corpus) whose models are cached as artifacts and whose weights are cached under a key naming the bases."""
import math
import random

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

from pyterrier_tot import recipe
from pyterrier_tot.index import BookIndex
from pyterrier_tot.models import BiEncoderModel, ModelUnavailableError, resolve_model
from pyterrier_tot.recipe import bases, hard_negatives
from pyterrier_tot.recipe.expert_training import build_pairs, train_biencoder, training_metadata
from tests.helpers.books import TINY_BOOKS
from tests.helpers.tiny_datasets import TinyDataset


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("bases_index"))


@pytest.fixture
def pairs():
    ds = TinyDataset()
    return build_pairs(ds.topics, ds.qrels, pd.DataFrame(TINY_BOOKS))


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(next(p for p in path.rglob("model.safetensors"))))


def _same(a, b, atol=1e-6):
    return a.keys() == b.keys() and all(torch.allclose(a[k].float(), b[k].float(), atol=atol) for k in a)


def test_loop_is_old_fit(pairs, tmp_path):
    """The loop of our own takes the steps sentence-transformers' old_fit takes (same seed, same weights)."""
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer.datasets import NoDuplicatesDataLoader
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    ours = train_biencoder(pairs, tmp_path / "ours", batch_size=4, max_steps=2, max_seq_length=32, lr=1e-4,
                           show_progress_bar=False, device="cpu")
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
    model = SentenceTransformer(resolve_model(None), device="cpu")
    model.max_seq_length = 32
    loader = NoDuplicatesDataLoader([InputExample(texts=list(p)) for p in pairs], batch_size=4)
    model.old_fit(train_objectives=[(loader, MultipleNegativesRankingLoss(model))], epochs=1, steps_per_epoch=2,
                  warmup_steps=math.ceil(0.1 * 2), optimizer_params={"lr": 1e-4}, show_progress_bar=False)
    model.save(str(tmp_path / "old"), safe_serialization=True)
    SentenceTransformer(resolve_model(None), device="cpu").save(str(tmp_path / "start"), safe_serialization=True)
    assert _same(_weights(ours), _weights(tmp_path / "old"))
    assert not _same(_weights(ours), _weights(tmp_path / "start"))  # and the weights moved


def test_epoch_checkpoints_recreate_their_epoch(pairs, tmp_path):
    out = train_biencoder(pairs, tmp_path / "e2", epochs=2, epoch_dirs={1: tmp_path / "e1"}, batch_size=4,
                          max_steps=1, max_seq_length=32, lr=1e-4, show_progress_bar=False)
    first = training_metadata(tmp_path / "e1")
    assert (first["epochs"], first["schedule_epochs"], first["steps"]) == (1, 2, 1)
    last = training_metadata(out)
    assert (last["epochs"], last["steps"], len(last["epoch_losses"])) == (2, 2, 2)
    assert isinstance(pt.Artifact.load(str(tmp_path / "e1")), BiEncoderModel)
    # epoch 1 of a 2-epoch schedule, trained alone, is the checkpoint (what fine_tuned_base relies on)
    again = train_biencoder(pairs, tmp_path / "again", epochs=1, schedule_epochs=2, batch_size=4, max_steps=1,
                            max_seq_length=32, lr=1e-4, show_progress_bar=False)
    assert _same(_weights(again), _weights(tmp_path / "e1"))
    assert not _same(_weights(out), _weights(tmp_path / "e1"))
    with pytest.raises(ValueError, match="epoch_dirs"):
        train_biencoder(pairs, tmp_path / "bad", epochs=1, epoch_dirs={2: tmp_path / "x"})
    with pytest.raises(ValueError, match="schedule_epochs"):
        train_biencoder(pairs, tmp_path / "bad", epochs=2, schedule_epochs=1)


def test_training_device_moves_batches_and_is_recorded(pairs, tmp_path):
    """``device=``: the model and every batch go there (a GPU run of benchmarks/device/base_grid_device.py trains
    this way); "cpu:0" takes the path a GPU takes (batches moved, non-tensor features kept) and must train the same
    weights as the plain CPU; the record names the device, the default is the CPU where torch sees no GPU."""
    kw = dict(batch_size=4, max_steps=1, max_seq_length=32, lr=1e-4, show_progress_bar=False)
    plain = train_biencoder(pairs, tmp_path / "plain", device="cpu", **kw)
    moved = train_biencoder(pairs, tmp_path / "moved", device="cpu:0", **kw)
    assert _same(_weights(plain), _weights(moved))
    assert training_metadata(moved)["device"] == "cpu:0"
    if not torch.cuda.is_available():
        default = train_biencoder(pairs, tmp_path / "default", **kw)
        assert training_metadata(default)["device"] == "cpu"
        assert _same(_weights(default), _weights(plain))


def test_bf16_autocast_trains_fp32_weights(pairs, tmp_path):
    out = train_biencoder(pairs, tmp_path / "amp", amp=True, batch_size=4, max_steps=1, max_seq_length=32, lr=1e-4,
                          show_progress_bar=False)
    assert training_metadata(out)["amp"] == "bf16"
    weights = _weights(out)
    assert {w.dtype for w in weights.values()} == {torch.float32}


def test_base_settings_and_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    # MiniLM's settings before issue 31 keep the name older runs gave them; the current settings get their own
    legacy = {k: bases.LEGACY_MINILM[k] for k in ("lr", "epoch", "schedule")}
    assert bases.base_dir(ds, "minilm", 4, **legacy).name == "base-minilm-tiny-bases-train-minus-fit4-e1"
    now = bases.base_dir(ds, "minilm", 4)
    assert now.name != "base-minilm-tiny-bases-train-minus-fit4-e1"
    cfg = bases.base_settings("minilm")
    assert now.name.endswith(f"-lr{cfg['lr']:g}-e{cfg['epoch']}of{cfg['schedule']}")
    mp = bases.base_dir(ds, "mpnet", 4, lr=5e-5, epoch=2, schedule=3)
    assert mp.name.startswith("base-mpnet-tiny-bases-train-minus-fit4-lr5e-05") and mp.name.endswith("-e2of3")
    assert bases.base_dir(ds, "minilm", 4, max_steps=2).name != bases.base_dir(ds, "minilm", 4).name
    assert bases.base_expert_name("minilm") == "dense_ft" and bases.base_expert_name("mpnet") == "dense_ft_mpnet"
    with pytest.raises(ValueError, match="epoch"):
        bases.base_settings("mpnet", epoch=3, schedule=2)
    with pytest.raises(ValueError, match="same model twice"):
        bases.as_bases(["mpnet", "mpnet"])
    with pytest.raises(ValueError, match="at least one"):
        bases.as_bases([])


def test_amp_auto_follows_the_hardware(tmp_path, monkeypatch):
    """bf16 autocast is emulated (3x slower) on a CPU without AMX / AVX512-BF16: "auto" picks it only where it is
    native, and the folder name says what was trained."""
    from pyterrier_tot.models import loading as models

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    assert bases.BASE_SETTINGS["mpnet"]["amp"] == "auto"
    for native in (False, True):
        monkeypatch.setattr(models, "native_bf16", lambda native=native: native)
        assert bases.base_settings("mpnet")["amp"] is native
        assert bases.base_dir(TinyDataset(), "mpnet", 4).name.endswith(("-bf16-e2of3" if native else "-lr3e-05-e2of3"))
        assert models.auto_precision() == ("bf16" if native else "fp32")
    assert models.auto_precision("fp32") == "fp32"
    with pytest.raises(ValueError, match="precision"):
        models.auto_precision("fp16")


def test_base_grid_saves_every_epoch_and_choose_base_picks_on_the_slice(index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    runs = bases.base_grid(ds, "minilm", lrs=(1e-4,), epochs=2, n=4, index=index, max_steps=1, batch_size=4,
                           max_seq_length=32, verbose=False)
    assert sorted(runs) == [(1e-4, 1), (1e-4, 2)]
    assert all(isinstance(pt.Artifact.load(p), BiEncoderModel) for p in runs.values())
    # the chosen checkpoint is what fine_tuned_base returns for those settings, without training again
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, train=False, lr=1e-4, epoch=1, schedule=2,
                                 max_steps=1, batch_size=4, max_seq_length=32) == runs[(1e-4, 1)]
    best, table = bases.choose_base(ds, index, runs, n=4)
    assert best in runs and len(table) == 2 and set(table["key"]) == set(runs)


def test_a_cached_base_is_reused_only_for_the_queries_it_was_trained_on(index, tmp_path, monkeypatch):
    from pyterrier_tot.recipe.protocol import qid_fingerprint, text_fingerprint, train_data, training_info

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds, tiny = TinyDataset(), dict(max_steps=1, batch_size=4, max_seq_length=32, verbose=False)
    path = bases.fine_tuned_base(ds, 4, model="minilm", index=index, **tiny)
    assert training_info(path)["train_qids"] == qid_fingerprint(train_data(ds, "rest", 4)[0])
    assert training_info(path)["train_text"] == text_fingerprint(train_data(ds, "rest", 4)[0])
    # another tuning seed draws another slice: its own folder, never the seed-0 model (trained on its slice)
    assert bases.fine_tuned_base(ds, 4, tuning_seed=1, model="minilm", index=index, train=False, max_steps=1,
                                 batch_size=4, max_seq_length=32) is None
    assert bases.base_dir(ds, "minilm", 4, 1, max_steps=1) != bases.base_dir(ds, "minilm", 4, max_steps=1)
    with pytest.raises(ValueError, match="trained on other queries"):      # the folder forced on other queries
        bases.fine_tuned_base(ds, 4, tuning_seed=1, path=path, model="minilm", index=index, train=False)
    # nor asked for as another model, or with other settings, through path= (or a folder of the same last name)
    same = dict(path=path, index=index, train=False, max_steps=1, batch_size=4, max_seq_length=32)
    assert bases.fine_tuned_base(ds, 4, model="minilm", **same) == path
    with pytest.raises(ValueError, match="another model or with other settings .*differing: lr"):
        bases.fine_tuned_base(ds, 4, model="minilm", **{**same, "lr": 1e-3})
    with pytest.raises(ValueError, match="differing: base_model"):
        bases.fine_tuned_base(ds, 4, model=str(tmp_path / "elsewhere" / "all-MiniLM-L6-v2"), **same)
    # two unnamed training sets never share a folder
    a = bases.TrainingSet([(ds.topics.head(6), ds.qrels.head(6))])
    b = bases.TrainingSet([(ds.topics.tail(6), ds.qrels.tail(6))])
    assert a.name != b.name and bases.base_dir(a, "minilm", 2) != bases.base_dir(b, "minilm", 2)


@pytest.fixture
def second_base(monkeypatch):
    """all-mpnet-base-v2 where it is unpacked (the user cache), else MiniLM again under its folder name: the
    multi-base code path runs either way."""
    from pathlib import Path

    home = Path.home() / ".cache" / "pyterrier_tot" / "models" / "all-mpnet-base-v2"
    if home.is_dir():
        monkeypatch.setenv("PYTERRIER_TOT_MPNET", str(home))
    try:
        resolve_model("mpnet")
        return "mpnet", "sentence-transformers/all-mpnet-base-v2"
    except ModelUnavailableError:
        folder = resolve_model("minilm")
        return folder, folder


def test_tuned_pipeline_fuses_two_fine_tuned_bases(index, tmp_path, monkeypatch, second_base):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    second, hub = second_base
    name = bases.base_expert_name(second)
    ds = TinyDataset()
    small = {"max_steps": 2, "batch_size": 4, "max_seq_length": 32}
    dp = recipe.tuned_pipeline(ds, index, base=["minilm", second], train_settings=small, n=4, k=3, expert_k=2,
                               verbose=False)
    assert list(dp.experts)[:2] == ["dense_ft", name] and name in dp.fuser.names
    models = {n: pt.Artifact.load(dp.experts[n].model) for n in ("dense_ft", name)}
    assert all(isinstance(m, BiEncoderModel) for m in models.values())
    assert models[name].metadata()["base_model"] == hub
    assert models[name].metadata()["steps"] == 2 * bases.base_settings(second)["epoch"]
    out = dp(ds.get_topics("train").head(4))
    assert set(out["qid"]) == {"q0", "q1", "q2", "q3"} and out.groupby("qid")["rank"].min().eq(0).all()
    # the weights cache key names the bases: one base and two bases are two fits
    ft = {n: dp.experts[n].model for n in ("dense_ft", name)}
    two = recipe.fitted_weights(ds, index, ft, n=4, k=3, expert_k=2)
    one = recipe.fitted_weights(ds, index, {"dense_ft": ft["dense_ft"]}, n=4, k=3, expert_k=2)
    assert two != one and two.exists() and one.exists()
    # a second call trains and fits nothing: everything comes from the cache
    monkeypatch.setattr(bases, "_corpus", lambda *a: pytest.fail("trained again"))
    again = recipe.tuned_pipeline(ds, index, base=["minilm", second], train_settings=small, n=4, k=3, expert_k=2,
                                  verbose=False)
    assert again.fuser.weights.tolist() == dp.fuser.weights.tolist()
    only = recipe.tuned_pipeline(ds, index, base=second, train_settings=small, n=4, k=3, expert_k=2, verbose=False,
                                 helpers=())
    assert list(only.experts)[0] == name and "dense_ft" not in only.experts
    # a set of bases listed in ENSEMBLES weighs the density prior of the base it names (the default: mpnet's)
    monkeypatch.setitem(bases.ENSEMBLES, frozenset({"minilm", second.lower()}), {"helpers": (), "prior": "minilm"})
    monkeypatch.setitem(recipe.RECIPE_PRIORS, "minilm", 2)
    ensemble = recipe.tuned_pipeline(ds, index, base=[second, "minilm"], train_settings=small, n=4, k=3, expert_k=2,
                                     verbose=False)
    assert "density" in ensemble.fuser.names and ensemble.experts["density"].model == ft["dense_ft"]
    assert ensemble.recipe["density"] and "density" not in dp.fuser.names
    if second == "mpnet":  # mpnet's recipe weighs the fine-tuned MiniLM beside it (bases.HELPERS), trained with
        # MiniLM's own settings, not the base's train_settings: absent here, so left out with a warning
        with pytest.warns(UserWarning, match=r"fine-tuned helper\(s\) \['minilm'\] are not trained"):
            alone = recipe.tuned_pipeline(ds, index, base=second, train_settings=small, n=4, k=3, expert_k=2,
                                          verbose=False, train=False)
        assert "dense_ft" not in alone.experts
        helped = recipe.tuned_pipeline(ds, index, base=second, train_settings=small, n=4, k=3, expert_k=2,
                                       verbose=False, helpers={"dense_ft": ft["dense_ft"]})
        assert list(helped.experts)[:2] == [name, "dense_ft"] and "dense_ft" in helped.fuser.names


def test_a_helper_scores_the_base_candidates_beside_it_and_the_floor_stays_the_base(index, tmp_path, monkeypatch):
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds, small = TinyDataset(), {"max_steps": 2, "batch_size": 4, "max_seq_length": 32, "verbose": False}
    fts = {"dense_ft": bases.fine_tuned_base(ds, 4, model="minilm", index=index, **small)}
    helpers = {"dense_ft_other": bases.fine_tuned_base(ds, 4, model="minilm", index=index, lr=1e-4, **small)}
    assert fts["dense_ft"] != helpers["dense_ft_other"]
    plain = recipe.build_pipeline(index, fts, k=3, expert_k=2, depth=None)
    dp = recipe.tuned_pipeline(ds, index, fine_tuned=fts, helpers=helpers, n=4, k=3, expert_k=2, verbose=False,
                               depth=None)
    assert "dense_ft_other" in dp.fuser.names and "dense_ft_other" not in plain.fuser.names
    topics = ds.get_topics("train").head(4)
    got, want = ((p.decomposer >> p.candidates)(topics) for p in (dp, plain))
    assert set(zip(got.qid, got.docno)) == set(zip(want.qid, want.docno))          # it adds no candidates
    path = recipe.fitted_weights(ds, index, fts, n=4, k=3, expert_k=2, helpers=helpers)
    assert WeightedFuser.load(path).fit_floor == ["dense_ft"]                        # the floor is the base alone
    assert path != recipe.fitted_weights(ds, index, fts, n=4, k=3, expert_k=2)
    out = dp(topics)
    assert set(out["qid"]) == set(topics["qid"]) and out.groupby("qid")["rank"].min().eq(0).all()
    with pytest.raises(ValueError, match="a base or a helper"):
        recipe.build_pipeline(index, fts, helpers={"dense_ft": helpers["dense_ft_other"]})
    assert recipe.default_helpers("mpnet") == ("minilm",) and recipe.default_helpers("minilm") == ()
    assert recipe.default_helpers(["minilm", "mpnet"]) == ()
    # the default's two bases are an ensemble measured with the MiniLM helper, in either order
    assert recipe.DEFAULT_BASE == ("mpnet", "nomic")
    assert recipe.default_helpers(recipe.DEFAULT_BASE) == recipe.default_helpers(["nomic", "mpnet"]) == ("minilm",)


def test_the_training_seed_is_a_setting_and_no_fit_learns_from_a_base_trained_on_its_slice(index, tmp_path,
                                                                                              monkeypatch):
    """``seed`` among the settings (or tuned_pipeline's ``train_settings``) is the training seed: its own folder,
    trained outside the same tuning slice the weights are then fitted on. A base trained outside another slice
    (``tuning_seed``) has learned some of the fit's queries: the fit refuses it, and warns where the record cannot
    tell (an older record with fingerprints only)."""
    import json
    import warnings

    from pyterrier_tot.recipe.protocol import qid_fingerprint, train_data, training_info

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds, small = TinyDataset(), {"max_steps": 1, "batch_size": 4, "max_seq_length": 32, "verbose": False}
    rest = train_data(ds, "rest", 4)[0]
    seeded = bases.fine_tuned_base(ds, 4, model="minilm", index=index, seed=7, **small)
    assert seeded != bases.fine_tuned_base(ds, 4, model="minilm", index=index, **small) and "-seed7-" in seeded
    info = training_info(seeded)
    assert info["seed"] == 7 and info["train_qids"] == qid_fingerprint(rest)
    assert info["train_qid_list"] == sorted(rest["qid"].astype(str))
    dp = recipe.tuned_pipeline(ds, index, base="minilm", helpers=(), n=4, k=3, expert_k=2, verbose=False,
                               depth=None, train_settings={"seed": 7, **{k: v for k, v in small.items()
                                                                           if k != "verbose"}})
    assert dp.fuser.names[0] == "dense_ft"
    other = bases.fine_tuned_base(ds, 4, tuning_seed=1, model="minilm", index=index, **small)
    learned = set(train_data(ds, "tuning", 4)[0]["qid"]) - set(train_data(ds, "tuning", 4, 1)[0]["qid"])
    assert learned  # the seed-1 base trained on some of the seed-0 slice
    with pytest.raises(ValueError, match=f"trained on {len(learned)} of the 4 tuning queries"):
        recipe.fitted_weights(ds, index, {"dense_ft": other}, n=4, k=3, expert_k=2)
    with pytest.raises(ValueError, match="trained on"):
        recipe.fitted_weights(ds, index, {"dense_ft": seeded}, n=4, k=3, expert_k=2, helpers={"dense_ft_o": other})
    meta = next(p for p in (tmp_path / "models").glob("*/pyterrier_tot_training.json") if str(other) in str(p))
    record = json.loads(meta.read_text())
    (record.get("training", record)).pop("train_qid_list")
    meta.write_text(json.dumps(record))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recipe.fitted_weights(ds, index, {"dense_ft": other}, n=4, k=3, expert_k=2)
    assert any("cannot say whether they include tuning queries" in str(w.message) for w in caught)


def test_batches_that_cannot_be_filled_are_emitted_short():
    """Three queries naming the same book: no batch of 2 holds distinct texts; NoDuplicatesDataLoader waits for
    ever there, DistinctTextBatches emits a short batch."""
    from sentence_transformers import InputExample

    from pyterrier_tot.recipe.training_loop import DistinctTextBatches

    same = [InputExample(texts=[f"query {i}", "The Sleepy Kitten"]) for i in range(3)]
    batches = list(DistinctTextBatches(same, batch_size=2))
    assert [len(b) for b in batches] == [1]
    mixed = same + [InputExample(texts=["query 9", "Spaceship Nine"])]
    assert all(len(b) == 2 for b in DistinctTextBatches(mixed, batch_size=2))


def test_pairs_read_only_the_gold_books_and_warn_about_missing_ones(index):
    """build_pairs takes a BookIndex as well as a frame (the same pairs), and a gold docno the corpus lacks is
    left out with a warning instead of failing the whole training run."""
    ds = TinyDataset()
    frame_pairs = build_pairs(ds.topics, ds.qrels, pd.DataFrame(TINY_BOOKS))
    assert build_pairs(ds.topics, ds.qrels, index) == frame_pairs
    qrels = ds.qrels.copy()
    qrels.loc[0, "docno"] = "not-a-book"
    with pytest.warns(UserWarning, match="1 of 7 training books are not in the corpus"):
        pairs = build_pairs(ds.topics, qrels, index)
    assert len(pairs) == len(frame_pairs) - 1
    with pytest.raises(TypeError, match="corpus frame or a BookIndex"):
        build_pairs(ds.topics, ds.qrels, ["b1"])


def test_hard_negative_round_mines_the_near_misses_of_its_own_base(index, tmp_path, monkeypatch):
    """Issue 31.3: the ``base`` miner draws a round's negatives from the model the round continues from, and the
    round's folder names its base, its miners and its training settings (never reused across them)."""
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    kw = dict(max_steps=1, batch_size=4, max_seq_length=32)
    models = hard_negatives.fine_tuned_hard(ds, index, epochs=1, n_negatives=1, depth=2, n=4, miners=("base",),
                                   clue_forms=False, verbose=False, **kw)
    assert sorted(models) == [0, 1] and models[0] == bases.fine_tuned_base(ds, 4, index=index, train=False)
    meta = training_metadata(models[1])
    assert meta["mined_from"] == ["base"] and meta["start"] == models[0].rsplit("/", 1)[-1]
    # each negative is one of the base model's own top-2 books for that query, never its gold book
    examples = hard_negatives.hard_negative_examples(ds, index, n_negatives=1, depth=2, n=4, clue_forms=False,
                                            miners=("base",), base_model=models[0])
    rest, qrels = bases.train_data(ds, "rest", 4)
    top = (index.dense(models[0]) % 2)(rest)
    text = {b["docno"]: b["title"] for b in TINY_BOOKS}
    gold = rest.merge(qrels, on="qid").set_index("query")["docno"].to_dict()
    top_of = top[["qid", "docno"]].merge(rest, on="qid").groupby("query")["docno"].agg(set).to_dict()
    assert examples
    for query, _, negative in examples:
        neg = next(d for d, t in text.items() if negative.startswith(t))
        assert neg in top_of[query] and neg != gold[query]
    with pytest.raises(ValueError, match="base_model"):
        hard_negatives.hard_negative_examples(ds, index, n=4, miners=("base",))
    # names: the current MiniLM base is not the legacy one; settings that change the model change the folder
    name = recipe.hard_negatives_dir(ds, "minilm", 4, 2, 1, True, ("bm25", "base")).name
    assert name.startswith("hn-" + bases.base_dir(ds, "minilm", 4).name) and "-from-bm25+base" in name
    lr = recipe.hard_negatives_dir(ds, "minilm", 4, 2, 1, True, ("bm25", "base"), train_kwargs={"lr": 5e-5})
    assert lr.name != name
    assert recipe.hard_negatives_dir(ds, "minilm", 4, 2, 1, True, ("bm25", "base"), depth=50).name != name


def test_a_base_encoding_at_another_length_is_a_copy_of_the_model_trained(index, tmp_path, monkeypatch):
    """nomic trains at 256 tokens and the recipe encodes with it at 512 (BASE_SETTINGS' encode_length): the model
    is trained once, at its training length, and the recipe's folder is a copy of it that loads at the other
    length (same weights; the trained folder is left as it was). A lookup (train=False) makes the copy, never a
    training; the plan counts the training as done."""
    from pathlib import Path

    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds, small = TinyDataset(), {"max_steps": 2, "batch_size": 4, "max_seq_length": 32}
    nomic = bases.base_settings("nomic")
    assert (nomic["max_seq_length"], nomic["encode_length"]) == (256, 512)
    assert bases.base_dir(ds, "nomic").name.endswith("-e2of3-encode512")
    assert not bases.base_dir(ds, "mpnet").name.endswith("512")
    trained = bases.fine_tuned_base(ds, 4, model="minilm", index=index, verbose=False, **small)
    got = bases.fine_tuned_base(ds, 4, model="minilm", index=index, verbose=False, encode_length=64, **small)
    assert Path(got).name == Path(trained).name + "-encode64"
    assert SentenceTransformer(got, device="cpu").max_seq_length == 64
    assert SentenceTransformer(trained, device="cpu").max_seq_length == 32
    assert _same(_weights(Path(got)), _weights(Path(trained)))
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, verbose=False, encode_length=32,
                                 **small) == trained  # its own length: the model itself
    from pyterrier_tot.recipe import expert_training

    monkeypatch.setattr(expert_training, "train_base_retriever", lambda *a, **k: pytest.fail("trained again"))
    import shutil

    shutil.rmtree(got)
    plan = recipe.recipe_plan(ds, index, base="minilm", helpers=(), n=4,
                              train_settings={**small, "encode_length": 64})
    assert not [s for s in plan.todo if s.kind == "train"], plan
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, train=False, verbose=False, encode_length=64,
                                 **small) == got
    assert SentenceTransformer(got, device="cpu").max_seq_length == 64
    # a copy whose weights are not the trained model's (made from an earlier training of its folder) is made again
    weights = next(Path(got).rglob("model.safetensors"))
    weights.unlink()  # the copy's link, not the trained model's file
    shutil.copy2(next(Path(resolve_model(None)).rglob("model.safetensors")), weights)
    assert not _same(_weights(Path(got)), _weights(Path(trained)))
    assert bases.fine_tuned_base(ds, 4, model="minilm", index=index, train=False, verbose=False, encode_length=64,
                                 **small) == got
    assert _same(_weights(Path(got)), _weights(Path(trained)))
    with pytest.raises(ValueError, match="encode_length"):
        bases.base_settings("minilm", encode_length=0)
