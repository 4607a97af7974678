"""Issue 31: the recipe beside its own base at every depth. Same-run rows on Reddit-TOMT (Books) validation and
BIRCO WhatsThatBook dev: BM25, each fine-tuned base alone (1000 deep), the recipe as it was (fuser fitted for R@5,
fused candidates only, ~170 books a query) and as it is now (fitted for the mean of R@1..R@100 and MRR with the
base as a floor on the tuning slice, then the base's ranking to depth 1000), at R@1/5/10/20/100/1000, MRR and
nDCG@1000, with paired t-tests against the base and each system's seconds per query.

    python benchmarks/recipe/recipe_depth.py [--bases minilm] [--train] [--no-birco | --birco-bases minilm] [--render]

Everything is fitted on the tuning slice (300 training queries); validation and BIRCO are only evaluated; nothing
is fitted on BIRCO (Reddit-trained bases and Reddit-fitted weights). Runs are cached under
``benchmarks/.work/recipe_depth`` with the seconds they took.
"""
from __future__ import annotations

import argparse
import json
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
from pyterrier_tot.models import (
    native_bf16,  # noqa: E402
)
from pyterrier_tot.recipe import bases  # noqa: E402
from pyterrier_tot.recipe.protocol import training_info  # noqa: E402

warnings.filterwarnings("ignore")
NAME = "recipe_depth_minilm"
WORK = _common.WORK / NAME
CUTS = (1, 5, 10, 20, 100, 1000)
MEASURES = [*(R @ k for k in CUTS), RR, nDCG @ 10, nDCG @ 1000]
COLS = [*(f"R@{k}" for k in CUTS), "MRR", "nDCG@10", "nDCG@1000"]
TESTED = ("R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR")
#: Each base's training settings before issue 31 (the "before" rows); a base not named here has not changed.
BEFORE = {"minilm": bases.LEGACY_MINILM, "mpnet": {"lr": 2e-5, "epoch": 1, "schedule": 1}}


def cached(key: str, make, seconds: dict, topics=None) -> pd.DataFrame:
    return _common.cached_run(WORK, key, make, seconds, topics)


def evaluate(runs: dict, topics, qrels, baseline: str) -> dict:
    """name -> measures + p-values (paired t-test over queries) against ``baseline``, from one pt.Experiment."""
    names = list(runs)
    table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels, measures=MEASURES,
                               names=names, round=None, verbose=False, baseline=names.index(baseline))
    table = table.rename(columns={"RR": "MRR", "RR p-value": "MRR p-value", "RR +": "MRR +", "RR -": "MRR -"})
    out = {}
    for r in table.to_dict("records"):
        row = {"n": len(topics), **{c: float(r[c]) for c in COLS}}
        for c in TESTED:
            if f"{c} p-value" in r and not pd.isna(r[f"{c} p-value"]):
                row[f"p {c}"] = float(r[f"{c} p-value"])
                row[f"+/- {c}"] = f"{int(r.get(f'{c} +', 0))}/{int(r.get(f'{c} -', 0))}"
        out[r["name"]] = row
    return out


def old_weights(feats: pd.DataFrame, names: list, tqrels: pd.DataFrame, path: Path) -> Path:
    """The fuser as the recipe fitted it before this issue: coordinate ascent on R@5 alone, no floor."""
    frame = feats.drop(columns=names).assign(features=list(feats[names].to_numpy(dtype=float)))
    fuser = WeightedFuser(None, names=names, weights=[1.0] * len(names), normalise="none").fit(frame, tqrels, "R@5")
    saved = WeightedFuser(None, names=names, weights=fuser.weights)
    saved.fit_metric, saved.fit_score = fuser.fit_metric, fuser.fit_score
    return saved.save(path)


def seconds_per_query(seconds: dict, key: str, n: int) -> float:
    return round(seconds.get(key, float("nan")) / max(n, 1), 3)


def _label(settings: dict) -> str:
    soup = f", soup of {settings['soup']} runs" if settings.get("soup", 1) > 1 else ""
    return f"lr {settings['lr']:g}, epoch {settings['epoch']} of {settings['schedule']}{soup}"


def _fit(ds, index, key: str, fts: dict, tune, tqrels, fit: str, helpers=None) -> Path:
    """The recipe's fuser on base ``fts``: as it is fitted now (``after``: ``recipe.fitted_weights``, bagged, cached
    under the recipe's key; ``helpers``: with the base's helper experts), with one ascent instead of the bagged mean
    (``ascent``), or as before this issue (``before``: R@5 alone, no floor); the tuning features are computed once."""
    old = fit == "before"
    bags = 0 if fit == "ascent" else recipe.FIT_BAGS
    helpers = helpers if fit in ("helpers", "density") else None
    extra = _extra(index, key, fts, fit)
    before = WORK / f"weights-before-{key}"
    after = recipe.weights_path(ds.name, index, fts, recipe.TUNING_QUERIES, recipe.TUNING_SEED, recipe.BASE_K,
                                 recipe.EXPERT_K, bags=bags, helpers=helpers, extra_experts=extra,
                                 tuning_text=recipe.text_fingerprint(tune))
    path = before if old else after
    if not (path / "pt_meta.json").is_file():
        dp0 = recipe.build_pipeline(index, fts, depth=None, helpers=helpers, extra_experts=extra)
        t0 = time.time()
        feats = dp0.fuser.features((dp0.decomposer >> dp0.candidates)(tune))
        print(f"  tuning features {key} ({Path(next(iter(fts.values()))).name}): {time.time() - t0:.0f} s", flush=True)
        if old:
            old_weights(feats, dp0.fuser.names, tqrels, before)
        else:
            recipe.fitted_weights(ds, index, fts, feats=feats, refit=True, bags=bags, helpers=helpers,
                                  extra_experts=extra)
    return path


def _extra(index, key: str, fts: dict, fit: str):
    """The density prior of the default (``fit == "density"``: ``tuned_pipeline``'s ``recipe_priors``), else None."""
    return (recipe.recipe_priors(index, key, fts) or None) if fit == "density" else None


def section(ds, index, models: dict, topics, qrels, tag: str, weights: dict, tune=None, tqrels=None,
            helpers: dict = None) -> dict:
    """Rows of one data set: BM25, each base alone (as trained before this issue and now), each recipe before (old
    base, R@5 fit, fused candidates only) and after (current base, floor fit, 1000 deep), each tested against the
    base it is built on. ``models``: {key: {"before": path, "now": path}}; ``weights``: {key: {when: path}},
    filled on Reddit (``tune`` given) and reused on BIRCO."""
    seconds, runs, info, vs = {}, {}, {}, {}
    runs["BM25 (title+text)"] = cached(f"{tag}-bm25", lambda: index.bm25(num_results=1000)(topics), seconds, topics)
    info["BM25 (title+text)"] = seconds_per_query(seconds, f"{tag}-bm25", len(topics))
    for key, paths in models.items():
        ename = recipe.base_expert_name(key)
        prec = recipe.encoding_precision(ename)
        base_rows = {}
        same = paths["before"][0] == paths["now"][0]  # the base's settings did not change: one row
        for when, (path, label) in paths.items():
            name = f"{key} fine-tuned alone ({label})" if same else f"{key} fine-tuned alone, {when} ({label})"
            k = f"{tag}-base-{Path(path).name}-{prec}"
            runs[name] = cached(k, lambda path=path, prec=prec: index.dense(path, precision=prec)(topics), seconds,
                                topics)
            info[name], base_rows[when] = seconds_per_query(seconds, k, len(topics)), name
        plan = [("before", "before", None, "recipe {key}, before (old base, R@5 fit, ~170 deep)"),
                ("before", "after", recipe.DEPTH, "recipe {key} on the old base, bagged floor fit, 1000 deep"),
                ("now", "ascent", recipe.DEPTH, "recipe {key}, one floor-fit ascent, not bagged (1000 deep)"),
                ("now", "after", recipe.DEPTH, "recipe {key}, after (current base, bagged floor fit, 1000 deep)")]
        if same:  # one base: no 'old base' row
            plan = [plan[0], *plan[2:]]
        mine = (helpers or {}).get(key)
        prior = bool(recipe.recipe_priors(index, key, {ename: paths["now"][0]}))
        if mine:  # the base's helper experts beside it (recipe.HELPERS)
            plan.append(("now", "helpers", recipe.DEPTH, "recipe {key} + helper(s) " + "+".join(mine)
                         + (" (bagged floor fit, 1000 deep)" if prior else
                            " (the default; bagged floor fit, 1000 deep)")))
        if mine and prior:  # the default recipe now: and the base's density prior (density_prior.RECIPE_PRIORS)
            plan.append(("now", "density", recipe.DEPTH, "recipe {key} + helper(s) " + "+".join(mine)
                         + " + density prior (the default; bagged floor fit, 1000 deep)"))
        for base_when, fit, depth, label in plan:
            path = paths[base_when][0]
            fts = {ename: path}
            wkey = f"{key}-{base_when}-{fit}"
            if tune is not None:
                weights[wkey] = _fit(ds, index, key, fts, tune, tqrels, fit, mine)
            pipe = recipe.build_pipeline(index, fts, weights=weights[wkey], depth=depth,
                                         helpers=mine if fit in ("helpers", "density") else None,
                                         extra_experts=_extra(index, key, fts, fit))
            name = label.format(key=key)
            k = f"{tag}-recipe-{Path(path).name}-{fit}-{Path(weights[wkey]).name}"
            runs[name] = cached(k, lambda pipe=pipe: pipe(topics), seconds, topics)
            info[name], vs[name] = seconds_per_query(seconds, k, len(topics)), base_rows[base_when]
        if not same:
            vs[base_rows["now"]] = base_rows["before"]
    results = {}
    for base_name in dict.fromkeys(vs.values()):
        mine = {n: r for n, r in runs.items() if vs.get(n) == base_name or n == base_name or n.startswith("BM25")}
        for n, row in evaluate(mine, topics, qrels, baseline=base_name).items():
            if vs.get(n) == base_name or n not in results:
                results[n] = {**row, "vs": vs.get(n)}
    for n in results:
        results[n]["s/query"] = info[n]
        results[n]["depth"] = float(runs[n].groupby("qid").size().mean())
    if tune is not None:  # the Recall@k curves of the validation rows, to depth 1000
        table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels,
                                   measures=ptt.CURVE_MEASURES, names=list(runs), verbose=False)
        ptt.plot_recall_at_k(table, _common.results_dir() / f"{NAME}.png", title="Recall@k, Reddit-TOMT validation",
                             highlight=[n for n in runs if "1000 deep" in n])
        curves = ptt.recall_curves(table).pivot(index="name", columns="k", values="recall")
        for n in results:
            results[n]["curve"] = {int(k): float(v) for k, v in curves.loc[n].items()}
    return {n: results[n] for n in runs}


#: What the benchmark reports of each base's training record (the cost of a base on this machine).
TRAINING_KEYS = ("base_model", "steps", "seconds", "epochs", "lr", "amp", "device", "batch_size", "seed", "train_text")


def training_costs(models: dict, helpers: dict = None) -> dict:
    """{model folder name: its training record's cost and settings}, for every base and helper a run used."""
    paths = [p for ps in models.values() for p, _ in ps.values()]
    paths += [p for hs in (helpers or {}).values() for p in hs.values()]
    out = {}
    for path in dict.fromkeys(str(p) for p in paths):
        info = training_info(path)
        out[Path(path).name] = {k: info[k] for k in TRAINING_KEYS if k in info}
    return out


#: Row labels of a ``--now-only`` run: its 'before' base is the current one, so only the fit is as before.
NOW_ONLY_LABELS = {"before (old base, R@5 fit, ~170 deep)": "fitted as before issue 31 (R@5 alone, fused candidates "
                   "only, ~170 deep)"}


def _relabel(p: dict) -> dict:
    if not p.get("args", {}).get("now_only"):
        return p

    def name(n):
        for a, b in NOW_ONLY_LABELS.items():
            n = n.replace(a, b)
        return n

    def rows(res):
        return {name(n): {**v, **({"vs": name(v["vs"])} if v.get("vs") else {})} for n, v in res.items()}

    return {**p, "results": rows(p["results"]), "birco": rows(p.get("birco") or {})}


def _set_name(name: str) -> None:
    global NAME, WORK
    NAME, WORK = name, _common.WORK / name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bases", nargs="+", default=["minilm"],
                    help="recipe_depth_minilm.* is MiniLM's; the default's is recipe_depth_mpnet.* (--now-only)")
    ap.add_argument("--train", action="store_true", help="train missing bases (mpnet: ~30 min fp32 on 2 cores)")
    ap.add_argument("--no-birco", action="store_true")
    ap.add_argument("--birco-bases", nargs="+", default=None,
                    help="the bases also run on BIRCO dev (default: all of --bases; mpnet encodes its corpus slowly)")
    ap.add_argument("--now-only", action="store_true",
                    help="only the base as BASE_SETTINGS trains it now (no 'before' base to train): the default's rows "
                    "as a new user gets them (the default: --bases mpnet --train --now-only --name recipe_depth_mpnet)")
    ap.add_argument("--train-seed", type=int, default=None,
                    help="train the base(s) with this seed instead of the default 42 (helpers keep theirs): with "
                    "--now-only, how much one training run of the default moves its numbers")
    ap.add_argument("--soup", type=int, default=None,
                    help="the base as the soup of this many runs (recipe.base_settings' soup), e.g. the one "
                    "benchmarks/device/soup_device.py installs: --soup 6 --fp32")
    ap.add_argument("--fp32", action="store_true", help="the base as trained without bf16 autocast (a GPU's run)")
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--name", default=NAME, help="the results' file stem, e.g. recipe_depth_mpnet for a run of one "
                    "base (its rows, runs cache and plot apart from the committed recipe_depth_minilm.*)")
    args = ap.parse_args()
    _set_name(args.name)
    if args.render:
        _common.rerender(NAME, markdown)
        return
    import torch

    t0 = time.time()
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    tune, tqrels = recipe.tuning_data(ds)
    models = {}
    for key in args.bases:
        now = recipe.base_settings(key)
        old = now if args.now_only else {**now, **BEFORE.get(key, {})}
        models[key] = {}
        for when, cfg in (("before", old), ("now", now)):
            settings = {k: cfg[k] for k in ("lr", "epoch", "schedule", "amp")}
            if args.train_seed is not None:  # the base's training seed (its helper keeps its own)
                settings["seed"] = args.train_seed
            settings.update({"soup": args.soup} if args.soup else {}, **({"amp": False} if args.fp32 else {}))
            path = recipe.fine_tuned_base(ds, model=key, train=args.train, index=index, **settings)
            if path is None:
                raise SystemExit(f"no fine-tuned {key} base ({_label(cfg)}) in the cache: run with --train")
            models[key][when] = (path, _label({**cfg, **settings}))
    helpers = {key: {recipe.base_expert_name(h): recipe.fine_tuned_base(ds, model=h, train=args.train, index=index)
                     for h in recipe.default_helpers(key)} for key in args.bases}
    if any(p is None for hs in helpers.values() for p in hs.values()):
        raise SystemExit(f"a helper base of {helpers} is not in the cache: run with --train")
    weights: dict = {}
    results = section(ds, index, models, val, vqrels, "val", weights, tune, tqrels, helpers)
    birco = {}
    if not args.no_birco:
        bds = ptt.get_dataset("birco-wtb")
        bindex = ptt.BookIndex(bds)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*empty title.*")
            on = {k: v for k, v in models.items() if args.birco_bases is None or k in args.birco_bases}
            birco = section(None, bindex, on, bds.get_topics("dev"), bds.get_qrels("dev"), "birco", weights,
                            helpers=helpers)
    fitted = {k: {**WeightedFuser.load(p).to_dict(), "path": Path(p).name} for k, p in weights.items()}
    payload = {"dataset": "reddit-tomt-books", "split": "validation", "n_queries": len(val), "corpus": len(index),
               "tuning": {"n_queries": len(tune), "fingerprint": recipe.qid_fingerprint(tune)},
               "fit_metric": recipe.FIT_METRIC, "fit_bags": recipe.FIT_BAGS, "depth": recipe.DEPTH,
               "results": results, "birco": birco,
               "weights": fitted, "training": training_costs(models, helpers),
               "native_bf16": native_bf16(), "threads": torch.get_num_threads(),
               "seconds": round(time.time() - t0, 1), "args": vars(args)}
    _common.write_results(NAME, payload, markdown(payload))


def _table(res: dict) -> str:
    rows = []
    for name, v in res.items():
        row = {"system": name, **{c: v[c] for c in COLS}, "s/query": v["s/query"], "books/query": v["depth"]}
        if v.get("vs"):
            row["p (R@1, R@5, R@20, R@100, MRR) vs"] = ", ".join(
                f"{v[f'p {c}']:.2g}" if f"p {c}" in v else "-" for c in ("R@1", "R@5", "R@20", "R@100", "MRR")) \
                + f" vs {v['vs'].split(' (')[0]}"
        else:
            row["p (R@1, R@5, R@20, R@100, MRR) vs"] = ""
        rows.append(row)
    return _common.md_table(pd.DataFrame(rows))


def _below(res: dict) -> list:
    out = []
    for name, v in res.items():
        if name.startswith("recipe") and "1000 deep" in name and "vs" in v:
            base = res[v["vs"]]
            for c in COLS:
                if v[c] < base[c] - 1e-9:
                    out.append(f"{name}: {c} {v[c]:.3f} < base {base[c]:.3f}"
                               + (f" (p {v[f'p {c}']:.2g})" if f"p {c}" in v else ""))
            for k, r in v.get("curve", {}).items():  # every cut-off of the Recall@k curve too
                if f"R@{k}" not in COLS and r < base["curve"][k] - 1e-9:
                    out.append(f"{name}: R@{k} {r:.3f} < base {base['curve'][k]:.3f}")
    return out


def markdown(p) -> str:
    p = _relabel(p)
    now_only = p.get("args", {}).get("now_only")
    lines = ["# The recipe beside its base at every depth (issue 31)", "",
             *(["Only the base as `BASE_SETTINGS` trains it now (`--now-only`): the default as a new user gets it, "
                "every model trained on the current training text (the `train_text` of the records below) and "
                "every fuser fitted in this run; a model already in the cache is reused, not retrained. 'fitted as "
                "before issue 31': the same base under the old fit and depth. The 'before' / 'after' wording "
                "below is the full benchmark's.", ""] if now_only else []),
             *([f"The base trained with seed {p['args']['train_seed']} (`--train-seed`; the default is "
                f"{bases.COMMON['seed']}), its helper with its own default: the same recipe from another training "
                "run.", ""] if p.get("args", {}).get("train_seed") is not None else []),
             f"Reddit-TOMT (Books) validation, {p['n_queries']} queries, {p['corpus']} books, all rows from one run. "
             "'before': the base as trained before this issue and the recipe as it was (fuser fitted for R@5 alone, "
             "fused candidates only, ~170 books a query); 'after': the base as `BASE_SETTINGS` trains it now and "
             f"the fuser fitted for the mean of `{p['fit_metric']}` on the tuning slice ({p['tuning']['n_queries']} "
             "training queries), a step kept only if no measure falls below the base alone there, the weights the "
             f"mean of the fits on {p.get('fit_bags', 0)} bootstrap resamples of the slice ('one ascent': a "
             "single fit on the slice itself, as before bagging), the fused "
             f"ranking's top 100 then continued with the base's own ranking to depth {p['depth']}. `p`: paired "
             "t-test (per query) against the base named in the last column (each recipe against the base it is "
             "built on; the current base against the old one). Seconds per query on the 2-core CPU (native bf16: "
             f"{p['native_bf16']}; {p['threads']} torch threads); the first system to use a model on a corpus pays "
             "its encoding (BIRCO: the base rows encode the corpus, the first recipe row builds the title and plot "
             "indexes). Rows cached by an earlier run keep the seconds they took then.", "",
             "## Validation", "", _table(p["results"]), "", f"![Recall@k]({NAME}.png)", ""]
    below = _below(p["results"])
    lines += ["Where the new recipe is below its base (the columns above and R@k at k = 1, 2, 3, 5, 10, 20, 30, 50, "
              "100, 200, 500, 1000): " + ("; ".join(below) if below else "nowhere."), ""]
    if p.get("birco"):
        skipped = [b for b in p["args"]["bases"] if (p["args"].get("birco_bases") or [b]).count(b) == 0]
        lines += ["## BIRCO WhatsThatBook dev (57 queries; Reddit-trained bases and weights, nothing fitted here)",
                  "", _table(p["birco"]), ""]
        if skipped:
            lines += [f"Not run on BIRCO (`--birco-bases`): {', '.join(skipped)}.", ""]
        below = _below(p["birco"])
        lines += ["Where the new recipe is below its base: " + ("; ".join(below) if below else "nowhere."), ""]
    if p.get("training"):
        lines += ["## What each base cost to train (its training record)", "",
                  "| model folder | steps | seconds | s/step | epochs | lr | bf16 autocast | device | train_text |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for folder, t in p["training"].items():
            per = f"{t['seconds'] / t['steps']:.1f}" if t.get("seconds") and t.get("steps") else "-"
            lines.append(f"| {folder} | {t.get('steps', '-')} | {t.get('seconds', '-')} | {per} | "
                         f"{t.get('epochs', '-')} | {t.get('lr', '-')} | {bool(t.get('amp'))} | "
                         f"{t.get('device', '-')} | {str(t.get('train_text', '-'))[:10]} |")
        lines += ["", f"Native bf16 on the machine of this run: {p['native_bf16']}."
                  + (f" ({p['training_note']}.)" if p.get("training_note") else ""), ""]
    lines += ["## Fitted weights", ""]
    for k, w in p["weights"].items():
        base, fit = k.rsplit("-", 2)[1:]
        base = "now" if now_only else base
        fit = {"after": "after (bagged)", "ascent": "one ascent"}.get(fit, fit)
        lines.append(f"- {k.split('-')[0]}, {fit} fit on the {'old' if base == 'before' else 'current'} base: "
                     f"`{json.dumps(dict(zip(w['names'], [round(x, 3) for x in w['weights']])))}` "
                     f"(objective {w.get('fit_metric')}: {w.get('fit_score') or 0:.3f} on the tuning slice)")
    again = "" if NAME == "recipe_depth_minilm" else f" --name {NAME}"
    lines += ["", f"Total {p['seconds']} s. Re-render: `python benchmarks/recipe/recipe_depth.py --render{again}`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
