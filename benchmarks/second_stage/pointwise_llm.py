"""Issue 31.4 on two CPU cores: an LLM pointwise re-ranker after the default recipe.

``PointwiseLLMReranker`` judges each of the recipe's top ``k`` books (yes / no, first-token log-probabilities) with
the largest local LLM here (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, ``fetch_models.py qwen``; a benchmark-only model),
mixed as ``alpha * p(yes) + (1 - alpha) * minmax(recipe)`` over the top ``k``. ``alpha`` is chosen on the first
``--tune`` queries of the tuning slice (objective: the mean of R@1, R@5, R@10 and MRR; an alpha that puts any of
them below the recipe there is not chosen, and the recipe alone is the choice when no alpha beats it); validation
(first ``--val`` queries, default all 233) is only evaluated, with paired t-tests against the recipe in the same
run.

    python benchmarks/fetch_models.py mpnet qwen
    python benchmarks/second_stage/pointwise_llm.py [--base mpnet] [--tune 60] [--val 233] [--k 10] [--threads 2] \\
        [--render]

Runs and LLM answers are cached under ``benchmarks/.work/pointwise_llm`` (a rerun resumes).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
from ir_measures import RR, R  # noqa: E402

NAME = "pointwise_llm"
WORK = _common.WORK / NAME
ALPHAS = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
MEASURES = [R @ 1, R @ 5, R @ 10, RR]
COLS = ["R@1", "R@5", "R@10", "MRR"]


def per_query(run: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """The measures of :data:`COLS` per query of ``qrels`` (0 where the run misses one), by ir_measures."""
    qids = qrels["qid"].astype(str).unique()
    return _common.measures_per_query(run, qrels, MEASURES, qids).rename(columns={"RR": "MRR"})[COLS]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", type=int, default=60)
    ap.add_argument("--val", type=int, default=233)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--base", default="mpnet", help="the recipe's base: mpnet (the default recipe) or minilm (make "
                    "demo's, whose base trains in ~20 min on two CPU cores where mpnet's takes ~1 h)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf", default=None, help="default: the Qwen2.5-Coder-1.5B file fetch_models.py qwen writes")
    ap.add_argument("--note", default="", help="a sentence for the results (e.g. where cached answers came from)")
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    from fetch_models import qwen_gguf
    from scipy.stats import ttest_rel

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe

    t0 = time.time()
    ds, index = _common.reddit()
    tune, tqrels = recipe.tuning_data(ds)
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    tune, val = tune.head(args.tune), val.head(args.val)
    splits = {"tuning": (tune, tqrels[tqrels["qid"].isin(tune["qid"])]),
              "validation": (val, vqrels[vqrels["qid"].isin(val["qid"])])}
    pipe = recipe.tuned_pipeline(ds, index, base=args.base)   # mpnet: the default (with its helper), 1000 deep
    seconds: dict = {}
    runs = {s: _common.cached_run(WORK, _common.pipeline_key(f"recipe-{args.base}-{s}-{len(t)}", pipe),
                                  lambda t=t: pipe(t), seconds, t)
            for s, (t, _) in splits.items()}
    gguf = Path(args.gguf) if args.gguf else qwen_gguf()
    scores, judged, llm_seconds = {}, {}, {}
    with ptt.LlamaServer(model_path=str(gguf), n_threads=args.threads, n_ctx=4096) as server:
        llm = server.llm(cache=WORK / f"llm-{gguf.stem}.sqlite3", timeout=600, verbose=True)
        for s, (topics, qrels) in splits.items():
            run = runs[s].merge(topics[["qid", "query"]], on="qid")
            calls = llm.usage.calls
            t1 = time.time()
            stage = ptt.PointwiseLLMReranker(llm, index, k=args.k)
            alone = stage(run)
            llm_seconds[s] = {"seconds": round(time.time() - t1, 1), "fresh calls": llm.usage.calls - calls}
            judged[s] = {"judged": stage.judged, "failures": stage.failures}
            scores[s] = {"recipe": per_query(runs[s], qrels), "LLM alone (top k)": per_query(alone, qrels)}
            for a in ALPHAS:                          # the same judgements, from the LLM cache
                calls, again = llm.usage.calls, ptt.PointwiseLLMReranker(llm, index, k=args.k, alpha=a)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # failures were counted on the first pass
                    mixed = again(run)
                if again.failures != stage.failures or llm.usage.calls - calls != again.failures:
                    raise SystemExit(f"alpha {a}: the judgements changed between passes (failures "
                                     f"{stage.failures} then {again.failures}); rerun to resume from the cache")
                scores[s][f"alpha {a}"] = per_query(mixed, qrels)
    # an alpha may be chosen only if no measure falls below the recipe on the tuning slice (the recipe's floor)
    tuned = scores["tuning"]
    objective = {name: float(df.mean().mean()) for name, df in tuned.items()}
    floor = tuned["recipe"].mean()
    allowed = [n for n in objective if n.startswith("alpha") and (tuned[n].mean() >= floor - 1e-12).all()]
    chosen = max(allowed, key=objective.get) if allowed else "recipe"
    if chosen != "recipe" and objective[chosen] <= objective["recipe"]:
        chosen = "recipe"
    results = {}
    for s, table in scores.items():
        base = table["recipe"]
        results[s] = {}
        for name, df in table.items():
            row = {c: round(float(df[c].mean()), 4) for c in COLS}
            for c in ("R@5", "MRR"):
                row[f"p {c}"], row[f"up/down {c}"] = "", ""       # the recipe's own row: nothing to compare
                if name != "recipe":
                    diff = df[c] - base[c]
                    row[f"p {c}"] = round(float(ttest_rel(df[c], base[c]).pvalue), 4) if diff.any() else 1.0
                    row[f"up/down {c}"] = f"{int((diff > 0).sum())}/{int((diff < 0).sum())}"
            results[s][name] = row
    payload = {"base": args.base, "k": args.k, "alphas": list(ALPHAS), "llm": gguf.name, "threads": args.threads,
               "n": {s: len(t) for s, (t, _) in splits.items()}, "chosen": chosen,
               "objective (tuning)": {k: round(v, 4) for k, v in objective.items()},
               "results": results, "llm cost": llm_seconds, "judgements": judged, "recipe seconds": seconds,
               "machine": _common.machine(), "seconds": round(time.time() - t0, 1), "args": vars(args),
               "note": args.note}
    _common.write_results(NAME, payload, markdown(payload))


def markdown(p) -> str:
    lines = ["# An LLM pointwise re-ranker after the recipe (issue 31.4, two CPU cores)", "",
             f"`tuned_pipeline(ds, base={p['base']!r}) >> PointwiseLLMReranker(llm, index, k={p['k']}, alpha=a)` "
             f"with {p['llm']} "
             f"served by llama.cpp ({p['threads']} threads): each of the recipe's top {p['k']} books judged yes / "
             "no from the first answer token's log-probabilities, mixed as `a * p(yes) + (1 - a) * "
             "minmax(recipe)` over the top k. `a` chosen on the first "
             f"{p['n']['tuning']} queries of the tuning slice (mean of R@1, R@5, R@10, MRR, none of them below the "
             "recipe there; else no second stage); validation "
             f"({p['n']['validation']} queries) only evaluated. p: paired t-test against the recipe, same run; "
             "up/down: queries above / below it.", "",
             f"Chosen on the tuning slice: **{p['chosen']}**.", ""]
    for s, res in p["results"].items():
        df = pd.DataFrame([{"system": k, **v} for k, v in res.items()])
        lines += [f"## {s} ({p['n'][s]} queries)", "", _common.md_table(df), ""]
    lines += ["## Cost", ""]
    for s, c in p["llm cost"].items():
        n, fresh = p["n"][s], c["fresh calls"]
        rate = f"{c['seconds'] / fresh:.1f} s a fresh call" if fresh else "every answer from the LLM cache"
        lines.append(f"- {s}: {c['seconds']} s, {fresh} fresh LLM calls for {n} queries ({rate}); "
                     f"judged {p['judgements'][s]['judged']}, no judgement {p['judgements'][s]['failures']}")
    if p.get("note"):
        lines += ["", p["note"]]
    lines += ["", f"Machine: {p['machine']}. Total {p['seconds']} s. Re-render: "
              "`python benchmarks/second_stage/pointwise_llm.py --render`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
