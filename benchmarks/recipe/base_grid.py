"""Issue 31.3: a learning-rate x epoch grid for one base model, chosen on the tuning slice, beside the base in
``BASE_SETTINGS`` (same run), and the chosen checkpoint evaluated once on validation.

    python benchmarks/recipe/base_grid.py --model minilm --lrs 2e-5 5e-5 --epochs 2

Each learning rate is one training run with an ``--epochs``-epoch schedule, saved after every epoch
(:func:`~pyterrier_tot.recipe.bases.base_grid`); the checkpoints are compared by the dense retriever alone
on the tuning slice (300 training queries; :func:`~pyterrier_tot.recipe.bases.choose_base`, R@5, ties to
the earlier). Validation is evaluated for the current setting and the chosen one only. Training seconds come from
each model's training record.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
from ir_measures import RR, R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.models import native_bf16  # noqa: E402

MEASURES = [R @ 1, R @ 5, R @ 20, R @ 100, R @ 1000, RR]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--lrs", type=float, nargs="+", default=[2e-5, 5e-5])
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    t0 = time.time()
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    current = recipe.fine_tuned_base(ds, model=args.model, index=index)
    grid = recipe.base_grid(ds, args.model, lrs=args.lrs, epochs=args.epochs, index=index)
    settings = recipe.BASE_SETTINGS.get(args.model, recipe.BASE_SETTINGS["minilm"])
    models = {("current", settings["lr"], settings["epoch"], settings["schedule"]): current,
              **{("grid", lr, e, args.epochs): p for (lr, e), p in grid.items()}}
    best, table = recipe.choose_base(ds, index, models)
    tune = table.drop(columns=["order"], errors="ignore").rename(columns={"RR": "MRR"})
    tune["training_s"] = [recipe.training_info(models[k]).get("seconds") for k in tune["key"]]
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    keys = [k for k in models if k[0] == "current"] + ([best] if best[0] != "current" else [])
    vt = ptt.tot_experiment([index.dense(models[k]) for k in keys], val, vqrels, measures=MEASURES,
                            names=[str(k) for k in keys], baseline=0, round=None)
    payload = {"model": args.model, "lrs": args.lrs, "epochs": args.epochs, "chosen": list(best),
               "tuning": tune.assign(key=tune["key"].map(str)).to_dict("records"),
               "validation": vt.to_dict("records"), "native_bf16": native_bf16(),
               "seconds": round(time.time() - t0, 1)}
    md = [f"# Base grid: {args.model} (issue 31.3)", "",
          f"Learning rates {args.lrs} x a {args.epochs}-epoch schedule (a checkpoint each epoch) beside the current "
          f"setting ({settings}); chosen on the tuning slice by R@5 of the dense retriever alone: **{best}**. "
          f"Native bf16: {native_bf16()}. Total {payload['seconds']} s.", "",
          "## Tuning slice (300 training queries)", "",
          _common.md_table(tune[["name", "R@5", "R@10", "R@100", "MRR", "nDCG@10", "training_s"]]
                           if "R@10" in tune.columns else tune.drop(columns=["key"])), "",
          "## Validation (the current setting and the chosen one only)", "",
          _common.md_table(pd.DataFrame(vt).drop(columns=[c for c in vt.columns if c.endswith(("+", "-"))])), ""]
    _common.write_results(f"base_grid_{args.model}", payload, "\n".join(md))


if __name__ == "__main__":
    main()
