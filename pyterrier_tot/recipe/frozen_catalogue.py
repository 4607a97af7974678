"""Training the request side only, against a catalogue encoded once.

A symmetric bi-encoder step encodes a batch of requests *and* their books, backward through both, and every
retrained model encodes the whole catalogue again. Here the books stay where they are: the dense index of a
pretrained model (the zero-shot expert's index, built anyway) is frozen, and only a copy of that model that encodes
requests is trained, its requests pulled towards their gold book's stored vector and away from the others:

    from pyterrier_tot.recipe.frozen_catalogue import train_request_encoder
    path = train_request_encoder(topics, qrels, index, book_model="mpnet")   # negatives="catalogue" (default)
    dense = index.dense(path)          # the fine-tuned requests against the mpnet vectors already on disk

- each step runs requests only (shorter than books, one forward and backward pass instead of two);
- ``negatives``: ``"catalogue"``, a softmax over every book of the index (2,679 here); ``"mined"``, the books of
  the batch plus each request's ``n_mined`` top non-gold books of the frozen index's own ranking (what scales to
  millions of pages: only those rows of the index are read); ``"batch"``, the batch's gold books alone;
- ``trainable_layers``: ``None`` trains the whole request encoder, ``k`` only its top ``k`` transformer layers;
- nothing is encoded after training: the model records the book index it belongs to
  (:data:`~pyterrier_tot.index.dense.FROZEN_BOOKS`: the book model, fields, precision, the corpus fingerprint and
  one digest over them), and ``index.dense(path)`` / ``dense_scorer(path)`` search that index, refusing any other
  (:class:`~pyterrier_tot.errors.FrozenCatalogueError`).

Training reads no book text (gold books are rows of the index), so a streamed corpus is never read at all.
The optimisation loop is the bi-encoder's (:mod:`~pyterrier_tot.recipe.training_loop`): AdamW, linear warm-up and
decay, bf16 autocast on request, the same atomic checkpoint and build lock.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd

from pyterrier_tot._plumbing.artifact import build_locks
from pyterrier_tot._plumbing.util import is_missing, require_columns
from pyterrier_tot.index.dense import FROZEN_BOOKS, catalogue_record, model_key
from pyterrier_tot.recipe.expert_training import _default_dir, _gold, _replaceable, _trained_as, pairs_digest
from pyterrier_tot.recipe.protocol import training_record
from pyterrier_tot.recipe.training_loop import DistinctTextBatches, _fit, _save_model, freeze_lower_layers

__all__ = ["train_request_encoder", "NEGATIVES", "CATALOGUE_LIMIT"]

NEGATIVES = ("catalogue", "mined", "batch")
#: Above this many books a softmax over the whole catalogue (its vectors in memory, a product per step) is refused:
#: ``negatives="mined"`` reads only the gold and mined rows.
CATALOGUE_LIMIT = 500_000
DEFAULTS = dict(epochs=1, batch_size=16, max_seq_length=256, lr=2e-5, warmup_ratio=0.1, scale=20.0, seed=42)


def _catalogue(index, book_model: str, fields, max_chars, precision):
    """(docno -> row, the stored vectors (a memory map), the record of the book index) of the frozen catalogue."""
    flex = index.flex_index(book_model, fields, max_chars, precision=precision)
    docnos, vectors, _ = flex.payload()
    rows = {str(d): i for i, d in enumerate(docnos)}
    return rows, vectors, catalogue_record(index, book_model, tuple(fields), max_chars, precision)


def _mined(index, book_model, fields, max_chars, precision, topics, gold: Dict[str, set], n: int,
           depth: int) -> Dict[str, List[str]]:
    """qid -> the first ``n`` non-gold books of the frozen index's own (zero-shot) ranking of the request."""
    ranking = index.dense(book_model, fields, num_results=depth, max_chars=max_chars,
                          precision=precision).transform(topics[["qid", "query"]])
    out: Dict[str, List[str]] = {}
    for qid, group in ranking.sort_values(["qid", "rank"]).groupby("qid"):
        out[str(qid)] = [d for d in group["docno"].astype(str) if d not in gold.get(str(qid), set())][:n]
    return out


def _loss_module(model, vectors, negatives: str, scale: float):
    import torch

    class CatalogueLoss(torch.nn.Module):
        """Cross-entropy of each request against book vectors that never change: the whole catalogue, or the
        batch's rows (gold books of the batch, plus each request's mined books)."""

        def __init__(self):
            super().__init__()
            self.model = model
            self.register_buffer("books", torch.from_numpy(np.array(vectors, dtype=np.float32)), persistent=False)

        def forward(self, features, labels):
            q = self.model(features[0])["sentence_embedding"].float()
            labels = labels.to(q.device)
            if negatives == "catalogue":
                return torch.nn.functional.cross_entropy(scale * q @ self.books.T, labels[:, 0])
            cols, where = torch.unique(labels.reshape(-1), return_inverse=True)
            logits = scale * q @ self.books[cols].T
            return torch.nn.functional.cross_entropy(logits, where.reshape(labels.shape)[:, 0])

    return CatalogueLoss()


def train_request_encoder(topics: pd.DataFrame, qrels: pd.DataFrame, index, book_model=None,
                          fields: Sequence[str] = ("title", "text"), *, max_chars: Optional[int] = None,
                          precision: str = "fp32", negatives: str = "catalogue", n_mined: int = 4, mine_depth: int = 30,
                          trainable_layers: Optional[int] = None, epochs: int = DEFAULTS["epochs"],
                          batch_size: int = DEFAULTS["batch_size"], max_seq_length: int = DEFAULTS["max_seq_length"],
                          lr: float = DEFAULTS["lr"], warmup_ratio: float = DEFAULTS["warmup_ratio"],
                          scale: float = DEFAULTS["scale"], max_steps: Optional[int] = None,
                          seed: int = DEFAULTS["seed"], amp: bool = False, device: Optional[str] = None,
                          output_dir: Union[str, Path, None] = None, reuse: bool = True,
                          show_progress_bar: bool = True) -> Path:
    """Fine-tune a request encoder (a copy of ``book_model``, default MiniLM) against the frozen dense index of
    ``book_model`` over ``fields`` of ``index`` (built first if missing), on the (request, gold book) pairs of
    ``topics`` and ``qrels``; returns its folder (a :class:`~pyterrier_tot.models.BiEncoderModel`), which
    ``index.dense(path)`` searches against that index. See the module docs for ``negatives`` and
    ``trainable_layers``; the other settings are :func:`~pyterrier_tot.recipe.expert_training.train_biencoder`'s
    (``scale``: the softmax's inverse temperature on cosine scores). ``reuse``: a model trained on the same pairs
    with the same settings against the same catalogue is returned as it is."""
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives must be one of {NEGATIVES}, not {negatives!r}")
    require_columns(topics, ["qid", "query"], "train_request_encoder topics")
    fields = tuple(fields)
    book_model = model_key(book_model) or model_key("minilm")
    gold = _gold(qrels)
    rows, vectors, record = _catalogue(index, book_model, fields, max_chars, precision)
    if negatives == "catalogue" and len(rows) > CATALOGUE_LIMIT:
        raise ValueError(f"negatives='catalogue' over {len(rows):,} books would hold every vector in memory and score "
                         f"them all at every step (limit {CATALOGUE_LIMIT:,}); use negatives='mined'")
    q = topics[["qid", "query"]].astype({"qid": str}).merge(gold, on="qid")
    q = q[[not is_missing(t) and bool(str(t).strip()) for t in q["query"]]]
    missing = sorted(set(q["docno"]) - set(rows))
    if missing:
        import warnings
        warnings.warn(f"{len(missing)} gold books are not in the book index (e.g. {missing[:3]}); their requests "
                      "are left out", stacklevel=2)
        q = q[q["docno"].isin(set(rows))]
    if len(q) < 2:
        raise ValueError(f"train_request_encoder: need at least 2 (request, gold book) pairs, got {len(q)}")
    mined: Dict[str, List[str]] = {}
    if negatives == "mined":
        golds = q.groupby("qid")["docno"].agg(set).to_dict()
        mined = _mined(index, book_model, fields, max_chars, precision, q.drop_duplicates("qid"), golds,
                       n_mined, mine_depth)
    examples = []
    for qid, text, docno in zip(q["qid"], q["query"], q["docno"]):
        extra = [rows[d] for d in mined.get(qid, [])][:n_mined] if negatives == "mined" else []
        if negatives == "mined" and len(extra) < n_mined:
            continue
        examples.append((str(text).strip(), rows[docno], *extra))
    params = dict(epochs=epochs, batch_size=max(2, min(batch_size, len(examples))), max_seq_length=max_seq_length,
                  lr=lr, warmup_ratio=warmup_ratio, max_steps=max_steps, seed=seed, negatives=negatives,
                  scale=scale, trainable_layers=trainable_layers, amp="bf16" if amp else None)
    if negatives == "mined":
        params.update(n_mined=n_mined, mine_depth=mine_depth)
    digest = pairs_digest([(t, str(r), *map(str, extra)) for t, r, *extra in examples])
    out = Path(output_dir).expanduser() if output_dir else _default_dir(
        "request", book_model, len(examples), {**params, "books": record["digest"]})
    with build_locks([out]):
        if reuse:
            got = _trained_as(out, {**params, "pairs_digest": digest})
            if got is not None and _record_of(got) == record:
                return got
        return _train(examples, vectors, record, out, book_model, params, digest, topics, amp, device,
                      show_progress_bar)


def _record_of(path: Path) -> Optional[dict]:
    from pyterrier_tot.recipe.expert_training import training_metadata

    return training_metadata(path).get(FROZEN_BOOKS)


def _train(examples, vectors, record: dict, out: Path, book_model: str, params: dict, digest: str, topics,
           amp: bool, device, show_progress_bar: bool) -> Path:
    import torch
    from sentence_transformers import InputExample, SentenceTransformer

    from pyterrier_tot.console import quiet_loading
    from pyterrier_tot.models.loading import device_label, resolve_model, training_device
    from pyterrier_tot.models.prompts import model_prompts

    overwrite = _replaceable(out)
    random.seed(params["seed"])
    np.random.seed(params["seed"])
    torch.manual_seed(params["seed"])
    device = training_device(device)
    with quiet_loading():
        model = SentenceTransformer(resolve_model(book_model), device=device)
    model.max_seq_length = params["max_seq_length"]
    if params["trainable_layers"] is not None:
        n_layers = len(model[0].auto_model.encoder.layer)
        freeze_lower_layers(model, max(0, n_layers - int(params["trainable_layers"])))
    prompt = model_prompts(model)[0]  # e.g. nomic's "search_query: " (the books were encoded with their own)
    negatives = params["negatives"]
    if negatives == "catalogue":
        books, labels = vectors, [[r] for _, r, *_ in examples]
    else:  # only the rows the examples name: a catalogue of millions of pages is never read whole
        needed = sorted({r for _, *rs in examples for r in rs})
        at = {r: i for i, r in enumerate(needed)}
        books, labels = np.asarray(vectors[needed]), [[at[r] for r in rs] for _, *rs in examples]
    loader = DistinctTextBatches([InputExample(texts=[prompt + t], label=lab)
                                  for (t, *_), lab in zip(examples, labels)], batch_size=params["batch_size"])
    steps = len(loader) if not params["max_steps"] else min(params["max_steps"], len(loader))
    loss = _loss_module(model, books, negatives, params["scale"]).to(device)
    t0 = time.time()
    meta = {"kind": "request-encoder", "base_model": str(book_model), "n_pairs": len(examples),
            "loss": f"frozen catalogue cross-entropy ({negatives})", **params, "pairs_digest": digest,
            FROZEN_BOOKS: record, "field": "+".join(record["fields"]), **training_record(topics),
            "device": device_label(device)}
    losses: List[float] = []

    def on_epoch(epoch: int, mean_loss: float) -> None:
        losses.append(mean_loss)
        if epoch == params["epochs"]:
            _save_model(model, out, {**meta, "steps": steps * epoch, "seconds": round(time.time() - t0, 1),
                                     "seconds_per_step": round((time.time() - t0) / max(1, steps * epoch), 3),
                                     "epoch_losses": list(losses)}, overwrite)

    _fit(model, loader, loss, params["epochs"], steps, steps * params["epochs"],
         int(math.ceil(params["warmup_ratio"] * steps * params["epochs"])), params["lr"], amp, on_epoch,
         "training request encoder" if show_progress_bar else None, device)
    return out
