"""CoverIndex / CoverRanker on synthetic covers with a tiny randomly initialised open_clip model."""
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pandas as pd
import pyterrier as pt  # noqa: E402
import pytest

from pyterrier_tot.covers import ClipCheckpoint, ClipModel, CoverIndex, CoverRanker, blank_cover  # noqa: E402
from pyterrier_tot.errors import CoverImageError, ModelUnavailableError  # noqa: E402
from pyterrier_tot.normalise import normalise_scores  # noqa: E402
from tests.helpers.synthetic_covers import make_books, write_covers


def test_open_clip_and_sentence_transformers_import_together():
    code = ("import sentence_transformers, open_clip, torchvision, torch;"
            "m = open_clip.model.CLIP(16, {'image_size': 16, 'layers': 1, 'width': 32, 'patch_size': 8,"
            " 'head_width': 16}, {'context_length': 8, 'vocab_size': 100, 'width': 32, 'heads': 2, 'layers': 1});"
            "print(torch.__version__, torchvision.__version__, open_clip.__version__,"
            " sentence_transformers.__version__)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stderr[-2000:]
    torch_v, tv_v = res.stdout.split()[:2]
    assert torch_v.startswith("2.") and tv_v.startswith("0.")


@pytest.fixture(scope="module")
def model():
    return ClipModel.from_config(seed=0)


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    return write_covers(make_books(12, seed=3, size=48), tmp_path_factory.mktemp("covers"))


@pytest.fixture(scope="module")
def index(tmp_path_factory, books, model):
    docs = [{"docno": b["docno"], "cover": b["cover"]} for b in books]
    return CoverIndex(tmp_path_factory.mktemp("idx") / "covers").build(docs, model, batch_size=5, verbose=False)


def _queries(books, n=4):
    return pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "query": ["whole query"] * n,
                         "clue_cover": [b["clue_cover"] for b in books[:n]]})


def test_retriever_scores_are_clip_cosines(index, model, books):
    ranker = CoverRanker(index, model, num_results=5)
    res = ranker(_queries(books))
    assert list(res.columns[:2]) == ["qid", "query"] and {"docno", "score", "rank"} <= set(res.columns)
    assert res.groupby("qid").size().tolist() == [5, 5, 5, 5]
    # scores are the cosine between the clue and the cover embedding, highest first
    img = model.encode_images([b["image"] for b in books])
    txt = model.encode_texts([b["clue_cover"] for b in books[:4]])
    pos = {b["docno"]: i for i, b in enumerate(books)}
    for qi, (_qid, grp) in enumerate(res.groupby("qid", sort=True)):
        want = img @ txt[qi]
        got = grp.sort_values("rank")
        np.testing.assert_allclose(got["score"], [want[pos[d]] for d in got["docno"]], atol=1e-5)
        assert got["rank"].tolist() == list(range(5))
        assert got["docno"].tolist() == [books[i]["docno"] for i in np.argsort(-want)[:5]]


def test_scorer_matches_retriever_and_keeps_rows(index, model, books):
    ranker = CoverRanker(index, model, num_results=12)
    retrieved = ranker(_queries(books, 2))
    inp = retrieved[["qid", "docno", "query", "clue_cover"]].sample(frac=1.0, random_state=0).reset_index(drop=True)
    scored = ranker(inp)
    assert len(scored) == len(inp) and scored["docno"].tolist() == inp["docno"].tolist()
    merged = scored.merge(retrieved, on=["qid", "docno"], suffixes=("", "_r"))
    np.testing.assert_allclose(merged["score"], merged["score_r"], atol=1e-6)
    np.testing.assert_array_equal(merged["rank"], merged["rank_r"])


def test_na_clue_gives_no_results_or_neutral_score(index, model, books):
    ranker = CoverRanker(index, model, num_results=3)
    q = pd.DataFrame({"qid": ["a", "b", "c", "d"],
                      "clue_cover": [books[0]["clue_cover"], None, float("nan"), "N/A"]})
    res = ranker(q)
    assert set(res["qid"]) == {"a"} and len(res) == 3
    assert len(ranker(q.iloc[1:])) == 0  # only N/A clues: an empty, well-formed frame
    assert {"qid", "docno", "score", "rank"} <= set(ranker(q.iloc[1:]).columns)
    rows = pd.DataFrame({"qid": ["a", "b", "b"], "docno": [books[0]["docno"], books[1]["docno"], "unknown"],
                         "clue_cover": [books[0]["clue_cover"], "", ""]})
    scored = ranker(rows)
    assert scored["score"].tolist()[1:] == [0.0, 0.0]
    assert scored["score"].iloc[0] != 0.0


def test_minmax_option_uses_shared_normalisation(index, model, books):
    raw = CoverRanker(index, model, num_results=12)(_queries(books, 3))
    norm = CoverRanker(index, model, num_results=12, normalise="minmax")(_queries(books, 3))
    np.testing.assert_allclose(norm["score"], normalise_scores(raw, "minmax"), atol=1e-6)
    assert norm.groupby("qid")["score"].max().eq(1.0).all() and norm.groupby("qid")["score"].min().eq(0.0).all()


def test_bad_input_is_named(index, model):
    ranker = CoverRanker(index, model)
    with pytest.raises(Exception, match="clue_cover"):
        ranker(pd.DataFrame({"qid": ["1"], "query": ["a red cover"]}))
    with pytest.raises(Exception, match="clue_cover"):
        ranker(pd.DataFrame({"qid": ["1"], "docno": ["book0000"]}))
    with pytest.raises(ValueError, match="missing_cover"):
        CoverRanker(index, model, missing_cover="grey")
    with pytest.raises(ValueError, match="long_clues"):
        CoverRanker(index, model, long_clues="summarise")


def test_long_clues_are_chunked_and_pooled(model):
    short = "a red cover with a yellow circle"
    assert np.allclose(model.encode_texts([short], long_clues="chunk"),
                       model.encode_texts([short], long_clues="truncate"))
    words = "red cover yellow circle tree house person dark night storm".split()
    long_clue = " ".join(words[i % len(words)] for i in range(180))  # > 2 windows of 75 tokens
    ids = model.tokenizer.encode(long_clue)
    assert len(ids) > 150
    chunked = model.encode_texts([long_clue], long_clues="chunk")[0]
    truncated = model.encode_texts([long_clue], long_clues="truncate")[0]
    windows = [model.tokenizer.decode(ids[i:i + 75]) for i in range(0, len(ids), 75)]
    per = model.encode_texts(windows, long_clues="truncate")
    pooled = per.mean(0) / np.linalg.norm(per.mean(0))
    np.testing.assert_allclose(chunked, pooled, atol=1e-4)
    np.testing.assert_allclose(truncated, per[0], atol=1e-4)
    assert not np.allclose(chunked, truncated, atol=1e-3)
    assert abs(np.linalg.norm(chunked) - 1) < 1e-5


def test_missing_and_corrupt_covers_are_counted_not_fatal(tmp_path, model, books):
    bad_bytes = tmp_path / "garbage.png"
    bad_bytes.write_bytes(b"this is not an image at all")
    good = Path(books[0]["cover"]).read_bytes()
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good[: len(good) // 3])
    docs = pd.DataFrame({
        "docno": ["ok", "nopath", "none", "gone", "garbage", "truncated", "url"],
        "cover": [books[0]["cover"], "", None, str(tmp_path / "does-not-exist.jpg"), str(bad_bytes), str(truncated),
                  "https://example.invalid/cover.jpg"],
    })
    with pytest.warns(UserWarning, match="6 of 7 books have no usable cover") as rec:
        idx = CoverIndex(tmp_path / "idx").build(docs, model, batch_size=2, verbose=False, fetch=False)
    assert "garbage" in str(rec[0].message)
    stats = idx.build_stats()
    assert (stats["ok"], stats["missing"], stats["corrupt"], stats["unfetched"]) == (1, 3, 2, 1)
    assert stats["corrupt_docnos"] == ["garbage", "truncated"]
    assert idx.has_cover.tolist() == [True] + [False] * 6
    # blank (default): a book without a cover is scored against the blank white image
    blank = model.encode_images([blank_cover(32)])[0]
    np.testing.assert_allclose(idx.embeddings[1:], np.tile(blank, (6, 1)), atol=1e-6)
    clue = books[0]["clue_cover"]
    rows = pd.DataFrame({"qid": "q", "docno": list(docs["docno"]) + ["not-indexed"], "clue_cover": clue})
    blank_scores = CoverRanker(idx, model)(rows)["score"].to_numpy()
    expect_blank = float(model.encode_texts([clue])[0] @ blank)
    np.testing.assert_allclose(blank_scores[1:], expect_blank, atol=1e-5)
    # neutral: no contribution (0.0) for them, and they are not retrieved
    neutral = CoverRanker(idx, model, missing_cover="neutral")
    assert neutral(rows)["score"].tolist()[1:] == [0.0] * 7
    assert neutral(rows)["score"].iloc[0] == pytest.approx(blank_scores[0])
    assert neutral(pd.DataFrame({"qid": ["q"], "clue_cover": [clue]}))["docno"].tolist() == ["ok"]
    assert len(CoverRanker(idx, model)(pd.DataFrame({"qid": ["q"], "clue_cover": [clue]}))) == 7


def test_corrupt_cover_can_raise_without_leaving_an_index(tmp_path, model, books):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    docs = [{"docno": "a", "cover": books[0]["cover"]}, {"docno": "b", "cover": str(bad)}]
    with pytest.raises(CoverImageError, match="'b'"):
        CoverIndex(tmp_path / "idx").build(docs, model, on_error="raise", verbose=False)
    assert not (tmp_path / "idx").exists()
    # only the build's lock file stays beside it (removing a lock others may wait on would be unsafe)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".idx.lock", "bad.jpg"]
    with pytest.raises(KeyError, match="docno"):
        CoverIndex(tmp_path / "idx2").build([{"cover": "x.png"}], model, verbose=False)
    with pytest.raises(ValueError, match="duplicate"):
        CoverIndex(tmp_path / "idx3").build([{"docno": "a", "cover": ""}] * 2, model, verbose=False)


def test_results_equal_across_batch_sizes(tmp_path, model, books, index):
    docs = [{"docno": b["docno"], "cover": b["cover"]} for b in books]
    one = CoverIndex(tmp_path / "b1").build(docs, model, batch_size=1, verbose=False)
    seven = CoverIndex(tmp_path / "b7").build(docs, model, batch_size=7, verbose=False)
    np.testing.assert_allclose(one.embeddings, seven.embeddings, atol=1e-5)
    np.testing.assert_allclose(one.embeddings, index.embeddings, atol=1e-5)
    q = _queries(books, 4)
    a = CoverRanker(one, model, num_results=12, batch_size=1)(q)
    b = CoverRanker(seven, model, num_results=12, batch_size=64)(q)
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-5)
    assert a["docno"].tolist() == b["docno"].tolist()


def test_artifact_save_and_load_give_identical_scores(tmp_path, model, books, index):
    ckpt = model.save(tmp_path / "ckpt")
    assert {p.name for p in ckpt.iterdir()} == {"open_clip_model.safetensors", "open_clip_config.json",
                                                "pt_meta.json"}
    reloaded = ClipModel.load(ckpt)
    assert reloaded.fingerprint() == model.fingerprint()
    docs = [{"docno": b["docno"], "cover": b["cover"]} for b in books]
    idx_path = tmp_path / "idx"
    CoverIndex(idx_path).build(docs, reloaded, verbose=False)
    q = _queries(books, 4)
    before = CoverRanker(index, model, num_results=12)(q)
    # a fresh CoverIndex over the saved directory, with the model it recorded (the checkpoint path)
    again = CoverIndex(str(idx_path))
    assert again.built() and len(again) == 12 and again.model_info()["source"]["kind"] == "checkpoint"
    after = CoverRanker(again, num_results=12)(q)
    assert isinstance(again.embeddings, np.memmap)
    assert before["docno"].tolist() == after["docno"].tolist()
    np.testing.assert_allclose(before["score"], after["score"], atol=1e-6)
    assert "CoverRanker(CoverIndex(" in repr(CoverRanker(again)) and "ClipModel.load" in repr(CoverRanker(again))


def test_model_mismatch_and_rebuild_guard(tmp_path, index, books):
    other = ClipModel.from_config(seed=1)
    with pytest.raises(ValueError, match="not the model"):
        CoverRanker(index, other)
    assert len(CoverRanker(index, other, check_model=False, num_results=12)(_queries(books, 1))) == 12
    with pytest.raises(FileExistsError):
        CoverIndex(index.path).build([], other, verbose=False)
    with pytest.raises(ValueError, match="in-memory model"):
        CoverRanker(index)  # built with a config model: nothing on disk to reload


def test_pretrained_weights_fail_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.time()
    with pytest.raises(ModelUnavailableError, match="ViT-B-32"):
        ClipModel.from_pretrained("ViT-B-32", "openai")
    with pytest.raises(ModelUnavailableError, match="no pretrained tag"):
        ClipModel.from_pretrained("ViT-B-32", "no-such-tag")
    assert time.time() - t < 10


def test_artifacts_open_with_pt_artifact_load(tmp_path, model, books, index):
    meta = index.meta()
    assert meta["type"] == "cover_index" and meta["format"] == "clip_npy" and meta["doc_count"] == 12
    assert {"package_hint", "pyterrier_tot_version", "created", "model", "build_stats"} <= set(meta)
    assert not {"model.json", "build_stats.json"} & {p.name for p in Path(index.path).iterdir()}
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, CoverIndex) and len(loaded) == 12
    q = _queries(books, 2)
    a = CoverRanker(index, model, num_results=4)(q)
    b = loaded.ranker(model, num_results=4)(q)
    assert a["docno"].tolist() == b["docno"].tolist()
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-6)
    ckpt = pt.Artifact.load(str(model.save(tmp_path / "ckpt")))
    assert isinstance(ckpt, ClipCheckpoint) and ckpt.meta()["type"] == "clip_model"
    assert ckpt.metadata()["fingerprint"] == model.fingerprint() == ckpt.model().fingerprint()
    with pytest.raises(FileExistsError):
        model.save(tmp_path / "ckpt")


def test_folders_with_old_side_files_still_open(tmp_path, model, books, index):
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(index.path, old)
    meta = json.loads((old / "pt_meta.json").read_text())
    (old / "model.json").write_text(json.dumps(meta.pop("model")))
    (old / "build_stats.json").write_text(json.dumps(meta.pop("build_stats")))
    (old / "pt_meta.json").write_text(json.dumps(meta))
    again = CoverIndex(old)
    assert again.model_info() == index.model_info() and again.build_stats() == index.build_stats()
    ckpt = model.save(tmp_path / "ckpt")
    meta = json.loads((ckpt / "pt_meta.json").read_text())
    (ckpt / "metadata.json").write_text(json.dumps({"base_model": meta["base_model"], "fingerprint": "x"}))
    assert ClipCheckpoint(ckpt).metadata()["fingerprint"] == "x"
    assert ClipModel.load(ckpt).source["base_model"] == model.source


def test_inspect_agrees_with_real_calls_in_both_modes(index, model, books):
    ranker = CoverRanker(index, model, num_results=3)
    modes = pt.inspect.transformer_inputs(ranker)
    assert sorted(map(sorted, modes)) == [["clue_cover", "docno", "qid"], ["clue_cover", "qid"]]
    real = {
        ("clue_cover", "qid"): _queries(books, 2)[["qid", "clue_cover"]],
        ("clue_cover", "docno", "qid"): pd.DataFrame({"qid": ["q0", "q0"], "docno": [books[0]["docno"], "nope"],
                                                      "clue_cover": [books[0]["clue_cover"]] * 2}),
    }
    for cols in modes:
        inp = real[tuple(sorted(cols))]
        out = ranker(inp)
        assert sorted(pt.inspect.transformer_outputs(ranker, list(inp.columns))) == sorted(out.columns)
        empty = ranker(inp.iloc[:0])
        assert len(empty) == 0 and sorted(empty.columns) == sorted(out.columns)


def test_rank_cutoff_is_fused_into_the_ranker(index, model, books):
    ranker = CoverRanker(index, model, num_results=10)
    compiled = (ranker % 5).compile()
    assert isinstance(compiled, CoverRanker) and "RankCutoff" not in repr(compiled)
    assert compiled.num_results == 5 and ranker.num_results == 10 and compiled.model is ranker.model
    q = _queries(books, 3)
    pd.testing.assert_frame_equal(compiled(q), (ranker % 5)(q))
    # scorer mode: the fused ranker cuts re-scored frames exactly like RankCutoff would
    pairs = q.merge(pd.DataFrame({"docno": [b["docno"] for b in books]}), how="cross")
    pd.testing.assert_frame_equal(compiled(pairs), (ranker % 5)(pairs))
    assert isinstance((ranker % 20).compile(), CoverRanker)
    assert len((ranker % 20).compile()(pairs)) == len(pairs)
    assert "score_cutoff=5" in repr(compiled)
