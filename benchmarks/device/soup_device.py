"""Issue 31.3 on a GPU: the default's mpnet base trained with ``BASE_SETTINGS`` under several seeds, and their
uniform soup (``pyterrier_tot.recipe.soup.average_models``: the mean of the weights, one model's cost).

    python benchmarks/device/soup_device.py export .dev/soup                 # here: base_grid_device's kit + BIRCO dev
    python benchmarks/device/rerank_device.py split MPNET_DIR .dev           # here: all-mpnet-base-v2 as upload chunks
    python3 benchmarks/device/soup_device.py run .dev/soup /tmp/base OUT     # there: train, average, score, pack
    python3 benchmarks/device/soup_device.py ship OUT FIRST LAST             # there: delta chunks FIRST..LAST into OUT
    python3 benchmarks/device/soup_device.py grid .dev/soup /tmp/base OUT    # there: soups at other lrs and epochs
    python benchmarks/device/soup_device.py install OUT                      # here: the soup into the cache (its name)

The seeds' runs are the library's ``train_base_retriever`` with the mpnet row of ``BASE_SETTINGS`` (lr 3e-5, epoch 2
of a 3-epoch schedule, batch 16; fp32 on the GPU) on the training queries outside the tuning slice, from the same
pretrained start; only the seed differs. The machine scores every model (each seed, the soup of the first three,
the soup of all) against all 2,679 books for the tuning slice and validation, and against BIRCO dev's 2,404 books,
and sends the score matrices back (fp16), so every measure, ensemble and paired test is computed here; nothing is
chosen there. The soup of all seeds travels back as its difference from the pretrained start, int8 per row (2-D
tensors) or fp32 (the rest), and is rebuilt here on the fp16-rounded start the machine trained from.
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
from base_grid_device import _library, settle  # noqa: E402
from base_grid_device import export as export_kit  # noqa: E402

SEEDS = (42, 43, 44, 45, 46, 47)
SETTINGS = {"lr": 3e-5, "epochs": 2, "schedule_epochs": 3, "batch_size": 16, "max_seq_length": 256,
            "warmup_ratio": 0.1}
CHUNK = int(15.9 * 2 ** 20)


def export(kit: Path) -> None:
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    export_kit(kit)
    import pyterrier_tot as ptt

    bds = ptt.get_dataset("birco-wtb")
    corpus = ptt.BookIndex(bds).corpus
    data = {"corpus": corpus[["docno", "title", "text"]].fillna("").astype(str).to_dict("records"),
            "topics": bds.get_topics("dev")[["qid", "query"]].astype(str).to_dict("records")}
    with gzip.open(kit / "birco.json.gz", "wt", encoding="utf8") as f:
        json.dump(data, f)
    print("birco:", len(data["corpus"]), "books,", len(data["topics"]), "queries")


def _texts(corpus) -> list:
    return ["\n".join((r["title"], r["text"])).strip() for r in corpus]


def run(kit: Path, model_dir: str, out: Path, seeds=SEEDS, dry: bool = False) -> None:
    import numpy as np
    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    from pyterrier_tot.recipe import soup

    data = json.load(gzip.open(kit / "kit.json.gz", "rt", encoding="utf8"))
    birco = json.load(gzip.open(kit / "birco.json.gz", "rt", encoding="utf8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    corpus = pd.DataFrame(data["corpus"])
    queries = data["tuning"]["topics"] + data["validation"]["topics"]
    books, bbooks, bqueries = _texts(data["corpus"]), _texts(birco["corpus"]), birco["topics"]
    extra = {"max_steps": 2} if dry else {}
    if dry:
        books, bbooks, queries, bqueries = books[:200], bbooks[:100], queries[:20], bqueries[:5]
    rest, qrels = pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"])
    work = Path("/tmp/soup") if not dry else out / "models"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "settings": SETTINGS, "seeds": list(seeds), "seconds": {}, "records": {},
           "qids": [q["qid"] for q in queries], "docnos": [d["docno"] for d in data["corpus"]][:len(books)],
           "birco_qids": [q["qid"] for q in bqueries],
           "birco_docnos": [d["docno"] for d in birco["corpus"]][:len(bbooks)]}
    paths = {}
    for s in seeds:
        t = time.time()
        paths[f"seed{s}"] = et.train_base_retriever(
            rest, qrels, corpus, output_dir=work / f"seed{s}", base_model=model_dir, seed=s, device=device,
            amp=False, show_progress_bar=False, **SETTINGS, **extra)
        res["seconds"][f"seed{s}"] = round(time.time() - t, 1)
        print(f"[{time.time() - t0:6.0f}s] seed {s} trained", flush=True)
    for n in sorted({3, len(seeds)}):
        paths[f"soup{n}"] = soup.average_models([paths[f"seed{s}"] for s in seeds[:n]], work / f"soup{n}")
    scores = {}
    for key, path in paths.items():
        t = time.time()
        model = SentenceTransformer(str(path), device=device)
        def enc(x, model=model):
            return model.encode(x, batch_size=128, convert_to_tensor=True)

        with torch.no_grad():
            scores[f"{key}/reddit"] = (enc([q["query"] for q in queries]) @ enc(books).T).half().cpu().numpy()
            scores[f"{key}/birco"] = (enc([q["query"] for q in bqueries]) @ enc(bbooks).T).half().cpu().numpy()
        res["records"][key] = json.loads((Path(path) / soup.RECORD).read_text())
        res["seconds"][f"score {key}"] = round(time.time() - t, 1)
        print(f"[{time.time() - t0:6.0f}s] {key} scored", flush=True)
        del model
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted(scores)
    half = len(keys) // 2
    np.savez(out / "scores_a.npz", **{k.replace("/", "__"): scores[k] for k in keys[:half]})
    np.savez(out / "scores_b.npz", **{k.replace("/", "__"): scores[k] for k in keys[half:]})
    last = f"soup{len(seeds)}"
    res["chunks"] = pack_delta(Path(paths[last]), Path(model_dir), work / "parts", out)
    res["shipped"] = last
    res["total_s"] = round(time.time() - t0, 1)
    (out / "soup_results.json").write_text(json.dumps(res))
    ship(out, 0, 1, work / "parts")
    print(f"done in {res['total_s']} s; {res['chunks']} delta chunks", flush=True)


def run_grid(kit: Path, model_dir: str, out: Path, seeds=SEEDS[:3], lrs=(3e-5, 5e-5), schedule: int = 3,
             dry: bool = False) -> None:
    """Soups at other settings: for each learning rate, ``seeds`` trained over a ``schedule``-epoch schedule (a
    checkpoint per epoch), and the soup of the seeds at each epoch scored as ``run`` scores (``grid_a.npz`` and
    ``grid_b.npz``, written after each soup, so a run stopped at its limit keeps what it scored). Nothing travels
    back but scores."""
    import numpy as np
    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, _ = _library()
    from pyterrier_tot.recipe import soup

    data = json.load(gzip.open(kit / "kit.json.gz", "rt", encoding="utf8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    queries = data["tuning"]["topics"] + data["validation"]["topics"]
    books = _texts(data["corpus"])
    extra = {"max_steps": 2} if dry else {}
    if dry:
        books, queries = books[:200], queries[:20]
    rest, qrels = pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"])
    work = Path("/tmp/soup_grid") if not dry else out / "grid_models"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "seeds": list(seeds), "lrs": list(lrs), "schedule": schedule, "seconds": {},
           "qids": [q["qid"] for q in queries], "docnos": [d["docno"] for d in data["corpus"]][:len(books)]}
    settings = {k: v for k, v in SETTINGS.items() if k not in ("lr", "epochs", "schedule_epochs")}
    scores = {}
    out.mkdir(parents=True, exist_ok=True)
    for lr in lrs:
        dirs = {s: {e: work / f"lr{lr:g}-seed{s}-e{e}" for e in range(1, schedule + 1)} for s in seeds}
        for s in seeds:
            t = time.time()
            et.train_base_retriever(rest, qrels, pd.DataFrame(data["corpus"]), output_dir=dirs[s][schedule],
                                    base_model=model_dir, seed=s, device=device, amp=False, show_progress_bar=False,
                                    lr=lr, epochs=schedule, schedule_epochs=schedule,
                                    epoch_dirs={e: p for e, p in dirs[s].items() if e < schedule}, **settings, **extra)
            res["seconds"][f"lr{lr:g} seed{s}"] = round(time.time() - t, 1)
            print(f"[{time.time() - t0:6.0f}s] lr {lr:g} seed {s} trained", flush=True)
        for e in range(1, schedule + 1):
            key = f"soup{len(seeds)}-lr{lr:g}-e{e}of{schedule}"
            path = soup.average_models([dirs[s][e] for s in seeds], work / key)
            model = SentenceTransformer(str(path), device=device)
            with torch.no_grad():
                q = model.encode([x["query"] for x in queries], batch_size=128, convert_to_tensor=True)
                scores[key] = (q @ model.encode(books, batch_size=128, convert_to_tensor=True).T).half().cpu().numpy()
            del model
            done = sorted(scores)  # two files: each file back from the machine is capped at 16 MiB
            np.savez(out / "grid_a.npz", **{k: scores[k] for k in done[:3]})
            np.savez(out / "grid_b.npz", **{k: scores[k] for k in done[3:]})
            res["done"] = sorted(scores)
            (out / "grid_results.json").write_text(json.dumps(res))
            print(f"[{time.time() - t0:6.0f}s] {key} scored", flush=True)


def pack_delta(model: Path, start: Path, parts: Path, out: Path) -> int:
    """``model``'s weights minus ``start``'s, as int8 with a per-row scale (2-D tensors; chunks ``d00``, ... in
    ``parts``) and fp32 (the rest, with the scales: ``small.safetensors`` in ``out``) + a tar of its other files."""
    import tarfile

    import torch
    from safetensors.torch import load_file, save, save_file

    w, b = load_file(str(model / "model.safetensors")), load_file(str(start / "model.safetensors"))
    q, small = {}, {}
    for k in sorted(w):
        if not w[k].is_floating_point():
            small[f"raw::{k}"] = w[k]
            continue
        d = w[k].float() - b[k].float()
        if d.dim() == 2:
            s = d.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
            q[k], small[f"scale::{k}"] = torch.round(d / s).to(torch.int8), s
        else:
            small[f"delta::{k}"] = d
    blob = save(q)
    parts.mkdir(parents=True, exist_ok=True)
    n = 0
    for n, i in enumerate(range(0, len(blob), CHUNK)):
        (parts / f"d{n:02d}").write_bytes(blob[i:i + CHUNK])
    save_file(small, str(out / "small.safetensors"))
    with tarfile.open(out / "rest.tar", "w") as tar:
        for f in model.rglob("*"):
            if f.is_file() and f.name != "model.safetensors":
                tar.add(f, arcname=str(f.relative_to(model)))
    return n + 1


def ship(out: Path, first: int, last: int, parts: Path = Path("/tmp/soup/parts")) -> None:
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    for i in range(first, last + 1):
        if (parts / f"d{i:02d}").is_file():
            shutil.copy(parts / f"d{i:02d}", out / f"d{i:02d}")


def rebuild(fetched: Path, start: Path, target: Path) -> Path:
    """The shipped soup as an fp32 model folder ``target``: the fp16-rounded ``start`` (as the machine trained
    from) plus the delta."""
    import tarfile

    from safetensors.torch import load, load_file, save_file

    chunks = sorted(fetched.glob("d[0-9][0-9]"))
    q = load(b"".join(p.read_bytes() for p in chunks))
    small = load_file(str(fetched / "small.safetensors"))
    b = load_file(str(start / "model.safetensors"))
    w = {k.split("::", 1)[1]: v for k, v in small.items() if k.startswith("raw::")}
    for k in [*q, *(k.split("::", 1)[1] for k in small if k.startswith("delta::"))]:
        d = q[k].float() * small[f"scale::{k}"] if k in q else small[f"delta::{k}"]
        w[k] = b[k].half().float() + d
    target.mkdir(parents=True, exist_ok=True)
    save_file(w, str(target / "model.safetensors"), metadata={"format": "pt"})
    with tarfile.open(fetched / "rest.tar") as tar:
        tar.extractall(target)
    return target


def install(fetched: Path) -> Path:
    """The shipped soup as the cached mpnet base of its settings (``bases.base_dir(..., amp=False, soup=N)``: it
    trained in fp32), its records naming the hub model and the machine it trained on."""
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    import _common  # noqa: F401  (offline)

    import pyterrier_tot as ptt
    from pyterrier_tot.models import resolve_model
    from pyterrier_tot.recipe import bases

    res = json.loads((fetched / "soup_results.json").read_text())
    n = len(res["seeds"])
    target = bases.base_dir(ptt.get_dataset("reddit-tomt-books"), "mpnet", lr=SETTINGS["lr"], epoch=SETTINGS["epochs"],
                            schedule=SETTINGS["schedule_epochs"], amp=False, soup=n, seed=res["seeds"][0])
    tmp = rebuild(fetched, Path(resolve_model("mpnet")), target.with_name(target.name + ".part"))
    return settle(tmp, target, bases.hub_name("mpnet"), f"{res['device']} (benchmarks/device/soup_device.py; fp32, "
                  f"torch {res['torch']}), shipped as an int8 difference from the fp16-rounded start and rebuilt in "
                  "fp32",
                  res["shipped"])

if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "export":
        export(Path(args[0]))
    elif cmd == "run":
        seeds = next((tuple(int(x) for x in a.split("=")[1].split(",")) for a in args if a.startswith("--seeds=")),
                     SEEDS)
        run(Path(args[0]), args[1], Path(args[2]), seeds=seeds, dry="--dry" in args)
    elif cmd == "grid":
        run_grid(Path(args[0]), args[1], Path(args[2]), dry="--dry" in args)
    elif cmd == "install":
        install(Path(args[0]))
    elif cmd == "ship":
        ship(Path(args[0]), int(args[1]), int(args[2]))
    else:
        raise SystemExit(__doc__)
