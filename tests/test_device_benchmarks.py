"""The plumbing of the GPU benchmarks (benchmarks/base_grid_device.py, second_stage_device.py), checked on the CPU:
their measures are ir_measures', a model survives the trip back from the GPU machine (fp16 chunks + tar), and the
training modules import without the package's __init__ (the GPU machine has no pyterrier-dr, PISA or faiss)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import ir_measures
import pytest
import torch
from ir_measures import RR, R

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import base_grid_device as dev  # noqa: E402


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
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import base_grid_device as b; "
            "et, hn = b._library(('decomposition', 'rerank')); "
            "from pyterrier_tot.rerank import cross_encoder; "
            "assert callable(et.train_biencoder) and callable(cross_encoder.train_cross_encoder); "
            "assert 'pyterrier_tot.index' not in sys.modules and 'pyterrier_dr' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('pyterrier'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
