"""A trained cross-encoder that re-ranks the top ``k`` books of each query.

A bi-encoder scores query and book apart; a cross-encoder reads them together (``[CLS] query [SEP] book``) and
so sees which words of a long, vague ToT description match which sentences of a blurb. No cross-encoder
weights exist offline, so one is trained here from a BERT-family checkpoint that does (the all-MiniLM-L6-v2
encoder by default; the regression head on top is new)::

    from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker, train_cross_encoder
    path = train_cross_encoder(groups)          # groups: (query, gold book text, [negative book texts])
    pipe = index.dense(ft) % 100 >> CrossEncoderReranker(path, index, k=100)

Training is listwise: each query's gold book and its mined negatives form one group and the loss is the
softmax cross-entropy of the gold book within the group. A trained model is an artifact folder
(:class:`CrossEncoderModel`, type ``cross_encoder``, format ``transformers``): the Hugging Face model and
tokenizer (safetensors weights) plus ``pt_meta.json`` and the training details.

The reranker re-scores the top ``k`` rows of each query by incoming score; rows below ``k`` keep their order
under the re-ranked block. ``alpha`` < 1 mixes the two views of the block: ``alpha * minmax(cross-encoder) +
(1 - alpha) * minmax(incoming score)`` per query, so a first stage that is usually right keeps a say
(``benchmarks/second_stage/second_stage.py`` chooses k and alpha on a tuning slice). The query is cut to
``max_query_tokens`` word pieces so the book always gets the rest of ``max_length``.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.artifact import ToTArtifact, artifact_path, building, read_meta
from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import cache_folder
from pyterrier_tot.checks import check_index, check_int, check_number
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.console import quiet_loading
from pyterrier_tot.normalise import mix_scores
from pyterrier_tot.rerank._topk import rerank_top_k

#: A training group: query text, gold book text, negative book texts.
Group = Tuple[str, str, Sequence[str]]
TRAINING_FILE = "pyterrier_tot_training.json"
DEFAULTS = dict(epochs=1, batch_queries=4, max_length=256, max_query_tokens=128, lr=3e-5, warmup_ratio=0.1,
                seed=42, head_lr=None)


class CrossEncoderModel(ToTArtifact):
    """A trained cross-encoder folder; :meth:`reranker` builds the re-ranking transformer."""

    ARTIFACT_TYPE = "cross_encoder"
    ARTIFACT_FORMAT = "transformers"

    def __init__(self, path):
        super().__init__(path)
        self._check_type()

    def reranker(self, index=None, k: int = 100, **kwargs) -> "CrossEncoderReranker":
        return CrossEncoderReranker(self, index, k=k, **kwargs)

    def training(self) -> dict:
        f = Path(self.path) / TRAINING_FILE
        return json.loads(f.read_text()) if f.is_file() else {}


def _encode(tok, queries: Sequence[str], docs: Sequence[str], max_length: int, max_query_tokens: int):
    """Tokenised (query, book) pairs: the query cut to ``max_query_tokens`` first, the book to what is left."""
    q_ids = tok(list(queries), add_special_tokens=False, truncation=True, max_length=max_query_tokens)["input_ids"]
    q_text = tok.batch_decode(q_ids)
    return tok(q_text, list(docs), truncation="only_second", max_length=max_length, padding=True,
               return_tensors="pt")


def _load(path, device: str = "cpu"):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with quiet_loading():
        tok = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1).to(device)
    model.eval()
    return tok, model


def score_pairs(tok, model, queries: Sequence[str], docs: Sequence[str], batch_size: int = 32,
                max_length: int = DEFAULTS["max_length"],
                max_query_tokens: int = DEFAULTS["max_query_tokens"]) -> np.ndarray:
    """Cross-encoder logits for aligned ``queries`` / ``docs``; batches are sorted by length to pad less."""
    import torch

    n = len(queries)
    out = np.zeros(n, dtype=float)
    order = np.argsort([len(q) + len(d) for q, d in zip(queries, docs)])
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            enc = _encode(tok, [queries[i] for i in idx], [docs[i] for i in idx], max_length, max_query_tokens)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            out[idx] = model(**enc).logits.reshape(-1).float().cpu().numpy()
    return out


def train_cross_encoder(groups: Sequence[Group], output_dir: Union[str, Path, None] = None,
                        base_model=None, n_negatives: Optional[int] = None, epochs: int = DEFAULTS["epochs"],
                        batch_queries: int = DEFAULTS["batch_queries"], max_length: int = DEFAULTS["max_length"],
                        max_query_tokens: int = DEFAULTS["max_query_tokens"], lr: float = DEFAULTS["lr"],
                        warmup_ratio: float = DEFAULTS["warmup_ratio"], max_steps: Optional[int] = None,
                        seed: int = DEFAULTS["seed"], show_progress_bar: bool = True,
                        extra_metadata: Optional[dict] = None, head_lr: Optional[float] = DEFAULTS["head_lr"],
                        device: Optional[str] = None) -> Path:
    """Train a cross-encoder on (query, gold text, negative texts) groups and save it as a
    :class:`CrossEncoderModel` folder (default under the library cache). ``base_model``: a BERT-family folder or
    name (default MiniLM, resolved offline; its head is initialised fresh). ``n_negatives`` (default: the
    fewest any group has) negatives per group are used; ``max_steps`` caps the optimisation steps. ``head_lr``: the
    learning rate of the scoring head and the pooler in front of it (default ``lr``): the head starts random,
    so a few hundred steps at an encoder's learning rate barely move it (the loss stays near chance). ``device``:
    where to train (default a GPU when torch sees one); not in the folder's name, but in the training record."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    from pyterrier_tot.models.loading import device_label, resolve_model, training_device

    groups = [(str(q), str(p), [str(n) for n in negs]) for q, p, negs in groups
              if str(q).strip() and str(p).strip() and len(negs)]
    if len(groups) < 1:
        raise ValueError("train_cross_encoder: need at least one (query, positive, negatives) group with negatives")
    n_neg = n_negatives or min(len(g[2]) for g in groups)
    groups = [(q, p, negs[:n_neg]) for q, p, negs in groups if len(negs) >= n_neg]
    src = artifact_path(base_model) or resolve_model(base_model)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    with quiet_loading():
        tok = AutoTokenizer.from_pretrained(str(src))
        model = AutoModelForSequenceClassification.from_pretrained(str(src), num_labels=1)
    device = training_device(device)
    model.to(device).train()
    per_epoch = math.ceil(len(groups) / batch_queries)
    steps = min(max_steps, per_epoch) if max_steps else per_epoch
    head = [p for n, p in model.named_parameters() if n.startswith(("classifier.", "bert.pooler.", "pooler."))]
    ids = {id(p) for p in head}
    body = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr or lr}])
    sched = get_linear_schedule_with_warmup(opt, int(math.ceil(warmup_ratio * steps * epochs)), steps * epochs)
    rng = random.Random(seed)
    losses, t0 = [], time.time()
    bar = progress_bar(total=steps * epochs, desc="cross-encoder training", unit="step", training=True,
                       disable=not show_progress_bar)
    for _ in range(epochs):
        order = list(range(len(groups)))
        rng.shuffle(order)
        for step in range(steps):
            batch = [groups[i] for i in order[step * batch_queries:(step + 1) * batch_queries]]
            queries = [q for q, _, negs in batch for _ in range(1 + len(negs))]
            docs = [d for _, p, negs in batch for d in [p, *negs]]
            enc = {k: v.to(device) for k, v in _encode(tok, queries, docs, max_length, max_query_tokens).items()}
            logits = model(**enc).logits.reshape(len(batch), 1 + n_neg)
            # the gold book is column 0 of every group
            loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long, device=device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(loss.item())
            bar.update(1)
    bar.close()
    seconds = time.time() - t0
    params = dict(epochs=epochs, batch_queries=batch_queries, n_negatives=n_neg, max_length=max_length,
                  max_query_tokens=max_query_tokens, lr=lr, warmup_ratio=warmup_ratio, max_steps=max_steps, seed=seed,
                  head_lr=head_lr)
    if head_lr is None:  # models trained before the option keep their default folder
        del params["head_lr"]
    key = hashlib.sha1(json.dumps([str(src), len(groups), params], sort_keys=True).encode()).hexdigest()[:8]
    out = Path(output_dir).expanduser() if output_dir else cache_folder(f"cross-encoder-{key}")
    meta = {"base_model": str(base_model or "sentence-transformers/all-MiniLM-L6-v2"), "n_groups": len(groups),
            "steps": steps * epochs, "seconds": round(seconds, 1), "loss": "listwise softmax cross-entropy",
            "first_loss": losses[0], "last_loss": float(np.mean(losses[-10:])), **params, **(extra_metadata or {}),
            "device": device_label(device)}
    overwrite = out.exists() and (not any(out.iterdir()) or _is_cross_encoder(out))
    model.eval()
    with building(out, overwrite=overwrite) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / TRAINING_FILE).write_text(json.dumps(meta, indent=2))
        CrossEncoderModel._write_meta(CrossEncoderModel, tmp, base_model=meta["base_model"], n_groups=len(groups),
                                      steps=steps * epochs, training_file=TRAINING_FILE)
    return out


def _is_cross_encoder(path: Path) -> bool:
    try:
        return read_meta(path).get("type") == CrossEncoderModel.ARTIFACT_TYPE
    except (FileNotFoundError, ValueError):
        return False


class CrossEncoderReranker(pt.Transformer):
    """Re-ranks the top ``k`` rows of each query of a result frame by a trained cross-encoder's score.

    :param model: a :class:`CrossEncoderModel` or its folder.
    :param index: a :class:`~pyterrier_tot.index.BookIndex` for the book text; without one the frame needs
        a ``text`` column.
    :param k: rows per query re-scored (by incoming score); the rest stay below in their order.
    :param fields: book fields joined into the text (with an index).
    :param max_chars: characters of each book read (``None``: all; the tokenizer cuts at ``max_length``).
    :param alpha: weight of the cross-encoder in the top ``k``: 1.0 (default) ranks them by its score alone,
        smaller values mix in the incoming score (both min-max normalised per query), 0.0 keeps the incoming order.
    """

    @keyword_settings
    def __init__(self, model, index=None, *, k: int = 100, fields: Union[str, Sequence[str]] = ("title", "text"),
                 max_chars: Optional[int] = 2000, batch_size: int = 32, max_length: Optional[int] = None,
                 max_query_tokens: Optional[int] = None, device: str = "cpu", alpha: float = 1.0):
        k = check_int(k, "k", "CrossEncoderReranker")
        self.alpha = float(check_number(alpha, "alpha", "CrossEncoderReranker", low=0.0, high=1.0))
        if index is not None:
            check_index(index, "CrossEncoderReranker")
        self.model = model if isinstance(model, CrossEncoderModel) else CrossEncoderModel(str(model))
        self.index = index
        self.k = int(k)
        self.fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self.max_chars = max_chars
        self.batch_size = batch_size
        info = self.model.training()
        self.max_length = int(max_length or info.get("max_length", DEFAULTS["max_length"]))
        self.max_query_tokens = int(max_query_tokens or info.get("max_query_tokens", DEFAULTS["max_query_tokens"]))
        self.device = device
        self._net = None
        self._loader = None

    def pair_scores(self, block: pd.DataFrame) -> np.ndarray:
        """This re-ranker's score of each (``qid``, ``query``, ``docno``) row of ``block`` (its book text read from
        the index, or ``block["text"]`` without one; with ``alpha < 1`` mixed with ``block["score"]``), in row
        order, without re-ranking anything: for studies that cache or compare scores per pair."""
        if self._net is None:
            self._net = _load(self.model.path, self.device)
        frame = block[["qid", "query", "docno"]]
        if self.index is not None:
            if self._loader is None:
                self._loader = self.index.text_loader(self.fields, self.max_chars)
            text = self._loader(frame)["text"]
        else:
            text = block["text"]
        text = text.fillna("").astype(str).tolist()
        ce = score_pairs(*self._net, frame["query"].astype(str).tolist(), text, self.batch_size,
                         self.max_length, self.max_query_tokens)
        if self.alpha == 1.0:
            return ce
        return mix_scores(block, ce, self.alpha)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        needs = ["query", "score"] if self.index is not None else ["query", "score", "text"]
        return rerank_top_k(self, inp, self.k, self.index, needs, f"needs a result frame with {needs}",
                            self.pair_scores)

    def __repr__(self):
        # max_length and max_query_tokens as read from the model's training record where not given
        return code_repr(self, [str(self.model.path)] + ([self.index] if self.index is not None else []), {
            "k": self.k, "fields": self.fields, "max_chars": self.max_chars, "batch_size": self.batch_size,
            "max_length": self.max_length, "max_query_tokens": self.max_query_tokens, "device": self.device,
            "alpha": self.alpha})
