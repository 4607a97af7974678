"""``tuned_pipeline(ds).parallel(2)`` (PyTerrier's joblib backend: pickled copies of the pipeline in two
processes) returns the run of the serial pipeline, on the 30-query sample."""
import pandas as pd
import pytest

import pyterrier_tot as ptt
from tests.helpers.paths import SHARED


def test_the_parallel_run_is_the_serial_run(monkeypatch):
    if not (SHARED / "reddit-tomt-books").is_dir():
        pytest.skip("shared Reddit-TOMT data not found beside the checkout")
    ds = ptt.get_dataset("reddit-tomt-books", sample=30)
    dp = ptt.tuned_pipeline(ds, base="minilm", verbose=False)   # the docs' sample recipe: cached by then
    topics = ds.get_topics("validation")
    serial = dp(topics)
    with pytest.warns(UserWarning, match="experimental"):       # PyTerrier says so of .parallel()
        parallel = dp.parallel(2)(topics)
    cols = ["qid", "docno", "rank"]
    key = lambda f: f[cols + ["score"]].sort_values(["qid", "rank"]).reset_index(drop=True)  # noqa: E731
    assert set(parallel["qid"]) == set(topics["qid"]) and len(parallel) == len(serial)
    pd.testing.assert_frame_equal(key(parallel)[cols], key(serial)[cols])
    assert (key(parallel)["score"] - key(serial)["score"]).abs().max() < 1e-5
