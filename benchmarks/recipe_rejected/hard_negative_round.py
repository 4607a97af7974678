"""Issue 31.3: a second training round for a base, on hard negatives mined by that base itself (and BM25), chosen
on the tuning slice against the base it continues from, and evaluated once on validation (same run).

    python benchmarks/recipe_rejected/hard_negative_round.py --model minilm --rounds 1 --miners bm25 base

Round 0 is the base of the recipe (``bases.fine_tuned_base``, in-batch negatives only). Round ``r`` continues
from round ``r - 1`` for one epoch on (query, gold book, ``--negatives`` mined books) examples, the negatives
drawn (seeded by the round) from the top ``--depth`` of each miner, gold excluded; ``base`` mines with the model
the round continues from, so every round learns from its own near misses (``hard_negatives.fine_tuned_hard``). The round
kept is the one whose dense retriever scores best on the tuning slice (R@5, ties to the earlier round, so the
base wins ties); validation is evaluated for BM25, the base and every round, each round tested against the base.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe
from pyterrier_tot.models import forget_queries, native_bf16  # noqa: E402
from pyterrier_tot.recipe import bases, hard_negatives  # noqa: E402

MEASURES = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "RR", "nDCG@10", "nDCG@1000"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--miners", nargs="+", default=["bm25", "base"], choices=list(hard_negatives.MINERS))
    ap.add_argument("--negatives", type=int, default=hard_negatives.HN_NEGATIVES)
    ap.add_argument("--depth", type=int, default=hard_negatives.HN_DEPTH)
    ap.add_argument("--no-clue-forms", action="store_true", help="train on the full queries only")
    ap.add_argument("--recipe", action="store_true",
                    help="also fit and run the recipe on the base and on the chosen round")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    if args.render:
        return _common.rerender(f"hard_negative_round_{args.model}", markdown)
    t0 = time.time()
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    models = hard_negatives.fine_tuned_hard(ds, index, epochs=args.rounds, n_negatives=args.negatives, depth=args.depth,
                                   clue_forms=not args.no_clue_forms, model=args.model, miners=args.miners)
    t_train = time.time() - t0
    best, table = bases.choose_epoch(ds, index, models)
    tune = table.rename(columns={"epoch": "round", "RR": "MRR"})
    info = {r: recipe.training_info(p) for r, p in models.items()}
    tune["training_s"] = [info[int(r)].get("seconds") for r in tune["round"]]
    tune["steps"] = [info[int(r)].get("steps") for r in tune["round"]]
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    names = ["BM25"] + [f"{args.model} base (round 0)"] + [f"+ hard-negative round {r}" for r in sorted(models)
                                                             if r > 0]
    systems = [index.bm25()] + [index.dense(models[r]) for r in sorted(models)]
    t1 = time.time()
    vt = ptt.tot_experiment(systems, val, vqrels, measures=MEASURES, names=names, baseline=1, round=None)
    vt = vt.rename(columns={"RR": "MRR", "RR p-value": "MRR p-value"})
    payload = {"model": args.model, "rounds": args.rounds, "miners": args.miners, "negatives": args.negatives,
               "depth": args.depth, "clue_forms": not args.no_clue_forms, "chosen_round": int(best),
               "models": {str(r): Path(p).name for r, p in models.items()},
               "training": {str(r): info[r] for r in models},
               "tuning": tune.to_dict("records"), "validation": vt.to_dict("records"),
               "native_bf16": native_bf16(), "train_and_choose_s": round(t_train, 1),
               "validation_s": round(time.time() - t1, 1)}
    if args.recipe:
        payload["recipes"] = recipes(ds, index, models, int(best), val, vqrels)
    payload["seconds"] = round(time.time() - t0, 1)
    print(tune.to_string(index=False))
    print(vt[["name", "R@5", "R@20", "R@100", "MRR"]].to_string(index=False))
    _common.write_results(f"hard_negative_round_{args.model}", payload, markdown(payload))


def recipes(ds, index, models: dict, best: int, val, vqrels) -> dict:
    """The recipe on the base (round 0) and on the chosen round, each fitted on the tuning slice as
    ``tuned_pipeline`` fits it; validation rows tested against the recipe on the base, and each recipe checked
    against its own base at every cut-off of the Recall@k curve."""
    import pyterrier as pt

    rows, names, systems, seconds = {}, [], [], {}
    for r in sorted({0, best}):
        path = models[r]
        t = time.time()
        pipe = recipe.tuned_pipeline(ds, index, fine_tuned=path, verbose=False)
        seconds[f"fit round {r}"] = round(time.time() - t, 1)
        forget_queries()  # timed as a new query's
        t = time.time()
        rows[f"recipe on round {r}"] = pipe(val)
        seconds[f"recipe on round {r}"] = round((time.time() - t) / len(val), 3)
        rows[f"round {r} alone"] = (index.dense(path) % 1000)(val)
    names = list(rows)
    systems = [pt.Transformer.from_df(rows[n]) for n in names]
    table = ptt.tot_experiment(systems, val, vqrels, measures=MEASURES + ptt.CURVE_MEASURES, names=names,
                               baseline=names.index("recipe on round 0"), round=None, verbose=False)
    table = table.rename(columns={"RR": "MRR", "RR p-value": "MRR p-value"})
    recs = table.to_dict("records")
    by = {r["name"]: r for r in recs}
    curve = [c for c in table.columns if c.startswith("R@") and "p-value" not in c and " " not in c] + ["MRR"]
    below = [f"recipe on round {r}: {c} {by[f'recipe on round {r}'][c]:.3f} < {by[f'round {r} alone'][c]:.3f}"
             for r in sorted({0, best}) for c in curve
             if by[f"recipe on round {r}"][c] < by[f"round {r} alone"][c] - 1e-12]
    return {"validation": recs, "below_own_base": below, "seconds": seconds, "curve_columns": curve}


def markdown(p: dict) -> str:
    tune = pd.DataFrame(p["tuning"])
    val = pd.DataFrame(p["validation"])
    pcols = [c for c in val.columns if c.endswith("p-value") and c.split(" ")[0] in ("R@5", "R@20", "R@100", "MRR")]
    rounds = "; ".join(f"round {r}: {t.get('n_pairs')} examples, {t.get('n_negatives', 0)} negatives each, "
                       f"{t.get('steps')} steps, {t.get('seconds')} s" for r, t in p["training"].items())
    return "\n".join([
        f"# Hard-negative rounds for the {p['model']} base (issue 31.3)", "",
        f"Round 0 is the recipe's base; each round continues from the one before for one epoch on examples with "
        f"{p['negatives']} negatives mined from the top {p['depth']} of {' + '.join(p['miners'])} "
        f"(``base``: the model the round continues from), gold excluded"
        f"{', the rule-clue forms of each query as extra anchors' if p['clue_forms'] else ''}. "
        f"Chosen on the tuning slice (R@5 of the dense retriever alone, ties to the earlier round): "
        f"**round {p['chosen_round']}**. Native bf16: {p['native_bf16']}. Total {p['seconds']} s "
        f"(training and choice {p['train_and_choose_s']} s).", "",
        f"Training: {rounds}.", "",
        "## Tuning slice (300 training queries)", "",
        _common.md_table(tune[[c for c in ["round", "name", "R@5", "R@10", "R@100", "MRR", "training_s", "steps"]
                               if c in tune.columns]]), "",
        "## Validation (233 queries; p-values: paired t-test against the base)", "",
        _common.md_table(val[["name"] + [m if m != "RR" else "MRR" for m in MEASURES] + pcols]
                         .astype(object).fillna("")), ""] + _recipe_md(p.get("recipes")))


def _recipe_md(rec) -> list:
    if not rec:
        return []
    val = pd.DataFrame(rec["validation"])
    pcols = [c for c in val.columns if c.endswith("p-value") and c.split(" ")[0] in ("R@1", "R@5", "R@20", "MRR")]
    secs = rec["seconds"]
    val["s/query"] = [secs.get(n, "") for n in val["name"]]
    return ["## The recipe on the base and on the chosen round (validation; p: paired t-test against the recipe "
            "on the base)", "",
            "Each recipe is `tuned_pipeline(ds, fine_tuned=<model>)`: weights fitted on the tuning slice with the "
            "model alone as the floor, 1000 deep. Fitting (tuning features + coordinate ascent): "
            + ", ".join(f"{k} {v} s" for k, v in secs.items() if k.startswith("fit")) + ".", "",
            _common.md_table(val[["name"] + [m if m != "RR" else "MRR" for m in MEASURES] + ["s/query"] + pcols]
                             .astype(object).fillna("")), "",
            "Where a recipe is below its own model alone (R@1 ... R@1000 of the Recall@k curve, MRR): "
            + ("; ".join(rec["below_own_base"]) if rec["below_own_base"] else "nowhere") + ".", ""]


if __name__ == "__main__":
    main()
