"""Encoding on Ray: books per second of the single-process MiniLM build against the same build on a local Ray
cluster with one and two actors, in one run, and what that makes of TREC ToT's 6.4M pages.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/speed_scale/ray_encoding.py [--books 2679] [--block 256]
    .venv/bin/python benchmarks/speed_scale/ray_encoding.py --cpus 16 --gpus 1     # on a GPU machine: a GPU row too

Each row builds the dense index (MiniLM, fp32, title + text) of the first ``--books`` Reddit-TOMT books into a
fresh folder, timed from the call to the index on disk: for Ray that includes starting the actors and shipping
the model to them (what every build pays), not starting the cluster (timed once, in its own row). The cluster is
local, ``ray.init(num_cpus=2)`` on this 2-core machine. Every Ray build's vectors are compared with the
single-process ones. Ray blocks are ``--block`` books (the library's default, 4,096, would give one block to the
whole corpus here). The pages-per-second column rescales the rate to a 256-token page (MiniLM's limit, which
nearly every Wikipedia page reaches), assuming the cost per book grows with its tokens.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402

NAME = "ray_encoding"
PAGES = 6_407_814  # TREC ToT 2025's corpus
PAGE_TOKENS = 256  # MiniLM's max_seq_length: a longer page is cut there


def build(books: pd.DataFrame, workers) -> tuple:
    """(seconds, vectors) of one fresh build of the MiniLM index of ``books``."""
    with tempfile.TemporaryDirectory(dir=_common.WORK) as tmp:
        index = ptt.BookIndex(books, path=Path(tmp) / "index")
        t0 = time.perf_counter()
        flex = index.flex_index("minilm", workers=workers)
        seconds = time.perf_counter() - t0
        return seconds, np.array(flex.payload()[1])


def markdown(payload: dict) -> str:
    rows = pd.DataFrame(payload["rows"])
    table = rows[["build", "seconds", "books_per_s", "pages_per_s", "speed_vs_single", "max_abs_diff",
                  "load_before", "load_after"]].assign(max_abs_diff=[f"{v:.1e}" for v in rows["max_abs_diff"]])
    per_cpu = payload["ray_2_workers_pages_per_s"] / 2
    by = {r["build"]: r for r in payload["rows"]}
    scaling = by["Ray, 1 actor x 1 CPU"]["seconds"] / by["Ray, 2 actors x 1 CPU"]["seconds"]
    lines = [
        "# Encoding on Ray: single process vs a local Ray cluster (MiniLM, fp32)",
        "",
        f"`benchmarks/speed_scale/ray_encoding.py`: the first {payload['books']} Reddit-TOMT books (title + text, "
        f"{payload['mean_tokens']:.0f} MiniLM tokens a book on average), Ray blocks of {payload['block']} books, "
        f"a local cluster `ray.init(num_cpus={payload.get('cpus', 2)}, num_gpus={payload.get('gpus', 0)})` "
        f"(started in {payload['ray_init_s']:.1f} s, not counted below). "
        "Seconds from the call to the index on disk; Ray's include starting the actors and shipping the model. "
        "pages/s: the rate rescaled to 256-token pages (cost taken as proportional to tokens). max_abs_diff: "
        "the largest difference of a vector component from the single-process build. load: the 1-minute load "
        "average before and after (other jobs share these two cores).",
        "",
        _common.md_table(table, "{:.2f}"),
        "",
        f"Two actors against one: {scaling:.2f}x. Per CPU: {per_cpu:.1f} pages/s with two one-CPU actors. "
        f"At that rate 6,407,814 pages take "
        f"{PAGES / per_cpu / 3600:.0f} CPU-hours: {PAGES / per_cpu / 3600 / 32:.1f} h on 32 CPUs "
        f"(e.g. two 16-core nodes), {PAGES / per_cpu / 3600 / 128:.1f} h on 128.",
        "",
        _common.trailer(payload["seconds"], NAME),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--books", type=int, default=2679)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local cluster")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs of the local cluster: adds a row of one actor per GPU")
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:
        return
    import ray

    started = time.perf_counter()
    _common.WORK.mkdir(parents=True, exist_ok=True)
    ds = ptt.get_dataset("reddit-tomt-books")
    books = ptt.BookIndex(ds).corpus.head(args.books).reset_index(drop=True)
    enc = ptt.load_biencoder("minilm")
    texts = (books["title"].astype(str) + "\n" + books["text"].astype(str)).str.strip().tolist()
    tokens = [min(len(ids), PAGE_TOKENS) for ids in enc.model.tokenizer(texts)["input_ids"]]
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, num_gpus=args.gpus, include_dashboard=False,
             logging_level="WARNING")
    ray_init_s = time.perf_counter() - t0
    builds = [("single process (torch, 2 threads)", 1), ("Ray, 1 actor x 1 CPU", ptt.RayWorkers(1, block=args.block)),
              ("Ray, 2 actors x 1 CPU", ptt.RayWorkers(2, block=args.block)),
              ("Ray, 1 actor x 2 CPUs", ptt.RayWorkers(1, cpus=2, block=args.block))]
    if args.gpus:
        builds.append((f"Ray, {args.gpus} actors x 1 GPU", ptt.RayWorkers(args.gpus, gpus=1, block=args.block)))
    rows, reference = [], None
    try:
        for name, workers in builds:
            load_before = round(os.getloadavg()[0], 2)
            seconds, vectors = build(books, workers)
            reference = vectors if reference is None else reference
            rate = len(books) / seconds
            rows.append({"build": name, "seconds": round(seconds, 1), "books_per_s": round(rate, 1),
                         "pages_per_s": round(rate * np.mean(tokens) / PAGE_TOKENS, 1),
                         "max_abs_diff": float(np.abs(vectors - reference).max()),
                         "load_before": load_before, "load_after": round(os.getloadavg()[0], 2)})
            print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    for row in rows:
        row["speed_vs_single"] = round(rows[0]["seconds"] / row["seconds"], 2)
    two = next(r for r in rows if r["build"] == "Ray, 2 actors x 1 CPU")
    payload = {"books": len(books), "block": args.block, "cpus": args.cpus, "gpus": args.gpus,
               "mean_tokens": float(np.mean(tokens)), "ray_init_s": round(ray_init_s, 1), "rows": rows,
               "ray_2_workers_pages_per_s": two["pages_per_s"], "ray": ray.__version__,
               "seconds": round(time.perf_counter() - started, 1)}
    _common.write_results(NAME, payload, markdown(payload))


if __name__ == "__main__":
    main()
