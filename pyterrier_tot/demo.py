"""The whole ToT pipeline on Reddit-TOMT (Books) validation in one ``pt.Experiment``, BM25 as the baseline.

    python -m pyterrier_tot.demo [--split validation] [--out runs/] [--no-ft]       (or: make demo)

Systems: BM25, zero-shot dense MiniLM, hedge removal before BM25, BM25 top-100 re-ranked by dense MiniLM, and
the decomposition pipeline of :mod:`pyterrier_tot.recipe.tuned` (rule clues, weights fitted on a slice of
the training queries, ranked to depth 1000; offline). The demo passes ``base="minilm"``, the fast base (minutes
of fine-tuning on two CPU cores), and says so; ``--base mpnet,nomic`` runs ``tuned_pipeline``'s default, the
stronger one (two bases; see docs/strong_retrievers.rst), ``--base mpnet`` the default before it. Paired
t-tests against BM25 (Holm correction). Writes a Recall@k plot and the best system's TREC run file (1000 books a
query). The first run fine-tunes the base and fits the fuser; both are cached, so later runs only evaluate.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import pandas as pd


def systems(ds, index, fine_tuned=True, train=True, base="minilm"):
    """(names, transformers) of the demo: the baseline first."""
    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import tuned_pipeline

    bm25 = index.bm25()
    dp = tuned_pipeline(ds, index, fine_tuned=fine_tuned, train=train, base=base)
    named = {"BM25 (title+text)": bm25,
             "Dense MiniLM zero-shot": index.dense(),
             "HedgeRemover >> BM25": ptt.HedgeRemover() >> bm25,
             "BM25 top-100 >> dense MiniLM": bm25 % 100 >> index.dense_scorer(),
             "Decomposition pipeline" + (f" (fine-tuned {named_bases(base)})" if fine_tuned else " (zero-shot base)"):
             dp}
    return list(named), list(named.values())


def named_bases(base) -> str:
    """``minilm base``, ``mpnet + nomic bases``."""
    return f"{base} base" if isinstance(base, str) else " + ".join(base) + (" bases" if len(base) > 1 else " base")


def parse_bases(text: str):
    """``--base``: one model, or several joined by commas (``mpnet,nomic``)."""
    found = [b.strip() for b in text.replace("+", ",").split(",") if b.strip()]
    if not found:
        raise SystemExit(f"--base: name a model (minilm, mpnet, nomic) or several joined by commas, not {text!r}")
    return found[0] if len(found) == 1 else tuple(found)


def main(argv=None) -> pd.DataFrame:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="reddit-tomt-books")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--out", default="runs", help="folder for the TREC run file and the Recall@k plot")
    parser.add_argument("--no-ft", action="store_true", help="zero-shot MiniLM as the pipeline's base (no training)")
    parser.add_argument("--base", default="minilm", type=parse_bases,
                        help="the recipe's base: minilm (default here: fast to train on a CPU), or mpnet,nomic "
                        "(tuned_pipeline's default, stronger: offline it needs `pyterrier-tot fetch mpnet` and "
                        "`pyterrier-tot fetch nomic`)")
    args = parser.parse_args(argv)

    import pyterrier as pt

    import pyterrier_tot as ptt

    warnings.filterwarnings("ignore", category=FutureWarning)
    t0 = time.time()
    ds = ptt.get_dataset(args.dataset)
    topics, qrels = ds.get_topics(args.split), ds.get_qrels(args.split)
    index = ptt.BookIndex(ds)
    print(f"{ds.name} {args.split}: {len(topics)} queries, {len(index)} books; indexes in {index.path}")
    from pyterrier_tot.recipe import DEFAULT_BASE

    if not args.no_ft and tuple([args.base] if isinstance(args.base, str) else args.base) != tuple(DEFAULT_BASE):
        print(f"the decomposition pipeline's base here is {args.base}, the fast one for a first run; "
              f"ptt.tuned_pipeline(ds)'s default, the one we recommend, is {named_bases(DEFAULT_BASE)} "
              f"(--base {','.join(DEFAULT_BASE)})")
    names, pipes = systems(ds, index, fine_tuned=not args.no_ft, base=args.base)
    print(f"pipelines ready in {time.time() - t0:.1f}s")
    measures = [*ptt.SHORT_MEASURES, pt.measures.Success @ 1, *ptt.CURVE_MEASURES]
    # each system runs once: the table and the best system's run file share its ranking
    runs = [pipe(topics) for pipe in pt.tqdm(pipes, desc="systems", unit="system")]
    table = ptt.tot_experiment(runs, topics, qrels, measures=measures, names=names, baseline=0,
                               correction="holm", round=3, verbose=False)
    shown = [c for c in table.columns if c in ("name", "R@5", "R@10", "R@100", "RR", "nDCG@10", "Success@1")
             or c.startswith(("R@5 ", "R@100 ", "RR ")) and c.endswith(("p-value", "reject"))]
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(table[shown].to_string(index=False))
    out = Path(args.out)
    plot = out / f"{ds.name}-{args.split}-recall-at-k.png"
    ptt.plot_recall_at_k(table, plot, title=f"Recall@k, {ds.name} {args.split}", highlight=[names[-1]])
    print(f"wrote Recall@k plot {plot}")
    best = int(table["R@5"].to_numpy().argmax())
    path = ptt.write_trec_run(runs[best], out / f"{ds.name}-{args.split}-best.run", run_name="ptt_best")
    print(f"best by R@5: {names[best]}; wrote TREC run {path}")
    print(f"done in {time.time() - t0:.1f}s")
    return table


if __name__ == "__main__":
    main()
