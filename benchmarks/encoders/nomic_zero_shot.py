"""Zero-shot nomic-embed-text-v1.5 beside mpnet and MiniLM on Reddit-TOMT (Books): dense retrieval alone, the
training-free pipeline on each base, the cost of encoding the books in fp32 and bf16, and Matryoshka vectors cut to
512 and 256 dimensions.

- Dense rows: ``index.dense(model)`` over title + text, validation (233 requests; reported, never used to choose),
  nomic in fp32 and bf16 (its prompts ``search_query: `` / ``search_document: ``, 512 tokens), mpnet (384 tokens) and
  MiniLM (256), same run; p: paired t-test against mpnet.
- Training-free pipeline: ``ptt.training_free_pipeline(index, base=...)`` for mpnet (today's default) and nomic.
  Its own rule (``benchmarks/recipe/transfer.py``), written before the run: the base of the training-free pipeline
  is the one whose pipeline has the highest recipe objective (the mean of R@1, R@5, R@10, R@20, R@100 and MRR) on
  Reddit-TOMT's tuning slice (300 training requests). Validation is reported beside it.
- Cost: books/s of the first build of each nomic index (2,679 books, title + text), fp32 and bf16 (the cached
  index is timed once; a rerun reuses the recorded seconds).
- Matryoshka: the fp32 book and request vectors cut to their first 512 or 256 dimensions and renormalised
  (``cut``), and nomic's own recipe (layer norm over the 768 dimensions, then cut and renormalised: ``layer norm +
  cut``), exact search; the size of the book vectors at each width (fp32), here and for 6.4M pages.

    python benchmarks/fetch_models.py mpnet nomic            # once
    python benchmarks/encoders/nomic_zero_shot.py            # results/nomic_zero_shot.{json,md}
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)

NAME = "nomic_zero_shot"
WORK = _common.WORK / NAME
FIT = ("R@1", "R@5", "R@10", "R@20", "R@100", "RR")
DIMS = (768, 512, 256)
TREC_PAGES = 6_400_000


def timed_index(index, model: str, precision: str, seconds: dict):
    """The dense retriever of ``model`` at ``precision``; the seconds of its first build are kept in WORK."""
    store = WORK / "build_seconds.json"
    known = json.loads(store.read_text()) if store.is_file() else {}
    key = f"{model}-{precision}"
    built = index.has_dense(model, precision=precision)
    t = time.perf_counter()
    retr = index.dense(model, precision=precision)
    if not built:
        known[key] = time.perf_counter() - t
        WORK.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(known, indent=1))
    seconds[key] = known.get(key)
    return retr


def vectors(index, model: str, topics):
    """(book docnos, book vectors, request vectors) of ``model`` in fp32, as its index and query encoder hold them."""
    import numpy as np

    from pyterrier_tot.models import load_biencoder

    flex = index.flex_index(model)
    dvecs, _ = flex.payload(return_docnos=False)
    docnos, _ = flex.payload(return_dvecs=False)
    docnos = np.asarray(docnos.fwd[np.arange(len(dvecs))]).astype(str)
    qvecs = load_biencoder(model).encode_queries(topics["query"].astype(str).tolist())
    return docnos, np.asarray(dvecs, dtype=np.float32), np.asarray(qvecs, dtype=np.float32)


def cut(vecs, dim: int, layer_norm: bool):
    import numpy as np

    if layer_norm:  # nomic's Matryoshka recipe: scale-free, so the stored unit vectors give the same result
        vecs = (vecs - vecs.mean(1, keepdims=True)) / np.sqrt(vecs.var(1, keepdims=True) + 1e-5)
    vecs = vecs[:, :dim]
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def exact_run(topics, docnos, dvecs, qvecs, k: int = 1000):
    import numpy as np
    import pandas as pd

    scores = qvecs @ dvecs.T
    top = np.argsort(-scores, axis=1)[:, :k]
    rows = [{"qid": str(q), "docno": docnos[j], "score": float(scores[i, j]), "rank": r}
            for i, q in enumerate(topics["qid"]) for r, j in enumerate(top[i])]
    return pd.DataFrame(rows)


def markdown(p: dict) -> str:
    import pandas as pd

    def table(rows):
        t = pd.DataFrame(rows)
        keep = [c for c in t.columns if c == "name" or c in FIT or (c.endswith(" p-value") and c[:-8] in FIT)]
        return _common.md_table(t[keep].astype(object).fillna(""))

    s = p["seconds"]
    lines = [f"# {__doc__.splitlines()[0]}", " ".join(__doc__.splitlines()[1:3]), "",
             _common.split_heading("validation", p["n_validation"]), "", "### Dense retrieval alone", "",
             table(p["dense"]), "", "p: paired t-test against zero-shot mpnet.", "",
             "### The training-free pipeline on each base", "",
             "Objective (mean of R@1, R@5, R@10, R@20, R@100, MRR) on Reddit-TOMT's tuning slice (300 training "
             "requests), the pipeline's own rule:", "",
             _common.md_table(pd.DataFrame([p["tuning_objective"]])), "",
             f"By the rule the training-free pipeline's base is **{p['training_free_choice']}**.", "",
             "Validation (p against the mpnet pipeline):", "", table(p["training_free_validation"]), "",
             "### Cost of encoding the books (2,679, title + text, first build of the index, 2 cores)", "",
             "| model | precision | seconds | books/s |", "|---|---|---|---|"]
    for key, sec in s["index_build"].items():
        model, prec = key.rsplit("-", 1)
        lines.append(f"| {model} | {prec} | {sec:.0f} | {p['n_books'] / sec:.1f} |" if sec else
                     f"| {model} | {prec} | (built before this run) | |")
    lines += ["", p["note"]] if p.get("note") else []
    lines += ["", "### Matryoshka: nomic's vectors cut to fewer dimensions (fp32, exact search)", "",
              "| dims | variant | R@1 | R@5 | R@10 | R@20 | R@100 | RR | book vectors here | at 6.4M pages |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in p["matryoshka"]:
        lines.append(f"| {r['dims']} | {r['variant']} | " + " | ".join(f"{r[m]:.3f}" for m in FIT)
                     + f" | {r['mib']:.1f} MiB | {r['trec_gb']:.1f} GB |")
    lines += ["", f"Machine: {p.get('machine', _common.machine())['cpus']} CPUs; bf16 native: {p['bf16_native']}.", "",
              _common.trailer(s["total"], NAME)]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = _common.parse_or_render(argparse.ArgumentParser(description=__doc__), NAME, markdown)
    if args is None:
        return
    import pyterrier as pt
    import torch

    import pyterrier_tot as ptt
    from pyterrier_tot.models import native_bf16
    from pyterrier_tot.recipe.protocol import train_data

    torch.set_num_threads(2)
    t0 = time.time()
    seconds: dict = {"index_build": {}}
    ds, index = _common.reddit()
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    dense = {"nomic (fp32)": timed_index(index, "nomic", "fp32", seconds["index_build"]),
             "nomic (bf16)": timed_index(index, "nomic", "bf16", seconds["index_build"]),
             "mpnet": index.dense("mpnet"), "MiniLM": index.dense("minilm")}
    names = list(dense)
    runs = {n: _common.cached_run(WORK, f"validation-{n}", lambda r=r: r(topics), seconds, topics)
            for n, r in dense.items()}
    dense_table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels,
                                     measures=list(FIT), names=names, baseline=names.index("mpnet"), round=4)
    print(dense_table, flush=True)

    tune, tqrels = train_data(ds, "tuning")
    objective, free_val = {}, {}
    for base in ("mpnet", "nomic"):
        pipe = ptt.training_free_pipeline(index, base=base)
        run = _common.cached_run(WORK, f"tuning-free-{base}", lambda p=pipe: p(tune), seconds, tune)
        t = ptt.tot_experiment([pt.Transformer.from_df(run)], tune, tqrels, measures=list(FIT), names=[base],
                               round=None)
        objective[base] = round(float(t[list(FIT)].mean(axis=1).iloc[0]), 4)
        free_val[f"training-free pipeline, base {base}"] = _common.cached_run(
            WORK, f"validation-free-{base}", lambda p=pipe: p(topics), seconds, topics)
    choice = max(objective, key=objective.get)
    free_names = list(free_val)
    free_table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in free_val.values()], topics, qrels,
                                    measures=list(FIT), names=free_names, baseline=0, round=4)
    print(objective, free_table, flush=True)

    docnos, dvecs, qvecs = vectors(index, "nomic", topics)
    matryoshka = []
    for dim in DIMS:
        for variant, ln in (("cut", False), ("layer norm + cut", True)):
            if dim == DIMS[0] and ln:
                continue
            run = exact_run(topics, docnos, cut(dvecs, dim, ln), cut(qvecs, dim, ln))
            t = ptt.tot_experiment([pt.Transformer.from_df(run)], topics, qrels, measures=list(FIT),
                                   names=[f"{dim}"], round=None)
            matryoshka.append({"dims": dim, "variant": "full" if dim == DIMS[0] else variant,
                               **{m: float(t[m].iloc[0]) for m in FIT},
                               "mib": len(docnos) * dim * 4 / 2**20, "trec_gb": TREC_PAGES * dim * 4 / 1e9})
    seconds["total"] = time.time() - t0
    payload = {"n_validation": len(topics), "n_books": len(index), "bf16_native": native_bf16(),
               "dense": dense_table.to_dict("records"), "tuning_objective": objective,
               "training_free_choice": choice, "training_free_validation": free_table.to_dict("records"),
               "matryoshka": matryoshka, "seconds": seconds}
    _common.write_results(NAME, payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
