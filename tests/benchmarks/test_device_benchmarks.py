"""The plumbing of the GPU benchmarks (benchmarks/device/base_grid_device.py, second_stage_device.py), checked on the
CPU: their measures are ir_measures', a model survives the trip back from the GPU machine (fp16 chunks + tar), and
the training modules import without the package's __init__ (the GPU machine has no pyterrier-dr, PISA or faiss)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import ir_measures
import pytest
import torch
from ir_measures import RR, R

from tests.helpers.paths import ROOT
from tests.helpers.scripts import load_script

dev = load_script("benchmarks/device/base_grid_device.py")


def test_measures_are_ir_measures():
    rng = random.Random(3)
    qrels, run, ranks = [], [], {}
    for q in range(40):
        gold = [f"d{rng.randrange(60)}" for _ in range(rng.choice([1, 1, 2]))]
        gold = list(dict.fromkeys(gold))
        order = rng.sample([f"d{i}" for i in range(60)], 50)  # some golds fall outside the 50 retrieved
        qrels += [ir_measures.Qrel(str(q), d, 1) for d in gold]
        run += [ir_measures.ScoredDoc(str(q), d, 100.0 - i) for i, d in enumerate(order)]
        ranks[str(q)] = [order.index(d) + 1 if d in order else 0 for d in gold]
    ours = dev.measures(ranks)
    theirs = ir_measures.calc_aggregate([R @ k for k in dev.CUTS] + [RR], qrels, run)
    for k in dev.CUTS:
        assert ours[f"R@{k}"] == pytest.approx(theirs[R @ k], abs=1e-4)
    assert ours["MRR"] == pytest.approx(theirs[RR], abs=1e-4)


def test_rerank_device_measures_are_ir_measures_with_trec_eval_ties():
    """rerank_device's choice runs on the GPU machine with its own evaluator: its measures equal ir_measures' on
    runs with tied scores (trec_eval: ties by docno, descending), and its mix re-scores only the top k."""
    import pandas as pd
    rr = load_script("benchmarks/device/rerank_device.py")

    rng = random.Random(5)
    rows, qrels = [], []
    for q in range(30):
        docs = rng.sample([f"d{i:02d}" for i in range(40)], 25)
        rows += [(str(q), d, float(rng.choice([1, 2, 3, 4]))) for d in docs]  # many ties
        qrels += [{"qid": str(q), "docno": d, "label": 1} for d in rng.sample(docs[:20], rng.choice([1, 2]))]
    run = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    ours = rr.floor_measures(rr.gold_ranks(run, qrels))
    names = ["R@1", "R@2", "R@3", "R@5", "R@10", "R@20", "RR"]
    theirs = ir_measures.calc_aggregate([ir_measures.parse_measure(n) for n in names],
                                        [ir_measures.Qrel(r["qid"], r["docno"], 1) for r in qrels],
                                        [ir_measures.ScoredDoc(*r) for r in rows])
    for n in names:
        assert ours[n] == pytest.approx(theirs[ir_measures.parse_measure(n)], abs=1e-9), n
    cos = {q: {d: rng.random() for d in g["docno"]} for q, g in run.groupby("qid")}
    mixed = rr.mix(run, cos, k=5, alpha=0.6)
    for q, g in mixed.groupby("qid"):
        before = run[run["qid"] == q].sort_values("score", ascending=False, kind="stable")
        top, s = before.iloc[:5], before.iloc[:5]["score"]
        want = 0.6 * top["docno"].map(cos[q]) + 0.4 * (s - s.min()) / (s.max() - s.min() or 1)
        got = g.set_index("docno").loc[top["docno"], "score"].to_numpy()
        assert got == pytest.approx(want.to_numpy())
        assert set(g.nlargest(5, "score")["docno"]) == set(top["docno"])


def test_rerank_device_mix_ranks_as_the_library_dense_reranker(monkeypatch):
    """The GPU machine chooses k and alpha with its own mix; the library re-ranks with DenseReranker. Given the same
    cosines, both put every book at the same rank."""
    import pandas as pd
    rr = load_script("benchmarks/device/rerank_device.py")

    from pyterrier_tot.rerank.dense_reranker import DenseReranker

    rng = random.Random(7)
    rows = [(str(q), f"d{i:02d}", float(rng.randrange(50))) for q in range(20) for i in rng.sample(range(40), 30)]
    run = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    cos = {q: {d: rng.random() for d in g["docno"]} for q, g in run.groupby("qid")}
    qrels = [{"qid": q, "docno": d, "label": 1} for q, g in run.groupby("qid") for d in g["docno"]]
    for k, alpha in ((5, 0.6), (10, 0.3), (30, 1.0)):
        stage = DenseReranker(k=k, alpha=alpha, max_chars=None)
        monkeypatch.setattr(stage, "_dense_scores", lambda block: block.apply(
            lambda r: cos[r["qid"]][r["docno"]], axis=1).to_numpy(dtype=float))
        lib = stage(run.assign(query="q", text="t"))
        assert rr.gold_ranks(lib, qrels) == rr.gold_ranks(rr.mix(run, cos, k, alpha), qrels), (k, alpha)


def test_a_model_survives_the_trip_back(tmp_path):
    """pack (on the GPU machine) -> chunks + rest.tar -> assemble (here): the weights come back in fp32, equal to
    their fp16 rounding, and every other file of the folder with them."""
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    weights = {"a.weight": torch.randn(300, 200), "b.bias": torch.randn(7), "ids": torch.arange(5)}
    save_file(weights, str(model / "model.safetensors"))
    (model / "config.json").write_text('{"x": 1}')
    (model / "1_Pooling" / "config.json").write_text('{"pooling": "mean"}')
    out = tmp_path / "out"
    out.mkdir()
    (out / "grid_results.json").write_text(json.dumps({"chosen": "m", "models": {"m": {"path": str(model)}}}))
    chunks = dev.pack(out, chunk_mib=0.05, parts=tmp_path / "parts")
    assert len(chunks) > 1 and all(c.stat().st_size <= 0.05 * 2 ** 20 for c in chunks)
    back = tmp_path / "back"
    back.mkdir()
    for f in chunks + [out / "rest.tar"]:
        (back / f.name).write_bytes(f.read_bytes())
    dev.assemble(back)
    got = load_file(str(back / "model.safetensors"))
    assert got["a.weight"].dtype == torch.float32
    assert torch.equal(got["a.weight"], weights["a.weight"].half().float())
    assert torch.equal(got["ids"], weights["ids"])
    assert (back / "1_Pooling" / "config.json").read_text() == '{"pooling": "mean"}'
    assert not list(back.glob("w[0-9][0-9]")) and not (back / "rest.tar").exists()


def test_training_modules_import_without_the_package_init():
    code = ("import sys; import base_grid_device as b; "
            "et, hn = b._library(('decomposition', 'recipe', 'rerank')); "
            "from pyterrier_tot.rerank import cross_encoder; "
            "from pyterrier_tot.recipe import second_stage; "
            "assert callable(et.train_biencoder) and callable(cross_encoder.train_cross_encoder); "
            "assert callable(second_stage.reranker_examples); "
            "assert 'pyterrier_tot.index' not in sys.modules and 'pyterrier_dr' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('pyterrier'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "benchmarks" / "device")})
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_soup_survives_the_trip_back_as_an_int8_difference(tmp_path, monkeypatch):
    """soup_device ships the soup as its difference from the (fp16-rounded) start it trained from: int8 per row
    for 2-D tensors, in several chunks, the rest as is; rebuilt here on the fp32 start it equals the soup within
    half a quantisation step per row."""
    soup_device = load_script("benchmarks/device/soup_device.py")
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(0)
    w0 = {"emb.weight": torch.randn(64, 16, generator=g), "ln.bias": torch.randn(16, generator=g),
          "ids": torch.arange(5)}
    rounded = {k: v.half().float() if v.is_floating_point() else v for k, v in w0.items()}
    soup = {k: v + 1e-3 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v for k, v in rounded.items()}
    dirs = {n: tmp_path / n for n in ("start", "machine_start", "soup", "out", "parts")}
    for d in dirs.values():
        d.mkdir()
    save_file(w0, str(dirs["start"] / "model.safetensors"))
    save_file(rounded, str(dirs["machine_start"] / "model.safetensors"))
    save_file(soup, str(dirs["soup"] / "model.safetensors"))
    (dirs["soup"] / "config.json").write_text("{}")
    monkeypatch.setattr(soup_device, "CHUNK", 1000)
    n = soup_device.pack_delta(dirs["soup"], dirs["machine_start"], dirs["parts"], dirs["out"])
    assert n > 1 and len(list(dirs["parts"].glob("d*"))) == n
    soup_device.ship(dirs["out"], 0, n - 1, dirs["parts"])
    back = load_file(str(soup_device.rebuild(dirs["out"], dirs["start"], tmp_path / "rebuilt") / "model.safetensors"))
    assert back.keys() == soup.keys() and torch.equal(back["ids"], soup["ids"])
    assert torch.allclose(back["ln.bias"], soup["ln.bias"], atol=1e-7)
    step = (soup["emb.weight"] - rounded["emb.weight"]).abs().amax(dim=1, keepdim=True) / 127
    err = (back["emb.weight"] - soup["emb.weight"]).abs()
    assert (err <= step / 2 + 5e-7).all()  # half a step, plus the fp32 rounding of weights near 1
    assert (tmp_path / "rebuilt" / "config.json").is_file()


def test_a_cached_recipe_run_is_keyed_by_its_fitted_weights_and_stages(tmp_path):
    """The benchmarks' run caches (second_stage, rerank_device, pointwise_llm) key a recipe's run by its fitted
    weights' folder and its repr: a refit, another model or another depth is computed again, never read back."""
    _common = load_script("benchmarks/_common.py")
    import pandas as pd
    import pyterrier as pt

    class Fitted(pt.Transformer):
        def __init__(self, weights, depth):
            self.weights_path, self.depth = weights, depth

        def transform(self, inp):
            return pd.DataFrame({"qid": ["1"], "docno": [f"d{self.depth}"], "score": [1.0]})

        def __repr__(self):
            return f"Fitted(depth {self.depth})"

    a = Fitted(tmp_path / "fuser-abc", 1000)
    assert _common.pipeline_key("recipe-tuning", a) == _common.pipeline_key("recipe-tuning", a)
    others = [Fitted(tmp_path / "fuser-def", 1000), Fitted(tmp_path / "fuser-abc", 100), pt.Transformer.identity()]
    keys = {_common.pipeline_key("recipe-tuning", p) for p in [a, *others]}
    assert len(keys) == 4 and all(k.startswith("recipe-tuning-") for k in keys)
    assert "fuser-abc" in _common.pipeline_key("recipe-tuning", a)
    topics = pd.DataFrame({"qid": ["1"], "query": ["a yellow cover"]})
    seconds: dict = {}
    first = _common.cached_run(tmp_path, _common.pipeline_key("r", a), lambda: a(topics), seconds, topics)
    again = _common.cached_run(tmp_path, _common.pipeline_key("r", a), lambda: 1 / 0, seconds, topics)  # read back
    deeper = _common.cached_run(tmp_path, _common.pipeline_key("r", others[1]), lambda: others[1](topics), seconds,
                                topics)
    assert list(first["docno"]) == list(again["docno"]) == ["d1000"] and list(deeper["docno"]) == ["d100"]


def test_batch_device_averages_seeds_as_measures_does_and_adopts_only_a_clear_gain():
    """batch_device's summary: each row is the mean over seeds of what ``measures`` gives per seed, and the rule
    adopts a setting whose gold books rank higher for most queries but not one that only ties the default."""
    bd = load_script("benchmarks/device/batch_device.py")

    rng = random.Random(5)
    qids = [str(q) for q in range(120)]

    def model(setting, epoch, seed, shift):
        ranks = {s: {q: [max(1, rng.randrange(1, 40) - shift)] for q in qids} for s in ("tuning", "validation")}
        return {"setting": setting, "epoch": epoch, "seed": seed, "schedule": 3, **ranks}

    models = {}
    for seed in (1, 2):
        models[f"cur{seed}"] = model(bd.CURRENT[0], bd.CURRENT[1], seed, 0)
        models[f"same{seed}"] = model("same", 1, seed, 0)
        models[f"better{seed}"] = model("better", 1, seed, 30)
    res = {"seeds": [1, 2], "models": models}
    out = bd.summarise(res)
    for name in ("same", "better"):
        rows = [dev.measures(m["tuning"]) for m in models.values() if m["setting"] == name]
        assert out["tables"]["tuning"][f"{name} e1of3"]["R@5"] == pytest.approx(sum(r["R@5"] for r in rows) / 2,
                                                                                abs=1e-3)
        assert out["tables"]["tuning"][f"{name} e1of3"]["MRR"] == pytest.approx(sum(r["MRR"] for r in rows) / 2,
                                                                                abs=1e-3)
    assert out["best"] == "better e1of3" and out["adopted"]
    models["cut"] = model("cut", 1, 1, 30)                         # a setting its run's budget cut after one seed
    out = bd.summarise(res)
    assert "cut e1of3" not in out["tables"]["tuning"] and out["best"] == "better e1of3"
    del models["better1"], models["better2"]
    out = bd.summarise(res)
    assert not out["adopted"]


def test_gold_ranks_are_measured_where_the_model_put_each_book():
    """Gold ranks become a run for ir_measures: each relevant book counts at the rank the model gave it (R@k over
    all of a query's books, RR from the first), a query none of whose books came back counts as 0, and a query
    without a relevant book is left out."""
    ranks = {"a": [3, 0], "b": [0], "c": [], "d": [1000, 1]}
    got = dev.per_query(ranks)
    assert list(got) == ["a", "b", "d"]
    assert (got["a"]["R@1"], got["a"]["R@5"], got["a"]["RR"]) == (0.0, 0.5, pytest.approx(1 / 3))
    assert (got["b"]["R@1000"], got["b"]["RR"]) == (0.0, 0.0)
    assert (got["d"]["R@1"], got["d"]["R@100"], got["d"]["R@1000"], got["d"]["RR"]) == (0.5, 0.5, 1.0, 1.0)
    assert dev.measures(ranks) == {"R@1": round(0.5 / 3, 4), "R@5": round(1 / 3, 4), "R@10": round(1 / 3, 4),
                                   "R@20": round(1 / 3, 4), "R@100": round(1 / 3, 4), "R@1000": 0.5,
                                   "MRR": round((1 / 3 + 1) / 3, 4)}
