"""Encoding options (issue 17 item 4): the length-sorted document encoder gives the vectors of a plain
``SentenceTransformer.encode`` loop, a bf16 index is close to the fp32 one but is a different index (its own
folder and manifest, never reused as fp32), and precision mismatches are refused. Behaviour only: speed is
measured in benchmarks/speed_scale/encoding_speed.py, never here."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.index.encoding import SortedDocEncoder, encoder_for
from pyterrier_tot.models import check_precision, load_biencoder, model_precision
from tests.helpers.books import TINY_BOOKS


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    try:
        ptt.resolve_model()
    except ptt.ModelUnavailableError as e:
        pytest.skip(str(e))
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("enc") / "index")


def _part_meta(flex):
    meta = json.loads((flex.index_path.parent / "pt_meta.json").read_text())
    return {k: v for k, v in meta.items() if k != "created"}


def _cos(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_sorted_encoder_equals_plain_encode(index):
    enc = load_biencoder()
    texts = index.field_text(("title", "text")).tolist()
    plain = enc.model.encode(texts, batch_size=32)
    ours = SortedDocEncoder(enc, chunk_size=4).encode(texts)  # chunks smaller than the corpus: order kept
    assert ours.dtype == np.float32 and ours.shape == plain.shape
    np.testing.assert_allclose(ours, plain, atol=1e-5)
    flex = index.flex_index()
    docnos, vecs, _ = flex.payload()
    assert list(docnos) == index.corpus["docno"].tolist()
    np.testing.assert_allclose(np.asarray(vecs), plain, atol=1e-5)


def test_sorted_encoder_frames_and_records():
    enc = SortedDocEncoder(load_biencoder())
    empty = enc(pd.DataFrame({"docno": [], "text": []}))
    assert "doc_vec" in empty.columns and len(empty) == 0
    out = enc(pd.DataFrame({"docno": ["a", "b"], "text": ["a dragon", "a kitten asleep"]}))
    assert out["doc_vec"].iloc[0].shape == (384,)
    recs = list(enc.transform_iter([{"docno": "a", "text": "a dragon"}]))
    np.testing.assert_allclose(recs[0]["doc_vec"], out["doc_vec"].iloc[0], atol=1e-5)
    assert "chunk_size=4096" in repr(enc)
    with pytest.raises(TypeError):
        SortedDocEncoder(object())


def test_bf16_vectors_close_to_fp32_and_manifests_differ(index):
    f32 = index.flex_index()
    b16 = index.flex_index(precision="bf16")
    assert f32.index_path != b16.index_path
    m32, m16 = _part_meta(f32), _part_meta(b16)
    assert m32["precision"] == "fp32" and m16["precision"] == "bf16"
    assert {k: v for k, v in m32.items() if k != "precision"} == {k: v for k, v in m16.items() if k != "precision"}
    _, v32, _ = f32.payload()
    _, v16, _ = b16.payload()
    assert np.asarray(v16).dtype == np.float32
    assert _cos(v32, v16).min() > 0.99
    # the same top book for every tiny query, through the bf16 query encoder too
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["a dragon and the moon", "ghost in a lighthouse"]})
    r32 = index.dense(num_results=3)(topics)
    r16 = index.dense(num_results=3, precision="bf16")(topics)
    assert r32[r32["rank"] == 0]["docno"].tolist() == r16[r16["rank"] == 0]["docno"].tolist()
    assert "precision='bf16'" in repr(index.dense(precision="bf16"))
    assert "precision" not in repr(index.dense())


def test_bf16_index_is_not_reused_as_fp32(index):
    b16 = index.flex_index(precision="bf16")
    f32 = index.flex_index()
    # an fp32 manifest written into the bf16 folder would be a lie: it is not accepted as the bf16 index
    meta = json.loads((b16.index_path.parent / "pt_meta.json").read_text())
    (b16.index_path.parent / "pt_meta.json").write_text(json.dumps({**meta, "precision": "fp32"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = index.flex_index(precision="bf16")
    assert any("(differing: precision); rebuilding" in str(w.message) for w in caught)
    assert _part_meta(again)["precision"] == "bf16"
    assert index.flex_index().index_path == f32.index_path


def test_fp32_manifest_without_precision_still_reused(index):
    # dense indexes written before the precision setting existed were fp32: they are reused, not rebuilt
    f32 = index.flex_index()
    path = f32.index_path.parent / "pt_meta.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in meta.items() if k != "precision"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert index.flex_index().index_path == f32.index_path


def test_precision_of_encoder_wins_and_mismatch_is_refused(index):
    b16 = load_biencoder(precision="bf16")
    assert model_precision(b16) == "bf16" and model_precision(load_biencoder()) == "fp32"
    assert b16 is load_biencoder(precision="bf16") and b16 is not load_biencoder()
    assert "bf16" in repr(b16)
    assert encoder_for(None, b16)[1] == "bf16"
    with pytest.raises(ValueError, match="precision='fp32'"):
        index.flex_index(encoder=b16, precision="fp32")
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("fp8")
    with pytest.raises(ValueError, match="precision must be one of"):
        index.dense(precision="half")
    assert index.flex_index(encoder=b16).index_path == index.flex_index(precision="bf16").index_path


def test_an_encoder_files_its_vectors_under_its_own_model(index, tmp_path):
    """``encoder=`` alone: the vectors are kept under the model the encoder runs, never under the default's name
    (a later call for the default would read a fine-tuned model's vectors); a mismatch or an unknown model is
    refused."""
    import shutil
    import types

    from pyterrier_tot.models import DEFAULT_MODEL, resolve_model

    shutil.copytree(resolve_model(None), tmp_path / "ft")
    other = load_biencoder(str(tmp_path / "ft"))
    own = index.flex_index(encoder=other).index_path
    assert own == index.flex_index(str(tmp_path / "ft")).index_path != index.flex_index().index_path
    assert index.flex_index(encoder=load_biencoder()).index_path == index.flex_index().index_path
    with pytest.raises(ValueError, match="encoder passed runs"):
        index.dense(DEFAULT_MODEL, encoder=other)
    with pytest.raises(ValueError, match="does not say which model"):
        index.dense_scorer(encoder=types.SimpleNamespace())
    q = pd.DataFrame({"qid": ["1"], "query": ["a lighthouse ghost"]})
    pd.testing.assert_frame_equal(index.dense(encoder=other)(q), index.dense(str(tmp_path / "ft"))(q))


def test_a_model_named_by_its_folder_or_its_hub_name_is_one_model(index):
    """``model=`` the local folder a hub name resolves to, with the encoder of that hub name: the same model."""
    from pyterrier_tot.models import resolve_model

    folder = resolve_model(None)
    assert index.flex_index(folder, encoder=load_biencoder()).index_path == index.flex_index(folder).index_path
