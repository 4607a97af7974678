"""Latency: ms per query for each stage and end to end for the best offline pipeline (no LLM at query time), and
indexing docs/s, each beside its reference from the same run (BM25 for queries, a plain sentence-transformers
``encode`` loop for dense indexing).

    .venv/bin/python benchmarks/speed_scale/latency.py [--queries 100] [--stages bm25,dense,dense-bf16,ft,pipeline]
                                           [--cross-encoder PATH [--ce-k 100]] [--index-docs 500]

Queries are run one at a time (an interactive user's latency), the stages round-robin per query so that the load
of the shared machine falls on all of them alike; each stage is warmed up first (models loaded, indexes opened).
The recipe pipeline (:func:`pyterrier_tot.recipe.tuned_pipeline`: rule clues, fine-tuned base
retriever, experts, weights fitted on the tuning slice of train) is also broken into its parts (decomposer,
candidate union, experts + fuser). ``--stages`` picks and orders stages; a new stage is one entry in ``STAGES``.
``--cross-encoder PATH`` appends "pipeline >> cross-encoder on the top ``--ce-k``" (a model trained by
:mod:`pyterrier_tot.rerank.cross_encoder`).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Tuple

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import encoding_speed  # noqa: E402  (the same library-vs-plain indexing runs)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.models import forget_queries, load_biencoder  # noqa: E402

NAME = "latency"


class Ctx:
    """What the stage builders share: the dataset, its index, the fine-tuned base, the recipe pipeline."""

    def __init__(self, args):
        self.args = args
        self.ds = ptt.get_dataset("reddit-tomt-books")
        self.index = ptt.BookIndex(self.ds)
        self._ft, self._pipe = False, None

    @property
    def ft(self):
        if self._ft is False:
            self._ft = recipe.fine_tuned_base(self.ds, train=False)
        return self._ft

    @property
    def pipeline(self):
        if self._pipe is None:
            self._pipe = recipe.tuned_pipeline(self.ds, self.index, fine_tuned=self.ft or None, train=False,
                                               verbose=False)
        return self._pipe


def _cross_encoder(ctx: Ctx):
    from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker

    k = ctx.args.ce_k
    return ctx.pipeline % k >> CrossEncoderReranker(ctx.args.cross_encoder, ctx.index, k=k)


#: name -> (what it is, builder). Part stages (``pipeline:...``) time one part of the pipeline on the output of
#: the parts before it, so they sum to about the end-to-end time.
STAGES: Dict[str, Tuple[str, Callable[[Ctx], object]]] = {
    "bm25": ("BM25 (PISA, title+text): the reference", lambda c: c.index.bm25()),
    "dense": ("Dense MiniLM zero-shot, fp32 (query encoding + exact search)", lambda c: c.index.dense()),
    "dense-bf16": ("Dense MiniLM zero-shot, bf16", lambda c: c.index.dense(precision="bf16")),
    "ft": ("Dense MiniLM fine-tuned (the pipeline's base), fp32", lambda c: c.index.dense(c.ft) if c.ft else None),
    "ft-bf16": ("Dense MiniLM fine-tuned, bf16",
                lambda c: c.index.dense(c.ft, precision="bf16") if c.ft else None),
    "pipeline": ("Recipe pipeline end to end (rule clues >> candidates >> experts + fuser)", lambda c: c.pipeline),
    "cross-encoder": ("Recipe pipeline >> cross-encoder on the top k", _cross_encoder),
}
PARTS = {"decomposer": "rule clue extraction", "candidates": "candidate union: base retriever + expert retrievals",
         "fuser": "experts score the candidates, weighted fusion"}
DEFAULT_STAGES = "bm25,dense,dense-bf16,ft,ft-bf16,pipeline"


def query_latency(systems: Dict[str, object], topics: pd.DataFrame, parts_of=None) -> pd.DataFrame:
    """ms per query (one query per call), stages round-robin per query; ``parts_of``: a DecompositionPipeline
    whose parts are timed too (each on its predecessors' output)."""
    times = {n: [] for n in systems}
    if parts_of is not None:
        times.update({f"pipeline: {p}": [] for p in PARTS})
    for system in systems.values():  # warm-up: models, indexes, caches
        system(topics.head(2))
    for i in range(len(topics)):
        q = topics.iloc[[i]]
        for name, system in systems.items():
            forget_queries()  # each stage meets the query as new (the bi-encoders remember query vectors)
            t0 = time.perf_counter()
            system(q)
            times[name].append(1000 * (time.perf_counter() - t0))
        if parts_of is not None:
            x = q
            forget_queries()
            for part in PARTS:
                stage = getattr(parts_of, part)
                t0 = time.perf_counter()
                x = stage(x)
                times[f"pipeline: {part}"].append(1000 * (time.perf_counter() - t0))
    rows = []
    for name, ms in times.items():
        rows.append({"stage": name, "queries": len(ms), "median ms": round(statistics.median(ms), 1),
                     "p95 ms": round(float(np.percentile(ms, 95)), 1), "mean ms": round(float(np.mean(ms)), 1)})
    table = pd.DataFrame(rows)
    ref = table.loc[table["stage"] == "bm25", "median ms"]
    table["x BM25 (median)"] = (table["median ms"] / float(ref.iloc[0])).round(1) if len(ref) else np.nan
    return table


def indexing(index, n_docs: int) -> pd.DataFrame:
    """docs/s: PISA BM25 over the whole corpus; dense (fp32, bf16) library vs plain loop on ``n_docs`` books,
    interleaved (library, plain, plain, library)."""
    rows = []
    frame = index.corpus.sample(min(n_docs, len(index)), random_state=0).reset_index(drop=True)
    sample = ptt.BookIndex(frame, path=_common.WORK / "latency-texts")
    texts = sample.field_text(encoding_speed.FIELDS).tolist()
    shutil.rmtree(_common.WORK / "latency-bm25", ignore_errors=True)  # a fresh build, not the last run's
    pisa = ptt.BookIndex(index.corpus, path=_common.WORK / "latency-bm25")
    t0 = time.perf_counter()
    pisa.bm25()
    dt = time.perf_counter() - t0
    rows.append({"indexer": "BM25 (PISA), whole corpus", "docs": len(index), "s": round(dt, 2),
                 "docs/s": round(len(index) / dt, 1), "reference": "", "reference docs/s": ""})
    for precision in ("fp32", "bf16"):
        enc = load_biencoder(precision=precision)
        enc.model.encode(texts[:32], batch_size=32)  # warm-up
        lib, plain = [], []
        for rep in range(2):
            order = [("lib", rep), ("plain", rep)] if rep == 0 else [("plain", rep), ("lib", rep)]
            for kind, r in order:
                if kind == "lib":
                    lib.append(encoding_speed.library_run(frame, precision, 100 + r))
                else:
                    plain.append(encoding_speed.plain_run(enc.model, texts))
        lib_s, plain_s = statistics.median(lib), statistics.median(plain)
        rows.append({"indexer": f"dense MiniLM {precision} (library flex_index)", "docs": len(texts),
                     "s": round(lib_s, 2), "docs/s": round(len(texts) / lib_s, 1),
                     "reference": "plain SentenceTransformer.encode loop", "reference docs/s":
                     round(len(texts) / plain_s, 1)})
    return pd.DataFrame(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=100, help="validation queries timed (the first N)")
    ap.add_argument("--stages", default=DEFAULT_STAGES, help=f"comma-separated, from {list(STAGES)}")
    ap.add_argument("--cross-encoder", default=None, help="a trained cross-encoder folder: adds that stage")
    ap.add_argument("--ce-k", type=int, default=100)
    ap.add_argument("--index-docs", type=int, default=500, help="books encoded for the dense indexing rows")
    ap.add_argument("--no-indexing", action="store_true")
    ap.add_argument("--render", action="store_true", help="only re-write the markdown from the JSON")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a machine shared with other jobs, 2 spinning threads per "
                    "process were 6-8x slower per query than 1)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.render:
        _common.rerender(NAME, markdown)
        return
    names = [s.strip() for s in args.stages.split(",") if s.strip()]
    if args.cross_encoder and "cross-encoder" not in names:
        names.append("cross-encoder")
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        ap.error(f"unknown stage(s) {unknown}; known: {list(STAGES)}")
    if "bm25" not in names:
        names.insert(0, "bm25")  # the same-run reference is always there
    t_start = time.time()
    ctx = Ctx(args)
    topics = ctx.ds.get_topics("validation").head(args.queries)
    systems, skipped = {}, []
    for n in names:
        system = STAGES[n][1](ctx)
        if system is None:
            skipped.append(n)
        else:
            systems[n] = system
    pipe = systems.get("pipeline")
    table = query_latency(systems, topics, parts_of=pipe)
    print(table.to_string(index=False))
    idx = None if args.no_indexing else indexing(ctx.index, args.index_docs)
    if idx is not None:
        print(idx.to_string(index=False))
    payload = {"command": "python benchmarks/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               "threads": torch.get_num_threads(), "queries": len(topics), "skipped": skipped,
               "pipeline": repr(pipe) if pipe is not None else None, "fine_tuned": ctx._ft or None,
               "latency": table.to_dict("records"), "indexing": None if idx is None else idx.to_dict("records"),
               "load_average_end": encoding_speed.load(), "total_s": round(time.time() - t_start, 1),
               "cpus": _common.machine()["cpus"]}
    _common.write_results(NAME, payload, markdown(payload))
    print(markdown(payload))


def _what(stage: str) -> str:
    if stage in STAGES:
        return STAGES[stage][0]
    return "part: " + PARTS.get(stage.split(": ", 1)[-1], stage)


def markdown(payload: dict) -> str:
    table = pd.DataFrame(payload["latency"]).drop(columns=["what"], errors="ignore")
    table.insert(1, "what", table["stage"].map(_what))
    idx = None if payload["indexing"] is None else pd.DataFrame(payload["indexing"])
    topics, skipped = range(payload["queries"]), payload["skipped"]
    md = ["# Latency per query and indexing throughput", "",
          f"Command: `{payload['command']}`. {len(topics)} Reddit-TOMT validation queries, one per call, "
          f"stages round-robin per query after a warm-up; {payload['threads']} torch threads on "
          f"{payload.get('cpus', 2)} CPU cores shared with other jobs (load average at the end: "
          f"{payload['load_average_end']}). CPU budget: about {payload['total_s'] / 60:.0f} min. "
          "BM25 is the same-run reference of every query row; the plain sentence-transformers loop that of every "
          "dense indexing row.", "", _common.md_table(table, "{:.1f}"), ""]
    if skipped:
        md += [f"Skipped (not available here): {', '.join(skipped)}.", ""]
    if idx is not None:
        md += ["## Indexing", "", _common.md_table(idx, "{:.1f}"), ""]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    main()
