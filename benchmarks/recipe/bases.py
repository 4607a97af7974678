"""Issue 24: fine-tuned base retrievers (MiniLM, mpnet) and the recipe over one or several of them, on Reddit-TOMT
(Books) validation and BIRCO WhatsThatBook dev, every row from one run: same-run BM25 and fine-tuned MiniLM beside
fine-tuned mpnet and the recipe with base="minilm" / "mpnet" / ["minilm", "mpnet"]; paired t-tests against the
current recipe (MiniLM base); training seconds and encoding docs/s of each base.

    python benchmarks/recipe/bases.py [--train] [--lrs 2e-5] [--epochs 2] [--no-birco] [--render]

Protocol (:mod:`pyterrier_tot.recipe.protocol`): every base trains on the training queries outside the fixed
tuning slice; mpnet's learning rate and epoch (``--lrs`` x checkpoints of an ``--epochs`` schedule), its encoding
precision (fp32 or bf16) and the fuser weights of each recipe are chosen / fitted on the tuning slice (300
training queries); validation and BIRCO are only evaluated. Without ``--train`` models come from the cache
(``~/.cache/pyterrier_tot/models``). Runs are cached as JSON lines under ``benchmarks/.work/bases``. Every number
comes from ``pt.Experiment``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from ir_measures import RR, R, nDCG  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser  # noqa: E402
from pyterrier_tot.models import auto_precision, native_bf16  # noqa: E402

warnings.filterwarnings("ignore")
NAME = "bases"
WORK = _common.WORK / NAME
COLS = ("R@5", "R@10", "R@20", "R@100", "MRR", "nDCG@10")
MEASURES = list(dict.fromkeys([R @ 5, R @ 10, R @ 20, R @ 100, RR, nDCG @ 10, *ptt.CURVE_MEASURES]))
CURRENT = "Recipe, base minilm (current)"
ENCODE_SAMPLE = 256
GRID_PRECISION = auto_precision()  # the grid's encodings: bf16 only where the hardware runs it natively


def cached(key: str, make) -> pd.DataFrame:
    """A run (qid, docno, score) computed once and kept as JSON lines."""
    WORK.mkdir(parents=True, exist_ok=True)
    f = WORK / (re.sub(r"[^A-Za-z0-9_.-]+", "_", key) + ".jsonl")
    if f.is_file():
        return pd.read_json(f, lines=True, dtype={"qid": str, "docno": str})
    t0 = time.time()
    run = make()[["qid", "docno", "score"]].copy()
    run.attrs = {}
    run.to_json(f, orient="records", lines=True)
    print(f"  {key}: {time.time() - t0:.0f} s", flush=True)
    return run


def evaluate(runs: dict, topics, qrels, baseline: str = None, tables=None) -> dict:
    """name -> {n, measures, p-values against ``baseline`` (paired t-test, per query)} from one pt.Experiment."""
    names = list(runs)
    systems = [pt.Transformer.from_df(r) for r in runs.values()]
    table = ptt.tot_experiment(systems, topics, qrels, measures=MEASURES, names=names, round=None, verbose=False,
                               baseline=names.index(baseline) if baseline in names else None)
    if tables is not None:
        tables.append(table)
    table = table.rename(columns={"RR": "MRR", "RR p-value": "MRR p-value"})
    out = {}
    for r in table.to_dict("records"):
        out[r["name"]] = {"n": len(topics), **{c: float(r[c]) for c in COLS}}
        for c in ("R@5", "R@100", "MRR"):
            p = r.get(f"{c} p-value")
            if p is not None and not pd.isna(p):
                out[r["name"]][f"p {c}"] = float(p)
    return out


def show(results: dict, prefix: str = "") -> None:
    for name, r in results.items():
        ps = " ".join(f"p({c}) {r[f'p {c}']:.3f}" for c in ("R@5", "R@100") if f"p {c}" in r)
        print(f"{prefix}{name:52s} " + " ".join(f"{c} {r[c]:.3f}" for c in COLS) + f"  {ps}", flush=True)


def encoding_speed(models: dict, texts: list) -> list:
    """docs/s of a plain length-sorted encode of ``texts`` with each model, fp32 and bf16 (models loaded first)."""
    from pyterrier_tot.index.encoding import SortedDocEncoder
    from pyterrier_tot.models import load_biencoder

    rows = []
    for label, path in models.items():
        for precision in ("fp32", "bf16"):
            enc = SortedDocEncoder(load_biencoder(path, precision=precision))
            enc.encode(texts[:16])  # warm-up
            t0 = time.perf_counter()
            enc.encode(texts)
            rows.append({"base": label, "precision": precision,
                         "docs_per_s": round(len(texts) / (time.perf_counter() - t0), 1)})
            print("  encoding", rows[-1], flush=True)
    return rows


def choose_precision(ds, index, path: str, tune, tqrels) -> tuple:
    """fp32 or bf16 for ``path`` on the tuning slice: bf16 unless it loses R@5 or R@100 there. Only where bf16 runs
    in hardware (``native_bf16``): emulated, it is 3x slower than fp32 and never the choice."""
    if not native_bf16():
        return "fp32", {}
    table = evaluate({p: cached(f"tune-dense-{Path(path).name}-{p}", lambda p=p: index.dense(path, precision=p)(tune))
                      for p in ("fp32", "bf16")}, tune, tqrels)
    keep = all(table["bf16"][m] >= table["fp32"][m] for m in ("R@5", "R@100"))
    return ("bf16" if keep else "fp32"), table


def recipe_runs(ds, index, fts: dict, topics, tag: str, key: str, weights_path=None) -> tuple:
    """The recipe pipeline over ``fts`` ({expert name: model}) on ``topics``: (run, weights path). Weights are
    fitted on the Reddit tuning slice (or ``weights_path`` given)."""
    weights_path = weights_path or recipe.fitted_weights(ds, index, fts)
    pipe = recipe.build_pipeline(index, fts, weights=weights_path)
    return cached(f"{tag}-recipe-{key}", lambda: pipe(topics)), weights_path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", action="store_true", help="train missing models (hours on 2 shared cores)")
    ap.add_argument("--lrs", type=float, nargs="+", default=[2e-5], help="mpnet learning rates tried")
    ap.add_argument("--epochs", type=int, default=2, help="epochs of each mpnet schedule (a checkpoint each)")
    ap.add_argument("--no-birco", action="store_true")
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    import torch

    t_start, timings = time.time(), {}
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    tune, tqrels = recipe.train_data(ds, "tuning")

    # ------------------------------------------------------------------ bases, choices on the tuning slice
    minilm = recipe.fine_tuned_base(ds, train=args.train)
    grid = recipe.base_grid(ds, "mpnet", lrs=args.lrs, epochs=args.epochs, index=index, train=args.train)
    if not minilm or not grid:
        raise SystemExit("fine-tuned bases missing from the cache: run with --train")
    grid_table = evaluate({f"lr {lr:g}, epoch {e} of {args.epochs}": cached(
        f"tune-dense-{Path(p).name}-{GRID_PRECISION}", lambda p=p: index.dense(p, precision=GRID_PRECISION)(tune))
        for (lr, e), p in sorted(grid.items())}, tune, tqrels)
    best_name = max(grid_table, key=lambda n: (grid_table[n]["R@5"], -list(grid_table).index(n)))
    chosen = sorted(grid.items())[list(grid_table).index(best_name)]
    settings = recipe.BASE_SETTINGS["mpnet"]
    if (settings["lr"], settings["epoch"], settings["schedule"]) != (chosen[0][0], chosen[0][1], args.epochs):
        print(f"WARNING: the tuning slice picks {best_name}; BASE_SETTINGS['mpnet'] says {settings}", flush=True)
    mpnet = chosen[1]
    precision, precision_table = choose_precision(ds, index, mpnet, tune, tqrels)
    print("mpnet grid on the tuning slice:", {k: round(v["R@5"], 3) for k, v in grid_table.items()}, "->",
          best_name, "; encoding", precision, flush=True)
    if precision != settings.get("precision", "fp32"):
        print(f"WARNING: the tuning slice picks {precision} encoding; BASE_SETTINGS['mpnet'] says "
              f"{settings.get('precision')}", flush=True)
    models = {"minilm": minilm, "mpnet": mpnet}
    train_info = {b: {k: recipe.training_info(p).get(k) for k in ("seconds", "steps", "n_pairs", "lr", "epochs",
                                                                  "schedule_epochs", "amp", "epoch_losses")}
                  for b, p in {**models, **{f"mpnet lr {lr:g} e{e}": p for (lr, e), p in grid.items()}}.items()}
    with _common.timer(timings, "encoding_speed_s"):
        texts = index.field_text().tolist()[:ENCODE_SAMPLE]
        speed = encoding_speed(models, texts)

    # ------------------------------------------------------------------ validation, one run
    fts = {"minilm": {"dense_ft": minilm}, "mpnet": {"dense_ft_mpnet": mpnet},
           "minilm+mpnet": {"dense_ft": minilm, "dense_ft_mpnet": mpnet}}
    runs = {"BM25 (title+text)": cached("val-bm25", lambda: index.bm25()(val)),
            "Dense MiniLM zero-shot": cached("val-dense-zs", lambda: index.dense()(val)),
            "Dense MiniLM fine-tuned": cached(f"val-dense-{Path(minilm).name}", lambda: index.dense(minilm)(val)),
            f"Dense mpnet fine-tuned ({precision})": cached(
                f"val-dense-{Path(mpnet).name}-{precision}", lambda: index.dense(mpnet, precision=precision)(val))}
    experts, _, _ = recipe.recipe_experts(index, fts["minilm+mpnet"])
    runs["Sum of the two fine-tuned bases (candidates)"] = cached(
        f"val-sum-{Path(minilm).name}-{Path(mpnet).name}",
        lambda: recipe.candidate_base(experts, ["dense_ft", "dense_ft_mpnet"])(val))
    weights = {}
    for key, ft in fts.items():
        label = CURRENT if key == "minilm" else f"Recipe, base {key.replace('+', ' + ')}"
        with _common.timer(timings, f"recipe_{key}_s"):
            runs[label], weights[key] = recipe_runs(ds, index, ft, val, "val", "-".join(Path(p).name
                                                                                         for p in ft.values()))
    tables = []
    results = evaluate(runs, val, vqrels, baseline=CURRENT, tables=tables)
    show(results)
    fitted = {k: {"weights": dict(zip(w.names, [round(x, 3) for x in w.weights.tolist()])),
                  "tuning_R@5": w.fit_score} for k, w in ((k, WeightedFuser.load(p)) for k, p in weights.items())}

    birco = {} if args.no_birco else birco_section(fts, weights, precision)
    timings["total_s"] = round(time.time() - t_start, 1)
    plot = pd.concat(tables, ignore_index=True)
    ptt.plot_recall_at_k(plot, _common.results_dir() / f"{NAME}.png", title="Recall@k, Reddit-TOMT validation",
                         highlight=["Recipe, base minilm + mpnet"])
    payload = {"dataset": "reddit-tomt-books", "split": "validation", "n_queries": len(val), "corpus": len(index),
               "tuning": {"n_queries": len(tune), "fingerprint": recipe.qid_fingerprint(tune)},
               "mpnet_grid": grid_table, "mpnet_chosen": best_name, "precision": precision,
               "precision_table": precision_table, "training": train_info, "encoding_speed": speed,
               "weights": fitted, "results": results, "birco": birco, "timings": timings, "args": vars(args),
               "threads": torch.get_num_threads(), "base_settings": recipe.BASE_SETTINGS,
               "native_bf16": native_bf16(), "grid_precision": GRID_PRECISION}
    _common.write_results(NAME, payload, markdown(payload))


def birco_section(fts: dict, weights: dict, precision: str) -> dict:
    """BIRCO WhatsThatBook dev (nothing fitted on it): the Reddit-trained bases and Reddit-fitted weights."""
    ds = ptt.get_dataset("birco-wtb")
    index = ptt.BookIndex(ds)
    topics, qrels = ds.get_topics("dev"), ds.get_qrels("dev")
    minilm, mpnet = fts["minilm+mpnet"]["dense_ft"], fts["minilm+mpnet"]["dense_ft_mpnet"]
    runs = {"BM25 (title+text)": cached("birco-bm25", lambda: index.bm25()(topics)),
            "Dense MiniLM zero-shot": cached("birco-dense-zs", lambda: index.dense()(topics)),
            "Dense MiniLM fine-tuned": cached(f"birco-dense-{Path(minilm).name}", lambda: index.dense(minilm)(topics)),
            f"Dense mpnet fine-tuned ({precision})": cached(
                f"birco-dense-{Path(mpnet).name}-{precision}",
                lambda: index.dense(mpnet, precision=precision)(topics))}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*empty title.*")
        for key, ft in fts.items():
            label = CURRENT if key == "minilm" else f"Recipe, base {key.replace('+', ' + ')}"
            runs[label], _ = recipe_runs(None, index, ft, topics, "birco", "-".join(Path(p).name for p in ft.values()),
                                         weights_path=weights[key])
    results = evaluate(runs, topics, qrels, baseline=CURRENT)
    show(results, "BIRCO ")
    return {"n_queries": len(topics), "corpus": len(index), "results": results}


def _table(res: dict, p: bool = True) -> str:
    rows = []
    for k, v in res.items():
        row = {"system": k, **{m: v[m] for m in COLS}}
        if p:
            row.update({f"p {m}": (f"{v[f'p {m}']:.3g}" if f"p {m}" in v else "") for m in ("R@5", "R@100")})
        rows.append(row)
    return _common.md_table(pd.DataFrame(rows))


def markdown(p) -> str:
    lines = ["# Fine-tuned bases and the recipe over several of them (issue 24)", "",
             f"Reddit-TOMT (Books) validation, {p['n_queries']} queries, {p['corpus']} books, every row from one "
             f"run. Bases trained on the training queries outside the tuning slice; mpnet's learning rate, epoch and "
             f"encoding precision and every recipe's fuser weights chosen / fitted on the tuning slice "
             f"({p['tuning']['n_queries']} training queries, qid fingerprint `{p['tuning']['fingerprint'][:12]}`). "
             f"`p` = paired t-test over queries against **{CURRENT}** (the recipe as it was: fine-tuned MiniLM "
             "base).", "", "## Validation (same run)", "", _table(p["results"]), ""]
    if p.get("birco"):
        b = p["birco"]
        lines += [f"## BIRCO WhatsThatBook dev ({b['n_queries']} queries, {b['corpus']} books; Reddit-trained models "
                  "and Reddit-fitted weights, nothing fitted on BIRCO)", "", _table(b["results"]), ""]
    lines += [f"## mpnet: learning rate and epoch on the tuning slice (dense retrieval alone, "
              f"{p.get('grid_precision', 'bf16')} encoding)", "",
              _table(p["mpnet_grid"], p=False), "", f"Chosen: **{p['mpnet_chosen']}**.", "",
              ]
    if p["precision_table"]:
        lines += ["Encoding precision of the chosen mpnet on the tuning slice:", "",
                  _table(p["precision_table"], p=False), "",
                  f"Chosen: **{p['precision']}** (bf16 unless it loses R@5 or R@100 on the slice).", ""]
    else:
        lines += [f"Encoding precision: **{p['precision']}**. This CPU has no native bf16 (no AMX / AVX512-BF16), "
                  "so bf16 is emulated and slower than fp32 (see the encoding table below); it was not tried.", ""]
    lines += ["## Cost", "", "Training (wall-clock seconds on the 2-core machine):", ""]
    for b, info in p["training"].items():
        lines.append(f"- {b}: {info.get('steps')} steps over {info.get('n_pairs')} pairs, lr {info.get('lr')}, "
                     f"epochs {info.get('epochs')} (of {info.get('schedule_epochs') or info.get('epochs')}), "
                     f"amp {info.get('amp') or 'fp32'}: **{info.get('seconds')} s**; loss per epoch "
                     f"{info.get('epoch_losses')}")
    lines += ["", f"Encoding ({ENCODE_SAMPLE} books, length-sorted batches of 16, {p['threads']} torch threads):", "",
              _common.md_table(pd.DataFrame(p["encoding_speed"])), "",
              "## Fuser weights (tuning slice, coordinate ascent on R@5)", ""]
    for k, w in p["weights"].items():
        lines.append(f"- base {k}: `{json.dumps(w['weights'])}` (tuning-slice R@5 {w['tuning_R@5']:.3f})")
    r = max(p["results"].values(), key=lambda v: v["R@5"])
    lines += ["", "## Target (validation, nothing tuned on it)", "",
              f"Best R@5 {r['R@5']:.3f} (target .63), best R@100 "
              f"{max(v['R@100'] for v in p['results'].values()):.3f} (target .88).", "",
              "Timings (s): `" + json.dumps(p["timings"]) + "`", "",
              "Re-render: `python benchmarks/recipe/bases.py --render`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
