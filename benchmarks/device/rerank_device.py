"""Issue 31.4 on a GPU: a second stage that re-scores the default recipe's top ``k`` with a second mpnet bi-encoder,
trained from the recipe's fine-tuned base on the recipe's *own* near misses (negatives from its top
``MINE_DEPTH`` on the training queries outside the tuning slice). The earlier cross-encoders (a new scoring head
over 1,553 requests) never came near the recipe; a bi-encoder keeps the base's pretrained scoring and only moves
it away from the books the recipe confuses with the answer.

    python benchmarks/device/rerank_device.py export .dev/rr                   # here: data + the recipe's runs
    python benchmarks/device/rerank_device.py split BASE_DIR .dev              # here: the base as fp16 upload chunks
    python3 benchmarks/device/rerank_device.py run .dev/rr /tmp/base OUT       # there: train VARIANTS, score, choose
    python benchmarks/device/rerank_device.py install OUT                      # here: the chosen model into the cache
    python benchmarks/device/rerank_device.py evaluate OUT                     # here: results/rerank_device.*

Protocol: every variant is trained on the same training queries the base learned from (the tuning slice is never
trained on); each re-scores the recipe's top ``k`` by ``alpha * cos + (1 - alpha) * minmax(recipe)`` (the
library's ``DenseReranker``); the variant, ``k`` and ``alpha`` are chosen on the tuning slice for the mean of
``recipe.FIT_METRIC``, a setting admitted only if no ``recipe.FLOOR_METRIC`` measure falls below the recipe alone
there (alpha 0 is the recipe itself). Validation is scored on the machine for the report, never used for a choice;
the kept-or-not verdict comes from ``rerank_device.py evaluate`` here, on the installed model, through the library.
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/

ROOT = Path(__file__).resolve().parents[2]  # the repository (benchmarks/device/ is two down)
MINE_DEPTH, KEEP = 30, 100  # negatives from the recipe's top 30; the top 100 re-scored at most
#: name -> (negatives per example, epochs, lr, clue forms as extra anchors)
VARIANTS = {"n2-e1": (2, 1, 2e-5, True), "n4-e1": (4, 1, 2e-5, True), "n2-e2": (2, 2, 2e-5, True)}
KS = (10, 20, 50, 100)
ALPHAS = tuple(round(a / 10, 1) for a in range(11))


def _recipe_key(split: str, pipe) -> str:
    """The cache key of the default recipe's run of ``split`` (read by second_stage_device.py too): its fitted
    weights name the models and the tuning queries they were fitted on, its repr the stages and depth, so a
    refitted, retrained or deepened recipe is never read from an older run."""
    import _common

    return _common.pipeline_key(f"recipe-{split}", pipe)


def _default(ds, index) -> tuple:
    """(fine-tuned base {expert: folder}, helpers, fitted weights path) of the default recipe, from the cache."""
    from pyterrier_tot import recipe

    fine = recipe.fine_tuned_bases(ds, index, recipe.DEFAULT_BASE, train=False)
    helpers = recipe.fine_tuned_bases(ds, index, recipe.default_helpers(recipe.DEFAULT_BASE), train=False,
                                      role="helper")
    return fine, helpers, recipe.fitted_weights(ds, index, fine, helpers=helpers)


def _runs(ds, index, pipe, splits: dict, seconds: dict) -> dict:
    import _common

    work = _common.WORK / "rerank_device"
    out = {}
    for name, (topics, _) in splits.items():
        run = _common.cached_run(work, _recipe_key(name, pipe), lambda t=topics: pipe(t), seconds, topics)
        run = run.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        out[name] = run[run.groupby("qid").cumcount() < KEEP]
    return out


def export(kit: Path) -> None:
    import _common  # noqa: F401  (offline)

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.decomposition.rule_clue_extractor import clue_form_queries
    from pyterrier_tot.recipe.protocol import text_fingerprint

    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    pipe = recipe.tuned_pipeline(ds, index)  # the default: mpnet + its helper, 1000 deep
    splits = {"rest": recipe.train_data(ds, "rest"), "tuning": recipe.train_data(ds, "tuning"),
              "validation": (ds.get_topics("validation"), ds.get_qrels("validation"))}
    seconds: dict = {}
    runs = _runs(ds, index, pipe, splits, seconds)
    data = {"corpus": index.corpus[["docno", "title", "text"]].fillna("").astype(str).to_dict("records"),
            "clue_forms": clue_form_queries(ptt.RuleClueExtractor()(splits["rest"][0])).to_dict("records"),
            "pipeline": repr(pipe), "seconds": seconds,
            "rest_text": text_fingerprint(splits["rest"][0])}  # what install records (and checks against)
    for name, (topics, qrels) in splits.items():
        data[name] = {"topics": topics[["qid", "query"]].astype(str).to_dict("records"),
                      "qrels": qrels[["qid", "docno", "label"]].astype({"qid": str, "docno": str}).to_dict("records"),
                      "run": runs[name][["qid", "docno", "score"]].to_dict("records")}
    kit.mkdir(parents=True, exist_ok=True)
    with gzip.open(kit / "rr.json.gz", "wt", encoding="utf8") as f:
        json.dump(data, f)
    print({k: len(v["topics"]) for k, v in data.items() if isinstance(v, dict) and "topics" in v}, seconds)


def split(base: Path, dev: Path, chunk_mib: float = 55.0) -> None:
    """The model folder ``base`` as fp16 weights cut into ``dev/b1/w00``, ``dev/b2/w01``, ... (one upload each: the
    device's working tree is capped at 64 MiB) + ``dev/b1/rest.tar`` (its other files)."""
    import tarfile

    from safetensors.torch import load_file, save

    weights = load_file(str(base / "model.safetensors"))
    blob = save({k: v.half() if v.is_floating_point() else v for k, v in weights.items()})
    size = int(chunk_mib * 2 ** 20)
    for n, i in enumerate(range(0, len(blob), size)):
        d = dev / f"b{n + 1}"
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("w[0-9][0-9]"):
            old.unlink()
        (d / f"w{n:02d}").write_bytes(blob[i:i + size])
    with tarfile.open(dev / "b1" / "rest.tar", "w") as tar:
        for f in base.rglob("*"):
            if f.is_file() and f.name != "model.safetensors":
                tar.add(f, arcname=str(f.relative_to(base)))
    print(base.name, "->", len(blob), "bytes fp16 in", -(-len(blob) // size), "upload chunks")


def _minmax(x):
    lo, hi = x.min(), x.max()
    return (x - lo) / (hi - lo) if hi > lo else x * 0.0


def mix(run, cos: dict, k: int, alpha: float):
    """The recipe's ranking with its top ``k`` re-scored as the library's ``DenseReranker`` does (cosine as is,
    the recipe's scores min-max'd in the block), placed above the rest of the top 100 (kept in order)."""
    import pandas as pd

    parts = []
    for qid, g in run.groupby("qid", sort=False):
        g = g.sort_values("score", ascending=False, kind="stable")
        top, low = g.iloc[:k].copy(), g.iloc[k:].copy()
        c = top["docno"].map(cos[qid]).to_numpy(dtype=float)
        top["score"] = alpha * c + (1 - alpha) * _minmax(top["score"].to_numpy(dtype=float))
        low["score"] = -1e3 - pd.Series(range(len(low)), index=low.index, dtype=float)
        parts += [top, low]
    return pd.concat(parts)


def gold_ranks(run, qrels: list) -> dict:
    """qid -> 1-based ranks of its relevant books in ``run`` (0: absent), ties by docno descending (trec_eval)."""
    gold = {}
    for r in qrels:
        if int(r["label"]) > 0:
            gold.setdefault(r["qid"], []).append(r["docno"])
    out = {}
    for qid, g in run.groupby("qid", sort=False):
        order = g.sort_values(["score", "docno"], ascending=[False, False], kind="stable")["docno"].tolist()
        pos = {d: n + 1 for n, d in enumerate(order)}
        out[qid] = [pos.get(d, 0) for d in gold.get(qid, [])]
    for qid in gold:
        out.setdefault(qid, [0] * len(gold[qid]))
    return out


def floor_measures(ranks: dict) -> dict:
    """The recipe's floor measures (R@1..R@100, RR) from gold ranks, by ir_measures, unrounded."""
    from base_grid_device import measures

    out = measures(ranks, cuts=(1, 2, 3, 5, 10, 20, 30, 50, 100), digits=None)
    return {("RR" if k == "MRR" else k): v for k, v in out.items()}


def choose(table: list) -> dict:
    """The best admitted row (objective desc, then alpha asc, then k asc); ``table`` rows carry their tuning
    measures and the recipe's (alpha 0)."""
    ok = [r for r in table if not r["below"]]
    return max(ok, key=lambda r: (round(r["objective"], 12), -r["alpha"], -r["k"]))


def grid(run, cos: dict, qrels: list, variant: str, ks=KS) -> list:
    base = floor_measures(gold_ranks(run, qrels))
    rows = []
    for k in ks:
        for a in ALPHAS:
            m = floor_measures(gold_ranks(mix(run, cos, k, a), qrels)) if a else base
            rows.append({"variant": variant, "k": k, "alpha": a, **m,
                         "objective": sum(m[n] for n in ("R@1", "R@5", "R@10", "R@20", "R@100", "RR")) / 6,
                         "below": [n for n in m if m[n] < base[n] - 1e-12]})
    return rows


def ce_grid(kit: Path, out: Path) -> dict:
    """The cross-encoders of ``second_stage_device.py run`` (scores in ``out/grid_results.json``) mixed into the
    recipe's top k (10, 20) as the library's ``CrossEncoderReranker`` mixes them (both scores min-max'd over the
    block), chosen on the tuning slice as ``choose``; validation rows of the same settings for the report. Packs
    the chosen model's weights for the trip back when a setting with alpha > 0 is admitted."""
    import pandas as pd

    data = json.load(gzip.open(kit / "ce.json.gz", "rt", encoding="utf8"))
    res = json.loads((out / "grid_results.json").read_text())
    qrels = {"tuning": data["tuning_qrels"], "validation": data.get("validation_qrels", [])}
    runs = {sp: pd.DataFrame([(c["qid"], d, sc) for c in data.get(sp, []) for d, sc in zip(c["docnos"], c["scores"])],
                             columns=["qid", "docno", "score"]) for sp in ("tuning", "validation")}
    rows = {"tuning": [], "validation": []}
    for name, m in res["models"].items():
        for sp in ("tuning", "validation"):
            if sp not in m["scores"]:
                continue
            scored = m["scores"][sp]  # every candidate list (a dry run: a few)
            run_sp = runs[sp][runs[sp]["qid"].isin(scored)]
            qrels_sp = [r for r in qrels[sp] if r["qid"] in scored]
            for k in (10, 20):
                cos = {}
                for c in (c for c in data[sp] if c["qid"] in scored):
                    x = scored[c["qid"]][:k]
                    lo, hi = min(x), max(x)
                    cos[c["qid"]] = {d: (v - lo) / (hi - lo) if hi > lo else 0.0 for d, v in zip(c["docnos"], x)}
                rows[sp] += grid(run_sp, cos, qrels_sp, name, ks=(k,))
    best = choose(rows["tuning"])
    res["ce_choice"] = {k: best[k] for k in ("variant", "k", "alpha", "objective")}
    res["ce_grid"] = rows
    (out / "grid_results.json").write_text(json.dumps(res))
    print("cross-encoder chosen on the tuning slice:", res["ce_choice"], flush=True)
    if best["alpha"] > 0:
        from base_grid_device import pack

        res["chosen"] = best["variant"]
        (out / "grid_results.json").write_text(json.dumps(res))
        pack(out)
    return res["ce_choice"]


def run(kit: Path, model_dir: str, out: Path, dry: bool = False) -> None:
    import pandas as pd
    import torch
    from base_grid_device import _library, pack
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    from pyterrier_tot.recipe import second_stage as ss

    data = json.load(gzip.open(kit / "rr.json.gz", "rt", encoding="utf8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    corpus = pd.DataFrame(data["corpus"])
    texts = dict(zip(corpus["docno"], ("\n".join(r).strip() for r in corpus[["title", "text"]].itertuples(False))))
    rest, rq = pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"])
    runs = {s: pd.DataFrame(data[s]["run"]).astype({"qid": str, "docno": str}) for s in ("rest", "tuning",
                                                                                          "validation")}
    variants = dict(VARIANTS)
    if dry:  # a check of the code on a CPU: few queries, two steps, one variant
        keep = lambda s, n: set(r["qid"] for r in data[s]["topics"][:n])  # noqa: E731
        for s, n in (("rest", 16), ("tuning", 12), ("validation", 8)):
            q = keep(s, n)
            data[s]["topics"] = [r for r in data[s]["topics"] if r["qid"] in q]
            runs[s] = runs[s][runs[s]["qid"].isin(q)]
        rest = pd.DataFrame(data["rest"]["topics"])
        variants = {"n2-e1": VARIANTS["n2-e1"]}
    forms = pd.DataFrame(data["clue_forms"])
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "pipeline": data["pipeline"], "models": {}, "grid": [], "protocol": __doc__.split("\n\n")[2],
           "rest_text": data.get("rest_text")}
    need = {s: sorted(set(runs[s]["docno"])) for s in ("tuning", "validation")}

    def cosines(model, split: str) -> dict:
        qs = data[split]["topics"]
        enc = lambda t: model.encode(t, batch_size=128, convert_to_tensor=True, normalize_embeddings=True)  # noqa
        with torch.no_grad():
            dv = enc([texts[d] for d in need[split]])
            qv = enc([q["query"] for q in qs])
            sims = (qv.float() @ dv.float().T).cpu().numpy()
        at = {d: i for i, d in enumerate(need[split])}
        cos = {}
        idx = {q["qid"]: n for n, q in enumerate(qs)}
        for qid, g in runs[split].groupby("qid", sort=False):
            cos[qid] = {d: float(sims[idx[qid], at[d]]) for d in g["docno"]}
        return cos

    for name, (n_neg, epochs, lr, use_forms) in variants.items():
        examples = ss.reranker_examples(rest, rq, corpus, runs["rest"], n_neg, MINE_DEPTH, 0,
                                        forms if use_forms else None)
        path = (out / "models" if dry else Path("/tmp/rr")) / name
        et.train_biencoder(examples, path, base_model=model_dir, epochs=epochs, lr=lr, device=device, amp=False,
                           show_progress_bar=False, seed=0, kind="reranker",
                           extra_metadata={"mined_from": [f"recipe top {MINE_DEPTH}"], "negatives": n_neg,
                                           "clue_forms": use_forms, "field": "title+text"},
                           **({"max_steps": 2} if dry else {}))
        model = SentenceTransformer(str(path), device=device)
        info = {"path": str(path), "n_examples": len(examples), "negatives": n_neg, "epochs": epochs, "lr": lr,
                "seconds": json.loads((path / et.METADATA_FILE).read_text()).get("seconds")}
        for split in ("tuning", "validation"):
            cos = cosines(model, split)
            info[f"cos_{split}"] = cos
            rows = grid(runs[split], cos, data[split]["qrels"], name)
            if split == "tuning":
                res["grid"] += rows
            else:
                info["validation_grid"] = rows
        res["models"][name] = info
        del model
        print(f"[{time.time() - t0:6.0f}s] {name}: {len(examples)} examples, trained in {info['seconds']} s",
              flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "rr_results.json").write_text(json.dumps(res))
    best = choose(res["grid"])
    res["choice"] = {k: best[k] for k in ("variant", "k", "alpha", "objective")}
    res["chosen"] = best["variant"]
    res["seconds"] = round(time.time() - t0, 1)
    (out / "rr_results.json").write_text(json.dumps(res))
    print("chosen on the tuning slice:", res["choice"], f"| {res['seconds']} s", flush=True)
    if best["alpha"] > 0 or dry:  # a second stage admitted: its weights go back (fp16 chunks, 16 MiB each)
        pack(out, results="rr_results.json", parts=out / "parts" if dry else Path("/tmp/parts"))


def _tuning_tables(res: dict) -> list:
    """Each variant's best admitted setting on the tuning slice (and the recipe alone), with the same setting's
    validation measures as the GPU machine computed them (reported, never used for a choice)."""
    cols = ["R@1", "R@5", "R@10", "R@20", "R@100", "RR"]
    rows = []
    for name, m in res["models"].items():
        mine = [r for r in res["grid"] if r["variant"] == name]
        if not rows:
            alone = next(r for r in mine if r["alpha"] == 0)
            val = next(r for r in m["validation_grid"] if r["alpha"] == 0)
            rows.append({"system": "recipe alone", **{f"tuning {c}": alone[c] for c in cols},
                         **{f"validation {c}": val[c] for c in cols}})
        best = choose(mine)
        val = next(r for r in m["validation_grid"] if r["k"] == best["k"] and r["alpha"] == best["alpha"])
        rows.append({"system": f"{name} (k {best['k']}, alpha {best['alpha']})",
                     **{f"tuning {c}": best[c] for c in cols}, **{f"validation {c}": val[c] for c in cols},
                     "objective": best["objective"], "train_s": m["seconds"]})
    return rows


def markdown(p: dict) -> str:
    import pandas as pd

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _common

    tun = pd.DataFrame(p["tuning"])
    md = ["# A second stage: a bi-encoder re-ranker trained on the recipe's near misses (issue 31.4)", "",
          f"Trained on {p['device']} (torch {p['torch']}, fp32; `benchmarks/device/rerank_device.py run`, "
          f"{p['gpu_seconds']} s for three variants), evaluated here through the library "
          f"(`rerank_device.py evaluate`: the default recipe, built from its cached bases and fitted weights as "
          "`tuned_pipeline(ds)` builds it, then the `DenseReranker` that `second_stage.reranker_stage(ds)` returns; "
          f"the model `{p['model']}` fetched back as fp16 weights and stored in fp32).", "",
          "Each variant starts from the recipe's fine-tuned mpnet base and trains on the 1,553 training queries "
          "outside the tuning slice (the base's own), each with its gold book and negatives drawn from the first "
          "30 non-gold books of the default recipe's ranking, the rule-clue form of the query as a second anchor "
          "(MultipleNegativesRankingLoss, lr 2e-5). It re-scores the recipe's top k by alpha * cos + (1 - alpha) "
          "* minmax(recipe). Variant, k (10/20/50/100) and alpha (0-1 by .1) are chosen on the tuning slice for "
          "the mean of R@1/5/10/20/100/MRR, a setting admitted only if no R@1/2/3/5/10/20/30/50/100 or MRR falls "
          f"below the recipe there. Chosen: **{p['choice']['variant']}, k {p['choice']['k']}, alpha "
          f"{p['choice']['alpha']}**.", "",
          "## The choice on the tuning slice (GPU machine's own evaluator; validation columns reported, not used)",
          "", "RR here is over the recipe's top 100 (a gold book below it counts 0), so it can be a little under the "
          "library's MRR over 1000 below.", "", _common.md_table(tun.astype(object).fillna("")), ""]
    for tag, title in (("validation", "Validation (233 queries)"),
                       ("birco", "BIRCO WhatsThatBook dev (57 queries; nothing fitted here)")):
        t = pd.DataFrame(p["results"][tag])
        for c in ("R@5", "MRR"):  # queries up / down against the recipe
            t[f"{c} +/-"] = [f"{u:.0f}/{d:.0f}" if u == u else "" for u, d in zip(t[f"{c} +"], t[f"{c} -"])]
        cols = ["name"] + [c for c in ("R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR", "nDCG@10",
                                       "nDCG@1000", "R@5 +/-", "MRR +/-")]
        md += [f"## {title}", "", "p: paired t-test against the recipe (default). s/query: this machine "
               "(2 cores); a stage row adds its own seconds to the recipe's.", "",
               _common.md_table(t[cols + [c for c in ("R@5 p-value", "MRR p-value", "s/query") if c in t]]
                                .astype(object).fillna("")), ""]
    ce = p.get("cross_encoder")
    if ce:
        rows = []
        for name, m in ce["models"].items():
            for sp in ("tuning", "validation"):
                for how, r in m[sp].items():
                    rows.append({"model": f"{name} ({m['epochs']} epoch(s), {m['train_s']:.0f} s)", "split": sp,
                                 "system": how, **{c: r.get(c) for c in ("R@1", "R@5", "R@10", "R@20")},
                                 "MRR": r.get("MRR", r.get("RR"))})
        md += ["## The design the issue names: a cross-encoder from the fine-tuned mpnet encoder", "",
               f"Trained on {ce['device']} (`second_stage_device.py run --tf32`: TF32 matrix products) from the "
               f"same base, a new scoring head, {ce['n_groups']} groups (gold + 7 negatives from the default "
               f"recipe's top 20), settings {ce['settings']} but the epochs; mixed into the recipe's top 10 / 20 "
               "by alpha * minmax(CE) + (1 - alpha) * minmax(recipe), chosen on the tuning slice as above: "
               f"**{ce['choice']}** (alpha 0: no second stage). The loss hardly moves (first -> last below): the "
               "new head over 1,553 requests does not learn to rank these books. Alone over the top 20 (R@20 "
               "is the share of queries whose gold book is there); the alpha 0.1 row shows the smallest mix "
               "(MRR there is over the top 20 only).", "",
               _common.md_table(pd.DataFrame(rows).astype(object).fillna("")), "",
               "| model | first loss | last loss |", "|---|---|---|"]
        md += [f"| {n} | {m['first_loss']:.3f} | {m['last_loss']:.3f} |" for n, m in ce["models"].items()] + [""]
    return "\n".join(md)


MEASURES = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "RR", "nDCG@10", "nDCG@1000"]


def evaluate(out: Path) -> None:
    """Here, through the library: the installed re-ranker after the default recipe on validation and on BIRCO
    dev (nothing fitted there), beside BM25, the base alone and the recipe, paired t-tests against the recipe;
    seconds per query on this machine (the stage's own, added to the recipe's). Writes ``results/rerank_device.*``
    with the GPU run's tuning tables."""
    import _common

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.recipe import second_stage

    work = _common.WORK / "rerank_device"
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    fine, helpers, weights = _default(ds, index)
    base_path = next(iter(fine.values()))
    res = json.loads((out / "rr_results.json").read_text())
    n_neg, epochs, lr, forms = VARIANTS[res["chosen"]]
    chosen = dict(n_negatives=n_neg, epochs=epochs, lr=lr, clue_forms=forms, mine_depth=MINE_DEPTH,
                  k=res["choice"]["k"], alpha=res["choice"]["alpha"])
    lib = {k: second_stage.RERANKER[k] for k in chosen}
    if lib != chosen:  # the library's stage must be what the tuning slice chose, or the rows would be mislabelled
        raise SystemExit(f"second_stage.RERANKER {lib} is not the run's choice {chosen}: update it first")
    folder = second_stage.recipe_reranker(ds, index, train=False)
    if folder is None:
        raise SystemExit("no re-ranker in the cache: run `install` (or second_stage.recipe_reranker) first")
    bds = ptt.get_dataset("birco-wtb")
    sets = {"validation": (index, ds.get_topics("validation"), ds.get_qrels("validation")),
            "birco": (ptt.BookIndex(bds), bds.get_topics("dev"), bds.get_qrels("dev"))}
    tables = {}
    for tag, (idx, topics, qrels) in sets.items():
        pipe = recipe.build_pipeline(idx, fine, weights=weights, depth=recipe.DEPTH, helpers=helpers)
        tables[tag] = _rows(work, tag, idx, topics, qrels, pipe, base_path, folder)
    tuning = _tuning_tables(res)
    payload = {"device": res["device"], "torch": res["torch"], "choice": res["choice"], "gpu_seconds": res["seconds"],
               "variants": {n: {k: m[k] for k in ("n_examples", "negatives", "epochs", "lr", "seconds")}
                            for n, m in res["models"].items()},
               "model": Path(folder).name, "settings": second_stage.RERANKER, "tuning": tuning, "results": tables}
    _common.write_results("rerank_device", payload, markdown(payload))


def _rows(work: Path, tag: str, idx, topics, qrels, pipe, base_path, folder) -> list:
    import _common
    import pyterrier as pt

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.models.fingerprint import model_fingerprint
    from pyterrier_tot.recipe import bases, second_stage
    from pyterrier_tot.rerank.dense_reranker import DenseReranker

    R = second_stage.RERANKER
    seconds: dict = {}
    prec = recipe.encoding_precision(bases.base_expert_name("mpnet"))
    keyed = {"BM25": (f"{tag}-bm25", lambda: idx.bm25(num_results=1000)(topics)),
             "mpnet fine-tuned alone": (f"{tag}-base", lambda: idx.dense(base_path, precision=prec)(topics)),
             "recipe (default)": (_recipe_key(tag, pipe), lambda: pipe(topics))}
    runs = {n: _common.cached_run(work, k, make, seconds, topics) for n, (k, make) in keyed.items()}
    first = runs["recipe (default)"].merge(topics[["qid", "query"]].astype({"qid": str}), on="qid")
    stages = {f"recipe >> re-ranker (k {R['k']}, alpha {R['alpha']})":
              ("mixed", DenseReranker(idx, model=folder, k=R["k"], max_chars=None, alpha=R["alpha"])),
              f"re-ranker alone over the recipe's top {R['k']}":
              ("alone", DenseReranker(idx, model=folder, k=R["k"], max_chars=None))}
    one = first[first["qid"] == first["qid"].iloc[0]]
    for _, stage in stages.values():  # the model loaded and the books' vectors built outside the timing
        stage(one)
    model = (model_fingerprint(folder) or "")[:10]
    for name, (short, stage) in stages.items():
        key = f"{tag}-{Path(folder).name}-{model}-k{R['k']}-" + (f"a{R['alpha']:g}" if short == "mixed" else short)
        runs[name] = _common.cached_run(work, key, lambda st=stage: st(first), seconds, topics)
        keyed[name] = (key, None)
    names = list(runs)
    table = ptt.tot_experiment([pt.Transformer.from_df(r) for r in runs.values()], topics, qrels,
                               measures=MEASURES, names=names, round=None, verbose=False, baseline=2)
    recipe_s = seconds[_recipe_key(tag, pipe)]
    table["s/query"] = [(seconds[keyed[n][0]] + (recipe_s if n in stages else 0)) / len(topics) for n in names]
    return table.rename(columns=lambda c: c.replace("RR", "MRR")).to_dict("records")


def install(out: Path) -> Path:
    """The chosen re-ranker (fp16 chunks + ``rest.tar`` fetched into ``out``) as the cached folder that
    ``second_stage.recipe_reranker`` looks for, weights back in fp32, its record saying where it trained."""
    import _common  # noqa: F401  (offline)
    from base_grid_device import install_into

    import pyterrier_tot as ptt
    from pyterrier_tot.recipe import bases, second_stage
    from pyterrier_tot.recipe.protocol import qid_fingerprint, text_fingerprint, train_data

    res = json.loads((out / "rr_results.json").read_text())
    n_neg, epochs, lr, forms = VARIANTS[res["chosen"]]
    ds = ptt.get_dataset("reddit-tomt-books")
    base = bases.fine_tuned_base(ds, model="mpnet", train=False)
    rest = train_data(ds, "rest")[0]
    kit = res.get("rest_text")  # the text the model was trained on (recorded at export, carried by run)
    if kit is not None and kit != text_fingerprint(rest):
        raise SystemExit("the run trained on other texts of the training queries than the loader gives now: "
                         "export and run again")
    target = second_stage.reranker_dir(base, n_negatives=n_neg, epochs=epochs, lr=lr, clue_forms=forms,
                                       mine_depth=MINE_DEPTH)
    return install_into(out, target, str(base), res, "benchmarks/device/rerank_device.py", init=str(base),
                        chosen=res["choice"], train_qids=qid_fingerprint(rest), train_text=text_fingerprint(rest))


def add_cross_encoder(ce_out: Path) -> None:
    """Adds the mpnet cross-encoder run (``second_stage_device.py run --tf32`` + ``ce-grid`` on the GPU machine,
    fetched into ``ce_out``) to ``results/rerank_device.*``: the tuning choice and each model's rows."""
    from base_grid_device import measures

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _common

    res = json.loads((ce_out / "grid_results.json").read_text())
    models = {}
    for name, m in res["models"].items():
        rows = {}
        for sp in ("tuning", "validation"):
            mine = [r for r in res["ce_grid"][sp] if r["variant"] == name]
            rows[sp] = {"alone (top 20)": measures(m[sp]),
                        "alpha 0.1 (k 10)": next(r for r in mine if r["k"] == 10 and r["alpha"] == 0.1)}
        models[name] = {"epochs": m["epochs"], "train_s": m["seconds"], "first_loss": m["first_loss"],
                        "last_loss": m["last_loss"], **rows}
    payload = json.loads((_common.results_dir() / "rerank_device.json").read_text())
    payload["cross_encoder"] = {"device": res["device"], "tf32": res["tf32"], "settings": res["settings"],
                                "n_groups": res["n_groups"], "choice": res["ce_choice"], "models": models}
    (_common.results_dir() / "rerank_device.json").write_text(json.dumps(payload, indent=2, default=str))
    (_common.results_dir() / "rerank_device.md").write_text(markdown(payload))


def _common_render() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _common

    _common.rerender("rerank_device", markdown)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "export":
        export(Path(args[0]))
    elif cmd == "split":
        split(Path(args[0]), Path(args[1]))
    elif cmd == "add-ce":
        add_cross_encoder(Path(args[0]))
    elif cmd == "ce-grid":
        ce_grid(Path(args[0]), Path(args[1]))
    elif cmd == "install":
        install(Path(args[0]))
    elif cmd == "evaluate":
        evaluate(Path(args[0]))
    elif cmd == "render":
        _common_render()
    elif cmd == "run":
        run(Path(args[0]), args[1], Path(args[2]), dry="--dry" in args)
    else:
        raise SystemExit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    main()
