"""Does bf16 autocast training cost a base quality? The same base (``BASE_SETTINGS``, same seed, text and machine)
trained in fp32 and with bf16 autocast (``amp``), each evaluated alone on the tuning slice and on validation in one
``pt.Experiment`` (paired t-tests against fp32; BM25 beside them). ``amp="auto"`` (mpnet's default) picks bf16
wherever the CPU runs it natively, so a quality cost there would be a silent one.

    python benchmarks/recipe/training_precision.py --model minilm

Needs a CPU with native bf16 (AMX / AVX512-BF16) to be worth running: elsewhere bf16 is emulated and slow.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
from ir_measures import RR, R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.models import native_bf16  # noqa: E402
from pyterrier_tot.recipe.protocol import training_info  # noqa: E402

NAME = "training_precision"
MEASURES = [R @ 1, R @ 5, R @ 10, R @ 20, R @ 100, R @ 1000, RR]
COLS = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "RR"]


def table(systems: dict, topics, qrels) -> list:
    names = list(systems)
    res = ptt.tot_experiment(list(systems.values()), topics, qrels, measures=MEASURES, names=names, round=None,
                             verbose=False, baseline=1)
    rows = []
    for i, r in enumerate(res.to_dict("records")):
        row = {"name": r["name"], "baseline": i == 1, **{c: float(r[c]) for c in COLS}}
        row.update({f"p {c}": float(r[f"{c} p-value"]) for c in COLS
                    if f"{c} p-value" in r and r[f"{c} p-value"] == r[f"{c} p-value"]})
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    name = f"{NAME}_{args.model}"
    if args.render:
        _common.rerender(name, markdown)
        return
    t0 = time.time()
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    cfg = recipe.base_settings(args.model)
    settings = {k: cfg[k] for k in ("lr", "epoch", "schedule")}
    paths = {amp: recipe.fine_tuned_base(ds, model=args.model, index=index, amp=amp, **settings)
             for amp in (False, True)}
    systems = {"BM25 (title+text)": index.bm25(num_results=1000)}
    for amp, path in paths.items():
        systems[f"{args.model} fine-tuned, {'bf16 autocast' if amp else 'fp32'}"] = index.dense(path)
    tune, tqrels = recipe.tuning_data(ds)
    payload = {"model": args.model, "settings": settings, "native_bf16": native_bf16(),
               "training": {Path(p).name: {k: training_info(p).get(k) for k in ("steps", "seconds", "amp")}
                            for p in paths.values()},
               "tuning": table(systems, tune, tqrels),
               "validation": table(systems, ds.get_topics("validation"), ds.get_qrels("validation")),
               "seconds": round(time.time() - t0, 1)}
    _common.write_results(name, payload, markdown(payload))
    print(markdown(payload))  # the fp32 base (the same-run baseline) beside the bf16 one


def _md(rows: list) -> str:
    lines = ["| system | " + " | ".join(COLS) + " | p (R@5, RR) vs fp32 |", "|---" * (len(COLS) + 2) + "|"]
    for r in rows:
        # no p-value: the two systems agree on every query (a paired test is undefined)
        p = "" if r.get("baseline") else ", ".join(f"{r[f'p {c}']:.2g}" if f"p {c}" in r else "same on every query"
                                                   for c in ("R@5", "RR"))
        lines.append(f"| {r['name']} | " + " | ".join(f"{r[c]:.3f}" for c in COLS) + f" | {p} |")
    return "\n".join(lines)


def markdown(p: dict) -> str:
    train = "; ".join(f"{k}: {v['steps']} steps in {v['seconds']} s" for k, v in p["training"].items())
    return "\n".join([
        f"# Training precision of the {p['model']} base: fp32 against bf16 autocast", "",
        f"The same settings ({p['settings']}, seed, training text and machine; native bf16: {p['native_bf16']}), "
        f"one training run each: {train}. Each base alone, paired t-tests against the fp32 one. One training run "
        "each, so a difference mixes precision with run-to-run noise; read it as a precision effect only where p "
        "is small.", "",
        "## Tuning slice (300 training queries)", "", _md(p["tuning"]), "",
        "## Validation (233 queries)", "", _md(p["validation"]), "",
        f"Total {p['seconds']} s. "
        f"Re-render: `python benchmarks/recipe/training_precision.py --model {p['model']} --render`.",
        ""])


if __name__ == "__main__":
    main()
