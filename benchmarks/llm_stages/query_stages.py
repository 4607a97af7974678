"""Query-side stages ablation (hedge removal, negation penalty, hybrid dense re-ranking, RM3) on Reddit-TOMT
(Books) validation and BIRCO WhatsThatBook dev, after the TREC ToT 2025 hedge-removal paper.

    python benchmarks/llm_stages/query_stages.py      # writes benchmarks/llm_stages/results/query_stages.{json,md}

Systems (all over the same PISA BM25, title + text, k1=1.2, b=0.75, top 1000):
    BM25 | +hedges | +negation (heads, w=3) | +negation (phrase, w=3) | hybrid dense (BM25 top-100 re-ordered by
    all-MiniLM-L6-v2 cosine over the first 1000 characters) | hybrid + hedges (the paper's configuration) |
    hybrid + hedges, alpha=0.5 interpolation | RM3 (only where Terrier can start).
BIRCO: every dev query's candidate pool (ds.get_results) is the whole 2,404-book corpus, so BM25 over
BookIndex(ds) scores exactly the pool (checked below); its books have no titles.
p-values: paired t-test against BM25 of the same run (pt.Experiment baseline=0).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from ir_measures import RR, Success, nDCG  # noqa: E402
from scipy import stats  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.query.hedge_remover import HedgeRemover, hedge_statistics  # noqa: E402
from pyterrier_tot.query.negation_penalty import NegationPenalty  # noqa: E402
from pyterrier_tot.query.rm3 import rm3_pipeline, terrier_status  # noqa: E402
from pyterrier_tot.rerank.dense_reranker import DenseReranker  # noqa: E402

MEASURES = [RR, nDCG @ 10, Success @ 1, Success @ 10, Success @ 100]
COLS = ["RR", "nDCG@10", "Success@1", "Success@10", "Success@100"]


def systems_for(index):
    bm25 = index.bm25()
    hedges = HedgeRemover()
    dense = DenseReranker(index, k=100, max_chars=1000)
    dense_interp = DenseReranker(index, k=100, max_chars=1000, alpha=0.5)
    out = {
        "BM25": bm25,
        "BM25 + hedges": hedges >> bm25,
        "BM25 + negation (heads)": bm25 >> NegationPenalty(index=index, mode="heads"),
        "BM25 + negation (phrase)": bm25 >> NegationPenalty(index=index, mode="phrase"),
        "Hybrid dense": bm25 >> dense,
        "Hybrid dense + hedges": hedges >> bm25 >> dense,
        "Hybrid + hedges, alpha=0.5": hedges >> bm25 >> dense_interp,
    }
    return out


def per_query(runs: dict, topics: pd.DataFrame, qrels: pd.DataFrame, measure) -> dict:
    """name -> per-query values of ``measure`` (pt.Experiment, perquery=True), indexed like ``topics``."""
    names = list(runs)
    t = pt.Experiment([pt.Transformer.from_df(runs[n]) for n in names], topics, qrels, eval_metrics=[measure],
                      names=names, perquery=True)
    wide = t.pivot_table(index="qid", columns="name", values="value")
    return {n: wide[n].reindex(topics["qid"]).fillna(0.0) for n in names}


def stratum_table(runs: dict, topics: pd.DataFrame, qrels: pd.DataFrame, strata: dict, names, measures) -> pd.DataFrame:
    """One pt.Experiment per stratum of queries (the stratum's means come from ir_measures)."""
    rows = []
    for label, mask in strata.items():
        row = {"stratum": label, "queries": int(mask.sum())}
        if mask.any():
            t = pt.Experiment([pt.Transformer.from_df(runs[n]) for n in names], topics[mask.values], qrels,
                              eval_metrics=measures, names=list(names), round=4)
            for rec in t.to_dict("records"):
                row.update({f"{rec['name']} {m}": rec[m] for m in t.columns if m != "name"})
        rows.append(row)
    return pd.DataFrame(rows)


def run_dataset(name: str, split: str) -> tuple[dict, str]:
    ds = ptt.get_dataset(name)
    topics, qrels = ds.get_topics(split), ds.get_qrels(split)
    qrels = qrels[qrels["qid"].isin(topics["qid"])]
    index = ptt.BookIndex(ds)
    notes = []
    if name.startswith("birco"):
        pool = ds.get_results(split)
        corpus = set(index.corpus["docno"])
        same = all(set(g) == corpus for _, g in pool.groupby("qid")["docno"])
        notes.append(f"candidate pools equal the whole corpus for every query: {same}")
    systems = systems_for(index)
    runs, timing = {}, {}
    for label, system in systems.items():
        t0 = time.perf_counter()
        runs[label] = system(topics)
        timing[label] = round(time.perf_counter() - t0, 1)
        print(f"  {label}: {timing[label]} s", flush=True)
    rm3_note = None
    ok, reason = terrier_status()
    if ok:
        bm25_t, rm3 = rm3_pipeline(ds, return_bm25=True)
        for label, system in (("Terrier BM25", bm25_t), ("RM3 (Terrier, fb_docs=10, fb_terms=20)", rm3)):
            t0 = time.perf_counter()
            runs[label] = system(topics)
            timing[label] = round(time.perf_counter() - t0, 1)
    else:
        rm3_note = f"RM3 not run: {reason}"
    names = list(runs)
    table = pt.Experiment([pt.Transformer.from_df(runs[n]) for n in names], topics, qrels, eval_metrics=MEASURES,
                          names=names,
                          baseline=0, round=4)
    base = table.iloc[0]

    # --- hedge statistics of the (original) queries
    remover = HedgeRemover()
    hstats = hedge_statistics(topics["query"], remover)
    words = topics["query"].map(lambda q: len(q.split()))
    hstats["mean_words"] = round(float(words.mean()), 1)
    counts = topics.set_index("qid")["query"].map(remover.count_hedges)

    # --- per-query analysis: hedge gain by hedge bucket, dense gain on hard vs easy queries
    ndcg = per_query(runs, topics, qrels, nDCG @ 10)
    rr = per_query(runs, topics, qrels, RR)
    gain = ndcg["BM25 + hedges"] - ndcg["BM25"]
    r, p = stats.pearsonr(counts.reindex(gain.index), gain) if gain.std() > 0 else (np.nan, np.nan)
    buckets = pd.cut(counts.reindex(topics["qid"]), [-1, 0, 2, 5, 11, 10**6], labels=["0", "1-2", "3-5", "6-11", "12+"])
    by_bucket = stratum_table(runs, topics, qrels, {b: (buckets == b) for b in buckets.cat.categories},
                              ["BM25", "BM25 + hedges"], [nDCG @ 10]).rename(columns={"stratum": "bucket"})
    # the target's BM25 rank band, from per-query Success@10 / Success@100 of the BM25 run
    s10 = per_query({"BM25": runs["BM25"]}, topics, qrels, Success @ 10)["BM25"]
    s100 = per_query({"BM25": runs["BM25"]}, topics, qrels, Success @ 100)["BM25"]
    strata = {"easy (BM25 rank 1-10)": s10 > 0,
              "hard, in pool (BM25 rank 11-100)": (s10 == 0) & (s100 > 0),
              "outside pool (BM25 rank > 100 or none)": s100 == 0}
    hard = stratum_table(runs, topics, qrels, strata, ["BM25", "Hybrid dense", "Hybrid dense + hedges"],
                         [Success @ 10, RR])
    neg_changed = {}
    for n in ("BM25 + negation (heads)", "BM25 + negation (phrase)"):
        res = runs[n]
        penalised = res[res["negation_penalty"] > 0]
        changed_q = int((rr[n] != rr["BM25"]).sum())
        neg_changed[n] = {"queries_with_penalised_docs": int(penalised["qid"].nunique()),
                          "penalised_docs": int(len(penalised)),
                          "queries_whose_RR_changed": changed_q,
                          "targets_penalised": int(len(penalised.merge(qrels[qrels.label > 0],
                                                                       on=["qid", "docno"])))}

    payload = {"queries": len(topics), "books": len(index), "notes": notes + ([rm3_note] if rm3_note else []),
               "results": table.to_dict("records"), "seconds": timing, "hedge_stats": hstats,
               "hedge_gain_vs_count": {"pearson_r": None if np.isnan(r) else round(float(r), 4),
                                       "p": None if np.isnan(p) else round(float(p), 4),
                                       "by_bucket": by_bucket.to_dict("records")},
               "dense_by_difficulty": hard.to_dict("records"), "negation": neg_changed,
               "bm25_recall_pool_S@100": float(base["Success@100"])}

    view = table[["name", *COLS, "RR +", "RR -", "RR p-value", "nDCG@10 p-value"]].copy()
    view.insert(1, "BM25 RR (same run)", base["RR"])
    view.insert(2, "BM25 nDCG@10", base["nDCG@10"])
    view["s"] = view["name"].map(timing)
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(f"\n== {name} {split}: {len(topics)} queries, {len(index)} books")
        print(view.to_string(index=False))
        print("hedges per query:", hstats)
        print(f"hedge gain vs hedge count: r={r:.3f} p={p:.3f}")
        print(by_bucket.to_string(index=False))
        print(hard.to_string(index=False))
        print("negation:", neg_changed)
        for n in notes + ([rm3_note] if rm3_note else []):
            print(n)
    shown = view.copy()
    for c in ("RR p-value", "nDCG@10 p-value"):
        shown[c] = shown[c].map(lambda v: "" if pd.isna(v) else f"{v:.3g}")
    shown["s"] = shown["s"].map(lambda v: f"{v:.1f}")
    md = [f"## {name} {split} ({len(topics)} queries, {len(index)} books)", "",
          _common.md_table(shown, floatfmt="{:.4f}"), "",
          f"Hedges per query (packaged lexicon, {len(remover.entries)} markers): mean {hstats['mean']}, median "
          f"{hstats['median']}, max {hstats['max']}, share with ≥1 hedge {hstats['share_with_hedge']}; "
          f"mean query length {hstats['mean_words']} words.", "",
          "| hedges | 0 | 1-2 | 3-5 | 6-11 | 12+ |", "|---|---|---|---|---|---|",
          "| queries | " + " | ".join(str(hstats["buckets"][b]) for b in ["0", "1-2", "3-5", "6-11", "12+"]) + " |", "",
          f"nDCG@10 gain of hedge removal vs hedge count: Pearson r = {r:.3f} (p = {p:.3f}); by bucket:", "",
          _common.md_table(by_bucket.fillna("")), "",
          "Hybrid dense by BM25 difficulty (rank of the target in the BM25 run):", "",
          _common.md_table(hard.fillna("")), "",
          "Negation penalty: " + "; ".join(f"{k}: {v}" for k, v in neg_changed.items()), ""]
    md += [f"- {n}" for n in notes + ([rm3_note] if rm3_note else [])] + [""]
    return payload, "\n".join(md)


def main():
    out = {"datasets": {}}
    md = ["# Query-side stages (hedge removal, negation penalty, hybrid dense, RM3)", "",
          "Command: `python benchmarks/llm_stages/query_stages.py`. BM25 = PISA BM25 (k1=1.2, b=0.75, porter2) over "
          "title + text, top 1000. Hybrid dense = BM25 top-100 re-ordered by all-MiniLM-L6-v2 cosine between the query "
          "and the first 1000 characters of title + text (stored FlexIndex vectors); ranks 101+ keep BM25 order. "
          "Negation: w = 3.0 subtracted from books whose title or first paragraph holds a negated concept. "
          "`p-value` = paired t-test against BM25 of the same run; `RR +` / `RR -` = queries better / worse than BM25. "
          "Every number comes from pt.Experiment (per-query values: perquery=True). BIRCO: each query's "
          "candidate pool is the whole corpus, so BM25 over `BookIndex(ds)` scores exactly the pool.", ""]
    for name, split in (("reddit-tomt-books", "validation"), ("birco-wtb", "dev")):
        payload, section = run_dataset(name, split)
        out["datasets"][f"{name}/{split}"] = payload
        md.append(section)
    _common.write_results("query_stages", out, "\n".join(md))


if __name__ == "__main__":
    main()
