"""The decomposition paper's query-rewriting baselines on Reddit-TOMT (Books) validation, with the local LLM.

    python benchmarks/llm_stages/rewriting_baselines.py [--gguf PATH] [--label NAME] [--limit N]
    # writes benchmarks/llm_stages/results/rewriting_baselines.{json,md}

Rows, each over BM25 (PISA, title + text) and dense MiniLM (title + text), beside the same-run baseline of the full
query: Q (one LLM rewrite, ``LLMQueryRewriter``), H (a hypothetical catalogue description, ``HyDE``, both "replace" and
"append"), E and P (the concatenated extractive / predictive clues of
``benchmarks/llm_stages/results/clues_validation_<method>.jsonl``, written by
``benchmarks/llm_stages/decomposition.py``) and the rule clues concatenated. p-values: paired t-test on per-query RR
against the full query (pt.Experiment baseline=0).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from ir_measures import RR, R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.decomposition.pipeline import ClueLookup  # noqa: E402
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor  # noqa: E402
from pyterrier_tot.llm.llama_server import LlamaServer  # noqa: E402
from pyterrier_tot.query.rewriters import ClueConcatenator, HyDE, LLMQueryRewriter  # noqa: E402
from pyterrier_tot.recipe.expert_training import load_clue_cache  # noqa: E402

MEASURES = [R @ 5, R @ 10, R @ 100, RR]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--label", default="SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--cache", default=None, help="LLM cache file (default: a fresh temporary file)")
    args = ap.parse_args()

    ds = ptt.get_dataset("reddit-tomt-books")
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    if args.limit:
        topics = topics.head(args.limit)
        qrels = qrels[qrels["qid"].isin(topics["qid"])]
    index = ptt.BookIndex(ds)
    retrievers = {"BM25": index.bm25(), "Dense MiniLM": index.dense()}

    queries = {"full query (baseline)": topics}
    cost = {}
    cache = args.cache or str(Path(tempfile.mkdtemp()) / "llm_cache.sqlite3")
    with LlamaServer(args.gguf) as server:
        llm = server.llm(cache=cache, max_tokens=200)
        for name, rw in (("Q: LLM rewrite", LLMQueryRewriter(llm)), ("H: HyDE (replace)", HyDE(llm))):
            llm.reset_usage()
            t0 = time.perf_counter()
            queries[name] = rw(topics)
            u = llm.usage
            cost[name] = {"requests/q": u.requests / len(topics),
                          "seconds/q": round((time.perf_counter() - t0) / len(topics), 3),
                          "tokens/q": round((u.prompt_tokens + u.completion_tokens) / len(topics), 1),
                          "failed (kept original)": rw.failures}
            print(name, cost[name], flush=True)
    # HyDE "append" re-uses the same generated text (the cache answers it)
    hy = queries["H: HyDE (replace)"]
    queries["H: HyDE (append to query)"] = hy.assign(query=hy["query_0"] + "\n" + hy["query"])
    for method, label in (("extractive", "E"), ("predictive", "P")):
        path = _common.results_dir() / f"clues_validation_{method}.jsonl"
        if path.exists():
            clues = ClueLookup(load_clue_cache(path), label=method)(topics)
            queries[f"{label}: concatenated {method} clues"] = ClueConcatenator()(clues)
    queries["rules: concatenated rule clues"] = ClueConcatenator()(RuleClueExtractor()(topics))

    rows = []
    for rname, retr in retrievers.items():
        systems = [pt.Transformer.from_df(retr(q[["qid", "query"]]), uniform=True) for q in queries.values()]
        res = pt.Experiment(systems, topics, qrels, MEASURES, names=list(queries), baseline=0,
                            correction=None)
        for _, r in res.iterrows():
            rows.append({"retriever": rname, "query": r["name"], "R@5": round(r["R@5"], 3),
                         "R@10": round(r["R@10"], 3), "R@100": round(r["R@100"], 3), "RR": round(r["RR"], 3),
                         "RR p-value": "" if pd.isna(r.get("RR p-value")) else round(float(r["RR p-value"]), 3)})
    table = pd.DataFrame(rows)
    print(table.to_string())
    fallbacks = {n: int((q["query"] == q.get("query_0", q["query"])).sum())
                 for n, q in queries.items() if "query_0" in q}
    payload = {"llm": args.label, "queries": len(topics), "cost": cost, "rows": rows,
               "unchanged_queries": fallbacks}
    md = ["# Query-rewriting baselines (decomposition paper) on Reddit-TOMT (Books) validation\n",
          f"{len(topics)} validation queries, corpus {len(index)} books. LLM: {args.label} on llama.cpp "
          "(`LlamaServer`), temperature 0. Q = one LLM rewrite, H = hypothetical catalogue description (HyDE), "
          "E / P = concatenated extractive / predictive clues (joint strategy, from `clues_validation_*.jsonl`), "
          "rules = concatenated `RuleClueExtractor` clues. p-values: paired t-test on RR against the full query "
          "(same run).\n", _common.md_table(table), "",
          "LLM cost: " + "; ".join(f"{k}: {v}" for k, v in cost.items()), "",
          f"Queries left unchanged (rewrite failed or all clues N/A): {fallbacks}", ""]
    _common.write_results("rewriting_baselines", payload, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
