"""The tables of ``benchmarks/generative/results/generative.md`` from the rows ``benchmarks/generative/generative.py``
cached: same-run baselines, the ablation with CPU seconds, zero-shot constrained LMs, the generative expert in the
recipe."""
from __future__ import annotations

import json
from pathlib import Path

import _common

from pyterrier_tot import recipe

METRICS = ("Hits@1", "Hits@10", "MRR@20", "R@5")
EARLIER = Path(__file__).resolve().parent / "results" / "generative_epochs.json"


def baselines(ds, index, ft, cached_run, splits) -> dict:
    """BM25, the dense encoders the sentence backbones start from, and the recipe: runs on both splits."""
    systems = {"BM25 (index.bm25)": lambda: index.bm25(),
               "dense MiniLM, zero-shot (index.dense)": lambda: index.dense(),
               "dense fine-tuned MiniLM (index.dense(ft))": lambda: index.dense(ft),
               "recipe (tuned_pipeline)": lambda: recipe.tuned_pipeline(ds, index, fine_tuned=ft, verbose=False)}
    tags = ["bm25", "dense", "dense_ft", "recipe"]
    out = {}
    for (name, make), tag in zip(systems.items(), tags):
        out[name] = {split: cached_run(f"{split}_{tag}", lambda make=make, topics=topics: make()(topics))
                     for split, (topics, _) in splits(ds).items()}
    return out


def _fmt(v, digits=3):
    return "" if v is None or (isinstance(v, float) and v != v) else (f"{v:.{digits}f}" if isinstance(v, float)
                                                                      else str(v))


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _backbone(spec: dict) -> str:
    enc = "fine-tuned MiniLM" if spec["encoder"] == "ft" else "MiniLM"
    tuned = "frozen" if spec["train_encoder"] == 0 else f"top {spec['train_encoder']} layers trained"
    return f"{enc} ({spec['states']}, {tuned}) + {spec['layers']}-layer decoder"


#: (factor, row A, row B): pairs of trained rows that differ in one setting (B is the change)
FACTORS = [("epochs 5 -> 20", "sem-cheap-ft-e5", "sem-cheap-ft"),
           ("epochs 20 -> 50", "sem-cheap-ft", "sem-cheap-ft-e50"),
           ("pairs: + 1,553 real requests (index -> queries)", "sem-index-ft", "sem-queries-ft"),
           ("pairs: + 17,486 cheap pseudo-queries (queries -> cheap)", "sem-queries-ft", "sem-cheap-ft"),
           ("pairs: index -> cheap", "sem-index-ft", "sem-cheap-ft"),
           ("ids: title -> semantic (index pairs)", "title-index-ft", "sem-index-ft"),
           ("ids: title -> semantic (cheap pairs)", "title-cheap-ft", "sem-cheap-ft"),
           ("encoder: zero-shot -> fine-tuned MiniLM", "sem-cheap-minilm", "sem-cheap-ft")]


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def factors(trained, cached_run, splits, ds) -> list:
    """One line per factor both of whose rows ran: validation Hits@10 / MRR@20 of A and B, B - A, queries
    better / worse, paired t-test p over the per-query values (all validation queries)."""
    from ir_measures import RR, Success

    from pyterrier_tot.clarinet.report import paired  # means, B - A, better / worse, paired t-test

    topics, qrels = splits(ds)["validation"]
    by = {r["name"]: r for r in trained}
    out = []
    for label, a, b in FACTORS:
        if a not in by or b not in by:
            continue
        vals = {}
        qids = [str(q) for q in topics["qid"]]
        for m, meas in (("Hits@10", Success @ 10), ("MRR@20", RR @ 20)):
            va, vb = (_common.measures_per_query(cached_run(f"validation_{by[x]['model']}", None), qrels, [meas],
                                                 qids)[str(meas)] for x in (a, b))
            vals[m] = paired(vb, va)  # B against A: diff = B - A
        h, r = vals["Hits@10"], vals["MRR@20"]
        out.append([label, f"{a} -> {b}", h["mean_b"], h["mean_a"], f"{h['diff']:+.3f}",
                    f"{h['better']} / {h['worse']}", _p(h["p_t"]), r["mean_b"], r["mean_a"], f"{r['diff']:+.3f}",
                    _p(r["p_t"])])
    return out


def report(data, evaluate, cached_run, splits, work: Path) -> None:
    ds, index, ft = data
    base = baselines(ds, index, ft, cached_run, splits)
    rows = [json.loads(f.read_text()) for f in sorted((work / "rows").glob("*.json"))]
    trained = [r for r in rows if "spec" in r]
    genre = [r for r in rows if r["name"].startswith("genre-")]
    experts = [r for r in rows if r["name"].startswith("expert-")]
    res = {split: {n: evaluate({"x": runs[split]}, topics, qrels).iloc[0][list(METRICS)].astype(float).to_dict()
                   for n, runs in base.items()} for split, (topics, qrels) in splits(ds).items()}
    bm25_val = res["validation"]["BM25 (index.bm25)"]["Hits@10"]
    best = max(trained, key=lambda r: (r["tuning"]["Hits@10"], r["tuning"]["MRR@20"])) if trained else None

    head = [[n, *(res["validation"][n][m] for m in METRICS), res["tuning"][n]["Hits@10"]] for n in base]
    if best:
        head.append([f"generative, {best['name']} (best on the tuning slice)",
                     *(best["validation"][m] for m in METRICS), best["tuning"]["Hits@10"]])
    for g in genre:
        head.append([f"zero-shot {g['name']}", *(g["validation"].get(m) for m in METRICS),
                     g.get("tuning", {}).get("Hits@10")])

    abl = []
    for r in sorted(trained, key=lambda r: -r["tuning"]["Hits@10"]):
        s, t = r["spec"], r["training"]
        n_pairs = sum(t["pairs"].values())
        dec = r.get("decode_validation", {})
        abl.append([r["name"], s["ids"], f"{s['pairs']} ({n_pairs:,})", _backbone(s), s["epochs"],
                    r["tuning"]["Hits@10"], *(r["validation"][m] for m in METRICS), r.get("own_inputs_hits10"),
                    t["cpu_s"], t["wall_s"], dec.get("cpu_s_per_query")])
    if EARLIER.is_file():
        e = json.loads(EARLIER.read_text())
        v = e["validation_decoded_subset"]
        g = next(x for n, x in v.items() if n.startswith("generative"))
        tr = e["training"]
        abl.append(["smollm2-2blocks-e6 (earlier run)", "title (book-id)", f"base ({sum(e['pairs'].values()):,})",
                    "SmolLM2 cut to 2 blocks, all trained", 6, None, None, g["Hits@10"], g["MRR@20"], g["R@5"],
                    e.get("train_hits10_index:lead"), None, tr.get("seconds"), e.get("decode_s_per_query")])

    fac = factors(trained, cached_run, splits, ds)

    zs = []
    for g in genre:
        d = g.get("decode_validation", {})
        zs.append([g["name"], g["validation"].get("n"), *(g["validation"].get(m) for m in METRICS),
                   d.get("cpu_s_per_query"), d.get("wall_s")])

    ex = []
    for e in experts:
        for rec in e["table"]:
            ex.append([rec["name"], *(rec.get(m) for m in METRICS), rec.get("R@5 p-value"), rec.get("Hits@10 p-value")])

    md = f"""# Generative retrieval on Reddit-TOMT (Books), two CPU cores

Commands: `PYTHONPATH=. python benchmarks/generative/generative.py rows|genre|expert|pseudo ...`, then `... report`
(see the script's docstring). Training data: the training queries outside the recipe's tuning slice and pairs
made from the books; the headline variant and every fuser weight are chosen on the tuning slice (300 training
queries nothing trains on); validation (233 queries) is only evaluated. Same-run baselines: the runs below were
made by this benchmark's code in the same cache folder.

## Validation, all 233 queries

{_table(["system", *METRICS, "tuning Hits@10"], head)}

BM25 Hits@10 on validation: {bm25_val:.3f}.

## Ablation: id type x pairs x backbone x epochs (trained variants)

CPU s: ``time.process_time()`` of the training (both threads counted); the frozen encoder's outputs are shared
between rows, so the first row over an encoder paid for encoding all sources (see ``training.sources_encoded_before``
in the JSON). own-input Hits@10: 200 book descriptions it was trained on (memorisation).

{_table(["row", "ids", "pairs", "backbone", "epochs", "tuning Hits@10", *METRICS, "own-input Hits@10",
         "train CPU s", "train wall s", "decode CPU s/query"], abl)}

## Which factor moves Hits@10 (validation, rows that differ in one setting)

B - A over all 233 validation queries; better / worse: queries whose Hits@10 rose / fell; p: paired t-test
over the per-query values (Hits@10 is 0/1 per query).

{_table(["factor", "rows (A -> B)", "Hits@10 A", "Hits@10 B", "B - A", "better / worse", "p",
         "MRR@20 A", "MRR@20 B", "B - A", "p"], fac)}

## Zero-shot LLMs, decoding constrained to the corpus' titles

{_table(["mode", "queries", *METRICS, "CPU s/query", "wall s"], zs)}

## The generative score as one more expert of the recipe's fuser

{_table(["system", *METRICS, "R@5 p (paired t)", "Hits@10 p"], ex)}
"""
    extra = Path(__file__).resolve().parent / "results" / "generative_notes.md"
    if extra.is_file():
        md += "\n" + extra.read_text()
    _common.write_results("generative", {"baselines": res, "rows": rows}, md)
    print(md)
