"""Generative retrieval (GBS, issues 14 and 25) on Reddit-TOMT (Books) on two CPU cores: an ablation, zero-shot
constrained LLM decoding, and the generative score as an expert of the recipe, beside same-run baselines.

    PYTHONPATH=. python benchmarks/generative/generative.py rows sem-cheap-ft ...   # trained variants
    PYTHONPATH=. python benchmarks/generative/generative.py genre smollm2 [qwen]    # zero-shot, constrained
    PYTHONPATH=. python benchmarks/generative/generative.py expert sem-cheap-ft     # + recipe fuser
    PYTHONPATH=. python benchmarks/generative/generative.py pseudo --books 400      # Qwen pseudo-queries
    PYTHONPATH=. python benchmarks/generative/generative.py report                  # tables → results/

Protocol. Models train on the training queries outside the recipe's tuning slice (``recipe.train_data(ds,
"rest")``) and on pairs made from the books; choices (which variant is the headline, the fuser weights) are made
on the tuning slice (300 training queries nothing trains on); validation (233 queries) is only evaluated. Every
row is evaluated on both, Hits@1/10, MRR@20 and R@5 through ``pt.Experiment``. Each step caches its output
(models under ``cache_dir()/models``, runs and rows in ``benchmarks/.work/generative``), so ``report`` only
gathers. CPU seconds are ``time.process_time()`` of the process (both threads counted), wall seconds beside.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
import torch  # noqa: E402
from ir_measures import RR, R, Success  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import (
    cache_dir,  # noqa: E402
    recipe,  # noqa: E402
)
from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.models import auto_precision  # noqa: E402  (bf16 only where the hardware runs it)

warnings.filterwarnings("ignore")
NAME = "generative"
WORK = _common.WORK / NAME
DRY = {"on": False}  # --dry: a few pairs and queries, results under .work/generative-dry (a check of the code)
MEASURES = [Success @ 1, Success @ 10, RR @ 20, R @ 5]
COLS = {"Success@1": "Hits@1", "Success@10": "Hits@10", "RR@20": "MRR@20", "R@5": "R@5"}
QUERY_TOKENS = 256  # a request's head given to a zero-shot LM (the prefill is most of its cost)
PSEUDO_FILE = cache_dir() / "generative" / "pseudo_queries_qwen.jsonl"

#: The settings of a trained variant; each row of the ablation changes some of them.
DEFAULTS = {"ids": "semantic", "pairs": "cheap", "encoder": "ft", "states": "pooled", "train_encoder": 0,
            "epochs": 20, "lr": 1e-3, "batch_size": 64, "layers": 2, "source_tokens": 256,
            "precision": auto_precision(), "schedule": "linear", "seed": 0}
ROWS = {
    "sem-cheap-ft": {},
    "title-cheap-ft": {"ids": "title"},
    "semtitle-cheap-ft": {"ids": "semantic+title"},
    "sem-index-ft": {"pairs": "index"},
    "sem-queries-ft": {"pairs": "queries"},
    "sem-llm-ft": {"pairs": "llm"},
    "sem-cheap-minilm": {"encoder": "minilm"},
    "sem-cheap-ft-tokens": {"states": "tokens", "epochs": 10},
    "sem-cheap-ft-e5": {"epochs": 5},
    "sem-cheap-ft-e50": {"epochs": 50},
    "sem-cheap-ft-tuned": {"train_encoder": 2, "epochs": 2, "lr": 1e-3},
    "title-index-ft": {"ids": "title", "pairs": "index"},
}


def dataset():
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    return ds, index, recipe.fine_tuned_base(ds, train=False)


def evaluate(systems: dict, topics: pd.DataFrame, qrels: pd.DataFrame, baseline=None) -> pd.DataFrame:
    systems = {n: pt.Transformer.from_df(s) if isinstance(s, pd.DataFrame) else s for n, s in systems.items()}
    return ptt.tot_experiment(list(systems.values()), topics, qrels, measures=MEASURES, names=list(systems),
                              round=None, verbose=False, baseline=baseline).rename(columns=COLS)


def metrics(run: pd.DataFrame, topics: pd.DataFrame, qrels: pd.DataFrame) -> dict:
    row = evaluate({"x": run}, topics, qrels).iloc[0]
    return {c: float(row[c]) for c in COLS.values()}


def cached_run(name: str, make) -> pd.DataFrame:
    f = WORK / "runs" / f"{name}.jsonl"
    if f.is_file():
        return pd.read_json(f, orient="records", lines=True, dtype={"qid": str, "docno": str})
    df = make()[["qid", "docno", "score"]].astype({"qid": str, "docno": str})
    f.parent.mkdir(parents=True, exist_ok=True)
    df.to_json(f, orient="records", lines=True)
    return df


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - w0, 1), round(time.process_time() - c0, 1)


def splits(ds):
    tune, tqrels = recipe.train_data(ds, "tuning")
    out = {"tuning": (tune, tqrels), "validation": (ds.get_topics("validation"), ds.get_qrels("validation"))}
    return {k: (t.head(6), q) for k, (t, q) in out.items()} if DRY["on"] else out


# ------------------------------------------------------------------------------------------- trained variants
def identifiers(spec: dict, index, ft) -> dict:
    if spec["ids"] == "title":
        return gen.book_ids(index.corpus)
    sem = gen.identifiers.index_semantic_ids(index, ft)
    if spec["ids"] == "semantic":
        return sem
    titles = gen.book_ids(index.corpus)
    return {d: f"{sem[d]}{gen.identifiers.SEP}{titles[d]}" for d in sem}


def training_pairs(spec: dict, ds, index, ids: dict) -> pd.DataFrame:
    books = index.corpus.assign(full=index.corpus["title"].fillna("") + " " + index.corpus["text"].fillna(""))
    parts = [gen.indexing_pairs(books, ids, forms=("lead", "keywords", "description")),
             gen.indexing_pairs(books, ids, forms=("description",), text_field="full").assign(task="index:full")]
    if spec["pairs"] != "index":
        rest, qrels = recipe.train_data(ds, "rest")
        parts.append(gen.retrieval_pairs(rest, qrels, ids))
        if spec["pairs"] in ("cheap", "llm"):
            parts += [gen.cheap_pseudo_queries(books, ids, n=2, seed=spec["seed"]),
                      gen.keyphrase_queries(books, ids, n=2, seed=spec["seed"]),
                      gen.template_queries(books, ids, n=3, seed=spec["seed"]),
                      gen.clue_form_pairs(rest, qrels, ids)]
        if spec["pairs"] == "llm":
            parts.append(gen.read_pseudo_queries(PSEUDO_FILE, ids))
    pairs = pd.concat(parts, ignore_index=True)
    return pairs.sample(300, random_state=0) if DRY["on"] else pairs


def encoder_cache(spec: dict, save: dict = None) -> dict:
    """The frozen encoder's outputs, shared by the rows over the same encoder (kept in .work between runs)."""
    f = WORK / f"encoded-{spec['encoder']}-{spec['states']}-{spec['precision']}-{spec['source_tokens']}.pt"
    if save is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"keys": list(save), "pooled": torch.stack([v[0] for v in save.values()]) if save else None,
                    "states": [v[1] for v in save.values()]}, f)
        return save
    if not f.is_file():
        return {}
    blob = torch.load(f, weights_only=True)
    return {tuple(k): (p, st) for k, p, st in zip(blob["keys"], blob["pooled"], blob["states"])}


def build_model(name: str, spec: dict, ds, index, ft) -> tuple:
    """(the trained model's artifact, its training record): trained once, then loaded from the cache."""
    ids = identifiers(spec, index, ft)
    pairs = training_pairs(spec, ds, index, ids)
    key = hashlib.sha1(json.dumps([spec, len(pairs), "v1"], sort_keys=True).encode()).hexdigest()[:10]
    folder = cache_dir() / "models" / f"generative-{name}-{key}"
    if DRY["on"]:
        folder = WORK / "models" / folder.name
    if not (folder / "pt_meta.json").is_file():
        frozen = spec["train_encoder"] == 0
        cache = encoder_cache(spec) if frozen and not DRY["on"] else None
        bb = gen.sentence_backbone(ids, model=ft if spec["encoder"] == "ft" else None, codes=spec["ids"] != "title",
                                   states=spec["states"], train_encoder=spec["train_encoder"], layers=spec["layers"],
                                   precision=spec["precision"], cache=cache, seed=spec["seed"])
        n_cached = len(cache or {})
        print(f"{name}: {bb}, {len(pairs)} pairs {pairs['task'].value_counts().to_dict()}", flush=True)
        stats, wall, cpu = timed(lambda: gen.train(bb, pairs, epochs=spec["epochs"], batch_size=spec["batch_size"],
                                                   lr=spec["lr"], max_source_tokens=spec["source_tokens"],
                                                   schedule=spec["schedule"], seed=spec["seed"]))
        record = {**stats, "wall_s": wall, "cpu_s": cpu, "pairs": pairs["task"].value_counts().to_dict(),
                  "backbone": repr(bb), "threads": torch.get_num_threads(), "sources_encoded_before": n_cached}
        if cache is not None and len(cache) > n_cached and spec["states"] == "pooled":  # token states: GBs
            encoder_cache(spec, save=cache)
        gen.GenerativeRetriever(bb, ids, max_source_tokens=spec["source_tokens"]).save(
            folder, overwrite=True, training=record, spec=spec)
    model = gen.GenerativeModel(folder)
    return model, model.meta()["training"]


def run_row(name: str, ds, index, ft) -> dict:
    spec = {**DEFAULTS, **ROWS[name]}
    model, record = build_model(name, spec, ds, index, ft)
    retriever = model.retriever(num_results=20, num_beams=20, batch_size=32)
    row = {"name": name, "spec": spec, "model": Path(model.path).name, "training": record}
    for split, (topics, qrels) in splits(ds).items():
        run, wall, cpu = timed(lambda topics=topics, split=split: cached_run(
            f"{split}_{row['model']}", lambda: retriever(topics[["qid", "query"]])))
        row[split] = metrics(run, topics, qrels)
        if cpu > 1:  # a cached run took no time: keep the timing of the run that decoded
            row[f"decode_{split}"] = {"wall_s": wall, "cpu_s": cpu, "cpu_s_per_query": round(cpu / len(topics), 3)}
    sample = gen.indexing_pairs(index.corpus, retriever.ids, forms=("description",)).sample(
        6 if DRY["on"] else 200, random_state=0)
    row["own_inputs_hits10"] = gen.hits_at(retriever, sample, k=10)
    return row


def save_row(row: dict) -> None:
    f = WORK / "rows" / f"{row['name']}.json"
    old = json.loads(f.read_text()) if f.is_file() else {}
    for key in ("decode_tuning", "decode_validation"):  # timings measured by an earlier invocation
        if key not in row and key in old and old.get("model") == row.get("model"):
            row[key] = old[key]
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(row, indent=1, default=str))
    print(json.dumps({k: row[k] for k in ("name", "tuning", "validation") if k in row}), flush=True)


# ------------------------------------------------------------------------------------------- zero-shot LMs
def lm_backbone(which: str):
    if which == "smollm2":
        return gen.smollm2(dtype=auto_precision())
    from fetch_models import qwen_gguf

    return gen.gguf_lm(qwen_gguf(), dtype=auto_precision(), name="Qwen2.5-Coder-1.5B-Instruct")


def run_genre(which: str, ds, index, limit=None, only=None, chunk: int = 20) -> list:
    """GENRE beam search (log-likelihood ranking) and the constrained TitleNamer list on the tuning slice and
    validation (``only``: one split; ``limit``: its first queries), in cached chunks so a killed run resumes."""
    base = lm_backbone(which)
    beam = gen.GenerativeRetriever.genre(gen.prompted(base), index.corpus, num_results=20, num_beams=20,
                                         batch_size=1, max_source_tokens=QUERY_TOKENS)
    namer = ptt.TitleNamer(base, index, num_titles=10, constrained=True, max_query_tokens=QUERY_TOKENS)
    rows = []
    for mode, system in (("beam", beam), ("list", namer)):
        row = {"name": f"genre-{which}-{mode}", "system": repr(system)}
        old = WORK / "rows" / f"{row['name']}.json"
        if old.is_file():
            row = {**json.loads(old.read_text()), **row}
        for split, (topics, qrels) in splits(ds).items():
            if only and split != only:
                continue
            topics = topics.head(limit) if limit else topics
            parts, wall, cpu, fresh = [], 0.0, 0.0, 0
            for start in range(0, len(topics), chunk):
                part = topics.iloc[start:start + chunk]
                tag = f"{split}_genre_{which}_{mode}_{start}"
                run, w, c = timed(lambda part=part, tag=tag, system=system: cached_run(
                    tag, lambda: system(part[["qid", "query"]])))
                parts.append(run)
                if c > 1:
                    wall, cpu, fresh = wall + w, cpu + c, fresh + len(part)
            row[split] = {**metrics(pd.concat(parts), topics, qrels), "n": len(topics)}
            if fresh:
                row[f"decode_{split}"] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "queries": fresh,
                                          "cpu_s_per_query": round(cpu / fresh, 2)}
        save_row(row)
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------- the recipe + expert
def run_expert(name: str, ds, index, ft) -> dict:
    spec = {**DEFAULTS, **ROWS[name]}
    model, _ = build_model(name, spec, ds, index, ft)
    expert = model.retriever(batch_size=32, score_batch_size=512)
    val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
    plain = recipe.tuned_pipeline(ds, index, fine_tuned=ft, verbose=False)
    (withgen, wall, cpu) = timed(lambda: recipe.tuned_pipeline(ds, index, fine_tuned=ft, verbose=False,
                                                               extra_experts={"generative": expert}))
    runs = {"recipe (tuned_pipeline)": cached_run("validation_recipe", lambda: plain(val)),
            f"recipe + generative expert ({name})": cached_run(f"validation_recipe+{model.path.name}",
                                                               lambda: withgen(val))}
    table = evaluate(runs, val, vqrels, baseline=0)
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    weights = recipe.fitted_weights(ds, index, ft, extra_experts={"generative": expert})
    fuser = WeightedFuser.load(weights)
    row = {"name": f"expert-{name}", "model": model.path.name, "fit_wall_s": wall, "fit_cpu_s": cpu,
           "weights": dict(zip(fuser.names, map(float, fuser.weights))), "table": table.to_dict("records")}
    save_row({**row, "tuning": {}, "validation": {}})
    return row


# ------------------------------------------------------------------------------------------- LLM pseudo-queries
def run_pseudo(n_books: int, per_book: int, max_tokens: int, out=None) -> None:
    """Qwen ToT-style requests for ``n_books`` books (a seeded random sample; a smaller count gives a prefix of
    the same order), written to :data:`PSEUDO_FILE` (or ``out``)."""
    from fetch_models import qwen_gguf

    ds, index, ft = dataset()
    books = index.corpus.sample(n=min(n_books, len(index.corpus)), random_state=0)
    ids = {d: d for d in books["docno"].astype(str)}
    with ptt.LlamaServer(model_path=qwen_gguf(), n_threads=2, n_ctx=2048) as server:
        llm = server.llm()
        pairs, wall, cpu = timed(lambda: gen.llm_pseudo_queries(books, ids, llm, n=per_book, kind="tot",
                                                                max_chars=700, max_tokens=max_tokens))
        usage = llm.usage.as_dict()
    gen.write_pseudo_queries(pairs, out or PSEUDO_FILE, model="Qwen2.5-Coder-1.5B-Instruct Q4_K_M", books=len(books),
                             per_book=per_book, wall_s=wall, client_cpu_s=cpu, usage=usage,
                             failed_books=pairs.attrs.get("failed_books"))
    print(f"{len(pairs)} pseudo-queries for {len(books)} books in {wall} s; usage {usage}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["rows", "genre", "expert", "pseudo", "report"])
    p.add_argument("names", nargs="*")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=None, help="genre: only the first queries of each split")
    p.add_argument("--split", choices=["tuning", "validation"], default=None, help="genre: this split only")
    p.add_argument("--books", type=int, default=400)
    p.add_argument("--per-book", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=90)
    p.add_argument("--out", default=None, help="pseudo: another file than the one the rows read")
    p.add_argument("--dry", action="store_true", help="a quick check: few pairs and queries, separate folders")
    args = p.parse_args()
    if args.dry:
        global WORK
        DRY["on"], WORK = True, _common.WORK / f"{NAME}-dry"
    torch.set_num_threads(args.threads)
    if args.what == "pseudo":
        return run_pseudo(args.books, args.per_book, args.max_tokens, args.out)
    if args.what == "report":
        from generative_report import report

        return report(dataset(), evaluate, cached_run, splits, WORK)
    ds, index, ft = dataset()
    for name in args.names:
        if args.what == "rows":
            save_row(run_row(name, ds, index, ft))
        elif args.what == "genre":
            run_genre(name, ds, index, args.limit, args.split)
        else:
            run_expert(name, ds, index, ft)


if __name__ == "__main__":
    main()
