"""Issue 31.3 on a GPU: the mpnet base's batch size. MultipleNegativesRankingLoss ranks each request's gold book
against the other books of its batch, so the batch size sets how many negatives every step sees (15 at the
default's 16); the grid asked only learning rates and epochs. Each setting is trained under two seeds (one run's
noise on the tuning slice is about .02 of R@5, ``soup.md``), bf16 autocast (the library's ``amp``) for all.

    python benchmarks/device/soup_device.py export .dev/soup                # here: the kit (reused)
    python benchmarks/device/rerank_device.py split MPNET_DIR .dev          # here: all-mpnet-base-v2 as upload chunks
    python3 benchmarks/device/batch_device.py run .dev/soup /tmp/base OUT   # there: train, rank, keep gold ranks
    python benchmarks/device/batch_device.py report OUT                     # here: results/batch_device.{json,md}

The rule, written before the run: every (setting, epoch) is scored on the tuning slice (300 training queries no
model trains on) by the recipe's own objective, the mean of R@1, R@5, R@10, R@20, R@100 and MRR per query
(``recipe.FIT_METRIC``), averaged over the seeds. The best one replaces the default's setting (batch 16, lr 3e-5,
epoch 2 of 3, trained in the same run) only if it is above it with p < .05 (paired t-test over the 300 queries'
seed-averaged objective) and its seed-averaged tuning R@5 is not lower. Validation (233 queries) is ranked for
every model and reported; it chooses nothing. Training pairs: the training queries outside the tuning slice, the
library's ``train_biencoder`` (distinct texts per batch, 10% warm-up, ``max_seq_length`` 256).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
from base_grid_device import CUTS, _library, measures, setup  # noqa: E402
from base_grid_device import per_query as gold_per_query  # noqa: E402

#: (name, batch size, lr, schedule epochs), in the order they run (a run cut by its budget keeps the first ones)
SETTINGS = (("b16-lr3e-05", 16, 3e-5, 3), ("b64-lr5e-05", 64, 5e-5, 4), ("b64-lr1e-04", 64, 1e-4, 4),
            ("b32-lr5e-05", 32, 5e-5, 4), ("b128-lr1e-04", 128, 1e-4, 4))
CURRENT = ("b16-lr3e-05", 2)  # BASE_SETTINGS["mpnet"]: lr 3e-5, epoch 2 of a 3-epoch schedule, batch 16
SEEDS = (42, 43)
FIT = ("R@1", "R@5", "R@10", "R@20", "R@100", "MRR")
NAME = "batch_device"


def run(kit: Path, model_dir: str, out: Path, budget_s: float = 430.0, dry: bool = False) -> None:
    import shutil

    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    data, device, ev = setup(kit, dry)
    settings, seeds, steps = SETTINGS, SEEDS, {}
    if dry:  # a check of the code on a CPU: a few queries and books, two steps, two settings, one seed
        settings, seeds, steps = tuple((n, b, lr, 2) for n, b, lr, _ in SETTINGS[:2]), SEEDS[:1], {"max_steps": 2}
    pairs = et.build_pairs(pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"]), ev.corpus)
    work = Path("/tmp/batch") if not dry else out / "models"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "n_pairs": len(pairs), "seeds": list(seeds), "settings": [list(s) for s in settings], "models": {},
           "seconds": {}, "skipped": [], "rule": __doc__.split("\n\n")[2]}
    out.mkdir(parents=True, exist_ok=True)
    for name, batch, lr, schedule in settings:
        for seed in seeds:
            if time.time() - t0 > budget_s:
                res["skipped"].append(f"{name} seed {seed}: {time.time() - t0:.0f} s spent of {budget_s:.0f}")
                continue
            dirs = {e: work / f"{name}-s{seed}-e{e}" for e in range(1, schedule + 1)}
            t = time.time()
            et.train_biencoder(pairs, dirs[schedule], base_model=model_dir, epochs=schedule, batch_size=batch,
                               lr=lr, seed=seed, device=device, amp=True, show_progress_bar=False, kind="base",
                               epoch_dirs={e: p for e, p in dirs.items() if e < schedule}, **steps)
            res["seconds"][f"{name} seed {seed}"] = round(time.time() - t, 1)
            for e, path in dirs.items():
                model = SentenceTransformer(str(path), device=device)
                res["models"][f"{name}/e{e}/s{seed}"] = {"setting": name, "epoch": e, "seed": seed, "batch": batch,
                                                         "lr": lr, "schedule": schedule, **gold_ranks(ev, model)}
                del model
                shutil.rmtree(path, ignore_errors=True)
            (out / f"{NAME}.json").write_text(json.dumps(res))  # a run stopped at its limit keeps its rows
            print(f"[{time.time() - t0:6.0f}s] {name} seed {seed}: tuning e-last "
                  f"{measures(res['models'][f'{name}/e{schedule}/s{seed}']['tuning'])}", flush=True)
    res["total_s"] = round(time.time() - t0, 1)
    (out / f"{NAME}.json").write_text(json.dumps(res))
    print(f"done in {res['total_s']} s", flush=True)


def run_hn(kit: Path, model_dir: str, out: Path, seeds=(42, 43, 44), dry: bool = False) -> None:
    """The default's setting (batch 16, lr 3e-5, epoch 2 of 3) under ``seeds``, each followed by one hard-negative
    round mined by itself (``base_grid_device.hn_examples``: 2 of its top 30 non-gold books per request, the
    rule-clue forms as extra anchors, one epoch at lr 2e-5 as ``hard_negatives.fine_tuned_hard``), all in bf16 autocast;
    gold ranks of both back in ``batch_device_hn.json``. The rule, written before the run, is the batch grid's: the
    round replaces the default's base only if its seed-averaged tuning objective is above the base's with p < .05
    and its seed-averaged tuning R@5 is not lower."""
    import shutil

    import pandas as pd
    import torch
    from base_grid_device import hn_examples
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    data, device, ev = setup(kit, dry)
    steps = {}
    if dry:
        data["rest"]["topics"], seeds, steps = data["rest"]["topics"][:60], seeds[:1], {"max_steps": 2}
    pairs = et.build_pairs(pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"]), ev.corpus)
    work = Path("/tmp/batch_hn") if not dry else out / "hn_models"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "n_pairs": len(pairs), "seeds": list(seeds), "models": {}, "seconds": {}, "skipped": [],
           "rule": run_hn.__doc__}
    out.mkdir(parents=True, exist_ok=True)
    common = dict(device=device, amp=True, show_progress_bar=False, **steps)
    for seed in seeds:
        t = time.time()
        base, round1 = work / f"base-s{seed}", work / f"hn1-s{seed}"
        et.train_biencoder(pairs, base, base_model=model_dir, epochs=2, schedule_epochs=3, batch_size=16, lr=3e-5,
                           seed=seed, kind="base", **common)
        examples = hn_examples(data, ev, str(base), 1, device)
        et.train_biencoder(examples, round1, base_model=str(base), epochs=1, lr=2e-5, seed=1, kind="base-hn",
                           **common)
        res["seconds"][f"seed {seed}"] = round(time.time() - t, 1)
        for name, path in (("b16-lr3e-05", base), ("hn-round1", round1)):
            model = SentenceTransformer(str(path), device=device)
            res["models"][f"{name}/s{seed}"] = {"setting": name, "epoch": 2 if name.startswith("b16") else 1,
                                                "seed": seed, "schedule": 3 if name.startswith("b16") else 1,
                                                "n_examples": len(examples), **gold_ranks(ev, model)}
            del model
            shutil.rmtree(path, ignore_errors=True)
        (out / f"{NAME}_hn.json").write_text(json.dumps(res))
        print(f"[{time.time() - t0:6.0f}s] seed {seed}: " + ", ".join(
            f"{k} tuning {measures(m['tuning'])}" for k, m in res["models"].items() if k.endswith(f"s{seed}")),
            flush=True)
    res["total_s"] = round(time.time() - t0, 1)
    (out / f"{NAME}_hn.json").write_text(json.dumps(res))
    print(f"done in {res['total_s']} s", flush=True)


def gold_ranks(ev, model) -> dict:
    """``Evaluator.gold_ranks`` for the tuning slice and validation, the books encoded once for both."""
    import torch

    with torch.no_grad():
        books = model.encode(ev.texts, batch_size=128, convert_to_tensor=True, normalize_embeddings=False)
    return {split: ev.gold_ranks(model, split, books) for split in ("tuning", "validation")}


def per_query(ranks: dict) -> dict:
    """qid -> {measure: value} for one model (queries with a relevant book, by ir_measures), as :func:`measures`
    averages them."""
    return {q: {("MRR" if k == "RR" else k): v for k, v in row.items()} for q, row in gold_per_query(ranks).items()}


def summarise(res: dict) -> dict:
    """Seed-averaged measures of every (setting, epoch) of a run, paired tests of the objective against the
    default's setting of the same run, the best on the tuning slice and whether the rule adopts it."""
    import numpy as np
    from scipy.stats import ttest_rel

    groups, table, perq = {}, {}, {}
    for m in res["models"].values():
        groups.setdefault((m["setting"], m["epoch"]), []).append(m)
    for (name, e), ms in groups.items():
        if len(ms) < len(res["seeds"]):
            continue  # a setting cut by the budget before all its seeds: not compared
        for split in ("tuning", "validation"):
            rows = [per_query(m[split]) for m in ms]
            avg = {q: {k: float(np.mean([r[q][k] for r in rows])) for k in rows[0][q]} for q in sorted(rows[0])}
            perq[(name, e, split)] = {q: float(np.mean([v[k] for k in FIT])) for q, v in avg.items()}
            row = {k: round(float(np.mean([v[k] for v in avg.values()])), 4) for k in [f"R@{c}" for c in CUTS]}
            row["MRR"] = round(float(np.mean([v["MRR"] for v in avg.values()])), 4)
            row["objective"] = round(float(np.mean(list(perq[(name, e, split)].values()))), 4)
            row["per seed R@5"] = " / ".join(f"{measures(m[split])['R@5']:.3f}" for m in ms)
            row["p objective"], row["delta objective"] = "", ""
            table.setdefault(split, {})[(name, e)] = row
    for split in ("tuning", "validation"):
        base = perq[(*CURRENT, split)]
        qs = sorted(base)
        for (name, e, s), v in perq.items():
            if s == split and (name, e) != CURRENT:
                p = ttest_rel([v[q] for q in qs], [base[q] for q in qs]).pvalue
                row = table[split][(name, e)]
                row["p objective"] = round(float(p), 4)
                row["delta objective"] = round(row["objective"] - table[split][CURRENT]["objective"], 4)
    tun = table["tuning"]
    best = max(tun, key=lambda k: (tun[k]["objective"], k == CURRENT))
    b, c = tun[best], tun[CURRENT]
    adopted = best != CURRENT and b["p objective"] < .05 and b["objective"] > c["objective"] and b["R@5"] >= c["R@5"]
    label = {k: f"{k[0]} e{k[1]}of{next(m['schedule'] for m in groups[k])}" for k in groups}
    return {"tables": {s: {label[k]: v for k, v in t.items()} for s, t in table.items()}, "best": label[best],
            "current": label[CURRENT], "adopted": bool(adopted)}


def report(batch: Path, hn: Path) -> None:
    """``results/batch_device.{json,md}`` from the two runs' files (``batch_device.json`` in ``batch``,
    ``batch_device_hn.json`` in ``hn``)."""
    import pandas as pd

    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    import _common

    runs = {"batch": json.loads((batch / f"{NAME}.json").read_text()),
            "hn": json.loads((hn / f"{NAME}_hn.json").read_text())}
    out = {k: {**{x: v for x, v in r.items() if x != "models"}, **summarise(r)} for k, r in runs.items()}
    (_common.results_dir() / f"{NAME}.json").write_text(json.dumps(out, indent=1))
    lines = ["# The mpnet base's batch size, and a hard-negative round, under several seeds on a GPU (issue 31.3)", ""]
    titles = {"batch": ("Batch size x learning rate", "run"), "hn": ("One hard-negative round after the base", "hn")}
    for k, r in runs.items():
        o = out[k]
        lines += [f"## {titles[k][0]}", "",
                  f"`benchmarks/device/batch_device.py {titles[k][1]}` on {r['device']} (torch {r['torch']}, "
                  "bf16 autocast),"
                  f" {r.get('total_s', '?')} s in all; {r['n_pairs']} training pairs; seeds {r['seeds']}.", "",
                  " ".join(line.strip() for line in r["rule"].splitlines()), "",
                  f"Best on the tuning slice: **{o['best']}**; the default's setting: {o['current']}. "
                  f"{'Adopted' if o['adopted'] else 'Not adopted'} by the rule.", ""]
        if r["skipped"]:
            lines += ["Cut by the run's time budget: " + "; ".join(r["skipped"]) + ".", ""]
        for split, n in (("tuning", 300), ("validation", 233)):
            lines += [f"### {split.capitalize()} ({n} queries; each row the mean of its seeds' measures; p: paired "
                      "t-test of the objective against the default's setting, two-sided, over queries with the seeds "
                      "averaged, not corrected for the number of rows; delta: the objective minus the default's)", "",
                      _common.md_table(pd.DataFrame(o["tables"][split]).T.reset_index(names="model")), ""]
        lines += ["GPU seconds per run (training, mining): "
                  + ", ".join(f"{x} {v}" for x, v in r["seconds"].items()) + ".", ""]
    lines += ["Re-render: `python benchmarks/device/batch_device.py report OUT HN_OUT` (the two runs' files)."]
    (_common.results_dir() / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "run":
        run(Path(args[0]), args[1], Path(args[2]), dry="--dry" in args)
    elif cmd == "hn":
        run_hn(Path(args[0]), args[1], Path(args[2]), dry="--dry" in args)
    elif cmd == "report":
        report(Path(args[0]), Path(args[1]))
    else:
        raise SystemExit(__doc__)
