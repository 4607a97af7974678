"""What the recipe's first call costs on a cold cache, measured whole, beside what its printed plan said.

    python benchmarks/recipe/first_call.py                 # this machine as it is (bf16 where it is native)
    python benchmarks/recipe/first_call.py --fp32          # the same machine without bf16 (a CPU without it)
    python benchmarks/recipe/first_call.py --plan          # only the plans a cold call prints (minutes)
    python benchmarks/recipe/first_call.py --render        # results/first_call.md from the committed JSON
    python benchmarks/recipe/first_call.py --keep DIR      # the cold cache built in DIR and kept: what the call
                                                           # trained serves later studies (DIR/cache)

Each run builds everything from nothing in a fresh ``$PYTERRIER_TOT_CACHE`` (a temporary folder): the book index,
the fine-tuned bases (mpnet and nomic, the default since nomic's study; the runs before it had mpnet alone) and
their MiniLM helper, every dense and BM25 sub-index, the density prior and the fuser's fit; only the models' own
weights are copied in first (what ``benchmarks/fetch_models.py mpnet nomic`` puts there). It records the plan the
call printed (its estimate), the wall-clock seconds of the whole call and of each model's training, and the
validation numbers of the pipeline it returns, so a changed default shows here. Timing runs want idle cores:
another heavy job on the machine slows every phase (the JSON records the load average).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import _common  # noqa: E402

NAME = "first_call"


def fresh_cache(tmp: str) -> Path:
    """A new ``$PYTERRIER_TOT_CACHE`` under ``tmp`` holding only the fetched models' own weights (all-mpnet-base-v2,
    and nomic-embed-text-v1.5 as ``fetch nomic`` converts it)."""
    from pyterrier_tot.models import loading as models

    mpnet = Path(models.resolve_model("mpnet"))
    nomic = Path(models.resolve_model("nomic"))
    cache = Path(tmp) / "cache"
    (cache / "models").mkdir(parents=True)
    shutil.copytree(mpnet.parent if mpnet.parent.name == "all-mpnet-base-v2" else mpnet,
                    cache / "models" / "all-mpnet-base-v2")
    shutil.copytree(nomic, cache / "models" / nomic.name)
    os.environ["PYTERRIER_TOT_CACHE"] = str(cache)
    os.environ["PYTERRIER_TOT_MPNET"] = str(cache / "models" / "all-mpnet-base-v2")
    return cache


def plans() -> dict:
    """The plan a cold first call prints (each step timed on a few examples here), natively and as in fp32;
    nothing is trained."""
    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.models import loading as models
    from pyterrier_tot.recipe import plan

    out = {}
    with tempfile.TemporaryDirectory(prefix="first-call-plan-") as tmp:
        fresh_cache(tmp)
        ds = ptt.get_dataset("reddit-tomt-books")
        native = models.native_bf16
        default = tuple(recipe.DEFAULT_BASE)
        for name, fp32, base in (("the default (mpnet + nomic), native", False, default),
                                 ("the default (mpnet + nomic), fp32", True, default),
                                 ("mpnet's recipe (the default before), native", False, "mpnet"),
                                 ("fast recipe (MiniLM), native", False, "minilm")):
            if fp32:
                models.native_bf16 = lambda: False
            try:
                p = ptt.recipe_plan(ds, base=base)
            finally:
                models.native_bf16 = native
            out[name] = {"machine": plan.machine(), "estimate_s": round(float(p.seconds), 1), "printed": str(p),
                         "loadavg": os.getloadavg()}
    return out


def one_run(fp32: bool, keep: str = "") -> dict:
    import pyterrier_tot as ptt
    from pyterrier_tot.models import loading as models
    from pyterrier_tot.recipe import plan
    from pyterrier_tot.recipe.expert_training import training_metadata

    with (contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="first-call-")) as tmp:
        fresh_cache(tmp)
        if fp32:  # as on a CPU without native bf16: training and encoding in fp32
            models.native_bf16 = lambda: False
        load = os.getloadavg()
        printed = io.StringIO()
        t0 = time.perf_counter()
        ds = ptt.get_dataset("reddit-tomt-books")
        with redirect_stdout(printed):
            dp = ptt.tuned_pipeline(ds)
        wall = time.perf_counter() - t0
        trained = {n: training_metadata(f)["seconds"] for part in (dp.recipe["bases"], dp.recipe["helpers"])
                   for n, f in part.items()}
        table = ptt.tot_experiment([dp], ds.get_topics("validation"), ds.get_qrels("validation"),
                                   measures=["R@1", "R@5", "R@100", "RR"], names=["the default recipe"])
        steps = dp.first_call.taken().to_dict("records") if dp.first_call is not None else []
        return {"fp32": fp32, "bases": list(dp.recipe["base"]), "machine": plan.machine(), "wall_s": round(wall, 1),
                "training_s": trained,
                "printed": printed.getvalue(), "steps": steps,
                "loadavg_before": load, "loadavg_after": os.getloadavg(),
                "validation": table.to_dict("records")[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp32", action="store_true")
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--keep", default="", help="an empty folder to build the cold cache in and keep")
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:
        return
    results = _common.results_dir(__file__) / f"{NAME}.json"
    old = json.loads(results.read_text()) if results.is_file() else {}
    old.setdefault("runs", {})
    if args.plan:
        old["plans"] = plans()
    else:
        old["runs"]["fp32" if args.fp32 else "native"] = one_run(args.fp32, args.keep)
    _common.write_results(NAME, old, markdown(old))


def markdown(p: dict) -> str:
    from pyterrier_tot.recipe.plan import duration

    lines = [f"# {__doc__.splitlines()[0]}", "", __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| run | bases | machine | whole call | mpnet base training | nomic base training | MiniLM helper "
             "training | printed estimate | validation R@5 / R@100 / MRR |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in p["runs"].items():
        est = next((line.split("in all about ")[1].split(";")[0] for line in r["printed"].splitlines()
                    if "in all about" in line), "")
        v = r["validation"]
        t = r["training_s"]
        lines.append(f"| {name} | {' + '.join(r.get('bases', ['mpnet']))} | {r['machine']} | "
                     f"{duration(r['wall_s'])} ({r['wall_s']:.0f} s) | {t.get('dense_ft_mpnet', 0):.0f} s | "
                     f"{t.get('dense_ft_nomic', 0):.0f} s | {t.get('dense_ft', 0):.0f} s | "
                     f"{est} | {v['R@5']:.3f} / {v['R@100']:.3f} / {v['RR']:.3f} |")
    if not p["runs"]:
        lines.append("| (no whole cold call measured yet: it wants an hour or more of idle cores) | | | | | | | | |")
    lines += ["", "## What the first calls printed", ""]
    for name, r in p["runs"].items():
        lines += [f"### {name}", "", "```", r["printed"].strip()[:2500], "```", ""]
        if r.get("steps"):  # each step of the plan, estimated and taken (the rest of the wall: loading, the prior)
            lines += ["| step | estimate | took | estimate / took |", "|---|---|---|---|"]
            lines += [f"| {s['step']} | {s['estimate_s']:.0f} s | {s['took_s']:.0f} s | {s['ratio']:.2f} |"
                      for s in r["steps"]]
            lines += [""]
    for name, r in p.get("plans", {}).items():
        lines += [f"### The plan alone, cold cache, {name} ({r['machine']}; load average {r['loadavg'][0]:.2f})",
                  "", *([r["note"], ""] if r.get("note") else []), "```", r["printed"].strip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
