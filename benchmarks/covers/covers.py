"""Cover ranker benchmark: the synthetic cover task before/after CLIP fine-tuning, and encoding throughput.

No CLIP weights can be downloaded here, so the models are randomly initialised: a tiny open_clip CLIP
(pyterrier_tot.covers.TINY_CLIP_CONFIG) for the task, plus a ViT-B-32-sized one for throughput.
The task: synthetic covers (tests/helpers/synthetic_covers.py) with a text description each; covers are split into
train (with a validation part for checkpoint selection) and held-out test covers; we report text->image top-1
/ top-5 over the held-out covers for the untuned model (same initialisation, same run) and for the fine-tuned
one, through the real CoverIndex + CoverRanker path.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/covers/covers.py [--books 256] [--test 64] [--quick]

Writes benchmarks/covers/results/covers.json and benchmarks/covers/results/covers.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]  # the repository
sys.path.insert(0, str(ROOT))  # tests.helpers: the synthetic covers the tests use

import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
import torch  # noqa: E402
from ir_measures import Success  # noqa: E402

from pyterrier_tot.covers import TINY_CLIP_CONFIG, ClipModel, CoverClipTrainer, CoverIndex, CoverRanker  # noqa: E402
from tests.helpers.synthetic_covers import make_books, write_covers  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def top_k_accuracy(ranker, queries, gold_docnos):
    """Top-1 / top-5 text->image accuracy of ``ranker`` (Success@1 / Success@5 via pt.Experiment): each query
    (qid, clue_cover) has exactly one relevant book, ``gold_docnos[i]``."""
    qrels = pd.DataFrame({"qid": queries["qid"].astype(str).to_numpy(), "docno": list(gold_docnos), "label": 1})
    table = pt.Experiment([ranker], queries, qrels, eval_metrics=[Success@1, Success@5], names=["cover"])
    row = table.iloc[0]
    return {"top1": float(row["Success@1"]), "top5": float(row["Success@5"])}


def ranker_accuracy(model, docs, test, workdir, name):
    index = CoverIndex(Path(workdir) / name).build(docs, model, verbose=False)
    q = pd.DataFrame({"qid": [str(i) for i in range(len(test))], "clue_cover": test["clue_cover"].tolist()})
    return top_k_accuracy(CoverRanker(index, model, num_results=5), q, test["docno"].tolist())


def synthetic_task(n_books, n_test, seed, settings, workdir):
    books = write_covers(make_books(n_books, seed=seed, size=32), Path(workdir) / "covers")
    pairs = pd.DataFrame({"docno": [b["docno"] for b in books], "clue_cover": [b["clue_cover"] for b in books],
                          "cover": [b["cover"] for b in books]})
    test, trainval = pairs.iloc[:n_test].reset_index(drop=True), pairs.iloc[n_test:].reset_index(drop=True)
    docs = test[["docno", "cover"]]  # the held-out corpus: only test covers compete
    out = {"n_books": n_books, "n_test_covers": n_test, "n_trainval_pairs": len(trainval),
           "chance_top1": 1 / n_test, "chance_top5": min(1.0, 5 / n_test), "runs": []}
    for name, kw in settings.items():
        model = ClipModel.from_config(seed=0)
        untuned = ranker_accuracy(model, docs, test, workdir, f"idx-{name}-untuned")
        trainer = CoverClipTrainer(model, verbose=False, **kw)
        t = time.time()
        trainer.fit(trainval, val_fraction=0.2)
        secs = time.time() - t
        tuned = ranker_accuracy(model, docs, test, workdir, f"idx-{name}-tuned")
        run = {"name": name, "settings": trainer.settings(), "untuned": untuned, "tuned": tuned,
               "best_epoch": trainer.best_epoch, "train_seconds": round(secs, 1),
               "val_top1_by_epoch": [round(h["top1"], 3) for h in trainer.history]}
        print(f"[{name}] untuned top1 {untuned['top1']:.3f} top5 {untuned['top5']:.3f} | tuned top1 "
              f"{tuned['top1']:.3f} top5 {tuned['top5']:.3f} | chance top1 {1 / n_test:.3f} | "
              f"best epoch {trainer.best_epoch} | {secs:.0f}s", flush=True)
        out["runs"].append(run)
    return out


def throughput(model, n_images, n_texts, batch_size=32):
    books = make_books(n_images, seed=7, size=128)
    images = [b["image"] for b in books]
    texts = [b["clue_cover"] + " on an old paperback" for b in books]
    texts = (texts * (n_texts // len(texts) + 1))[:n_texts]
    model.encode_images(images[:2])
    model.encode_texts(texts[:2])  # warm-up
    t = time.time()
    model.encode_images(images, batch_size=batch_size)
    img_s = n_images / (time.time() - t)
    t = time.time()
    model.encode_texts(texts, batch_size=batch_size)
    txt_s = n_texts / (time.time() - t)
    return {"images_per_s": round(img_s, 1), "texts_per_s": round(txt_s, 1), "n_images": n_images,
            "n_texts": n_texts, "batch_size": batch_size,
            "params_millions": round(sum(p.numel() for p in model.model.parameters()) / 1e6, 2)}


def vit_b_32_random():
    import open_clip

    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None)
    return ClipModel(model, preprocess, open_clip.get_tokenizer("ViT-B-32"),
                     model_cfg=open_clip.get_model_config("ViT-B-32"),
                     preprocess_cfg=dict(model.visual.preprocess_cfg),
                     source={"kind": "config", "name": "ViT-B-32 (random init)", "seed": 0})


def write_md(res, path):
    t = res["task"]
    lines = [
        "# Cover ranker benchmark (synthetic covers, randomly initialised CLIP)",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']['cpus']} CPU cores visible, torch threads {res['machine']['torch_threads']}, "
        f"torch {res['machine']['torch']}, open_clip {res['machine']['open_clip']}; {res['date']}.",
        "",
        "No pretrained CLIP weights are available offline, so these numbers show that the fine-tuning loop and "
        "the CoverIndex/CoverRanker path work, not how a real CLIP does on real covers.",
        "",
        f"## Synthetic cover task: {t['n_test_covers']} held-out covers, {t['n_trainval_pairs']} train+val pairs",
        "",
        "Text->image retrieval over the held-out covers through CoverIndex + CoverRanker. *Untuned* is the same "
        "random initialisation in the same run, before fine-tuning.",
        "",
        "| training settings | untuned top-1 | tuned top-1 | untuned top-5 | tuned top-5 | chance top-1 "
        "| chance top-5 | best epoch | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t["runs"]:
        s = r["settings"]
        lines.append(
            f"| {r['name']} (bs {s['batch_size']}, lr {s['lr']:g}, wd {s['weight_decay']}, {s['epochs']} ep) "
            f"| {r['untuned']['top1']:.3f} | **{r['tuned']['top1']:.3f}** | {r['untuned']['top5']:.3f} "
            f"| **{r['tuned']['top5']:.3f}** | {t['chance_top1']:.3f} | {t['chance_top5']:.3f} "
            f"| {r['best_epoch']} | {r['train_seconds']} |")
    lines += ["", "Validation top-1 by epoch (epoch 0 = untuned):", ""]
    for r in t["runs"]:
        lines.append(f"- {r['name']}: {r['val_top1_by_epoch']}")
    lines += ["", "## Encoding throughput (CPU, fp32, including preprocessing / tokenisation)", "",
              "| model | params (M) | images/s | texts/s | batch |", "|---|---|---|---|---|"]
    for name, th in res["throughput"].items():
        lines.append(f"| {name} | {th['params_millions']} | {th['images_per_s']} | {th['texts_per_s']} | "
                     f"{th['batch_size']} |")
    path.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--books", type=int, default=256)
    ap.add_argument("--test", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="skip the ViT-B-32-sized throughput run")
    args = ap.parse_args()
    import open_clip

    res = {"command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/covers/covers.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                       "open_clip": open_clip.__version__, "python": platform.python_version()},
           "tiny_config": TINY_CLIP_CONFIG}
    settings = {
        "paper defaults": {},  # batch 4, lr 5e-5, wd 0.2, 10 epochs, AdamW
        "from-scratch settings": {"batch_size": 16, "lr": 1e-3, "epochs": 12},
    }
    with tempfile.TemporaryDirectory() as tmp:
        res["task"] = synthetic_task(args.books, args.test, args.seed, settings, tmp)
    res["throughput"] = {"tiny (random init)": throughput(ClipModel.from_config(seed=0), 256, 1024)}
    print("throughput tiny:", res["throughput"]["tiny (random init)"], flush=True)
    if not args.quick:
        res["throughput"]["ViT-B-32 (random init)"] = throughput(vit_b_32_random(), 64, 256)
        print("throughput ViT-B-32:", res["throughput"]["ViT-B-32 (random init)"], flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "covers.json").write_text(json.dumps(res, indent=2))
    write_md(res, RESULTS / "covers.md")
    print(f"wrote {RESULTS / 'covers.json'} and {RESULTS / 'covers.md'}")


if __name__ == "__main__":
    main()
