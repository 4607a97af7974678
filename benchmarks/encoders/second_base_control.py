"""Is it nomic, or any second fine-tuned base? The default (mpnet + nomic) beside the same recipe on two mpnet runs.

    python benchmarks/fetch_models.py mpnet nomic
    python benchmarks/encoders/second_base_control.py          # trains a second mpnet run (seed 43) if missing
    python benchmarks/encoders/second_base_control.py --render

A control written after ``nomic_base.py`` decided, so it chooses nothing: the default stays what that study's rule
adopted. The control recipe is the default with nomic swapped for a second fine-tuned mpnet (the same settings,
training seed 43 instead of 42): both bases summed for the candidates, each an expert, the MiniLM helper, mpnet's
density prior (over the seed-42 model, as in the default). If the control matches the default, the gain came from
fusing two fine-tuned bases, not from nomic; if it falls short, nomic brings something a second mpnet run does not.
Reported on the tuning slice (the objective the rule used: the mean of R@1, R@5, R@10, R@20, R@100 and MRR) and
on validation, with paired t-tests against the default, all in the same run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _common  # noqa: E402

NAME = "second_base_control"
WORK = _common.WORK / NAME
FIT = ("R@1", "R@5", "R@10", "R@20", "R@100", "RR")


def run() -> dict:
    import pyterrier as pt

    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import bases, tuned_pipeline
    from pyterrier_tot.recipe.expert_training import training_metadata
    from pyterrier_tot.recipe.protocol import train_data

    t0 = time.time()
    seconds: dict = {}
    ds, index = _common.reddit()
    mpnet = bases.fine_tuned_base(ds, model="mpnet", index=index, verbose=False)
    second = bases.fine_tuned_base(ds, model="mpnet", index=index, seed=43)
    pipes = {"mpnet's recipe": tuned_pipeline(ds, index, base="mpnet", verbose=False),
             "the default (mpnet + nomic)": tuned_pipeline(ds, index, verbose=False),
             "control (mpnet + mpnet seed 43)": tuned_pipeline(
                 ds, index, fine_tuned={"dense_ft_mpnet": mpnet, "dense_ft_mpnet_seed43": second},
                 helpers=("minilm",), verbose=False)}
    short = dict(zip(pipes, ("mpnet", "default", "control")))
    reports = {}
    for split in ("tuning", "validation"):
        topics, qrels = (train_data(ds, "tuning") if split == "tuning"
                         else (ds.get_topics("validation"), ds.get_qrels("validation")))
        runs = {n: _common.cached_run(WORK, _common.pipeline_key(f"{split}-{short[n]}", p), lambda p=p, t=topics: p(t),
                                      seconds, topics) for n, p in pipes.items()}
        table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels,
                                   measures=list(FIT), names=list(runs), baseline=1, round=None)
        table["objective"] = table[list(FIT)].mean(axis=1)
        reports[split] = table.to_dict("records")
    meta = training_metadata(second)
    return {"reports": reports, "second_run": {"folder": Path(second).name, "seconds": meta.get("seconds"),
                                               "steps": meta.get("steps")},
            "seconds": round(time.time() - t0, 1)}


def markdown(p: dict) -> str:
    import pandas as pd

    cols = ["name", "objective", "R@1", "R@5", "R@10", "R@20", "R@100", "RR", "R@5 p-value", "RR p-value"]
    lines = [f"# {__doc__.splitlines()[0]}", "", __doc__.split("\n\n")[2].replace("\n", " "), ""]
    for split, rows in p["reports"].items():
        frame = pd.DataFrame(rows)[cols]
        lines += [f"## {split} (p against the default)", "",
                  _common.md_table(frame.astype(object).where(frame.notna(), ""), "{:.4f}"), ""]
    s = p["second_run"]
    lines += [f"The second mpnet run: {s['folder']}, {s['steps']} steps, {s['seconds']:.0f} s.", "",
              _common.trailer(p["seconds"], NAME), ""]
    return "\n".join(lines)


def main() -> None:
    _common.run_or_render(NAME, run, markdown, argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


if __name__ == "__main__":
    main()
