"""Issue 31.4 on a GPU: the recipe's cross-encoder (``second_stage``) trained for many more steps than two CPU cores
allow, by the library's own ``train_cross_encoder`` on ``device="cuda"``; the epoch count chosen on the tuning
slice there, the chosen model fetched back and evaluated here by ``benchmarks/second_stage/second_stage.py``.

    python benchmarks/device/second_stage_device.py export .dev/ce --negatives 7  # here: groups + tuning candidates
    python3 benchmarks/device/second_stage_device.py run .dev/ce MODEL_DIR OUT    # there (MODEL_DIR: the MiniLM base)
    python benchmarks/device/second_stage_device.py report OUT                    # here: results/second_stage_device.*
    python benchmarks/device/second_stage_device.py install OUT                   # here: into the cache, where
    python benchmarks/second_stage/second_stage.py --negatives 7 --epochs E --name second_stage_gpu  # evaluates it

The groups are exactly ``second_stage.recipe_groups`` (the MiniLM recipe's top 20 on the training queries outside
the tuning slice, gold excluded, negatives drawn seeded); the tuning candidates are the recipe's top 20 on the
tuning slice. On the GPU one model is trained per epoch count of ``EPOCHS`` and scored alone over the tuning
candidates (R@5 within the top 20, ties to fewer epochs); only that choice is made there.
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
from base_grid_device import _library, install_into, measures  # noqa: E402

EPOCHS = (3, 8)


def export(kit: Path, negatives: int, source: str = "minilm") -> None:
    """``source``: whose runs the groups and candidates come from: ``minilm`` (the MiniLM recipe's, cached by
    ``second_stage.py``) or ``default`` (the default recipe's, cached by ``rerank_device.py export``; validation
    candidates too, for the report)."""
    import _common

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.recipe import second_stage

    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    work = _common.WORK / ("second_stage" if source == "minilm" else "rerank_device")
    first = "second_stage/second_stage.py" if source == "minilm" else "device/rerank_device.py export"
    missing = lambda: (_ for _ in ()).throw(SystemExit(f"run benchmarks/{first} once first"))  # noqa: E731
    pipe = recipe.tuned_pipeline(ds, index, base="minilm" if source == "minilm" else recipe.DEFAULT_BASE)
    s = {**second_stage.SETTINGS, "n_negatives": negatives}
    # the keys the runs were cached under: this pipeline's (its fitted weights and stages), never another fit's
    rest_key = f"recipe-rest-top{s['mine_depth']}" if source == "minilm" else "recipe-rest"  # second_stage.rest_key
    rest_run = _common.cached_run(work, _common.pipeline_key(rest_key, pipe), missing, {})
    tune_run = _common.cached_run(work, _common.pipeline_key("recipe-tuning", pipe), missing, {})
    groups = second_stage.recipe_groups(ds, index, pipe, negatives, s["mine_depth"], run=rest_run)
    texts = dict(zip(index.corpus["docno"], index.corpus["title"].fillna("") + "\n" + index.corpus["text"].fillna("")))

    def candidates(run, topics) -> list:
        top = run.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        top = top[top.groupby("qid").cumcount() < s["mine_depth"]]
        queries = dict(zip(topics["qid"].astype(str), topics["query"]))
        return [{"qid": str(q), "query": queries[str(q)], "docnos": list(g["docno"].astype(str)),
                 "scores": list(g["score"].astype(float)), "texts": [texts[d].strip() for d in g["docno"].astype(str)]}
                for q, g in top.groupby("qid")]

    tune, tqrels = recipe.train_data(ds, "tuning")
    kit.mkdir(parents=True, exist_ok=True)
    data = {"settings": s, "groups": groups, "tuning": candidates(tune_run, tune), "source": source,
            "tuning_qrels": tqrels[["qid", "docno", "label"]].astype({"qid": str, "docno": str}).to_dict("records")}
    if source != "minilm":
        val, vqrels = ds.get_topics("validation"), ds.get_qrels("validation")
        vkey = _common.pipeline_key("recipe-validation", pipe)
        data["validation"] = candidates(_common.cached_run(work, vkey, missing, {}), val)
        data["validation_qrels"] = vqrels[["qid", "docno", "label"]].astype({"qid": str, "docno": str}).to_dict(
            "records")
    with gzip.open(kit / "ce.json.gz", "wt", encoding="utf8") as f:
        json.dump(data, f)
    print(len(groups), "groups,", len(data["tuning"]), "tuning queries,", s)


def run(kit: Path, model_dir: str, out: Path, dry: bool = False, epochs_list=EPOCHS, tf32: bool = False) -> None:
    """``tf32``: TensorFloat-32 matrix products (an mpnet cross-encoder trains several times faster on a GPU)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if tf32:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    _library(("decomposition", "recipe", "rerank"))
    from pyterrier_tot.rerank import cross_encoder as ce

    t0 = time.time()
    data = json.load(gzip.open(kit / "ce.json.gz", "rt", encoding="utf8"))
    s, groups, cands = data["settings"], data["groups"], data["tuning"]
    if dry:
        groups, cands = groups[:16], cands[:5]
    gold = {}
    for r in data["tuning_qrels"] + data.get("validation_qrels", []):
        if int(r["label"]) > 0:
            gold.setdefault(r["qid"], []).append(r["docno"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
               "settings": s, "n_groups": len(groups), "models": {}, "tf32": tf32, "source": data.get("source")}
    for epochs in ((1,) if dry else epochs_list):
        path = Path("/tmp/ce") / f"e{epochs}" if not dry else out / f"e{epochs}"
        ce.train_cross_encoder(groups, path, base_model=model_dir, n_negatives=s["n_negatives"], epochs=epochs,
                               lr=s["lr"], head_lr=s["head_lr"], batch_queries=s["batch_queries"],
                               max_length=s["max_length"], max_query_tokens=s["max_query_tokens"],
                               max_steps=2 if dry else s["max_steps"], show_progress_bar=False, device=device,
                               extra_metadata={"mined_from": f"recipe top {s['mine_depth']}", "init": "base"})
        tok = AutoTokenizer.from_pretrained(str(path))  # the model as CrossEncoderModel loads it, for scoring
        model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1).to(device).eval()
        info = json.loads((path / ce.TRAINING_FILE).read_text())
        entry = {"epochs": epochs, "path": str(path), "seconds": info["seconds"], "first_loss": info["first_loss"],
                 "last_loss": info["last_loss"], "scores": {}}
        for split in ("tuning", "validation"):
            ranks = {}
            for c in (cands if split == "tuning" else data.get("validation", [])[:5 if dry else None]):
                scores = ce.score_pairs(tok, model, [c["query"]] * len(c["texts"]), c["texts"], batch_size=64,
                                        max_length=s["max_length"], max_query_tokens=s["max_query_tokens"])
                entry["scores"].setdefault(split, {})[c["qid"]] = [float(x) for x in scores]
                order = [c["docnos"][i] for i in sorted(range(len(scores)), key=lambda i: -scores[i])]
                ranks[c["qid"]] = [order.index(d) + 1 if d in order else 0 for d in gold.get(c["qid"], [])]
            if ranks:
                entry[split] = ranks
        ranks = entry["tuning"]
        results["models"][f"e{epochs}"] = entry
        print(f"[{time.time() - t0:5.0f}s] e{epochs}: loss {info['first_loss']:.3f} -> {info['last_loss']:.3f}, "
              f"tuning (alone, top {s['mine_depth']}) {measures(ranks)}", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        (out / "grid_results.json").write_text(json.dumps(results))
    keys = list(results["models"])
    results["chosen"] = max(keys, key=lambda k: (measures(results["models"][k]["tuning"])["R@5"], -keys.index(k)))
    results["seconds"] = round(time.time() - t0, 1)
    (out / "grid_results.json").write_text(json.dumps(results))
    print("chosen on the tuning slice:", results["chosen"], f"({results['seconds']} s)")


def install(out: Path) -> Path:
    import _common  # noqa: F401  (offline)

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.recipe import second_stage

    res = json.loads((out / "grid_results.json").read_text())
    chosen = res["models"][res["chosen"]]
    ds = ptt.get_dataset("reddit-tomt-books")
    base = recipe.fine_tuned_bases(ds, ptt.BookIndex(ds), "minilm", train=False)["dense_ft"]
    settings = {**res["settings"], "epochs": chosen["epochs"]}
    target = second_stage.model_dir(base, **settings)
    return install_into(out, target, str(base), res, "benchmarks/device/second_stage_device.py", init=str(base))


def report(out: Path) -> None:
    """``results/second_stage_device.{json,md}``: each epoch count's cross-encoder alone over the recipe's top 20
    on the tuning slice (the choice made on the GPU machine), with its training loss and seconds."""
    import _common
    import pandas as pd

    res = json.loads((out / "grid_results.json").read_text())
    rows = [{"model": k, "epochs": m["epochs"], **measures(m["tuning"]), "first_loss": round(m["first_loss"], 3),
             "last_loss": round(m["last_loss"], 3), "train_s": m["seconds"]} for k, m in res["models"].items()]
    cols = ["model", "epochs", "R@1", "R@5", "R@10", "R@20", "MRR", "first_loss", "last_loss", "train_s"]
    md = ["# The recipe's cross-encoder trained on a GPU: the epoch count (issue 31.4)", "",
          f"`benchmarks/device/second_stage_device.py run` on {res['device']} (torch {res['torch']}, fp32), "
          f"{res['n_groups']} groups, settings {res['settings']} except the epochs. Each model alone re-ranks the "
          "MiniLM recipe's top 20 of the 300 tuning queries (R@20 is the share of queries whose gold book is in "
          f"that top 20). Chosen by R@5, ties to fewer epochs: **{res['chosen']}**; it is evaluated beside the "
          "recipe in `second_stage_gpu.md`.", "", _common.md_table(pd.DataFrame(rows)[cols]), ""]
    _common.write_results("second_stage_device", {k: res[k] for k in ("device", "torch", "settings", "n_groups",
                                                                       "chosen", "seconds")} | {"rows": rows},
                          "\n".join(md))


if __name__ == "__main__":
    verb = sys.argv[1]
    if verb == "export":
        export(Path(sys.argv[2]), int(sys.argv[sys.argv.index("--negatives") + 1]) if "--negatives" in sys.argv else 7,
               sys.argv[sys.argv.index("--source") + 1] if "--source" in sys.argv else "minilm")
    elif verb == "run":
        eps = tuple(int(e) for e in sys.argv[sys.argv.index("--epochs") + 1].split(",")) if "--epochs" in sys.argv \
            else EPOCHS
        run(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), dry="--dry" in sys.argv, epochs_list=eps,
            tf32="--tf32" in sys.argv)
    elif verb == "install":
        install(Path(sys.argv[2]))
    elif verb == "report":
        report(Path(sys.argv[2]))
    else:
        raise SystemExit(f"unknown verb {verb!r}: export, run, install or report")
