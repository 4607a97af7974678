"""The query memo of loaded bi-encoders (``models.QueryMemo``): an ablation of the decomposition pipeline (all
experts, then one ``without(name)`` per expert) evaluated with the memo off and on, same run, same queries.

    python benchmarks/speed_scale/query_memo.py --queries 50

Off runs first (each variant encodes its queries again, as before the memo); on starts from an empty memo, so its
first variant pays for the encoding once and the others reuse it. The two tables must be identical.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.models import loading as models  # noqa: E402

MEASURES = ["R@5", "R@10", "R@100", "RR"]


def _memos():
    return list(models._MEMOS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    topics = ds.get_topics("validation").sample(n=args.queries, random_state=0).reset_index(drop=True)
    qrels = ds.get_qrels("validation")
    decomp = ptt.decomposition_pipeline(index, ptt.RuleClueExtractor())
    systems = {"Decomposition (all experts)": decomp,
               **{f"without {name}": decomp.without(name) for name in decomp.experts}}
    decomp(topics.head(2))  # warm-up: models loaded, indexes opened (not timed)
    rows, tables = [], {}
    for memo_on in (False, True):
        models.forget_queries()
        for m in _memos():
            m.size = models.QUERY_MEMO if memo_on else 0
        t0 = time.perf_counter()
        table = ptt.tot_experiment(list(systems.values()), topics, qrels, names=list(systems), measures=MEASURES,
                                   round=None)
        secs = time.perf_counter() - t0
        hits, misses = sum(m.hits for m in _memos()), sum(m.misses for m in _memos())
        tables["on" if memo_on else "off"] = table
        rows.append({"memo": "on" if memo_on else "off", "systems": len(systems), "queries": len(topics),
                     "seconds": round(secs, 1), "s_per_query_per_system": round(secs / len(topics) / len(systems), 3),
                     "texts_encoded": misses if memo_on else None, "texts_reused": hits if memo_on else None})
        print(rows[-1], flush=True)
    diff = (tables["on"][MEASURES] - tables["off"][MEASURES]).abs().to_numpy().max()
    speedup = rows[0]["seconds"] / rows[1]["seconds"]
    payload = {"queries": len(topics), "systems": list(systems), "rows": rows, "speedup": round(speedup, 2),
               "max_measure_difference": float(diff), "table_on": tables["on"].to_dict("records")}
    md = ["# Query memo: an ablation with the memo off and on (same run)", "",
          f"{len(topics)} Reddit-TOMT validation queries (seeded sample); the decomposition pipeline with "
          f"equal weights and each of its {len(systems) - 1} experts removed once ({len(systems)} systems in one "
          f"`pt.Experiment`). Off first, then on from an empty memo. Speed-up **{speedup:.2f}x**; largest "
          f"difference of any measure between the two tables: {diff:.2g}.", "",
          _common.md_table(pd.DataFrame(rows).astype(object).fillna("")), "",
          _common.md_table(tables["on"][["name", *MEASURES]]), ""]
    _common.write_results("query_memo", payload, "\n".join(md))


if __name__ == "__main__":
    main()
