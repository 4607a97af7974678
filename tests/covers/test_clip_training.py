"""Fine-tuning a tiny random open_clip model on synthetic (cover clue, cover) pairs, then ranking with it."""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.covers import ClipModel, CoverIndex, CoverRanker  # noqa: E402
from pyterrier_tot.covers.clip_training import (  # noqa: E402
    PAPER_DEFAULTS,
    ClipCheckpoint,
    CoverClipTrainer,
    finetune_clip,
    retrieval_accuracy,
)
from tests.helpers.synthetic_covers import make_books, write_covers

N_BOOKS, N_TEST = 96, 24


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    books = write_covers(make_books(N_BOOKS, seed=1, size=32), tmp_path_factory.mktemp("covers"))
    pairs = pd.DataFrame({"docno": [b["docno"] for b in books], "clue_cover": [b["clue_cover"] for b in books],
                          "cover": [b["cover"] for b in books]})
    return pairs.iloc[N_TEST:].reset_index(drop=True), pairs.iloc[:N_TEST].reset_index(drop=True), books


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, data):
    trainval, test, books = data
    import torch

    torch.set_num_threads(2)
    model = ClipModel.from_config(seed=0)
    test_images = [books[i]["image"] for i in range(N_TEST)]
    before = retrieval_accuracy(model, test["clue_cover"].tolist(), test_images, list(range(N_TEST)))
    out = tmp_path_factory.mktemp("ckpt") / "cover-clip"
    # a randomly initialised model needs a larger learning rate and more epochs than the paper's fine-tuning
    trainer = CoverClipTrainer(model, batch_size=16, lr=1e-3, epochs=12, verbose=False)
    trainer.fit(trainval, val_fraction=0.25, output_dir=out)
    after = retrieval_accuracy(model, test["clue_cover"].tolist(), test_images, list(range(N_TEST)))
    return {"model": model, "trainer": trainer, "before": before, "after": after, "ckpt": out}


def test_finetuning_lifts_heldout_top1_well_above_chance(tuned):
    chance = 1.0 / N_TEST
    before, after = tuned["before"], tuned["after"]
    print(f"held-out top1 {before['top1']:.3f} -> {after['top1']:.3f}, top5 {before['top5']:.3f} -> "
          f"{after['top5']:.3f} (chance {chance:.3f}); history {tuned['trainer'].history}")
    assert after["n_covers"] == N_TEST
    assert after["top1"] >= 3 * chance, (before, after)
    assert after["top1"] >= before["top1"] + 2 * chance, (before, after)
    assert after["top5"] >= 0.5
    hist = tuned["trainer"].history
    assert [h["epoch"] for h in hist] == list(range(13))
    assert hist[-1]["train_loss"] < hist[1]["train_loss"]


def test_best_validation_epoch_is_kept_and_saved(tuned, data):
    from PIL import Image

    trainer = tuned["trainer"]
    best = trainer.best_epoch
    val_top1 = [h["top1"] for h in trainer.history]
    assert best == int(np.argmax(val_top1))  # first epoch reaching the maximum
    # the returned weights are the best epoch's: re-measuring on the same validation split gives its accuracy
    _, val = CoverClipTrainer.split(data[0], val_fraction=0.25, seed=0)
    acc = retrieval_accuracy(tuned["model"], val["clue"].tolist(), [Image.open(p) for p in val["cover"]],
                             list(range(len(val))))
    assert acc["top1"] == pytest.approx(max(val_top1))
    ckpt = ClipCheckpoint(tuned["ckpt"])
    meta = ckpt.metadata()
    assert meta["best_epoch"] == best and meta["best_val_top1"] == pytest.approx(max(val_top1))
    assert meta["training"]["batch_size"] == 16 and meta["base_model"]["kind"] == "config"
    assert json.loads((tuned["ckpt"] / "pt_meta.json").read_text())["type"] == "clip_model"
    assert not (tuned["ckpt"] / "metadata.json").exists()  # training metadata lives in pt_meta.json
    loaded = pt.Artifact.load(str(tuned["ckpt"]))
    assert isinstance(loaded, ClipCheckpoint) and loaded.metadata()["history"] == json.loads(
        json.dumps(trainer.history))
    with pytest.raises(FileExistsError, match="overwrite"):  # before any training happens
        CoverClipTrainer(ClipModel.from_config(seed=0), epochs=1, verbose=False).fit(
            data[0], output_dir=tuned["ckpt"])
    reloaded = ckpt.model()
    assert reloaded.fingerprint() == tuned["model"].fingerprint()
    assert tuned["model"].source == {"kind": "checkpoint", "path": str(tuned["ckpt"]),
                                     "base_model": tuned["model"].source["base_model"]}


def test_ranker_with_tuned_model_returns_the_right_book(tmp_path, tuned, data):
    trainval, test, books = data
    docs = pd.DataFrame({"docno": [b["docno"] for b in books[:N_TEST]], "cover": [b["cover"] for b in books[:N_TEST]]})
    index = CoverIndex(tmp_path / "idx").build(docs, tuned["model"], verbose=False)
    queries = pd.DataFrame({"qid": [f"q{i}" for i in range(N_TEST)], "clue_cover": test["clue_cover"]})
    ranker = CoverRanker(index, num_results=5)  # model reloaded from the checkpoint recorded in the index
    res = ranker(queries)
    top = res[res["rank"] == 0].set_index("qid")["docno"]
    hits = np.mean([top[f"q{i}"] == test["docno"][i] for i in range(N_TEST)])
    assert hits == pytest.approx(tuned["after"]["top1"])
    assert hits >= 3.0 / N_TEST
    # the best-ranked clue is answered with its own book in first place
    correct = [i for i in range(N_TEST) if top[f"q{i}"] == test["docno"][i]]
    assert correct, "no clue retrieved its own cover"
    # and as a scorer over all (query, book) pairs the gold book is the top-scored for the same queries
    pairs = queries.merge(docs[["docno"]], how="cross")
    scored = CoverRanker(index, normalise="minmax")(pairs)
    best = scored.loc[scored.groupby("qid")["score"].idxmax()].set_index("qid")["docno"]
    assert [best[f"q{i}"] for i in correct] == [test["docno"][i] for i in correct]


def test_defaults_follow_the_paper():
    trainer = CoverClipTrainer(ClipModel.from_config(seed=0), verbose=False)
    s = trainer.settings()
    assert {k: s[k] for k in PAPER_DEFAULTS} == PAPER_DEFAULTS == {
        "batch_size": 4, "lr": 5e-5, "weight_decay": 0.2, "epochs": 10, "optimizer": "adamw"}
    decay_groups = trainer._param_groups()
    assert decay_groups[0]["weight_decay"] == 0.0 and decay_groups[1]["weight_decay"] == 0.2
    assert all(p.ndim >= 2 for p in decay_groups[1]["params"])


def test_unusable_pairs_are_dropped_and_split_is_by_cover(tmp_path, data):
    trainval, _, books = data
    small = trainval.iloc[:10].copy()
    small.loc[0, "clue_cover"] = None
    small.loc[1, "cover"] = str(tmp_path / "missing.png")
    # a second clue for one cover: the split keeps both on the same side
    small = pd.concat([small, small.iloc[[5]].assign(clue_cover="another clue")], ignore_index=True)
    train, val = CoverClipTrainer.split(small, val_fraction=0.3, seed=0)
    assert not set(train["group"]) & set(val["group"])
    model = ClipModel.from_config(seed=0)
    with pytest.warns(UserWarning, match="dropped 1 pair\\(s\\) with an N/A clue and 1 with a missing"):
        finetune_clip(model, small, val=small.iloc[2:6], epochs=1, batch_size=4, verbose=False)
    # training through pooled windows of long clues also runs and keeps the model usable
    long = small.iloc[2:10].assign(clue_cover=lambda d: d["clue_cover"] + " and more" * 60)
    finetune_clip(model, long, val=long.iloc[:4], epochs=1, batch_size=4, train_long_clues="chunk", verbose=False)
    assert np.isfinite(model.encode_texts(long["clue_cover"].tolist())).all()
    with pytest.raises(KeyError, match="clue_cover"):
        finetune_clip(model, pd.DataFrame({"docno": ["a"], "text": ["x"]}), epochs=1, verbose=False)
    with pytest.raises(ValueError, match="batch_size"):
        CoverClipTrainer(model, batch_size=1)
