"""Issue 31.2 / 31.3: which fine-tuned models should the mpnet recipe's fuser weigh beside its base? Decided inside
the tuning slice alone (300 training queries; validation is not read), as ``fuser_bagging.py`` decided the fit:
the slice is split into random halves, the recipe's fuser is fitted on one half (bagged coordinate ascent, the
base alone as the floor) with and without each candidate helper expert, and measured on the other half against the
base alone. Candidates: the fine-tuned MiniLM base (a second bi-encoder over the full query), and the fine-tuned
mpnet as the title and as the plot expert (in place of zero-shot MiniLM on the clue; both kept beside it).

    python benchmarks/recipe/helper_bases.py [--splits 30] [--render]

The first row (the recipe as it was) is the same-run baseline. Kept in the recipe (``recipe.HELPERS``): a helper
whose mean gain over the base, and mean smallest gain, are above the baseline's.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from fuser_bagging import OBJ, fit  # noqa: E402

from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.decomposition.field_expert import FieldExpert  # noqa: E402
from pyterrier_tot.evaluation import parse_measure  # noqa: E402

NAME = "helper_bases"
WORK = _common.WORK / NAME


def features(index, ds):
    """The tuning slice's features: the mpnet recipe's experts, the fine-tuned MiniLM (a helper) and the fine-tuned
    mpnet title / plot experts (extra experts), all on the mpnet recipe's candidates; cached as a pickle."""
    mp = recipe.fine_tuned_base(ds, model="mpnet", train=False, index=index)
    ml = recipe.fine_tuned_base(ds, model="minilm", train=False, index=index)
    if mp is None or ml is None:
        raise SystemExit("the fine-tuned mpnet and MiniLM bases are not in the cache: train them first "
                         "(python benchmarks/recipe/recipe_depth.py --bases minilm mpnet --train)")
    fts = {recipe.base_expert_name("mpnet"): mp}
    helpers = {recipe.base_expert_name("minilm"): ml}
    extra = {"title_mpnet": FieldExpert(index, "title", "dense", model=mp),
             "plot_mpnet": FieldExpert(index, "plot", "dense", model=mp)}
    dp = recipe.build_pipeline(index, fts, extra_experts=extra, helpers=helpers, depth=None)
    tune, _ = recipe.tuning_data(ds)
    # keyed by the tuning queries' text too: features of differently cleaned queries are computed again
    f = WORK / f"tuning-{Path(mp).name}+{Path(ml).name}-{recipe.text_fingerprint(tune)[:10]}.pkl"
    seconds = None
    if not f.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        feats = dp.fuser.features((dp.decomposer >> dp.candidates)(tune))
        seconds = round(time.time() - t0, 1)
        feats[["qid", "docno", *dp.fuser.names]].to_pickle(f)
    names = dp.fuser.names
    plain = [n for n in names if n not in helpers and n not in extra]
    return pd.read_pickle(f), names, plain, list(helpers), list(extra), recipe.base_names(fts), \
        {"mpnet": Path(mp).name, "minilm": Path(ml).name}, seconds


def compare_on_halves(feats: pd.DataFrame, qrels: pd.DataFrame, variants: dict, floor, splits: int, bags: int,
                      baseline: str):
    """For each variant (name -> expert columns of ``feats``): on ``splits`` random halves of the slice's queries,
    the fuser fitted on one half (bagged, ``floor`` held) and measured on the other against the floor alone; rows
    of mean gains, paired against the ``baseline`` variant over the same halves, and each variant's weights fitted
    on the whole slice."""
    measures = [parse_measure(m) for m in OBJ]
    qids = np.array(sorted(feats["qid"].unique()))
    rng = np.random.default_rng(0)
    gains = {v: [] for v in variants}
    for s in pt.tqdm(range(splits), desc="halves"):
        perm = rng.permutation(qids)
        fit_q, held_q = perm[: len(perm) // 2], perm[len(perm) // 2:]
        for v, cols in variants.items():
            held_f, held_qrels = feats[feats["qid"].isin(held_q)], qrels[qrels["qid"].isin(held_q)]
            base_w = np.array([1.0 if n in floor else 0.0 for n in cols])
            w = fit(feats[feats["qid"].isin(fit_q)][["qid", "docno", *cols]], qrels[qrels["qid"].isin(fit_q)],
                    cols, floor, bags, seed=s)
            on_held = [_common.fused_measures(held_f, held_qrels, cols, x, measures) for x in (w, base_w)]
            gains[v].append((on_held[0] - on_held[1]).tolist())
    ref = np.array(gains[baseline])
    rows = {}
    for v, g in gains.items():
        g = np.array(g)
        low = g.min(axis=1)
        d_mean, d_low = g.mean(axis=1) - ref.mean(axis=1), low - ref.min(axis=1)
        se = (lambda d: d.std(ddof=1) / np.sqrt(len(d))) if len(g) > 1 else (lambda d: float("nan"))
        rows[v] = {"mean gain": float(g.mean()), "mean smallest gain": float(low.mean()),
                   "share of halves below the base somewhere": float((low < -1e-9).mean()),
                   "share below at R@5": float((g[:, OBJ.index("R@5")] < -1e-9).mean()),
                   **{f"gain {c}": float(x) for c, x in zip(OBJ, g.mean(axis=0))},
                   "mean gain vs baseline (se)": f"{d_mean.mean():+.4f} ({se(d_mean):.4f})",
                   "smallest gain vs baseline (se)": f"{d_low.mean():+.4f} ({se(d_low):.4f})"}
    full = {v: dict(zip(cols, np.round(fit(feats[["qid", "docno", *cols]], qrels, cols, floor, bags, 0), 3)
                        .tolist())) for v, cols in variants.items()}
    return rows, full


def main():
    args = halves_args(NAME, markdown)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    t0 = time.time()
    ds, index = _common.reddit()
    feats, names, plain, helpers, extra, floor, models, feat_s = features(index, ds)
    _, qrels = recipe.tuning_data(ds)
    feats = feats.assign(qid=feats["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    variants = {"recipe as it was (baseline)": plain,
                **{f"+ {h} (fine-tuned MiniLM)": plain + [h] for h in helpers},
                **{f"+ {e}": plain + [e] for e in extra}}
    rows, full = compare_on_halves(feats, qrels, variants, floor, args.splits, args.bags,
                                   "recipe as it was (baseline)")
    payload = {"models": models, "splits": args.splits, "bags": args.bags,
               "tuning_queries": int(feats["qid"].nunique()),
               "objective": recipe.FIT_METRIC, "floor_metric": recipe.FLOOR_METRIC, "floor": floor, "rows": rows,
               "weights_on_the_whole_slice": full, "feature_seconds": feat_s,
               "seconds": round(time.time() - t0, 1), "machine": _common.machine()}
    _common.write_results(NAME, payload, markdown(payload))


def halves_args(name: str, markdown, script=None):
    """The arguments of a benchmark on halves of the tuning slice (``--splits``, ``--bags``, ``--render``); None
    after ``--render`` (which rewrites the markdown beside ``script``, the benchmark's ``__file__``; default this
    one)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--splits", type=int, default=30)
    ap.add_argument("--bags", type=int, default=recipe.FIT_BAGS)
    return _common.parse_or_render(ap, name, markdown, script or __file__)


def halves_sections(p) -> list:
    """The markdown lines of a :func:`compare_on_halves` result: its table, then the weights on the whole slice."""
    table = pd.DataFrame([{"experts": v, **r} for v, r in p["rows"].items()])
    weights = "\n".join(f"- {v}: `{w}`" for v, w in p["weights_on_the_whole_slice"].items())
    return [_common.md_table(table, floatfmt="{:.4f}"), "", "Weights fitted on the whole slice:", "", weights, ""]


def markdown(p) -> str:
    return "\n".join([
        "# Helper experts beside the mpnet base (issue 31.2 / 31.3)", "",
        f"Inside the tuning slice only ({p['tuning_queries']} training queries; validation not read): "
        f"{p['splits']} random halves; on each, the fuser is fitted on one half (mean of `{p['objective']}`, "
        f"bagged over {p['bags']} resamples, floor `{p['floor']}` held on `{p['floor_metric']}`) and measured on "
        f"the other against the mpnet base alone (`{p['models']['mpnet']}`). 'gain': held-out measure minus the "
        "base's; 'smallest gain': the lowest of the six gains of a half, averaged over halves; 'vs baseline': "
        "paired over the same halves against the recipe as it was (held-out halves overlap, so the standard "
        f"errors are optimistic). The MiniLM helper is `{p['models']['minilm']}`; `title_mpnet` / `plot_mpnet` "
        "are the fine-tuned mpnet scoring the title / plot clue. One run; the first row is the baseline.", "",
        *halves_sections(p),
        f"Total {p['seconds']} s (features {p['feature_seconds']} s, when computed in this run). "
        "Re-render: `python benchmarks/recipe/helper_bases.py --render`.",
        *([f"Note: {p['note']}"] if p.get("note") else []), ""])


if __name__ == "__main__":
    main()
