"""The main job: BM25 vs dense retrieval on Reddit-TOMT (Books) validation, evaluated with pt.Experiment,
with the best run written as a TREC run file.

    python -m pyterrier_tot.demo [--split validation] [--model minilm] [--out runs/]
"""
from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import pandas as pd
import pyterrier as pt


def main(argv=None) -> pd.DataFrame:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="reddit-tomt-books")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--model", default=None, help="sentence-transformers name or local dir (default MiniLM)")
    parser.add_argument("--out", default="runs", help="folder for the TREC run files")
    args = parser.parse_args(argv)

    import pyterrier_tot as ptt

    warnings.filterwarnings("ignore", category=FutureWarning)
    t0 = time.time()
    ds = ptt.get_dataset(args.dataset)
    topics, qrels = ds.get_topics(args.split), ds.get_qrels(args.split)
    index = ptt.BookIndex(ds)
    print(f"{ds.name} {args.split}: {len(topics)} queries, {len(index)} books; indexes in {index.path}")
    bm25 = index.bm25()
    dense = index.dense(args.model)
    hybrid = bm25 % 100 >> index.dense_scorer(args.model)
    systems = [bm25, dense, hybrid]
    names = ["BM25 (title+text)", f"Dense ({Path(str(args.model or 'all-MiniLM-L6-v2')).name})",
             "BM25 top-100 >> dense rescoring"]
    table = ptt.tot_experiment(systems, topics, qrels, measures=ptt.SHORT_MEASURES + [pt.measures.Success @ 1],
                               names=names, round=3, verbose=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.to_string(index=False))
    out = Path(args.out)
    for system, tag in ((bm25, "bm25"), (dense, "dense")):
        path = ptt.write_trec_run(system(topics), out / f"{ds.name}-{args.split}-{tag}.run", run_name=f"ptt_{tag}")
        print(f"wrote TREC run {path}")
    print(f"done in {time.time() - t0:.1f}s")
    return table


if __name__ == "__main__":
    main()
