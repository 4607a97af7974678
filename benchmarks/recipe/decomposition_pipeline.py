"""The decomposition pipeline measured on Reddit-TOMT (Books) validation: baselines, single experts (the paper's
Table 6), the fused pipeline with its ablation, and a corpus-size curve (the paper's Figure 2).

    .venv/bin/python benchmarks/recipe/decomposition_pipeline.py [--train-ft] [--no-curve] [--no-ft] [--no-birco]

Protocol (:mod:`pyterrier_tot.recipe`): fuser weights are fitted (coordinate ascent, Recall@5) on
the tuning slice of the TRAIN split (``tuning_split``: 300 queries, ``train.sample(300, random_state=0)``) with
rule clues; the fine-tuned base retriever is trained on the other training queries (``fine_tuned_base``;
``--train-ft`` trains it when the cache lacks it); validation is only ever evaluated. LLM clues come from
``benchmarks/llm_stages/results/clues_validation_<method>.jsonl`` when committed. Every number comes from
``pt.Experiment``; precomputed runs enter it through ``pt.Transformer.from_df``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from ir_measures import RR, R  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.decomposition.clues import YEAR_COLUMN, clue_column, clues_na_as_none  # noqa: E402
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert  # noqa: E402
from pyterrier_tot.decomposition.pipeline import ClueLookup  # noqa: E402
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor  # noqa: E402
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser  # noqa: E402
from pyterrier_tot.query.rewriters import ClueConcatenator  # noqa: E402
from pyterrier_tot.recipe.expert_training import load_clue_cache  # noqa: E402

warnings.filterwarnings("ignore")
NAME = "decomposition_pipeline"
#: The LLM clue caches ``benchmarks/llm_stages/decomposition.py`` writes.
CLUES = _common.BENCHMARKS / "llm_stages" / "results"
COLS = ("R@5", "R@10", "R@20", "R@100", "MRR")
MEASURES = list(dict.fromkeys([R @ 5, R @ 10, R @ 20, R @ 100, RR, *ptt.CURVE_MEASURES]))


def evaluate(systems: dict, topics: pd.DataFrame, qrels: pd.DataFrame, table_out: list = None) -> dict:
    """name -> {n, R@k, MRR} from one pt.Experiment (DataFrames enter as pt.Transformer.from_df)."""
    systems = {n: pt.Transformer.from_df(s) if isinstance(s, pd.DataFrame) else s for n, s in systems.items()}
    table = ptt.tot_experiment(list(systems.values()), topics, qrels, measures=MEASURES, names=list(systems),
                               round=None, verbose=False)
    if table_out is not None:
        table_out.append(table)
    table = table.rename(columns={"RR": "MRR"})
    return {r["name"]: {"n": len(topics), **{c: float(r[c]) for c in COLS}} for r in table.to_dict("records")}


def show(results: dict, prefix: str = "") -> None:
    for name, r in results.items():
        print(f"{prefix}{name:60s} " + " ".join(f"{c} {r[c]:.3f}" for c in COLS))


class RunTable(pt.Transformer):
    """Scorer mode over a precomputed run, as FieldExpert's scorer mode would: a candidate missing from the run of
    a query that has one scores raw 0.0; queries absent from the run (N/A clue) get no rows. (The curve re-uses
    full-corpus dense rankings: a dense score does not depend on the other books in the corpus.)"""

    def __init__(self, run, name):
        self.run = run[["qid", "docno", "score"]]
        self.name = name

    def transform(self, inp):
        base = inp.drop(columns=["score", "rank"], errors="ignore")
        out = base[base["qid"].isin(self.run["qid"])].merge(self.run, on=["qid", "docno"], how="left")
        out["score"] = out["score"].fillna(0.0)
        return pt.model.add_ranks(out)

    def __repr__(self):
        return self.name


def clue_sets_for(val: pd.DataFrame) -> dict:
    sets = {"rules": RuleClueExtractor()(val)}
    for method in ("extractive", "predictive"):
        path = CLUES / f"clues_validation_{method}.jsonl"
        if path.exists():
            sets[f"LLM {method}"] = ClueLookup(load_clue_cache(path), label=method)(val)
    return sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-curve", action="store_true")
    ap.add_argument("--no-ft", action="store_true")
    ap.add_argument("--no-birco", action="store_true")
    ap.add_argument("--train-ft", action="store_true", help="fine-tune the base when the recipe's cache lacks it "
                    "(about 5 min on 2 idle CPU cores, much longer when they are shared)")
    ap.add_argument("--refit", action="store_true", help="re-fit the fuser weights even when cached")
    ap.add_argument("--render", action="store_true", help="only re-write the markdown from the JSON results")
    args = ap.parse_args()
    if args.render:
        _common.rerender(NAME, markdown)
        return
    t_start, timings = time.time(), {}
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")

    ft = None
    if not args.no_ft:
        with _common.timer(timings, "ft_get_or_train_s"):
            ft = recipe.fine_tuned_base(ds, train=args.train_ft)
    ft_meta = recipe.training_info(ft) if ft else None
    print("fine-tuned base:", ft, ft_meta)
    with _common.timer(timings, "fit_s"):
        weights_path = recipe.fitted_weights(ds, index, ft, refit=args.refit, verbose=True)
    fitted = WeightedFuser.load(weights_path)
    weights = dict(zip(fitted.names, fitted.weights.tolist()))
    # the committed copy stays one JSON file (WeightedFuser.load reads it; save() would write an artifact folder)
    (_common.results_dir() / f"{NAME}_weights.json").write_text(json.dumps(fitted.to_dict(), indent=2))
    print("fitted weights (tuning slice):", weights, "tuning-slice R@5", fitted.fit_score)
    clue_sets = clue_sets_for(val)

    # ---------------------------------------------------------------- baselines (same run)
    bm25, dense = index.bm25(), index.dense()
    systems = {"BM25 (title+text)": bm25, "Dense MiniLM zero-shot": dense,
               "BM25 >> MiniLM rescoring": bm25 % 100 >> index.dense_scorer()}
    if ft:
        systems["Dense MiniLM fine-tuned"] = index.dense(ft)
    for cname, cdf in clue_sets.items():
        systems[f"Dense MiniLM on concatenated clues ({cname})"] = pt.Transformer.from_df(cdf) >> \
            ClueConcatenator() >> dense
    tables = []
    with _common.timer(timings, "baselines_s"):
        results = evaluate(systems, val, vqrels, tables)
    show(results)
    singles = [n for n in systems if "concatenated" not in n]
    best_single = max(singles, key=lambda n: (results[n]["R@5"], results[n]["R@100"]))

    # ---------------------------------------------------------------- single experts (Table 6)
    table6 = []
    specs = [("title", "dense"), ("title", "bm25"), ("plot", "dense"), ("plot", "bm25"), ("genre", "dense"),
             ("author", "dense")]
    for cname, cdf in clue_sets.items():
        given = clues_na_as_none(cdf)  # N/A clues as None
        for field, backend in specs:
            col = clue_column(field)
            has = given[col].notna() if col in cdf else pd.Series(False, index=cdf.index)
            e = FieldExpert(index, field, backend)
            row = {"clues": cname, "expert": f"{field} ({backend})", "% not N/A": round(100 * has.mean(), 1)}
            if e.empty_field:
                row["note"] = f"book field {e.book_fields[0]!r} empty on Reddit-TOMT"
            elif has.any():
                row.update(evaluate({row["expert"]: e}, cdf[has], vqrels)[row["expert"]])
            table6.append(row)
            print(row)
        has_year = given[YEAR_COLUMN].notna() if YEAR_COLUMN in cdf else pd.Series(False)
        table6.append({"clues": cname, "expert": "date (symbolic)", "% not N/A": round(100 * has_year.mean(), 1),
                       "note": "Reddit-TOMT books have no year: score is the neutral 1.0 for every book"})

    # ---------------------------------------------------------------- fused pipeline + ablation
    experts, base_name, cand_experts = recipe.recipe_experts(index, ft)
    fused = {}
    for cname, cdf in clue_sets.items():
        with _common.timer(timings, f"fused_{cname}_s"):
            pipe = recipe.build_pipeline(index, ft, pt.Transformer.from_df(cdf), weights=weights_path)
            # expert scores once; every row below re-weights the same features
            feats = pipe.fuser.features((pipe.decomposer >> pipe.candidates)(val))
            runs = {f"Fused pipeline ({cname} clues, fitted weights)": pipe.fuser.fuse(feats),
                    f"Plain sum of min-max experts ({cname} clues)": pipe.fuser.fuse(feats,
                                                                                     np.ones(len(pipe.fuser.names)))}
            for name in [n for n in experts if n != base_name]:
                w = np.where(np.array(pipe.fuser.names) == name, 0.0, pipe.fuser.weights)
                runs[f"  ablation ({cname}): without {name}"] = pipe.fuser.fuse(feats, w)
            fused.update(evaluate(runs, val, vqrels, tables if cname == "rules" else None))
    show(fused)
    results.update(fused)

    curve = []
    if not args.no_curve:
        with _common.timer(timings, "curve_s"):
            curve = corpus_curve(index, val, vqrels, clue_sets["rules"], experts, base_name, cand_experts, weights)
    birco = {}
    if not args.no_birco:
        with _common.timer(timings, "birco_s"):
            birco = birco_section(ft, weights_path)
    timings["total_s"] = round(time.time() - t_start, 1)

    plot = pd.concat(tables, ignore_index=True)
    plot = plot[~plot["name"].str.contains("ablation|Plain sum|concatenated", regex=True)]
    ptt.plot_recall_at_k(plot, _common.results_dir() / f"{NAME}_recall.png", title="Recall@k, Reddit-TOMT validation",
                         highlight=["Fused pipeline (rules clues, fitted weights)"])
    head = "Fused pipeline (rules clues, fitted weights)"
    margin = {m: round(results[head][m] - results[best_single][m], 4) for m in ("R@5", "R@10", "R@20", "R@100")}
    payload = {"dataset": "reddit-tomt-books", "split": "validation", "n_queries": len(val), "corpus": len(index),
               "fit": {"split": "train", "n_queries": recipe.TUNING_QUERIES,
                       "sample": "recipe.tuning_split: train.sample(300, random_state=0)", "clues": "rules",
                       "metric": recipe.FIT_METRIC, "weights": weights, "train_slice_R@5": fitted.fit_score},
               "clues": "RuleClueExtractor (pyterrier_tot.decomposition.rule_clue_extractor)",
               "clue_sets": list(clue_sets), "fine_tuned": ft_meta,
               "candidates": {"base": base_name, "k": recipe.BASE_K, "expert_k": recipe.EXPERT_K,
                              "experts": cand_experts},
               "results": results, "best_single": best_single, "margin_fused_vs_best_single": margin,
               "table6": table6, "curve": curve, "birco": birco, "timings": timings}
    _common.write_results(NAME, payload, markdown(payload))


def birco_section(ft, weights_path) -> dict:
    """BIRCO WhatsThatBook dev: same-run baselines and the pipeline with the Reddit-fitted weights (BIRCO has no
    training split, so nothing is fitted on it). Its books have no titles: the title experts score nothing."""
    ds = ptt.get_dataset("birco-wtb")
    index = ptt.BookIndex(ds)
    topics, qrels = ds.get_topics("dev"), ds.get_qrels("dev")
    systems = {"BM25 (title+text)": index.bm25(), "Dense MiniLM zero-shot": index.dense()}
    if ft:
        systems["Dense MiniLM fine-tuned (Reddit train)"] = index.dense(ft)
    best_of = list(systems)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*empty title.*")
        systems["Fused pipeline (rules clues, Reddit-fitted weights)"] = recipe.build_pipeline(
            index, ft, weights=weights_path)
        results = evaluate(systems, topics, qrels)
    show(results, "BIRCO ")
    best = max(best_of, key=lambda n: (results[n]["R@5"], results[n]["R@100"]))
    return {"n_queries": len(topics), "corpus": len(index), "results": results, "best_single": best}


def corpus_curve(index, val, vqrels, val_rules, experts, base_name, cand_experts, weights):
    """R@5 / R@100 of BM25, dense and the fused pipeline as negatives are added to the validation gold books."""
    from pyterrier_tot.datasets import RedditTomtBooks

    corpus = index.corpus
    gold_val = set(vqrels["docno"].astype(str))
    gold_all = set(RedditTomtBooks(corpus="gold").get_corpus_df()["docno"].astype(str))
    rng = np.random.default_rng(0)
    other_gold = [d for d in corpus["docno"] if d in gold_all and d not in gold_val]
    negatives = [d for d in corpus["docno"] if d not in gold_all]
    order = list(gold_val) + list(rng.permutation(other_gold)) + list(rng.permutation(negatives))
    sizes = [len(gold_val), 1000, len(gold_all), 2300, len(corpus)]
    dense_names = [n for n, e in experts.items() if isinstance(e, FieldExpert) and e.backend == "dense"]
    full = {n: FieldExpert(index, experts[n].field, "dense", model=experts[n].model, num_results=len(corpus),
                           normalise=None)(val_rules) for n in dense_names}  # full-depth dense runs, once
    rows = []
    for size in pt.tqdm(sizes, desc="corpus sizes"):
        keep = set(order[:size])
        sidx = ptt.BookIndex(corpus[corpus["docno"].isin(keep)], path=_common.WORK / "decomposition-curve" / f"n{size}")
        runs = {n: pt.model.add_ranks(r[r["docno"].isin(keep)].copy()) for n, r in full.items()}
        runs["bm25"] = base_expert(sidx, "bm25", num_results=1000, normalise=None)(val_rules)
        runs["title_bm25"] = FieldExpert(sidx, "title", "bm25", num_results=1000, normalise=None)(val_rules)
        tops = [(pt.Transformer.from_df(runs[n]) % (recipe.BASE_K if n == base_name else recipe.EXPERT_K))(val_rules)
                for n in [base_name, *cand_experts]]
        cands = pd.concat([t[["qid", "docno"]] for t in tops]).drop_duplicates().merge(val_rules, on="qid")
        fuser = WeightedFuser([RunTable(runs[n], n) if n in runs else experts[n] for n in experts],
                              [weights[n] for n in experts], names=list(experts))
        systems = {"BM25": runs["bm25"], "Dense": runs["dense"], "Dense FT": runs.get(base_name),
                   "Fused": fuser(cands.assign(score=0.0))}
        systems = {n: s for n, s in systems.items() if s is not None and not (n == "Dense FT" and base_name == "dense")}
        res = evaluate(systems, val, vqrels)
        row = {"corpus_size": size, **{f"{n} R@5": r["R@5"] for n, r in res.items()},
               **{f"{n} R@100": r["R@100"] for n, r in res.items() if n != "Dense FT"}}
        print("curve", row)
        rows.append(row)
    return rows


def markdown(p) -> str:
    res = p["results"]
    lines = ["# Decomposition pipeline on Reddit-TOMT (Books) validation", "",
             f"{p['n_queries']} validation queries, corpus {p['corpus']} books. Fuser weights fitted on "
             f"{p['fit']['n_queries']} TRAIN queries ({p['fit']['sample']}) with rule clues, metric R@5; validation "
             f"is never used for fitting. Clues: {p['clues']}. Candidates: {p['candidates']}.", "",
             f"Fitted weights: `{json.dumps({k: round(v, 3) for k, v in p['fit']['weights'].items()})}`", "",
             "Fine-tuned base: " + (f"`{p['fine_tuned']['kind']}` {p['fine_tuned']['n_pairs']} pairs, "
                                    f"{p['fine_tuned']['steps']} steps, {p['fine_tuned']['seconds']} s "
                                    f"(batch {p['fine_tuned']['batch_size']}, max_seq_length "
                                    f"{p['fine_tuned']['max_seq_length']}, lr {p['fine_tuned']['lr']})"
                                    if p["fine_tuned"] else "not available in this run"), "",
             "## Results (same run)", ""]
    df = pd.DataFrame([{"system": k, **{m: v[m] for m in ("R@5", "R@10", "R@20", "R@100", "MRR")}}
                       for k, v in res.items()])
    lines += [_common.md_table(df), "",
              f"Best single retriever: **{p['best_single']}**. Fused (rules) minus best single: "
              f"`{p['margin_fused_vs_best_single']}`.", "",
              "## Single experts (paper Table 6; R@k over the queries whose clue is not N/A)", ""]
    t6 = pd.DataFrame(p["table6"])
    for c in ("n", "R@5", "R@10", "R@20", "R@100", "note"):
        if c not in t6:
            t6[c] = ""
    t6 = t6[["clues", "expert", "% not N/A", "n", "R@5", "R@10", "R@20", "R@100", "note"]]
    t6["n"] = t6["n"].map(lambda v: "" if v == "" or pd.isna(v) else str(int(v)))
    t6["% not N/A"] = t6["% not N/A"].map(lambda v: f"{float(v):.1f}")
    t6 = t6.fillna("")
    lines += [_common.md_table(t6), ""]
    if p["curve"]:
        lines += ["## Corpus-size curve (paper Figure 2): validation gold books, then other gold books, then "
                  "negatives", "", _common.md_table(pd.DataFrame(p["curve"]).astype({"corpus_size": str})), ""]
    if p.get("birco"):
        b = p["birco"]
        bdf = pd.DataFrame([{"system": k, **{m: v[m] for m in ("R@5", "R@10", "R@20", "R@100", "MRR")}}
                            for k, v in b["results"].items()])
        lines += [f"## BIRCO WhatsThatBook dev ({b['n_queries']} queries, {b['corpus']} books; weights fitted on "
                  "Reddit train, nothing fitted on BIRCO; its books have no titles)", "", _common.md_table(bdf), "",
                  f"Best single retriever: **{b['best_single']}**.", ""]
    lines += ["## Notes", "",
              "- Reddit-TOMT books have only title + text: the author and genre experts see empty book fields and "
              "the date expert gives the neutral 1.0 to every book, so the title / plot experts and the full-query "
              "retrievers carry the signal.",
              "- The fine-tuned base never saw the 300 fitting queries (trained on the other training queries); "
              "validation queries are used only for the numbers above.",
              "- Ablation rows zero one fitted weight on the same cached features (no re-fit).",
              "- Concatenated clues: `ClueConcatenator()` (pyterrier_tot.query.rewriters) joins the non-N/A clues "
              "with '. ' in the order title, author, date, cover, genre, plot (before #12 the benchmark joined them "
              "with ' ' in the order title, author, genre, cover, plot, date).",
              "- Every number comes from `pt.Experiment` (ir_measures); precomputed runs enter it through "
              "`pt.Transformer.from_df`. Recall@k curves: `decomposition_pipeline_recall.png`.",
              "- The curve re-uses the full-corpus dense rankings (a dense score does not depend on the other books) "
              "and builds a BM25 index per corpus size; at the full corpus it equals the fused row above.",
              "- Re-render this file from the JSON: `python benchmarks/recipe/decomposition_pipeline.py --render`.", "",
              "Timings (s): `" + json.dumps(p["timings"]) + "`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
