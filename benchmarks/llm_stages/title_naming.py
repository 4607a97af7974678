"""LLM title naming and listwise reranking on Reddit-TOMT (Books) validation, with the local LLM.

    python benchmarks/llm_stages/title_naming.py [--limit 50] [--gguf PATH] [--label NAME]
    # writes benchmarks/llm_stages/results/title_naming.{json,md}

Systems, all on the same queries in one run: BM25 (title + text, the baseline of the p-values); the best pipeline
(``ptt.tuned_pipeline(ds, base="minilm")`` when its fine-tuned base is cached, else RRF of BM25 and zero-shot
dense MiniLM);
``TitleNamer`` alone; the best pipeline and the namer fused by reciprocal rank (``pyterrier_alpha.fusion``); and
``ListwiseReranker`` (window 10, step 5) on the fused top 20. Each system runs once (timed); the metrics come from
``ptt.tot_experiment`` over the saved runs. The LLM answers are cached in ``benchmarks/.work`` so a rerun resumes.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pyterrier as pt  # noqa: E402
import pyterrier_alpha as pta  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.llm.llama_server import LlamaServer  # noqa: E402
from pyterrier_tot.recipe import fine_tuned_base, tuned_pipeline  # noqa: E402
from pyterrier_tot.rerank.listwise_reranker import ListwiseReranker  # noqa: E402
from pyterrier_tot.submission.title_namer import TitleNamer  # noqa: E402

BEST_TUNED = "tuned decomposition pipeline (fine-tuned base)"
BEST_HYBRID = "RRF(BM25, dense MiniLM zero-shot)"


def best_pipeline(ds, index):
    """The tuned decomposition pipeline when its fine-tuned base is cached (no training here), else BM25 + dense."""
    if fine_tuned_base(ds, train=False, verbose=False):
        return BEST_TUNED, tuned_pipeline(ds, index, train=False, verbose=False, base="minilm")
    return BEST_HYBRID, pta.fusion.RRFusion(index.bm25(), index.dense())


def timed(name, stage, inp, costs, llm=None):
    if llm is not None:
        llm.reset_usage()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ptt.NoResultsWarning)
        run = stage(inp)
    seconds = time.perf_counter() - t0
    n = inp["qid"].nunique()
    costs[name] = {"seconds/q": round(seconds / n, 3)}
    if llm is not None:
        u = llm.usage
        costs[name].update({"LLM requests/q": round(u.requests / n, 2), "LLM failures": u.failures,
                            "tokens/q": round((u.prompt_tokens + u.completion_tokens) / n, 1)})
    print(name, costs[name], flush=True)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=20, help="first N validation queries (0 = all 233)")
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--label", default="SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--num-titles", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads (1: its spinning threads crawl when another job holds a core)")
    args = ap.parse_args()

    ds = ptt.get_dataset("reddit-tomt-books")
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    if args.limit:
        topics = topics.head(args.limit)
    qrels = qrels[qrels["qid"].isin(topics["qid"])]
    index = ptt.BookIndex(ds)
    best_name, best = best_pipeline(ds, index)
    costs, runs = {}, {}
    runs["BM25 (baseline)"] = timed("BM25 (baseline)", index.bm25(), topics, costs)
    runs[best_name] = timed(best_name, best, topics, costs)
    _common.WORK.mkdir(parents=True, exist_ok=True)
    with LlamaServer(args.gguf, n_threads=args.threads) as server:
        llm = server.llm(cache=str(_common.WORK / "title_naming_llm.sqlite3"), timeout=300)
        namer = TitleNamer(llm, index, num_titles=args.num_titles)
        runs["TitleNamer"] = timed("TitleNamer", namer, topics, costs, llm)
        fused_name = f"RRF({best_name}, TitleNamer)"
        runs[fused_name] = pta.fusion.rr_fusion(runs[best_name], runs["TitleNamer"])
        reranker = ListwiseReranker(llm, index, k=20, window=10, step=5, max_chars=200)
        rr_name = f"{fused_name} >> ListwiseReranker(top 20)"
        runs[rr_name] = timed(rr_name, reranker, runs[fused_name], costs, llm)
    counters = {"titles named": namer.named, "names mapped to no book": namer.unmatched,
                "queries with no mapped title": namer.empty_results, "namer LLM failures": namer.failures,
                "listwise windows": reranker.windows, "windows repaired": reranker.repaired,
                "window LLM failures": reranker.failures}
    print(counters)

    systems = [pt.Transformer.from_df(run, uniform=True) for run in runs.values()]
    table = ptt.tot_experiment(systems, topics, qrels, names=list(runs), baseline=0, correction=None,
                               round=3)
    keep = ["name", "R@1", "R@5", "R@10", "R@20", "R@100", "RR", "nDCG@10", "RR p-value"]
    table = table[[c for c in keep if c in table.columns]]
    print(table.to_string())
    rows = table.astype(object).where(table.notna(), "").to_dict("records")
    payload = {"llm": args.label, "queries": len(topics), "subset": f"first {len(topics)} validation queries",
               "best_pipeline": best_name, "costs": costs, "counters": counters, "rows": rows,
               "settings": {"num_titles": args.num_titles, "llama_threads": args.threads,
                            "min_similarity": namer.min_similarity,
                            "listwise": {"k": 20, "window": 10, "step": 5, "max_chars": 200}}}
    md = ["# LLM title naming and listwise reranking on Reddit-TOMT (Books) validation\n",
          f"The first {len(topics)} of the 233 validation queries (a fixed subset: the local LLM on two shared cores "
          f"is slow), corpus {len(index)} books. LLM: {args.label} on llama.cpp (`LlamaServer`), temperature 0. "
          f"Best pipeline: {best_name}. Fusion: reciprocal rank (k=60). p-values: paired t-test on RR against "
          "BM25 (same run).\n", _common.md_table(table), "",
          "Cost per query: " + "; ".join(f"{k}: {v}" for k, v in costs.items()), "",
          "Counters: " + "; ".join(f"{k}: {v}" for k, v in counters.items()), ""]
    _common.write_results("title_naming", payload, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
