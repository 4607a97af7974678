"""Issue 31.4 on two CPU cores: are there signals the default recipe does not use yet that a training-free second
stage could add? Decided inside the tuning slice alone (300 training queries; validation is not read), with the
protocol of ``helper_bases.py``: 30 random halves; on each, the fuser is fitted on one half (bagged, the mpnet
base alone as the floor) with and without each candidate expert and measured on the other half against the base.

Candidates, each scoring the default recipe's candidates with the fine-tuned mpnet base unless said otherwise:

- ``long_query``: the query encoded up to 512 word pieces (the base reads 256; about one validation query in five
  is longer);
- ``query_windows``: the best cosine over windows of 128 word pieces (stride 64) of the query, so a clue late in a
  long query is not averaged away;
- ``past_queries_ft`` / ``past_queries_zs``: known-item requests repeat (about a fifth of the slice's answers are
  also the answer of a training query outside it): the book's most similar solved training request (outside
  the slice), by the fine-tuned mpnet / the zero-shot MiniLM, counted only by how far it exceeds the query's
  95th-percentile similarity to all solved requests (a near-duplicate request, not a popular book).

    python benchmarks/recipe_rejected/query_signals.py [--splits 30] [--render]

The first row (the default recipe: mpnet, its MiniLM helper and the rule-clue experts) is the same-run baseline.
Needs the tuning features of ``helper_bases.py`` (computed there when missing).
"""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe")]  # study, benchmarks/, recipe/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import helper_bases  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.models import DEFAULT_MODEL, load_sentence_transformer  # noqa: E402
from pyterrier_tot.normalise import normalise_scores  # noqa: E402
from pyterrier_tot.recipe.protocol import train_data  # noqa: E402

NAME = "query_signals"
WORK = _common.WORK / NAME
WINDOW, STRIDE, PERCENTILE = 128, 64, 95


def encode(model, texts, max_len: int, key: str) -> np.ndarray:
    """Unit vectors of ``texts`` (cached under ``key`` and the texts' hash)."""
    texts = list(texts)
    f = WORK / f"{key}-{hashlib.sha1(chr(0).join(texts).encode()).hexdigest()[:10]}.npy"
    if f.is_file():
        return np.load(f)
    model.max_seq_length = max_len
    vecs = model.encode(list(texts), batch_size=16, convert_to_numpy=True, normalize_embeddings=True,
                        show_progress_bar=False)
    WORK.mkdir(parents=True, exist_ok=True)
    np.save(f, vecs)
    return vecs


def windows(tokenizer, query: str):
    ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    if len(ids) <= WINDOW:
        return [query]
    return [tokenizer.decode(ids[s:s + WINDOW]) for s in range(0, len(ids) - STRIDE, STRIDE)]


def past_query_scores(qv: np.ndarray, log_v: np.ndarray, log_books: dict) -> dict:
    """{book row: per-query score}: the most similar solved request naming the book, above the query's
    PERCENTILE-th similarity to all solved requests (0 below it)."""
    sims = qv @ log_v.T
    cut = np.percentile(sims, PERCENTILE, axis=1)
    return {b: np.maximum(sims[:, rows].max(axis=1) - cut, 0.0) for b, rows in log_books.items()}


def signal_columns(index, ds, tune: pd.DataFrame, mpnet: str, seconds: dict) -> dict:
    """{column: {(qid, docno): raw score}} of the candidate signals on the tuning slice's queries."""
    flex = index.flex_index(mpnet)
    lookup, dvecs, _ = flex.payload()
    docnos = np.array([lookup.fwd[i] for i in range(len(lookup))])
    D = np.asarray(dvecs, dtype=np.float32)
    row = {d: i for i, d in enumerate(docnos)}
    rest, rest_qrels = train_data(ds, "rest")
    rq = {q: i for i, q in enumerate(rest["qid"].astype(str))}
    log_books: dict = {}
    for q, d in zip(rest_qrels["qid"].astype(str), rest_qrels["docno"].astype(str)):
        log_books.setdefault(row[d], []).append(rq[q])
    t0 = time.time()
    model = load_sentence_transformer(mpnet)
    tag = Path(mpnet).name
    qs = tune["query"].tolist()
    long_q = encode(model, qs, 512, f"tuning-512-{tag}")
    wins = [windows(model.tokenizer, q) for q in qs]
    owner = np.repeat(np.arange(len(qs)), [len(w) for w in wins])
    win_v = encode(model, [t for w in wins for t in w], 256, f"tuning-windows-{tag}")
    q_ft = encode(model, qs, 256, f"tuning-256-{tag}")
    log_ft = encode(model, rest["query"].tolist(), 256, f"rest-256-{tag}")
    zs = load_sentence_transformer(DEFAULT_MODEL)
    q_zs = encode(zs, qs, 256, "tuning-256-zero-shot-minilm")
    log_zs = encode(zs, rest["query"].tolist(), 256, "rest-256-zero-shot-minilm")
    seconds["encoding"] = round(time.time() - t0, 1)
    win_best = np.full((len(qs), len(D)), -np.inf, dtype=np.float32)
    np.maximum.at(win_best, owner, win_v @ D.T)
    full = {"long_query": long_q @ D.T, "query_windows": win_best}
    for name, (qv, lv) in {"past_queries_ft": (q_ft, log_ft), "past_queries_zs": (q_zs, log_zs)}.items():
        m = np.zeros((len(qs), len(D)), dtype=np.float32)
        for b, s in past_query_scores(qv, lv, log_books).items():
            m[:, b] = s
        full[name] = m
    return {"matrices": full, "row": row, "qrow": {q: i for i, q in enumerate(tune["qid"].astype(str))}}


def add_columns(feats: pd.DataFrame, signals: dict) -> pd.DataFrame:
    qi = feats["qid"].map(signals["qrow"]).to_numpy()
    di = feats["docno"].astype(str).map(signals["row"]).to_numpy()
    out = feats.copy()
    for name, m in signals["matrices"].items():
        raw = pd.DataFrame({"qid": feats["qid"].to_numpy(), "score": m[qi, di]})
        out[name] = normalise_scores(raw, "minmax").to_numpy()
    return out


def main():
    args = helper_bases.halves_args(NAME, markdown, __file__)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    t0, seconds = time.time(), {}
    ds, index = _common.reddit()
    feats, names, plain, helpers, extra, floor, models, _ = helper_bases.features(index, ds)
    tune, qrels = recipe.tuning_data(ds)
    mpnet = recipe.fine_tuned_base(ds, model="mpnet", train=False, index=index)
    feats = feats.assign(qid=feats["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    signals = signal_columns(index, ds, tune.assign(qid=tune["qid"].astype(str)), mpnet, seconds)
    feats = add_columns(feats, signals)
    default = plain + helpers
    baseline = "the default recipe (baseline)"
    variants = {baseline: default, **{f"+ {c}": default + [c] for c in signals["matrices"]}}
    rows, full = helper_bases.compare_on_halves(feats, qrels, variants, floor, args.splits, args.bags, baseline)
    payload = {"models": models, "splits": args.splits, "bags": args.bags,
               "tuning_queries": int(feats["qid"].nunique()), "objective": recipe.FIT_METRIC,
               "floor_metric": recipe.FLOOR_METRIC, "floor": floor, "rows": rows, "weights_on_the_whole_slice": full,
               "window": WINDOW, "stride": STRIDE, "percentile": PERCENTILE, "seconds_parts": seconds,
               "seconds": round(time.time() - t0, 1), "machine": _common.machine()}
    _common.write_results(NAME, payload, markdown(payload))


def markdown(p) -> str:
    return "\n".join([
        "# Signals for a training-free second stage (issue 31.4, two CPU cores)", "",
        f"Inside the tuning slice only ({p['tuning_queries']} training queries; validation not read): "
        f"{p['splits']} random halves; on each, the default recipe's fuser is fitted on one half (mean of "
        f"`{p['objective']}`, bagged over {p['bags']} resamples, floor `{p['floor']}` held on "
        f"`{p['floor_metric']}`) with and without each candidate expert, and measured on the other half against "
        f"the mpnet base alone (`{p['models']['mpnet']}`). 'gain': held-out measure minus the base's; 'vs "
        "baseline': paired over the same halves against the default recipe (held-out halves overlap, so the "
        "standard errors are optimistic). `long_query`: the query read to 512 word pieces; `query_windows`: the "
        f"best of {p['window']}-piece windows (stride {p['stride']}); `past_queries_*`: the book's most similar "
        "solved training request outside the slice (fine-tuned mpnet / zero-shot MiniLM), above the query's "
        f"{p['percentile']}th-percentile similarity to all of them. One run; the first row is the baseline.", "",
        *helper_bases.halves_sections(p),
        f"Total {p['seconds']} s ({p['seconds_parts']}). "
        "Re-render: `python benchmarks/recipe_rejected/query_signals.py --render`.",
        *([f"Note: {p['note']}"] if p.get("note") else []), ""])


if __name__ == "__main__":
    main()
