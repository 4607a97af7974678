"""Generative retrieval run to convergence on a GPU: how far do epochs carry the semantic-id decoder?

On two CPU cores the generative retriever's best row (``sem-cheap-ft``: the fine-tuned MiniLM, frozen and pooled,
reads the request; a 2-layer decoder writes a hierarchical k-means id; 28,656 training pairs) was trained for 20
epochs, and 5 -> 20 epochs was the factor that moved validation Hits@10 most (.094 -> .210). Whether it goes on
rising was the open question. This run trains the same model on a GPU for as many epochs as it keeps improving.

    python benchmarks/device/generative_device.py export .dev/gen           # here: pairs, splits, book texts
    python benchmarks/device/generative_device.py minilm .dev/minilm        # here: MiniLM as one fp16 chunk
    python3 benchmarks/device/generative_device.py run .dev/gen /tmp/minilm OUT   # there
    python benchmarks/device/generative_device.py report OUT                # here: results via pt.Experiment

On the machine: the MiniLM base is fine-tuned as the recipe fine-tunes it (the training queries outside the tuning
slice, two epochs at lr 5e-5, fp32), the books are encoded with it and given semantic ids (k = 10 clusters a
level, at most 10 books a leaf, seed 0), and the decoder is trained on the pairs the CPU row used (their targets
kept as docnos here and mapped to the ids there), batch 64, lr 1e-3, fp32, in blocks of 10 epochs at a constant
learning rate (each block a fresh optimiser), each block followed by constrained beam search (20 beams) over the
tuning slice and over 200 of the books' own descriptions (memorisation).

The rule, written before the run: the model is trained until the best tuning-slice Hits@10 has not risen by at
least .01 (3 queries of 300) over the last three evaluations (30 epochs), or 200 epochs, or the time budget; the
checkpoint with the best tuning Hits@10 (ties: the earlier) is the run's model, and only it ranks validation.
Every number reported is computed here from the returned rankings through ``pt.Experiment``.
"""
from __future__ import annotations

import copy
import gzip
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (HERE, HERE.parent):
    sys.path.insert(0, str(p))

BLOCK, MAX_EPOCHS, PATIENCE, MIN_GAIN = 10, 200, 3, 0.01
BATCH, LR, SOURCE_TOKENS, BEAMS, TOP = 64, 1e-3, 256, 20, 20
RULE = next(p for p in __doc__.split("\n\n") if p.startswith("The rule"))
NAME = "generative_device"


def export(kit: Path) -> None:
    """The CPU row's training pairs with docnos as targets, the splits, and the texts the dense index encodes."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "generative"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _common  # noqa: F401  (offline)
    import generative as g

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe

    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    docnos = [str(d) for d in index.corpus["docno"]]
    spec = {**g.DEFAULTS, **g.ROWS["sem-cheap-ft"]}
    pairs = g.training_pairs(spec, ds, index, {d: d for d in docnos})
    books = list(index.docs_iter(("title", "text")))
    data = {"spec": {k: v for k, v in spec.items()}, "docnos": [b["docno"] for b in books],
            "texts": [b["text"] for b in books],
            "pairs": pairs[["source", "target", "task"]].astype(str).to_dict("records"),
            "corpus": index.corpus[["docno", "title", "text"]].fillna("").astype(str).to_dict("records")}
    for name in ("rest", "tuning"):
        topics, qrels = recipe.train_data(ds, name)
        data[name] = {"topics": topics[["qid", "query"]].astype(str).to_dict("records"),
                      "qrels": qrels[["qid", "docno", "label"]].astype({"qid": str, "docno": str}).to_dict("records")}
    vt, vq = ds.get_topics("validation"), ds.get_qrels("validation")
    data["validation"] = {"topics": vt[["qid", "query"]].astype(str).to_dict("records"),
                          "qrels": vq[["qid", "docno", "label"]].astype({"qid": str, "docno": str}).to_dict("records")}
    kit.mkdir(parents=True, exist_ok=True)
    with gzip.open(kit / "gen.json.gz", "wt", encoding="utf8") as f:
        json.dump(data, f)
    print({"pairs": len(data["pairs"]), "books": len(books), **{s: len(data[s]["topics"]) for s in
                                                                  ("rest", "tuning", "validation")}})


def minilm(dev: Path) -> None:
    """The offline MiniLM as fp16 weights in one chunk + ``rest.tar`` (``dev/b1``), for ``assemble``."""
    from rerank_device import split

    from pyterrier_tot.models import resolve_model

    split(Path(resolve_model("minilm")), dev, chunk_mib=60.0)


def _library():
    from base_grid_device import _library as lib

    lib(("decomposition", "recipe", "generative"))
    from pyterrier_tot.generative import identifiers, sentence_backbone, training, trie
    from pyterrier_tot.recipe import expert_training

    return expert_training, identifiers, sentence_backbone, training, trie


def _search(bb, trie, docno_of, queries, sources):
    """{qid: [(docno, log-likelihood), ...]} of the top :data:`TOP` books by constrained beam search."""
    hits = bb.search(sources, trie, num_beams=BEAMS, batch_size=64)
    return {q: [(docno_of[t], s) for t, s in h][:TOP] for q, h in zip(queries, hits)}


def _found_at_10(found: dict, gold: dict) -> float:
    """The share of queries with a relevant book among their first 10 (the stopping rule's signal only; what is
    reported is computed here afterwards through ``pt.Experiment``)."""
    return sum(any(d in gold.get(q, ()) for d, _ in r[:10]) for q, r in found.items()) / max(1, len(found))


def run(kit: Path, minilm_dir: str, out: Path, budget_s: float = 480.0, dry: bool = False) -> None:
    import pandas as pd
    import torch
    from sentence_transformers import SentenceTransformer

    t0 = time.time()
    et, identifiers, sb, training, trie_mod = _library()
    data = json.load(gzip.open(kit / "gen.json.gz", "rt", encoding="utf8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pairs = pd.DataFrame(data["pairs"])
    splits = {s: data[s] for s in ("tuning", "validation")}
    if dry:
        pairs = pairs.sample(200, random_state=0)
        splits = {s: {**v, "topics": v["topics"][:8]} for s, v in splits.items()}
    corpus = pd.DataFrame(data["corpus"])
    rest = et.build_pairs(pd.DataFrame(data["rest"]["topics"]), pd.DataFrame(data["rest"]["qrels"]), corpus)
    out.mkdir(parents=True, exist_ok=True)
    ft = out / "minilm-ft" if dry else Path("/tmp/gen/minilm-ft")
    et.train_biencoder(rest, ft, base_model=minilm_dir, epochs=2, batch_size=16, lr=5e-5, max_seq_length=256,
                       seed=42, device=device, amp=False, show_progress_bar=False, kind="base",
                       **({"max_steps": 2} if dry else {}))
    t_base = time.time() - t0
    vecs = SentenceTransformer(str(ft), device=device).encode(data["texts"], batch_size=256, convert_to_numpy=True)
    ids = identifiers.semantic_ids(vecs, data["docnos"], k=10, leaf=10, seed=0)
    pairs["target"] = pairs["target"].map(ids)
    bb = sb.sentence_backbone(ids, model=str(ft), codes=True, states="pooled", train_encoder=0, layers=2,
                              precision="fp32", seed=0, device=device)
    tokens = {d: tuple(bb.target_ids(i)) for d, i in ids.items()}
    docno_of = {t: d for d, t in tokens.items()}
    trie = trie_mod.IdTrie(tokens.values())
    gold = {s: {} for s in splits}
    for s, v in splits.items():
        for r in v["qrels"]:
            if int(r["label"]) > 0:
                gold[s].setdefault(str(r["qid"]), set()).add(str(r["docno"]))
    src = {s: [bb.source_ids(q["query"], SOURCE_TOKENS) for q in v["topics"]] for s, v in splits.items()}
    qids = {s: [str(q["qid"]) for q in v["topics"]] for s, v in splits.items()}
    own = pairs[pairs["task"] == "index:description"].sample(8 if dry else 200, random_state=0)
    own_src = [bb.source_ids(x, SOURCE_TOKENS) for x in own["source"]]
    own_gold = {str(i): {d} for i, d in enumerate(own["target"].map({v: k for k, v in ids.items()}))}
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
           "n_pairs": len(pairs), "tasks": pairs["task"].value_counts().to_dict(), "backbone": repr(bb),
           "base_seconds": round(t_base, 1), "curve": [], "rule": RULE,
           "settings": {"block": BLOCK, "max_epochs": MAX_EPOCHS, "patience": PATIENCE, "min_gain": MIN_GAIN,
                        "batch": BATCH, "lr": LR, "source_tokens": SOURCE_TOKENS, "beams": BEAMS}}
    best, best_state, epochs, since = -1.0, None, 0, 0
    while epochs < (2 * BLOCK if dry else MAX_EPOCHS):
        tb = time.time()
        stats = training.train(bb, pairs, epochs=BLOCK if not dry else 1, batch_size=BATCH, lr=LR,
                               max_source_tokens=SOURCE_TOKENS, schedule="constant", seed=epochs, verbose=False)
        epochs += BLOCK
        t_train = time.time() - tb
        found = _search(bb, trie, docno_of, qids["tuning"], src["tuning"])
        own_found = _search(bb, trie, docno_of, list(own_gold), own_src)
        hits = _found_at_10(found, gold["tuning"])
        point = {"epochs": epochs, "tuning_hits10": round(hits, 4), "own_hits10": round(_found_at_10(own_found,
                 own_gold), 4), "loss_last50": stats["loss_last50"], "train_s": round(t_train, 1),
                 "eval_s": round(time.time() - tb - t_train, 1), "elapsed_s": round(time.time() - t0, 1)}
        res["curve"].append(point)
        print(point, flush=True)
        if hits >= best + MIN_GAIN or best_state is None:
            since = 0
        else:
            since += 1
        if hits > best:
            best, best_state, res["chosen_epochs"] = hits, copy.deepcopy(bb.model.state_dict()), epochs
            res["runs"] = {"tuning": found}
        (out / f"{NAME}.json").write_text(json.dumps(res))
        per_block = time.time() - tb
        if since >= PATIENCE:
            res["stopped"] = f"no rise of {MIN_GAIN} in tuning Hits@10 over the last {PATIENCE} evaluations"
            break
        if time.time() - t0 + per_block > budget_s:
            res["stopped"] = f"time budget: {time.time() - t0:.0f} s of {budget_s:.0f}"
            break
    else:
        res["stopped"] = f"{MAX_EPOCHS} epochs"
    bb.model.load_state_dict(best_state)
    res["runs"]["validation"] = _search(bb, trie, docno_of, qids["validation"], src["validation"])
    res["ids"] = ids
    res["total_s"] = round(time.time() - t0, 1)
    (out / f"{NAME}.json").write_text(json.dumps(res))
    print(f"chosen at {res['chosen_epochs']} epochs (tuning Hits@10 {best:.3f}); {res['stopped']}; "
          f"{res['total_s']} s", flush=True)


def report(fetched: Path) -> None:
    """``results`` of the run beside the CPU rows' numbers, every measure through ``pt.Experiment``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import _common
    import pandas as pd
    from ir_measures import RR, R, Success

    import pyterrier_tot as ptt
    from pyterrier_tot import recipe

    res = json.loads((fetched / f"{NAME}.json").read_text())
    ds = ptt.get_dataset("reddit-tomt-books")
    topics = {"tuning": recipe.train_data(ds, "tuning"),
              "validation": (ds.get_topics("validation"), ds.get_qrels("validation"))}
    measures = [Success @ 1, Success @ 10, RR @ 20, R @ 5]
    rows = []
    for split, (t, q) in topics.items():
        run = pd.DataFrame([(qid, d, s) for qid, hits in res["runs"][split].items() for d, s in hits],
                           columns=["qid", "docno", "score"])
        table = ptt.tot_experiment([pt_frame(run)], t, q, names=[f"generative, {res['chosen_epochs']} epochs"],
                                   measures=measures, round=4, verbose=False)
        rows.append({"split": split, **table.iloc[0].to_dict()})
    payload = {"device_run": {k: v for k, v in res.items() if k not in ("runs", "ids")}, "rows": rows}
    curve = pd.DataFrame(res["curve"])
    md = [f"# Generative retrieval to convergence on a GPU ({res['device']})", "", __doc__.split("\n\n")[0], "",
          f"Training pairs: {res['n_pairs']} ({res['tasks']}); backbone {res['backbone']}; the MiniLM base trained "
          f"there in {res['base_seconds']} s. Stopped: {res['stopped']}. {res['total_s']} s on the machine.", "",
          "## The curve (tuning slice, 300 queries; own: 200 book descriptions it trains on)", "",
          _common.md_table(curve), "", "## The chosen checkpoint, through pt.Experiment", "",
          _common.md_table(pd.DataFrame(rows)), "",
          "CPU rows of the same model (two cores, ``generative.md``): 5 epochs validation Hits@10 .094, 20 epochs "
          ".210 (tuning .200); BM25 .412, the fine-tuned MiniLM alone .609.", "", "## The rule", "", res["rule"]]
    _common.write_results(NAME, payload, "\n".join(md))


def pt_frame(run):
    import pyterrier as pt

    return pt.Transformer.from_df(run)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "export":
        export(Path(sys.argv[2]))
    elif cmd == "minilm":
        minilm(Path(sys.argv[2]))
    elif cmd == "run":
        run(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), dry="--dry" in sys.argv)
    elif cmd == "report":
        report(Path(sys.argv[2]))
    else:
        raise SystemExit(f"unknown command {cmd!r}: export | minilm | run | report")
