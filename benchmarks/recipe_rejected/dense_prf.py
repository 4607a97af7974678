"""Vector pseudo-relevance feedback on the recipe's base (issue 31.2 / 31.4: can PRF lift the base's recall?).

pyterrier-dr's ``VectorPrf`` moves each query vector towards the mean vector of its top ``k`` books (``alpha = 1``,
``beta``) and searches again: ``encoder >> retriever >> vec_loader >> VectorPrf >> retriever``. In a known-item
search the top books are the gold book's look-alikes, so the feedback may pull the query towards the right
neighbourhood (recall deep down) or away from the one right book (the top). Measured here, on the default's mpnet
base, for ``k`` in 3 / 5 / 10 / 20 and ``beta`` in .1 / .3 / .5 / 1:

- each PRF ranking alone against the base alone, at R@1 ... R@1000 and MRR;
- each as the recipe's tail below its fused top 100 (where it cannot touch R@1 ... R@100), against the base's own.

Rule fixed before the run (``tail_order.py``'s): a PRF tail replaces the base's own only if, on the tuning slice, it
is at or above it at every R@k from 200 to 1000 and above it at R@1000. Validation is reported, never used.

    python benchmarks/recipe_rejected/dense_prf.py   # about 6 minutes on two cores (the queries encoded once a split)
    python benchmarks/recipe_rejected/dense_prf.py --render
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/

import ir_measures
import pandas as pd
import pyterrier as pt
from _common import WORK, cached_run, md_table, parse_or_render, split_heading, trailer, write_results
from ir_measures import RR, R
from tail_order import BASE_TAIL, CUTS, choose_tail, ir_measures_recall, the_default_and_splits

NAME = "dense_prf"
GRID = [(k, beta) for k in (3, 5, 10, 20) for beta in (0.1, 0.3, 0.5, 1.0)]
ALONE = (1, 5, 20, 100, 200, 1000)


def alone(run: pd.DataFrame, qrels: pd.DataFrame) -> dict:
    measures = [*(R @ c for c in ALONE), RR]
    got = ir_measures.calc_aggregate(measures, qrels, run.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    return {**{f"R@{c}": float(got[R @ c]) for c in ALONE}, "MRR": float(got[RR])}


def markdown(p: dict) -> str:
    lines = ["# Vector PRF on the recipe's base", "",
             f"pyterrier-dr `VectorPrf` (alpha 1, beta, the top k books' mean vector) over the default's base "
             f"`{p['base']}`. Rule fixed before the run: a PRF tail replaces the base's own below the fused top "
             f"{p['keep']} only if on the tuning slice it is at or above it at every R@k from 200 to 1000 and above "
             f"it at R@1000. Chosen: **{p['chosen']}**.", ""]
    for split in ("tuning", "validation"):
        lines += [split_heading(split, p["queries"][split]), "", "Each ranking alone:", "",
                  md_table(pd.DataFrame([{"ranking": n, **r} for n, r in p["alone"][split].items()])), "",
                  f"As the recipe's tail below its fused top {p['keep']}:", "",
                  md_table(pd.DataFrame([{"tail": n, **r} for n, r in p["tails"][split].items()]), "{:.4f}"), ""]
    lines += [trailer(p["seconds"], NAME), ""]
    return "\n".join(lines)


def main():
    args = parse_or_render(argparse.ArgumentParser(description=__doc__), NAME, markdown)
    if args is None:
        return
    from pyterrier_dr import VectorPrf

    from pyterrier_tot.decomposition.pipeline import fill_to_depth

    t0 = time.time()
    dp, key, splits = the_default_and_splits()
    dense = dp.experts["dense_ft_mpnet"].retriever(1000).retriever  # the base's encoder and FlexIndex retriever
    flex = dense.retriever.flex_index
    seconds, alone_rows, tails, queries = {}, {}, {}, {}
    for split, (topics, q) in splits.items():
        first = {}  # the first search with its vectors, made once a split and only when a run is not cached

        def feedback(k, beta, topics=topics, first=first):
            if "res" not in first:
                first["res"] = (dense.query_encoder >> flex.np_retriever(num_results=max(k for k, _ in GRID))
                                >> flex.vec_loader())(topics)
            top = first["res"][first["res"]["rank"] < k]
            return (VectorPrf(k=k, beta=beta) >> flex.np_retriever(num_results=1000, drop_query_vec=True))(top)

        fused = cached_run(WORK / NAME, f"{split}-fused-{key}", lambda t=topics: dp.pipeline(t), seconds, topics)
        base = cached_run(WORK / NAME, f"{split}-base-{key}", lambda t=topics: dp.tail(t), seconds, topics)
        runs = {BASE_TAIL: pt.model.add_ranks(base)}
        for k, beta in GRID:
            runs[f"VectorPrf k {k}, beta {beta}"] = pt.model.add_ranks(cached_run(
                WORK / NAME, f"{split}-prf-k{k}-b{beta}-{key}", lambda k=k, b=beta: feedback(k, b), seconds, topics))
        alone_rows[split] = {n: alone(r, q) for n, r in runs.items()}
        tails[split] = {n: ir_measures_recall(fill_to_depth(fused, r, 1000, keep=dp.candidates.k), q, CUTS)
                        for n, r in runs.items()}
        queries[split] = len(topics)
    chosen = choose_tail(tails["tuning"])
    payload = {"base": Path(str(dp.experts["dense_ft_mpnet"].model)).name, "keep": dp.candidates.k, "weights": key,
               "chosen": chosen, "alone": alone_rows, "tails": tails, "queries": queries, "run_seconds": seconds,
               "seconds": time.time() - t0}
    write_results(NAME, payload, markdown(payload))


if __name__ == "__main__":
    main()
