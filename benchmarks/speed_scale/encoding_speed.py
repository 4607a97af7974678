"""Dense indexing speed: the library (``BookIndex.flex_index``) against a plain ``SentenceTransformer.encode``
loop over the same texts, in fp32 and bf16, plus the forward batch size and the recall cost of bf16.

    .venv/bin/python benchmarks/speed_scale/encoding_speed.py [--repeats 3] [--sweep-docs 400] [--no-ft]

Timing protocol: the other processes on the machine come and go, so the library run (A), the plain loop (B) and
the library path of version 0.2 (pyterrier-dr ``doc_encoder()`` in PyTerrier's 100-document chunks, C, fp32 only) are
interleaved within each repeat (A B C, then C B A, ...), and the ratio of medians is reported with the load
average seen around each run. Both sides use the same loaded model object and the same texts; the library run
includes everything ``flex_index`` does (text assembly, encoding, FlexIndex writes, manifest, atomic rename).
Recall: validation R@5 / R@100 of fp32 and bf16 indexes (MiniLM zero-shot and the recipe's fine-tuned base when
cached), beside the same-run BM25; validation is only evaluated here.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier_dr  # noqa: E402
import torch  # noqa: E402
from ir_measures import RR, R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.index.encoding import ENCODE_BATCH  # noqa: E402
from pyterrier_tot.models import load_biencoder  # noqa: E402

NAME = "encoding_speed"
FIELDS = ("title", "text")
MEASURES = [R @ 5, R @ 10, R @ 20, R @ 100, RR]


def load() -> float:
    return round(os.getloadavg()[0], 2)


def library_run(frame: pd.DataFrame, precision: str, rep: int) -> float:
    path = _common.WORK / f"encoding-{precision}-{rep}"
    shutil.rmtree(path, ignore_errors=True)
    index = ptt.BookIndex(frame, path=path)  # corpus written before the clock starts, as a user's index has it
    t0 = time.perf_counter()
    index.flex_index(precision=precision)
    return time.perf_counter() - t0


def plain_run(model, texts: list, batch_size: int = 32) -> float:
    """sentence-transformers' own defaults (batch 32), as a user's loop would have them."""
    t0 = time.perf_counter()
    model.encode(texts, batch_size=batch_size)
    return time.perf_counter() - t0


def old_library_run(enc, docs: list, rep: int) -> float:
    path = _common.WORK / f"encoding-old-{rep}" / "index.flex"
    shutil.rmtree(path.parent, ignore_errors=True)
    t0 = time.perf_counter()
    (enc.doc_encoder() >> pyterrier_dr.FlexIndex(str(path)).indexer(mode="overwrite")).index(iter(docs))
    return time.perf_counter() - t0


def timing(frame: pd.DataFrame, repeats: int) -> dict:
    index = ptt.BookIndex(frame, path=_common.WORK / "encoding-texts")
    docs = list(index.docs_iter(FIELDS))
    texts = [d["text"] for d in docs]
    runs = {p: {"library": [], "plain": [], "plain_library_batch": [], "old_library": [], "load": []}
            for p in ("fp32", "bf16")}
    for precision in runs:
        load_biencoder(precision=precision).model.encode(texts[:64], batch_size=32)  # warm-up (kernels, caches)
    for rep in range(repeats):
        for precision, r in runs.items():
            enc = load_biencoder(precision=precision)
            steps = [("library", library_run, (frame, precision, rep)), ("plain", plain_run, (enc.model, texts)),
                     ("plain_library_batch", plain_run, (enc.model, texts, ENCODE_BATCH))]
            if precision == "fp32":
                steps.append(("old_library", old_library_run, (enc, docs, rep)))
            for key, fn, fn_args in (steps if rep % 2 == 0 else steps[::-1]):
                before = load()
                r[key].append(round(fn(*fn_args), 2))
                r["load"].append([before, load()])
                print(f"rep {rep} {precision} {key}: {r[key][-1]:.1f} s ({len(texts) / r[key][-1]:.1f} docs/s), "
                      f"load {r['load'][-1]}", flush=True)
    out = {}
    for precision, r in runs.items():
        med = {k: statistics.median(v) for k, v in r.items() if k != "load" and v}
        out[precision] = {**r, "median_s": med, "docs_per_s": {k: round(len(texts) / v, 1) for k, v in med.items()},
                          "ratio_library_to_plain": round(med["library"] / med["plain"], 3),
                          "ratio_library_to_plain_same_batch": round(med["library"] / med["plain_library_batch"], 3)}
        if "old_library" in med:
            out[precision]["ratio_old_library_to_plain"] = round(med["old_library"] / med["plain"], 3)
    out["bf16_speedup_plain"] = round(out["fp32"]["median_s"]["plain"] / out["bf16"]["median_s"]["plain"], 2)
    out["bf16_speedup_library"] = round(out["fp32"]["median_s"]["library"] / out["bf16"]["median_s"]["library"], 2)
    out["n_docs"] = len(texts)
    return out


def sweep(texts: list, repeats: int = 2) -> list:
    """Plain-loop docs/s per forward batch size (length-sorted, as both paths now encode), fp32 and bf16."""
    rows = []
    for precision in ("fp32", "bf16"):
        model = load_biencoder(precision=precision).model
        for rep in range(repeats):
            for bs in (8, 16, 32, 64, 128):
                t = plain_run_bs(model, texts, bs)
                rows.append({"precision": precision, "batch_size": bs, "rep": rep, "s": round(t, 2),
                             "docs_per_s": round(len(texts) / t, 1), "load": load()})
                print(rows[-1], flush=True)
    return rows


def plain_run_bs(model, texts: list, bs: int) -> float:
    t0 = time.perf_counter()
    model.encode(texts, batch_size=bs)
    return time.perf_counter() - t0


def token_lengths(texts: list) -> dict:
    tok = load_biencoder().model.tokenizer
    lens = np.array([len(ids) for ids in tok(texts, add_special_tokens=True)["input_ids"]])
    return {"median": int(np.median(lens)), "p90": int(np.percentile(lens, 90)),
            "share_over_128": round(float((lens > 128).mean()), 3),
            "share_over_256": round(float((lens > 256).mean()), 3), "max_seq_length": 256}


def validation_experiment(ds, use_ft: bool) -> pd.DataFrame:
    index = ptt.BookIndex(ds)
    val, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    systems = {"BM25 (title+text, same run)": index.bm25(),
               "MiniLM zero-shot fp32": index.dense(), "MiniLM zero-shot bf16": index.dense(precision="bf16")}
    ft = recipe.fine_tuned_base(ds, train=False) if use_ft else None
    if ft:
        systems["MiniLM fine-tuned fp32"] = index.dense(ft)
        systems["MiniLM fine-tuned bf16"] = index.dense(ft, precision="bf16")
    return ptt.tot_experiment(list(systems.values()), val, qrels, names=list(systems), measures=MEASURES,
                              baseline=0, round=4)


def markdown(p: dict) -> str:
    t = p["timing"]
    rows, per_rep = [], []
    for precision in ("fp32", "bf16"):
        r = t[precision]
        # A and B of one repeat ran back to back under the same load: the median of their ratios is the
        # figure least moved by the load changing between repeats
        for key in ("plain", "plain_library_batch", "old_library"):
            if r.get(key):
                num, den = (r["library"], r[key]) if key != "old_library" else (r[key], r["plain"])
                ratios = [round(a / b, 3) for a, b in zip(num, den)]
                per_rep.append({"precision": precision, "ratio": "0.2 path / plain" if key == "old_library"
                                else f"library / {key.replace('_library_batch', ' at the library batch')}",
                                "per repeat": ", ".join(f"{x:.2f}" for x in ratios),
                                "median": statistics.median(ratios)})
        rows.append({"precision": precision, "plain loop s (batch 32, median)": r["median_s"]["plain"],
                     "library flex_index s (median)": r["median_s"]["library"],
                     "library / plain": r["ratio_library_to_plain"],
                     f"library / plain at batch {p.get('encode_batch', 32)}":
                         r.get("ratio_library_to_plain_same_batch", ""),
                     "0.2 library path / plain": r.get("ratio_old_library_to_plain", ""),
                     "plain docs/s": r["docs_per_s"]["plain"], "library docs/s": r["docs_per_s"]["library"]})
    rec = pd.DataFrame(p["recall"])
    rec = rec[["name", "R@5", "R@10", "R@20", "R@100", "RR"] + [c for c in rec.columns if c == "R@5 p-value"]]
    sw = pd.DataFrame(p["sweep"]).groupby(["precision", "batch_size"])["docs_per_s"].median().unstack(0)
    sw = sw.reset_index()[["batch_size", "fp32", "bf16"]].astype(object)
    tl = p["token_lengths"]
    lines = [
        "# Encoding speed: library dense indexing vs a plain sentence-transformers loop", "",
        f"Command: `{p['command']}`. all-MiniLM-L6-v2, {t['n_docs']} Reddit-TOMT books (title + text; a "
        "random sample when fewer than the 2,679), "
        f"{p['threads']} torch threads on {p['machine']['cpus']} CPU cores shared with other jobs "
        f"(load average during the runs: {p['load_range'][0]}-{p['load_range'][1]}); {p['repeats']} interleaved "
        "repeats, medians. CPU budget: about " f"{p['total_s'] / 60:.0f} min.", "",
        _common.md_table(pd.DataFrame(rows), "{:.2f}"), "",
        "Ratios within each repeat (A and B back to back) and their median:", "",
        _common.md_table(pd.DataFrame(per_rep), "{:.2f}"), "",
        f"bf16 speed-up over fp32: plain loop {t['bf16_speedup_plain']}x, library {t['bf16_speedup_library']}x. "
        "'plain' is `SentenceTransformer.encode(texts)` with its default batch of 32, as a user would write it; "
        f"the library encodes length-sorted chunks of 4,096 books in forward batches of {p.get('encode_batch', 32)}"
        " (chosen from the batch table below), so the next column compares both at that batch. "
        "'0.2 library path' is the path before this change (pyterrier-dr `doc_encoder()` fed PyTerrier's "
        "100-document chunks), timed in the same repeats.", "",
        "## Validation recall, fp32 vs bf16 (same-run BM25 first; p = paired t-test against it)", "",
        _common.md_table(rec.astype(object).where(rec.notna(), "")), "",
        f"## Forward batch size (plain loop, {p['sweep_docs']} books sampled, length-sorted, docs/s, median of 2)",
        "", _common.md_table(sw, "{:.1f}"), "",
        f"Token lengths of the books (MiniLM tokenizer): median {tl['median']}, 90th percentile {tl['p90']}; "
        f"{tl['share_over_128']:.1%} exceed 128 tokens and {tl['share_over_256']:.1%} exceed the model's "
        f"max_seq_length of 256 (kept: cutting to 128 would drop text from {tl['share_over_128']:.0%} of books).",
        ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep-docs", type=int, default=200)
    ap.add_argument("--no-ft", action="store_true")
    ap.add_argument("--timing-docs", type=int, default=400, help="books sampled (random_state=0) for the timed "
                    "runs; 0: all of them")
    ap.add_argument("--render", action="store_true", help="only re-write the markdown from the JSON")
    ap.add_argument("--out", default=NAME, help="results name (benchmarks/speed_scale/results/<out>.json/.md)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, one per core)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.render:
        _common.rerender(args.out, markdown)
        return
    t_start = time.time()
    ds = ptt.get_dataset("reddit-tomt-books")
    frame = ptt.BookIndex(ds).corpus
    if args.timing_docs and args.timing_docs < len(frame):  # the shared cores make full-corpus repeats too slow
        frame = frame.sample(args.timing_docs, random_state=0).reset_index(drop=True)
    texts = ptt.BookIndex(frame, path=_common.WORK / "encoding-texts").field_text(FIELDS)
    payload = {"command": "python benchmarks/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               "threads": torch.get_num_threads(), "repeats": args.repeats, "sweep_docs": args.sweep_docs,
               "encode_batch": ENCODE_BATCH}
    payload["token_lengths"] = token_lengths(ptt.BookIndex(ds).field_text(FIELDS).tolist())  # the whole corpus
    payload["timing"] = timing(frame, args.repeats)
    payload["sweep"] = sweep(texts.sample(min(args.sweep_docs, len(texts)), random_state=0).tolist())
    table = validation_experiment(ds, not args.no_ft)
    print(table.to_string(index=False))
    payload["recall"] = table.to_dict("records")
    loads = [x for p in ("fp32", "bf16") for pair in payload["timing"][p]["load"] for x in pair]
    payload["load_range"] = [min(loads), max(loads)]
    payload["total_s"] = round(time.time() - t_start, 1)
    payload["machine"] = _common.machine()
    _common.write_results(args.out, payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
