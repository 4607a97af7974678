"""Issue 31.4: a second stage over the recipe. A cross-encoder initialised from the recipe's fine-tuned base
encoder (its weights; the scoring head is new), trained on the recipe's *own* near misses, re-scores the recipe's
top ``k`` by ``alpha * minmax(cross-encoder) + (1 - alpha) * minmax(recipe)``.

    python benchmarks/second_stage/second_stage.py            # mines, trains (one epoch, ~35 min on 2 cores), evaluates
    python benchmarks/second_stage/second_stage.py --render   # rewrite the markdown from the committed JSON

Protocol (nothing here reads validation before the last step):

1. The recipe (``recipe.tuned_pipeline(ds, base="minilm")``) ranks the training queries outside the tuning slice;
   its top ``--mine-depth`` books minus the gold book are each query's negatives (``--negatives`` drawn, seeded).
2. ``train_cross_encoder`` on (query, gold, negatives) groups, listwise softmax loss, from the base's folder.
3. ``k`` and ``alpha`` are chosen on the tuning slice (300 training queries) for the mean of
   ``recipe.FIT_METRIC``, a setting admitted only if none of ``recipe.FLOOR_METRIC`` falls below the recipe alone
   there (alpha 0 is the recipe itself, so the choice can be "no second stage").
4. Validation (233 queries) and BIRCO dev (57, nothing fitted there): BM25, the base alone, the recipe, the
   recipe >> cross-encoder (chosen k, alpha) and the cross-encoder alone over the same top k, paired t-tests
   against the recipe. The issue keeps a second stage only if validation R@5 and MRR rise with p < .05.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import ir_measures  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
import strong_retrievers  # noqa: E402
from strong_retrievers import ce_scores, interpolate  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe
from pyterrier_tot.models import native_bf16  # noqa: E402
from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker, train_cross_encoder  # noqa: E402

NAME = "second_stage"
WORK = _common.WORK / NAME
MEASURES = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "RR", "nDCG@10", "nDCG@1000"]
TESTED = ["R@1", "R@5", "R@10", "R@20", "MRR"]
ALPHAS = [round(a / 10, 1) for a in range(11)]


def cached(key: str, make, seconds: dict, topics=None) -> pd.DataFrame:
    return _common.cached_run(WORK, key, make, seconds, topics)


def measure_all(run: pd.DataFrame, qrels: pd.DataFrame, names) -> dict:
    ms = [ir_measures.parse_measure(m) for m in names]
    qrels = qrels[qrels["qid"].astype(str).isin(set(run["qid"].astype(str)))]  # the mean is over the run's queries
    r = run.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]]
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    q = q.assign(query_id=q["query_id"].astype(str), doc_id=q["doc_id"].astype(str))
    agg = ir_measures.calc_aggregate(ms, q[["query_id", "doc_id", "relevance"]], r)
    return {str(m): float(agg[m]) for m in ms}


def choose(run: pd.DataFrame, ce: pd.DataFrame, qrels, ks) -> tuple:
    """(k, alpha, table): the setting with the best mean of FIT_METRIC on the tuning slice among those where no
    FLOOR_METRIC measure is below the recipe alone (alpha 0)."""
    fit = recipe.FIT_METRIC.split(",")
    floor_names = recipe.FLOOR_METRIC.split(",")
    top = pt.model.add_ranks(run.copy())
    top = top[top["rank"] < 100][["qid", "docno", "score"]]
    base = measure_all(top, qrels, floor_names)
    rows = []
    for k in ks:
        for a in ALPHAS:
            m = measure_all(interpolate(top, ce, k, a), qrels, floor_names)
            below = [n for n in floor_names if m[n] < base[n] - 1e-12]
            rows.append({"k": k, "alpha": a, "objective": sum(m[n] for n in fit) / len(fit),
                         **{n: m[n] for n in ("R@1", "R@5", "R@20", "RR")}, "below recipe": ",".join(below)})
    table = pd.DataFrame(rows)
    ok = table[table["below recipe"] == ""]
    best = ok.sort_values(["objective", "alpha"], ascending=[False, True]).iloc[0]
    return int(best["k"]), float(best["alpha"]), table


def evaluate(runs: dict, topics, qrels, baseline: str) -> list:
    names = list(runs)
    table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels, measures=MEASURES,
                               names=names, round=None, verbose=False, baseline=names.index(baseline))
    table = table.rename(columns={"RR": "MRR", "RR p-value": "MRR p-value"})
    return table.to_dict("records")


def main():
    S = recipe.CROSS_ENCODER_SETTINGS  # the library's defaults are the benchmark's
    ap = argparse.ArgumentParser()
    ap.add_argument("--negatives", type=int, default=S["n_negatives"])
    ap.add_argument("--mine-depth", type=int, default=S["mine_depth"])
    ap.add_argument("--epochs", type=int, default=S["epochs"])
    ap.add_argument("--lr", type=float, default=S["lr"])
    ap.add_argument("--head-lr", type=float, default=S["head_lr"],
                    help="learning rate of the new scoring head (0: the encoder's)")
    ap.add_argument("--batch-queries", type=int, default=S["batch_queries"])
    ap.add_argument("--max-length", type=int, default=S["max_length"])
    ap.add_argument("--query-tokens", type=int, default=S["max_query_tokens"])
    ap.add_argument("--ks", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--smoke", type=int, default=0, help="check the code path on N queries a split; writes nothing")
    ap.add_argument("--name", default=NAME, help="the results' file stem (e.g. second_stage_gpu for a cross-encoder "
                    "trained by second_stage_device.py; the runs cache is shared)")
    args = ap.parse_args()
    if args.render:
        return _common.rerender(args.name, markdown)
    t_start = time.time()
    seconds: dict = {}
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    base = recipe.fine_tuned_bases(ds, index, "minilm")["dense_ft"]
    pipe = recipe.tuned_pipeline(ds, index, base="minilm")
    wpath = recipe.weights_path(ds.name, index, {"dense_ft": base}, recipe.TUNING_QUERIES, recipe.TUNING_SEED,
                                 recipe.BASE_K, recipe.EXPERT_K,
                                 tuning_text=recipe.text_fingerprint(recipe.train_data(ds, "tuning")[0]))
    prec = recipe.encoding_precision("dense_ft")
    rest, rqrels = recipe.train_data(ds, "rest")
    tune, tqrels = recipe.train_data(ds, "tuning")
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    if args.smoke:
        global WORK
        WORK = Path("/tmp/second_stage_smoke")
        rest, tune, val = rest.head(args.smoke), tune.head(args.smoke), val.head(args.smoke)
    strong_retrievers.WORK = WORK  # the cross-encoder scores are cached beside this benchmark's runs

    # 1-2. the recipe's own near misses on the training queries it may learn from; the cross-encoder from the base
    rest_run = cached(rest_key(pipe, args.mine_depth), lambda: (pipe % args.mine_depth)(rest), seconds, rest)
    settings = dict(n_negatives=args.negatives, mine_depth=args.mine_depth, epochs=args.epochs, lr=args.lr,
                    head_lr=args.head_lr or None,
                    batch_queries=args.batch_queries, max_length=args.max_length, max_query_tokens=args.query_tokens)
    groups = recipe.recipe_groups(ds, index, pipe, args.negatives, args.mine_depth, run=rest_run)
    if args.smoke:
        out = WORK / "ce"
        if not (out / "pt_meta.json").is_file():
            train_cross_encoder(groups[:8], out, base_model=base, n_negatives=args.negatives, max_steps=2,
                                max_length=args.max_length, max_query_tokens=args.query_tokens)
    else:
        out = Path(recipe.recipe_cross_encoder(ds, index, base="minilm", pipeline=pipe, run=rest_run,
                                                       **settings))
    training = recipe.training_info(out)
    ce = CrossEncoderReranker(out, index, k=max(args.ks))
    timings: dict = {}
    kmax = max(args.ks)

    # 3. k and alpha on the tuning slice
    tune_run = cached(_common.pipeline_key("recipe-tuning", pipe), lambda: pipe(tune), seconds, tune)
    tce = ce_scores(f"{out.name}-tuning", ce, [tune_run], tune, kmax, timings)
    k, alpha, grid = choose(tune_run, tce, tqrels, args.ks)
    print(f"chosen on the tuning slice: k={k}, alpha={alpha}", flush=True)

    # 4. validation and BIRCO dev, each from one pt.Experiment
    sections = {}
    birco = ptt.get_dataset("birco-wtb")
    btopics = birco.get_topics("dev").head(args.smoke) if args.smoke else birco.get_topics("dev")
    bindex = ptt.BookIndex(birco)
    for tag, idx, rec, topics, qrels in [
            ("validation", index, pipe, val, vqrels),
            ("birco", bindex, recipe.build_pipeline(bindex, {"dense_ft": base}, weights=wpath), btopics,
             birco.get_qrels("dev"))]:
        sections[tag] = section(tag, idx, rec, topics, qrels, base, prec, out, k, alpha, kmax)
    val_rows = {r["name"]: r for r in sections["validation"]["rows"]}
    second = val_rows[f"recipe >> cross-encoder top {k} (alpha {alpha})"]
    keep = (alpha > 0 and second["R@5"] > val_rows["recipe"]["R@5"] and second["MRR"] > val_rows["recipe"]["MRR"]
            and second.get("R@5 p-value", 1) < 0.05 and second.get("MRR p-value", 1) < 0.05)
    payload = {"args": vars(args), "base": Path(base).name, "cross_encoder": out.name, "training": training,
               "n_groups": len(groups), "chosen": {"k": k, "alpha": alpha}, "tuning_grid": grid.to_dict("records"),
               "sections": sections, "tuning_ce_scoring": timings, "keep": bool(keep), "native_bf16": native_bf16(),
               "torch_threads": _threads(), "seconds": round(time.time() - t_start, 1)}
    if args.smoke:
        return print(markdown(payload))
    _common.write_results(args.name, payload, markdown(payload))


def rest_key(pipe, mine_depth: int) -> str:
    """The cache key of the recipe's top ``mine_depth`` on the training queries outside the tuning slice (read by
    second_stage_device.py too): another fit or model of the recipe is another run."""
    return _common.pipeline_key(f"recipe-rest-top{mine_depth}", pipe)


def section(tag, idx, rec, topics, qrels, base, prec, out, k, alpha, kmax) -> dict:
    """One data set: BM25, the base alone, the recipe, the recipe >> cross-encoder (chosen k, alpha) and the
    cross-encoder alone over the same top k, from one pt.Experiment with paired tests against the recipe."""
    seconds, timings = {}, {}
    rkey = _common.pipeline_key(f"recipe-{tag}", rec)
    bkey = f"base-{tag}-{Path(base).name}"
    runs = {"BM25": cached(f"bm25-{tag}", lambda: (idx.bm25() % 1000)(topics), seconds, topics),
            "base alone": cached(bkey, lambda: (idx.dense(base, precision=prec) % 1000)(topics), seconds, topics),
            "recipe": cached(rkey, lambda: rec(topics), seconds, topics)}
    cev = ce_scores(f"{out.name}-{tag}", CrossEncoderReranker(out, idx, k=kmax), [runs["recipe"]], topics, kmax,
                    timings)
    runs[f"recipe >> cross-encoder top {k} (alpha {alpha})"] = interpolate(runs["recipe"], cev, k, alpha)
    runs[f"recipe >> cross-encoder top {k} (alone)"] = interpolate(runs["recipe"], cev, k, 1.0)
    t = timings[f"{out.name}-{tag}"]
    per_pair = t["seconds"] / max(t["pairs"], 1)
    sq = {name: seconds[key] / len(topics) for name, key in
          (("BM25", f"bm25-{tag}"), ("base alone", bkey), ("recipe", rkey))}
    rows = evaluate(runs, topics, qrels, "recipe")
    for r in rows:
        r["s/query"] = round(sq.get(r["name"], sq["recipe"] + per_pair * k), 3)
    return {"rows": rows, "ce_seconds_per_pair": round(per_pair, 4), "n": len(topics)}


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _table(rows: list) -> str:
    df = pd.DataFrame(rows)
    cols = ["name"] + [m if m != "RR" else "MRR" for m in MEASURES] + ["s/query"]
    df["p vs recipe (" + ", ".join(TESTED) + ")"] = [
        ", ".join(f"{r.get(f'{c} p-value'):.2g}" if not pd.isna(r.get(f"{c} p-value", float("nan"))) else "-"
                  for c in TESTED) if r["name"] != "recipe" else "" for r in rows]
    return _common.md_table(df[cols + [df.columns[-1]]].astype(object).fillna(""))


def markdown(p: dict) -> str:
    t, c = p["training"], p["chosen"]
    grid = pd.DataFrame(p["tuning_grid"])
    best = grid.sort_values("objective", ascending=False).head(8)
    lines = [
        "# A second stage over the recipe: a cross-encoder from the base's encoder (issue 31.4)", "",
        f"The cross-encoder starts from the recipe's fine-tuned MiniLM base (`{p['base']}`: its encoder weights, a new "
        f"scoring head) and is trained for {t.get('epochs')} epoch(s) ({t.get('steps')} steps of "
        f"{t.get('batch_queries')} queries, lr {t.get('lr')}, {t.get('seconds')} s; loss {t.get('first_loss'):.3f} -> "
        f"{t.get('last_loss'):.3f}{'; trained on ' + t['trained_on'] if t.get('trained_on') else ''}) on "
        f"{p['n_groups']} training queries outside the tuning slice, each with its gold "
        f"book and {p['args']['negatives']} negatives drawn from the recipe's own top {p['args']['mine_depth']} "
        f"(gold excluded); pairs cut to {t.get('max_length')} word pieces, the query to {t.get('max_query_tokens')}. "
        f"It re-scores the recipe's top k by alpha * minmax(cross-encoder) + (1 - alpha) * minmax(recipe); k and "
        f"alpha chosen on the tuning slice for the mean of `{recipe.FIT_METRIC}`, a setting admitted only if no "
        f"measure of `{recipe.FLOOR_METRIC}` falls below the recipe alone there: **k = {c['k']}, alpha = "
        f"{c['alpha']}**. Kept in the recipe (validation R@5 and MRR up with p < .05): "
        f"**{'yes' if p['keep'] else 'no'}**.",
        "", f"2-core CPU, native bf16: {p['native_bf16']}, {p['torch_threads']} torch threads; total "
        f"{p['seconds']} s. s/query: the recipe's own seconds plus the cross-encoder's seconds per pair times k.", ""]
    for tag, title in [("validation", "Validation (233 queries)"),
                       ("birco", "BIRCO WhatsThatBook dev (57 queries; nothing fitted here)")]:
        s = p["sections"][tag]
        lines += [f"## {title}", "", f"Cross-encoder: {s['ce_seconds_per_pair']} s per (query, book) pair. "
                  "p: paired t-test against the recipe.", "", _table(s["rows"]), ""]
    lines += ["## Tuning slice: the best settings (300 training queries)", "",
              _common.md_table(best.astype(object).fillna("")), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
