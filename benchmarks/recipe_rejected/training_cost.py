"""What the default recipe's training costs against what it buys: cheaper training settings, tested cheapest first.

    python benchmarks/recipe_rejected/training_cost.py run     # each profile until one passes (tens of minutes each)
    python benchmarks/recipe_rejected/training_cost.py render  # results/training_cost.{json,md} from the runs kept

A cold ``tuned_pipeline(ds)`` trains the mpnet base (194 steps at ``max_seq_length`` 256, every layer) and its
MiniLM helper (194 steps): about an hour on two CPU cores, most of the first call. The training requests are long
(median 144 mpnet tokens, 58% over 128) and the books short (median 88), so a step at 128 tokens costs about 1.6x
less; one epoch instead of two costs half; a frozen lower half of mpnet saves most of the backward pass.

The profiles, in the order they are tried (cheapest first; each changes the base's and the helper's training only):

- ``fast``: mpnet at 128 tokens, its embeddings and lower 6 of 12 layers frozen, one epoch at lr 5e-5; the MiniLM
  helper at 128 tokens, one epoch at lr 1e-4;
- ``seq128-e1``: as ``fast`` but every mpnet layer trained;
- ``seq128``: both models at 128 tokens with the default's epochs and learning rates.

The rule, written before the run (non-inferiority on the tuning slice, the 300 training queries nothing trains
on): a profile's recipe passes when (1) its objective there (the mean over queries of the mean of R@1, R@5, R@10,
R@20, R@100 and MRR: the fuser's own objective, ``recipe.FIT_METRIC``) is not below the default recipe's by more
than .0067, the seed-to-seed standard deviation of that objective for the default's base over six seeds
(``results/soup.md``: .681 .674 .676 .669 .682 .665), and (2) its R@5 there is not below the default's by more than
2 queries of 300 (.0067). Profiles are tried in the order above and the first that passes is adopted (it is the
cheapest that passes); if none passes, the default stays. Both recipes' weights are fitted on that same slice, so
both objectives are in-sample alike. Validation (233 queries) is reported and chooses nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _common  # noqa: E402

NAME = "training_cost"
PROFILES = {
    "fast": ({"max_seq_length": 128, "freeze_layers": 6, "epoch": 1, "schedule": 1, "lr": 5e-5},
             {"max_seq_length": 128, "epoch": 1, "schedule": 1, "lr": 1e-4}),
    "seq128-e1": ({"max_seq_length": 128, "epoch": 1, "schedule": 1, "lr": 5e-5},
                  {"max_seq_length": 128, "epoch": 1, "schedule": 1, "lr": 1e-4}),
    "seq128": ({"max_seq_length": 128}, {"max_seq_length": 128}),
}
MARGIN_OBJECTIVE, MARGIN_R5 = 0.0067, 2 / 300
FIT = ("R@1", "R@5", "R@10", "R@20", "R@100", "RR")
WORK = _common.WORK / NAME
SECONDS = ("Reading the seconds: each model's training seconds are those its saved metadata records. The default's "
           "were recorded on a cold call that shared the two cores with a test-suite run, so they overstate a quiet "
           "machine (a quiet 2-core bf16 machine trained the same mpnet base in 46:45, 2,805 s); each cheaper "
           "profile trained alone. A whole-call time below its plan means the call found parts cached (the seq128 "
           "call resumed after an interruption with both its models trained). On any machine the ratio holds: "
           "128 tokens halve a step, one epoch halves the steps.")


def measured(dp, topics, qrels) -> dict:
    """Mean measures and the per-query objective of ``dp`` on ``topics`` (through ``pt.Experiment``)."""
    import pyterrier_tot as ptt

    per = ptt.tot_experiment([dp], topics, qrels, measures=list(FIT), perquery=True, names=["x"], round=None)
    wide = per.pivot_table(index="qid", columns="measure", values="value")
    objective = wide[list(FIT)].mean(axis=1)
    out = {m: round(float(wide[m].mean()), 4) for m in FIT}
    out["objective"] = round(float(objective.mean()), 4)
    out["per_query_objective"] = {str(q): float(v) for q, v in objective.items()}
    return out


def training_seconds(folder: str) -> float:
    from pyterrier_tot.recipe.expert_training import training_metadata

    return float(training_metadata(folder)["seconds"])


def run_profile(name: str, ds, index) -> dict:
    """Train (or reuse) the profile's recipe and measure it; the plan printed first is kept beside the times."""
    import io
    from contextlib import redirect_stdout

    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import tuned

    out = WORK / f"{name}.json"
    if out.is_file():
        return json.loads(out.read_text())
    mp, mini = PROFILES[name]
    plan = tuned.recipe_plan(ds, index, train_settings=mp, helper_settings=mini)
    print(plan, flush=True)
    t0 = time.perf_counter()
    printed = io.StringIO()
    with redirect_stdout(printed):
        dp = ptt.tuned_pipeline(ds, index, train_settings=mp, helper_settings=mini)
    wall = time.perf_counter() - t0
    models = dp.recipe["bases"], dp.recipe["helpers"]
    row = {"name": name, "mpnet": mp, "helper": mini, "wall_s": round(wall, 1), "plan": str(plan),
           "plan_estimate_s": round(plan.seconds, 1), "printed": printed.getvalue()[-3000:],
           "train_s": {n: training_seconds(f) for part in models for n, f in part.items()}}
    for split, (t, q) in splits(ds).items():
        row[split] = measured(dp, t, q)
    WORK.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row))
    return row


def splits(ds):
    from pyterrier_tot.recipe import tuned

    return {"tuning": tuned.train_data(ds, "tuning"), "validation": (ds.get_topics("validation"),
                                                                    ds.get_qrels("validation"))}


def default_row(ds, index) -> dict:
    import pyterrier_tot as ptt

    out = WORK / "default.json"
    if out.is_file():
        return json.loads(out.read_text())
    dp = ptt.tuned_pipeline(ds, index, train=False, verbose=False)
    row = {"name": "default", "train_s": {n: training_seconds(f) for part in (dp.recipe["bases"],
                                                                              dp.recipe["helpers"])
                                          for n, f in part.items()}}
    for split, (t, q) in splits(ds).items():
        row[split] = measured(dp, t, q)
    WORK.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(row))
    return row


def passes(row: dict, default: dict) -> bool:
    t, d = row["tuning"], default["tuning"]
    return t["objective"] >= d["objective"] - MARGIN_OBJECTIVE and t["R@5"] >= d["R@5"] - MARGIN_R5 - 1e-9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["run", "render"])
    args = ap.parse_args()
    import pyterrier_tot as ptt

    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    default = default_row(ds, index)
    rows, adopted = cheapest_passing(PROFILES, lambda name: run_profile(name, ds, index), default,
                                     lambda name: args.what != "render" or (WORK / f"{name}.json").is_file())
    render(default, rows, adopted)


def cheapest_passing(names, run, default: dict, ready=lambda name: True):
    """(rows, the first name that passes the rule or None): ``run(name)`` for each of ``names`` in order (cheapest
    first) while ``ready(name)``, stopping at the first that passes."""
    rows = []
    for name in names:
        if not ready(name):
            break
        row = run(name)
        row["passes"] = passes(row, default)
        rows.append(row)
        print(f"{name}: tuning objective {row['tuning']['objective']} (default {default['tuning']['objective']}), "
              f"R@5 {row['tuning']['R@5']} ({default['tuning']['R@5']}); passes: {row['passes']}", flush=True)
        if row["passes"]:
            return rows, name
    return rows, None


def split_columns(r: dict, default: dict, p_label: str, splits=("tuning", "validation")) -> dict:
    """A row's measures on ``splits`` as table columns, with the paired t-test of its per-query objective
    against ``default``'s (none for the default itself)."""
    from scipy.stats import ttest_rel

    line = {}
    for split in splits:
        m = r[split]
        line.update({f"{split} objective": m["objective"], f"{split} R@5": m["R@5"],
                     f"{split} R@100": m["R@100"], f"{split} MRR": m["RR"]})
        if r is not default:
            qs = sorted(default[split]["per_query_objective"])
            p = ttest_rel([r[split]["per_query_objective"][q] for q in qs],
                          [default[split]["per_query_objective"][q] for q in qs]).pvalue
            line[f"{split} {p_label}"] = round(float(p), 3)
    return line


def render(default: dict, rows: list, adopted) -> None:
    import pandas as pd

    table = []
    for r in [default, *rows]:
        line = {"profile": r["name"], "mpnet training s": r["train_s"].get("dense_ft_mpnet"),
                "helper training s": r["train_s"].get("dense_ft")}
        line.update(split_columns(r, default, "p (objective)"))
        line["passes the rule"] = r.get("passes", "")
        table.append(line)
    frame = pd.DataFrame(table)
    payload = {"rule": next(p for p in __doc__.split("\n\n") if p.startswith("The rule")),
               "margins": [MARGIN_OBJECTIVE, MARGIN_R5], "adopted": adopted,
               "rows": [{k: v for k, v in r.items() if k not in ("tuning", "validation")} |
                        {s: {k: v for k, v in r[s].items() if k != "per_query_objective"}
                         for s in ("tuning", "validation")} for r in [default, *rows]],
               "machine": _common.machine()}
    md = [f"# {__doc__.splitlines()[0]}", "", f"Machine: {payload['machine']}.", "",
          _common.md_table(frame.astype(object).fillna("")), "",
          f"Adopted: **{adopted or 'none (the default stays)'}**.", "", SECONDS, "",
          "## The rule", "", payload["rule"], "",
          "## The plans the first calls printed", ""]
    for r in rows:
        md += [f"### {r['name']} (measured {r['wall_s']:.0f} s for the whole call; the plan said "
               f"{r['plan_estimate_s']:.0f} s)", "", "```", r["plan"], "```", ""]
    _common.write_results(NAME, payload, "\n".join(md))


if __name__ == "__main__":
    main()
