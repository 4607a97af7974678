"""llama.cpp threads: seconds per joint extractive clue decomposition (SmolLM2-135M, ``LlamaServer``) with
``n_threads`` 1 and 2, on the machine as found and with one extra CPU-burning process, to pick
``LlamaServer``'s default thread count.

    .venv/bin/python benchmarks/speed_scale/llama_threads.py [--queries 6] [--budget 45]

Each of the four runs starts its own server and decomposes the first validation queries one at a time (no cache)
for ``--budget`` seconds; a request not answered within what is left of the budget ends the run.
The load average is recorded before and after each run; the burner is a ``python -c "while True: pass"`` started
before the busy runs and killed after them.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402

NAME = "llama_threads"


def one_run(topics: pd.DataFrame, threads: int, budget: float) -> dict:
    """Decompositions one at a time for ``budget`` seconds: each request may take what is left of the budget, and
    one that gets no answer in that time ends the run (the server would still be busy with it)."""
    load_before = round(os.getloadavg()[0], 2)
    times, timed_out = [], False
    with ptt.LlamaServer(n_threads=threads, n_ctx=2048) as server:
        t_start = time.perf_counter()
        for i in range(len(topics)):
            left = budget - (time.perf_counter() - t_start)
            if left < 1:
                break
            llm = server.llm(cache=False, verbose=False, timeout=left, max_retries=0)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a timed-out request is reported below
                ptt.ClueDecomposer(llm, mode="extractive", strategy="joint")(topics.iloc[[i]])
            if llm.usage.failures:
                timed_out = True
                break
            times.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - t_start
    return {"threads": threads, "decompositions": len(times), "seconds": round(elapsed, 1),
            "s_median": round(statistics.median(times), 2) if times else None,
            "per_minute": round(60 * len(times) / elapsed, 1), "timed_out": timed_out,
            "load_before": load_before, "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--budget", type=float, default=55.0, help="seconds per run")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its servers and burner
    topics = ptt.get_dataset("reddit-tomt-books").get_topics("validation").head(args.queries)
    rows, t0 = [], time.perf_counter()
    for state in ("as found", "+1 spinning process"):
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if state != "as found" else None
        try:
            time.sleep(2 if burner else 0)
            for threads in (1, 2):
                rows.append({"machine": state, **one_run(topics, threads, args.budget)})
                print(rows[-1], flush=True)
        finally:
            if burner is not None:
                burner.kill()
                burner.wait()
    table = pd.DataFrame(rows)
    md = (f"# llama.cpp threads: SmolLM2-135M joint extractive decomposition\n\n"
          f"`{' '.join(['python', 'benchmarks/speed_scale/llama_threads.py'] + sys.argv[1:])}`, {os.cpu_count()} CPUs, "
          f"{_common.machine()['date']}, {time.perf_counter() - t0:.0f} s in all. \"+1 spinning process\" adds a "
          "`python -c \"while True: pass\"`; the load average (1 min) before and after each run shows what else "
          "ran (the machine is shared). One request per decomposition, no cache; `s_median`: seconds per "
          "decomposition, "
          "`per_minute`: decompositions finished per minute of the run; `timed_out`: the last request got no "
          f"answer within the run's {args.budget:g} s.\n\n"
          + _common.md_table(table, "{:.2f}") + "\n")
    _common.write_results(NAME, {"args": vars(args), "runs": rows}, md)


if __name__ == "__main__":
    main()
