"""What fills the recipe's ranking below its fused top k (issue 31.1 / the R@1000 target), and what caps R@100.

The default ranks the fused candidates' top ``k`` (100) and continues with the base's own ranking to depth 1000.
This benchmark measures, on the tuning slice (where a choice would be made) and on validation (reported only):

- how often the fused candidate union holds the gold book, and how often the base's top 100 / 200 / 1000 does;
- R@100 ... R@1000 of the recipe with other tails: the MiniLM helper's ranking, the sum of the base's and the
  helper's cosines (as several bases are summed), reciprocal-rank fusion of the base with the helper or with BM25
  (1:1, 2:1, 4:1), and min-max sums of the base and BM25 (BM25 weight .1 to .5).

Rule fixed before the run: a tail replaces the base's own only if, on the tuning slice, it is at or above it at
every R@k from 200 to 1000 and above it at R@1000.

    python benchmarks/recipe_rejected/tail_order.py            # about 8 minutes on two cores
    python benchmarks/recipe_rejected/tail_order.py --render
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
from _common import WORK, cached_run, md_table, parse_or_render, reddit, split_heading, trailer, write_results
from ir_measures import R

NAME = "tail_order"
CUTS = (100, 200, 300, 500, 1000)
BASE_TAIL = "the base's own ranking (the default)"


def _minmax(run: pd.DataFrame) -> pd.DataFrame:
    g = run.groupby("qid")["score"]
    lo, hi = g.transform("min"), g.transform("max")
    return run.assign(score=(run["score"] - lo) / (hi - lo).replace(0, 1))


def rrf(runs, weights, k: int = 60) -> pd.DataFrame:
    parts = [r.assign(s=w / (k + r["rank"].astype(float) + 1))[["qid", "docno", "s"]] for r, w in zip(runs, weights)]
    summed = pd.concat(parts).groupby(["qid", "docno"], as_index=False)["s"].sum()
    return pt.model.add_ranks(summed.rename(columns={"s": "score"}))


def combsum(a: pd.DataFrame, b: pd.DataFrame, w: float) -> pd.DataFrame:
    m = _minmax(a)[["qid", "docno", "score"]].merge(_minmax(b)[["qid", "docno", "score"]], on=["qid", "docno"],
                                                     how="outer", suffixes=("_a", "_b")).fillna(0.0)
    return pt.model.add_ranks(m.assign(score=m["score_a"] + w * m["score_b"])[["qid", "docno", "score"]])


def ir_measures_recall(run: pd.DataFrame, qrels: pd.DataFrame, cuts=CUTS) -> dict:
    got = ir_measures.calc_aggregate([R @ c for c in cuts], qrels,
                                     run.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    return {f"R@{c}": float(got[R @ c]) for c in cuts}


def share_with_gold(run: pd.DataFrame, qrels: pd.DataFrame, qids) -> float:
    """Share of ``qids`` whose gold book appears anywhere in ``run``."""
    gold = qrels[qrels["relevance"] > 0][["query_id", "doc_id"]].rename(columns={"query_id": "qid", "doc_id": "docno"})
    return float(run[["qid", "docno"]].merge(gold, on=["qid", "docno"])["qid"].nunique() / len(qids))


def the_default_and_splits():
    """(the default recipe's DecompositionPipeline, its weights' folder name, {split: (topics, ir_measures qrels)})
    for the tuning slice and validation: where a tail is chosen and where it is only reported."""
    from pyterrier_tot import recipe

    ds, index = reddit()
    dp = recipe.tuned_pipeline(ds, index, train=False, verbose=False)
    tuning, tq = recipe.train_data(ds, "tuning", recipe.TUNING_QUERIES, recipe.TUNING_SEED)
    splits = {}
    for split, (topics, qrels) in {"tuning": (tuning, tq),
                                   "validation": (ds.get_topics("validation"), ds.get_qrels("validation"))}.items():
        splits[split] = (topics.astype({"qid": str}), qrels.rename(
            columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}).astype(
            {"query_id": str, "doc_id": str}))
    return dp, Path(dp.weights_path).name, splits


def choose_tail(tuning_tails: dict) -> str:
    """The rule fixed before the run: a tail replaces the base's own only if, on the tuning slice, it is at or above
    it at every R@k from 200 to 1000 and above it at R@1000 (the best such tail at R@1000)."""
    ref = tuning_tails[BASE_TAIL]
    better = [n for n, r in tuning_tails.items() if n != BASE_TAIL and r["R@1000"] > ref["R@1000"]
              and all(r[f"R@{c}"] >= ref[f"R@{c}"] for c in CUTS if c >= 200)]
    return max(better, key=lambda n: tuning_tails[n]["R@1000"]) if better else BASE_TAIL


def markdown(p: dict) -> str:
    lines = ["# What fills the recipe's ranking below its fused top k, and what caps R@100", "",
             f"The default recipe (`tuned_pipeline(ds)`) ranks its fused candidates' top {p['k']} and continues "
             "with a tail to depth 1000. Each row below keeps the same fused top and changes only the tail. Rule fixed "
             "before the run: a tail replaces the base's own only if, on the tuning slice, it is at or above it at "
             f"every R@k from 200 to 1000 and above it at R@1000. Chosen: **{p['chosen']}**.", ""]
    for split in ("tuning", "validation"):
        c = p["coverage"][split]
        lines += [split_heading(split, c["queries"]),
                  "", f"The gold book is in the fused candidate union (about {c['union_rows']:.0f} books a query) for "
                  f"{c['union']:.3f} of the queries; in the base's top 100 / 200 / 1000 for {c['base@100']:.3f} / "
                  f"{c['base@200']:.3f} / {c['base@1000']:.3f}.", "",
                  md_table(pd.DataFrame([{"tail": t, **r} for t, r in p["tails"][split].items()]), "{:.4f}"), ""]
    lines += [trailer(p["seconds"], NAME), ""]
    return "\n".join(lines)


def main():
    args = parse_or_render(argparse.ArgumentParser(description=__doc__), NAME, markdown)
    if args is None:
        return
    from pyterrier_tot import recipe
    from pyterrier_tot.decomposition.pipeline import fill_to_depth

    t0 = time.time()
    dp, key, splits = the_default_and_splits()
    retrievers = {"fused": dp.pipeline, "base": dp.tail, "bm25": dp.experts["bm25"].retriever(1000),
                  "helper": dp.experts["dense_ft"].retriever(1000),
                  "sum": recipe.candidate_base(dp.experts, ["dense_ft_mpnet", "dense_ft"], 1000)}
    seconds, tails, coverage = {}, {}, {}
    for split, (topics, q) in splits.items():
        runs = {n: pt.model.add_ranks(cached_run(WORK / NAME, f"{split}-{n}-{key}", lambda r=r, t=topics: r(t),
                                                 seconds, topics)) for n, r in retrievers.items()}
        qids = sorted(topics["qid"])
        base, bm, helper = runs["base"], runs["bm25"], runs["helper"]
        candidates = {BASE_TAIL: base, "the MiniLM helper's ranking": helper,
                      "sum of the base's and the helper's cosines": runs["sum"],
                      "RRF(base, helper)": rrf([base, helper], [1, 1]),
                      **{f"RRF(base, BM25) {w}:1": rrf([base, bm], [w, 1]) for w in (1, 2, 4)},
                      **{f"minmax base + {w} * minmax BM25": combsum(base, bm, w) for w in (0.1, 0.2, 0.3, 0.5)}}
        tails[split] = {n: ir_measures_recall(fill_to_depth(runs["fused"], t, 1000, keep=dp.candidates.k), q)
                        for n, t in candidates.items()}
        coverage[split] = {"queries": len(qids), "union": share_with_gold(runs["fused"], q, qids),
                           "union_rows": len(runs["fused"]) / len(qids),
                           **{f"base@{c}": share_with_gold(base[base["rank"] < c], q, qids) for c in (100, 200, 1000)}}
    chosen = choose_tail(tails["tuning"])
    write_results(NAME, {"k": dp.candidates.k, "weights": key, "chosen": chosen, "tails": tails,
                         "coverage": coverage, "run_seconds": seconds, "seconds": time.time() - t0},
                  markdown({"k": dp.candidates.k, "chosen": chosen, "tails": tails, "coverage": coverage,
                            "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
