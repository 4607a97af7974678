"""What the default base's training costs against what it buys, screened on a GPU under three seeds.

The default recipe's first call fine-tunes all-mpnet-base-v2 for 194 steps (two epochs of a three-epoch schedule,
``max_seq_length`` 256, every layer trained): most of a cold call's hour on two CPU cores. This run trains the
base under cheaper settings (shorter sequences, one epoch, the lower six layers frozen, and their combinations),
each under three seeds, bf16 autocast as on a CPU with native bf16, and keeps every model's gold ranks on the
tuning slice and on validation. ``benchmarks/recipe_rejected/training_cost.py`` measures the same settings' seconds
per step on the CPU, applies the rule below and confirms the chosen setting through the whole recipe.

    python benchmarks/device/base_grid_device.py export .dev/kit                            # here: the data kit
    python benchmarks/device/rerank_device.py split MPNET_DIR .dev                          # here: upload chunks
    python3 benchmarks/device/training_cost_device.py run .dev/kit /tmp/base OUT       # there
    python benchmarks/recipe_rejected/training_cost.py report OUT                               # here

The rule, written before the run (a non-inferiority rule: a cheaper setting is adopted when it is not worse by
more than the noise of one training run): every setting is scored on the tuning slice (300 training queries no
model trains on) by the base's objective, the mean of R@1, R@5, R@10, R@20, R@100 and MRR per query, averaged over
the three seeds. A setting passes the screen when (1) its objective is not below the default's by more than the
default's own seed-to-seed spread in this run (the largest minus the smallest of its three seeds' objectives, at
least .005), and (2) its seed-averaged tuning R@5 is not below the default's by more than 2 queries of 300
(.0067). Of the settings that pass, the one with the fewest CPU seconds of training (measured on the CPU by
``training_cost.py``) is confirmed through the whole recipe on the CPU (base trained there with the library's
seed, helper, density prior, fuser fitted as the default's is) by the same two conditions on the recipe's tuning
objective and R@5 against the default recipe; it replaces the default only if it passes both. Validation (233
queries) is ranked for every model and reported; it chooses nothing.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE, HERE.parent):  # base_grid_device / batch_device sit in benchmarks/ or benchmarks/device/
    sys.path.insert(0, str(p))
from base_grid_device import _library, measures, setup  # noqa: E402
from batch_device import gold_ranks  # noqa: E402

#: name -> training settings of the mpnet base; the first is the default's (``bases.BASE_SETTINGS["mpnet"]``)
SETTINGS = {
    "default": dict(max_seq_length=256, epochs=2, schedule=3, lr=3e-5, freeze_layers=0),
    "seq128-frozen6-e1": dict(max_seq_length=128, epochs=1, schedule=1, lr=5e-5, freeze_layers=6),
    "seq128-e1": dict(max_seq_length=128, epochs=1, schedule=1, lr=5e-5, freeze_layers=0),
    "seq128": dict(max_seq_length=128, epochs=2, schedule=3, lr=3e-5, freeze_layers=0),
    "e1": dict(max_seq_length=256, epochs=1, schedule=1, lr=5e-5, freeze_layers=0),
    "frozen6": dict(max_seq_length=256, epochs=2, schedule=3, lr=3e-5, freeze_layers=6),
    "seq128-frozen6": dict(max_seq_length=128, epochs=2, schedule=3, lr=3e-5, freeze_layers=6),
}
SEEDS = (42, 43, 44)
RULE = next(p for p in __doc__.split("\n\n") if p.startswith("The rule"))
NAME = "training_cost_device"


def run(kit: Path, model_dir: str, out: Path, budget_s: float = 400.0, dry: bool = False) -> None:
    """Every setting under every seed (seeds outer: a run cut by its budget keeps whole seeds of every setting),
    batch 16, bf16 autocast, the gold ranks of each model on the tuning slice and validation into ``NAME.json``."""
    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    data, device, ev = setup(kit, dry)
    settings, seeds, steps = SETTINGS, SEEDS, {}
    if dry:  # a check of the code on a CPU: two settings, one seed, two steps
        settings, seeds, steps = dict(list(SETTINGS.items())[:2]), SEEDS[:1], {"max_steps": 2}
    pairs = et.build_pairs(pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"]), ev.corpus)
    work = Path("/tmp/training_cost") if not dry else out / "models"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "n_pairs": len(pairs), "seeds": list(seeds), "settings": settings, "models": {}, "seconds": {},
           "skipped": [], "rule": RULE}
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for name, s in settings.items():
            if time.time() - t0 > budget_s:
                res["skipped"].append(f"{name} seed {seed}: {time.time() - t0:.0f} s spent of {budget_s:.0f}")
                continue
            path = work / f"{name}-s{seed}"
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.time()
            et.train_biencoder(pairs, path, base_model=model_dir, epochs=s["epochs"], schedule_epochs=s["schedule"],
                               batch_size=16, lr=s["lr"], max_seq_length=s["max_seq_length"],
                               freeze_layers=s["freeze_layers"], seed=seed, device=device, amp=True,
                               show_progress_bar=False, kind="base", **steps)
            res["seconds"][f"{name}/s{seed}"] = round(time.time() - t, 2)
            model = SentenceTransformer(str(path), device=device)
            res["models"][f"{name}/s{seed}"] = {"setting": name, "seed": seed, **s, **gold_ranks(ev, model)}
            del model
            shutil.rmtree(path, ignore_errors=True)
            (out / f"{NAME}.json").write_text(json.dumps(res))  # a run stopped at its limit keeps its rows
            print(f"[{time.time() - t0:6.0f}s] {name} seed {seed} ({res['seconds'][f'{name}/s{seed}']} s): "
                  f"tuning {measures(res['models'][f'{name}/s{seed}']['tuning'])}", flush=True)
    res["total_s"] = round(time.time() - t0, 1)
    (out / f"{NAME}.json").write_text(json.dumps(res))
    print(f"done in {res['total_s']} s", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "run":
        run(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), dry="--dry" in sys.argv)
    else:
        raise SystemExit(f"unknown command {cmd!r}: run")
