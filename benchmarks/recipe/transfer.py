"""Another catalogue, no training data there: the best training-free pipeline, and a recipe trained on
Reddit-TOMT applied to it, on BIRCO WhatsThatBook dev (57 requests, 2,404 books; nothing is fitted on it).

    python benchmarks/recipe/transfer.py           # runs cached under benchmarks/.work/transfer
    python benchmarks/recipe/transfer.py --render  # results/transfer.md from the committed JSON

Training-free pipelines (no fine-tuning, no fitted weights; each a fixed recipe a user can build in a line):

- ``bm25``: BM25 over the catalogue's default fields (title + text here; the author too where books have one);
- ``dense``: zero-shot all-mpnet-base-v2 (the strongest bi-encoder this machine has offline);
- ``bm25+dense``: the two, min-max normalised and summed (``ptt.linear_fusion``);
- ``untuned recipe``: the recipe's pipeline with zero-shot mpnet as its base and every expert weighted 1
  (``ptt.training_free_pipeline(index, base="mpnet")``: rule clues, BM25, title and plot experts; the function's
  default base is nomic since ``encoders/nomic_zero_shot.py`` applied this rule to the base).

The rule, written before the run: the training-free pipeline named "best" is the one with the highest recipe
objective (the mean of R@1, R@5, R@10, R@20, R@100 and MRR) on Reddit-TOMT's tuning slice, 300 training requests,
which is training data of another collection, not BIRCO. BIRCO then reports every row. The transfer rows are the
default recipe (mpnet) and the fast one (MiniLM) trained and fitted on Reddit-TOMT, saved as artifacts and applied
to BIRCO's index with ``RecipeArtifact.transfer``; the same-run baselines are BM25 and zero-shot mpnet. p: paired
t-test over the 57 requests against zero-shot mpnet.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _common  # noqa: E402

NAME = "transfer"
WORK = _common.WORK / NAME
FIT = ("R@1", "R@5", "R@10", "R@20", "R@100", "RR")
SHOW = ["R@1", "R@5", "R@10", "R@20", "R@100", "RR", "nDCG@10"]


def free_pipelines(index):
    import pyterrier_tot as ptt
    from pyterrier_tot.models import resolve_model

    mpnet = resolve_model("mpnet")
    bm25, dense = index.bm25(), index.dense(mpnet)
    return {"bm25": bm25, "dense": dense,
            "bm25+dense": ptt.linear_fusion(bm25 % 1000, dense % 1000),
            "untuned recipe": ptt.training_free_pipeline(index, base="mpnet")}


def objective(table) -> float:
    return float(table[list(FIT)].mean(axis=1).iloc[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    payload = _common.parse_or_render(ap, NAME, markdown)
    if payload is None:
        return
    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import RecipeArtifact, tuned_pipeline
    from pyterrier_tot.recipe.protocol import train_data

    seconds: dict = {}
    ds = ptt.get_dataset("reddit-tomt-books")
    rindex = ptt.BookIndex(ds)
    tune, tqrels = train_data(ds, "tuning")
    choice = {}
    for name, pipe in free_pipelines(rindex).items():
        run = _common.cached_run(WORK, f"reddit-tuning-{name}", lambda pipe=pipe: pipe(tune), seconds, tune)
        table = ptt.tot_experiment([pt_frame(run)], tune, tqrels, measures=list(FIT), names=[name], round=None)
        choice[name] = round(objective(table), 4)
    best = max(choice, key=choice.get)
    print("training-free, objective on Reddit's tuning slice:", choice, "->", best, flush=True)

    bds = ptt.get_dataset("birco-wtb")
    bindex = ptt.BookIndex(bds)
    topics, qrels = bds.get_topics("dev"), bds.get_qrels("dev")
    runs = {}
    for name, pipe in free_pipelines(bindex).items():
        label = f"training-free: {name}" + (" (the best, by Reddit's tuning slice)" if name == best else "")
        runs[label] = _common.cached_run(WORK, f"birco-{name}", lambda pipe=pipe: pipe(topics), seconds, topics)
    for base in ("mpnet", "minilm"):
        folder = WORK / f"saved-{base}"
        if not folder.is_dir():
            tuned_pipeline(ds, rindex, base=base, verbose=False).save(folder)  # cached: fitted at most
        moved = RecipeArtifact(folder).transfer(bindex)
        runs[f"transfer: the {'default' if base == 'mpnet' else 'fast'} recipe ({base}), fitted on Reddit-TOMT"] = \
            _common.cached_run(WORK, f"birco-transfer-{base}", lambda m=moved: m(topics), seconds, topics)
    names = list(runs)
    base_i = names.index(next(n for n in names if n.startswith("training-free: dense")))
    table = ptt.tot_experiment([pt_frame(r) for r in runs.values()], topics, qrels, measures=SHOW, names=names,
                               baseline=base_i, round=4)
    payload = {"rule": next(p for p in __doc__.split("\n\n") if p.startswith("The rule")),
               "reddit_tuning_objective": choice, "best_training_free": best,
               "birco": table.to_dict("records"), "seconds": seconds}
    _common.write_results(NAME, payload, markdown(payload))


def pt_frame(run):
    import pyterrier as pt

    return pt.Transformer.from_df(run)


def markdown(p: dict) -> str:
    import pandas as pd

    table = pd.DataFrame(p["birco"])
    keep = [c for c in table.columns if c == "name" or c in SHOW or c.endswith(" p-value")]
    lines = [f"# {__doc__.splitlines()[0]}", __doc__.splitlines()[1], "",
             "## Which training-free pipeline (objective on Reddit-TOMT's tuning slice)", "",
             _common.md_table(pd.DataFrame([p["reddit_tuning_objective"]])), "",
             f"Best: **{p['best_training_free']}**.", "",
             "## BIRCO WhatsThatBook dev (57 requests; nothing fitted on it)", "",
             _common.md_table(table[keep].astype(object).fillna("")), "", "## The rule", "", p["rule"], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
