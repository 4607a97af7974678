"""Fine-tuning sentence-transformers bi-encoders for the retrieval experts.

One model per field is trained on (clue, book field) pairs built from the training queries: the clue comes from
a clue frame (LLM clues read from a cache JSONL with :func:`load_clue_cache`, or the output of the rule
extractor), the positive is the gold book's field text (``FIELD_FOR_CLUE``: title, author, genres, text).
The base retriever is trained on (full query, title + text) pairs. The loss is
``MultipleNegativesRankingLoss`` (in-batch negatives; batches never hold the same book twice).

Default budget (CPU-sized): 1 epoch, batch 16, ``max_seq_length`` 256, lr 2e-5, 10% linear warm-up. On the
1,853 Reddit-TOMT training queries that is 116 steps, a few minutes of MiniLM on two CPU cores.

    from pyterrier_tot.recipe.expert_training import train_base_retriever, train_field_expert
    path = train_base_retriever(topics, qrels, index.corpus)          # -> ~/.cache/pyterrier_tot/models/base-...
    dense = index.dense(path)                                         # any loader takes the directory
    title_path = train_field_expert("title", clue_frame, qrels, index.corpus)
    expert = FieldExpert(index, "title", model=title_path)

A trained model is a ``pt.Artifact`` folder (:class:`~pyterrier_tot.models.BiEncoderModel`, type ``biencoder``,
format ``sentence_transformers``): a plain sentence-transformers directory (safetensors weights) plus
``pt_meta.json`` and ``pyterrier_tot_training.json`` (base model, field, pair count, hyper-parameters, seconds
taken; a base records ``train_qids`` and ``train_text``, the sha1 of its training qids and of their
text). The folder is written atomically, so a
killed training never leaves one that looks finished; ``pt.Artifact.load(path)`` opens it. Training uses
``SentenceTransformer.old_fit``: the installed sentence-transformers 6.2 routes ``fit`` through
``SentenceTransformerTrainer``, which needs the ``datasets`` and ``accelerate`` packages that are not
dependencies of this library; ``old_fit`` is the same loop without them.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
import warnings
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_tot._plumbing.artifact import META_FILE, build_locks, read_meta
from pyterrier_tot._plumbing.util import cache_folder, is_missing, require_columns
from pyterrier_tot.decomposition.clues import CLUE_FIELDS, FIELD_FOR_CLUE, clue_column, clues_na_as_none
from pyterrier_tot.models.loading import TRAINING_FILE, BiEncoderModel
from pyterrier_tot.recipe.protocol import training_record
from pyterrier_tot.recipe.training_loop import (
    DistinctTextBatches,
    _fit,
    _save_model,
    freeze_lower_layers,
)

#: Default hyper-parameters (CPU-sized).
DEFAULTS = dict(epochs=1, batch_size=16, max_seq_length=256, lr=2e-5, warmup_ratio=0.1, seed=42)
METADATA_FILE = TRAINING_FILE
Pair = Tuple[str, str]
#: (anchor, positive, negative, ...): a training example; every example of one training run has the same length.
Example = Tuple[str, ...]


def load_clue_cache(path: Union[str, Path]) -> pd.DataFrame:
    """A clue frame (``qid`` + ``clue_*`` + ``clue_year``) from a JSONL cache, one query per line."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf8").splitlines() if line.strip()]
    df = pd.DataFrame(rows)
    require_columns(df, ["qid"], f"clue cache {path}")
    df["qid"] = df["qid"].astype(str)
    return clues_na_as_none(df)


def _gold(qrels: pd.DataFrame) -> pd.DataFrame:
    require_columns(qrels, ["qid", "docno"], "expert training qrels")
    q = qrels[qrels["label"] > 0] if "label" in qrels.columns else qrels
    return q[["qid", "docno"]].astype(str)


def book_texts(corpus, docnos: Iterable[str], doc_fields: Sequence[str] = ("title", "text"),
               max_chars: Optional[int] = None) -> Dict[str, str]:
    """docno -> text (``doc_fields`` joined by newlines, stripped, cut at ``max_chars``) of the books of ``docnos``
    that ``corpus`` holds. ``corpus``: a corpus frame, or a :class:`~pyterrier_tot.index.BookIndex` (anything with
    ``books_of``), which is read by docno: a streamed corpus (TREC ToT, 6.4M pages) is never loaded whole.
    Docnos the corpus lacks are left out, with a warning."""
    wanted = list(dict.fromkeys(str(d) for d in docnos))
    if isinstance(corpus, pd.DataFrame):
        require_columns(corpus, ["docno", *doc_fields], "training corpus")
        books = corpus[corpus["docno"].astype(str).isin(set(wanted))]
    elif hasattr(corpus, "books_of"):
        books = corpus.books_of(wanted, missing="skip")
        require_columns(books, ["docno", *doc_fields], "training corpus")
    else:
        raise TypeError(f"training corpus must be a corpus frame or a BookIndex, not {type(corpus).__name__}")
    texts = ["\n".join(row).strip() for row in books[list(doc_fields)].fillna("").astype(str).itertuples(index=False)]
    found = dict(zip(books["docno"].astype(str), [t[:max_chars] if max_chars else t for t in texts]))
    lost = [d for d in wanted if d not in found]
    if lost:
        warnings.warn(f"{len(lost)} of {len(wanted)} training books are not in the corpus (e.g. {lost[:3]}); "
                      "their examples are left out", stacklevel=3)
    return found


def build_pairs(queries: pd.DataFrame, qrels: pd.DataFrame, corpus, query_column: str = "query",
                doc_fields: Sequence[str] = ("title", "text"), max_chars: Optional[int] = None) -> List[Pair]:
    """(query text, gold book text) pairs: one per relevant (qid, docno); queries whose ``query_column`` is N/A or
    whose gold book has empty ``doc_fields`` are skipped. ``corpus``: a corpus frame or a BookIndex (see
    :func:`book_texts`: only the gold books are read)."""
    require_columns(queries, ["qid", query_column], "build_pairs")
    q = queries[["qid", query_column]].copy()
    q["qid"] = q["qid"].astype(str)
    merged = q.merge(_gold(qrels), on="qid")
    texts = book_texts(corpus, merged["docno"], doc_fields, max_chars)
    return [(str(a).strip(), texts[d]) for a, d in zip(merged[query_column], merged["docno"])
            if not is_missing(a) and texts.get(d, "").strip()]


def build_field_pairs(field: str, clues: pd.DataFrame, qrels: pd.DataFrame, corpus: pd.DataFrame,
                      book_field: Optional[str] = None) -> List[Pair]:
    """(clue, gold book field) pairs for clue ``field`` (title, author, genre, plot, ...)."""
    if field not in CLUE_FIELDS:
        raise ValueError(f"unknown clue field {field!r}; expected one of {CLUE_FIELDS}")
    book_field = book_field or FIELD_FOR_CLUE[field]
    if book_field in ("year", "cover", "url"):
        raise ValueError(f"field {field!r} maps to book field {book_field!r}, which is not text; nothing to train")
    return build_pairs(clues, qrels, corpus, query_column=clue_column(field), doc_fields=(book_field,))


def _default_dir(kind: str, base_model: Optional[str], n: int, params: dict) -> Path:
    key = hashlib.sha1(json.dumps([kind, str(base_model), n, params], sort_keys=True).encode()).hexdigest()[:8]
    return cache_folder(kind, Path(str(base_model or "minilm")).name, key)


def _replaceable(out: Path) -> bool:
    """May training write over ``out``? Only when it is absent, empty, or a model folder written before."""
    if not out.exists():
        return False
    if out.is_dir() and not any(out.iterdir()):
        return True
    if (out / META_FILE).is_file():
        try:
            return read_meta(out).get("type") == BiEncoderModel.ARTIFACT_TYPE
        except ValueError:
            return False
    if (out / METADATA_FILE).is_file():  # a model saved before models were artifacts
        return True
    raise FileExistsError(f"{out} exists and is not a model folder written by pyterrier_tot; "
                          "choose another output_dir")


def build_examples(queries: pd.DataFrame, qrels: pd.DataFrame, corpus,
                   negatives: Dict[str, List[str]], n_negatives: int, query_column: str = "query",
                   doc_fields: Sequence[str] = ("title", "text"), max_chars: Optional[int] = None) -> List[Example]:
    """(query, gold book, ``n_negatives`` hard negatives) examples, the negatives from ``negatives`` (qid ->
    docnos, e.g. :func:`~pyterrier_tot.recipe.hard_negatives.sample_negatives`). A query with fewer
    negatives, an N/A query text or an empty gold book is skipped (MNRL needs the same width everywhere).
    ``corpus``: a corpus frame or a BookIndex (only the gold and negative books are read)."""
    require_columns(queries, ["qid", query_column], "build_examples")
    gold = _gold(qrels)
    q = queries[["qid", query_column]].astype({"qid": str}).merge(gold, on="qid")
    wanted = list(q["docno"]) + [d for qid in q["qid"].unique() for d in negatives.get(qid, [])]
    texts = book_texts(corpus, wanted, doc_fields, max_chars)
    out: List[Example] = []
    for qid, anchor, docno in zip(q["qid"], q[query_column], q["docno"]):
        negs = [texts[d] for d in negatives.get(qid, []) if texts.get(d, "").strip()][:n_negatives]
        pos = texts.get(docno, "")
        if is_missing(anchor) or not str(anchor).strip() or not pos.strip() or len(negs) < n_negatives:
            continue
        out.append((str(anchor).strip(), pos, *negs))
    return out


def train_biencoder(pairs: Sequence[Example], output_dir: Union[str, Path, None] = None,
                    base_model: Optional[str] = None,
                    epochs: int = DEFAULTS["epochs"], batch_size: int = DEFAULTS["batch_size"],
                    max_seq_length: int = DEFAULTS["max_seq_length"], lr: float = DEFAULTS["lr"],
                    warmup_ratio: float = DEFAULTS["warmup_ratio"], max_steps: Optional[int] = None,
                    seed: int = DEFAULTS["seed"], kind: str = "biencoder", show_progress_bar: bool = True,
                    extra_metadata: Optional[dict] = None, schedule_epochs: Optional[int] = None,
                    epoch_dirs: Optional[Dict[int, Union[str, Path]]] = None, amp: bool = False,
                    device: Optional[str] = None, freeze_layers: int = 0, reuse: bool = False) -> Path:
    """Fine-tune ``base_model`` (default MiniLM, resolved offline; a fine-tuned folder continues its training)
    on (anchor, positive) pairs, or (anchor, positive, negative, ...) examples of one width, with
    MultipleNegativesRankingLoss (the extra texts are hard negatives beside the in-batch ones) and save it to
    ``output_dir`` (default under the library cache). ``max_steps`` caps the optimisation steps (per epoch).
    ``schedule_epochs`` (default ``epochs``): the epochs the learning-rate schedule spans, so that ``epochs=1,
    schedule_epochs=3`` is the first epoch of a 3-epoch run. ``epoch_dirs``: ``{epoch: folder}``, a complete model
    saved after each of those epochs as well (a checkpoint per epoch, so choosing the epoch costs no retraining).
    ``amp``: bfloat16 autocast for the forward passes (about twice as fast on CPUs with AMX; weights stay fp32).
    Returns the output directory, loadable by :class:`~pyterrier_tot.decomposition.field_expert.FieldExpert`
    (``model=path``), ``BookIndex.dense(path)``, ``SentenceTransformer(path)`` or ``pt.Artifact.load(path)`` (a
    :class:`~pyterrier_tot.models.BiEncoderModel`). Each folder appears only once complete; an existing model folder
    there is replaced. ``device``: where to train (default a GPU when torch sees one); not in the folder's name, but
    in the training record. ``freeze_layers``: the word embeddings and the lowest ``n`` transformer layers stay as
    they are (no gradient through them: each step costs less). The whole run holds the build lock of every folder
    it writes, so two processes never train into the same folder at once; ``reuse=True``: a complete model there
    trained on the same examples (their digest) with the same settings is returned as it is, also one another
    process finished while this one waited."""
    pairs = [tuple(ex) for ex in pairs if all(str(t).strip() for t in ex)]
    widths = sorted({len(ex) for ex in pairs})
    if len(widths) > 1 or (widths and widths[0] < 2):
        raise ValueError(f"train_biencoder: every example needs the same number (>= 2) of texts, got widths {widths}")
    if len(pairs) < 2:
        raise ValueError(f"train_biencoder: need at least 2 (anchor, positive) pairs, got {len(pairs)}")
    schedule_epochs = schedule_epochs or epochs
    if epochs < 1 or schedule_epochs < epochs:
        raise ValueError(f"train_biencoder: need 1 <= epochs <= schedule_epochs, got epochs={epochs}, "
                         f"schedule_epochs={schedule_epochs}")
    epoch_dirs = {int(e): Path(p).expanduser() for e, p in (epoch_dirs or {}).items()}
    bad = sorted(e for e in epoch_dirs if not 1 <= e <= epochs)
    if bad:
        raise ValueError(f"train_biencoder: epoch_dirs names epochs {bad} outside 1..{epochs}")
    batch_size = max(2, min(batch_size, len(pairs)))
    params = dict(epochs=epochs, batch_size=batch_size, max_seq_length=max_seq_length, lr=lr,
                  warmup_ratio=warmup_ratio, max_steps=max_steps, seed=seed)
    if schedule_epochs != epochs:  # absent otherwise, so the default folder names of older runs stay the same
        params["schedule_epochs"] = schedule_epochs
    if amp:
        params["amp"] = "bf16"
    if freeze_layers:  # absent when nothing is frozen, as above
        params["freeze_layers"] = int(freeze_layers)
    out = Path(output_dir).expanduser() if output_dir else _default_dir(kind, base_model, len(pairs), params)
    targets = {**epoch_dirs, epochs: out}
    digest = pairs_digest(pairs)
    with build_locks(targets.values()):  # the whole run: a second process waits, then finds the folders
        if reuse:
            got = _trained_as(out, {**params, "pairs_digest": digest})
            if got is not None:
                return got
        return _train_into(pairs, targets, out, base_model, params, digest, kind, extra_metadata, max_steps,
                           schedule_epochs, amp, device, freeze_layers, show_progress_bar)


def pairs_digest(pairs: Sequence[Example]) -> str:
    """The sha1 of the training examples, in order (what a model records it was trained on)."""
    h = hashlib.sha1()
    for ex in pairs:
        h.update(json.dumps([str(t) for t in ex], ensure_ascii=False).encode())
    return h.hexdigest()


def _trained_as(out: Path, wanted: dict) -> Optional[Path]:
    """``out`` when it holds a complete model whose training record has every setting of ``wanted``."""
    if not (out / META_FILE).is_file() or not (out / METADATA_FILE).is_file():
        return None
    found = training_metadata(out)
    return out if all(found.get(k) == v for k, v in wanted.items()) else None


def _train_into(pairs, targets: Dict[int, Path], out: Path, base_model, params: dict, digest: str, kind: str,
                extra_metadata, max_steps, schedule_epochs: int, amp: bool, device, freeze_layers: int,
                show_progress_bar: bool) -> Path:
    import numpy as np
    import torch
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from pyterrier_tot.models.loading import device_label, resolve_model, training_device
    from pyterrier_tot.models.prompts import prompted_examples

    epochs, batch_size, seed = params["epochs"], params["batch_size"], params["seed"]
    max_seq_length, lr, warmup_ratio = params["max_seq_length"], params["lr"], params["warmup_ratio"]
    overwrite = {e: _replaceable(p) for e, p in targets.items()}  # checked before training, not after minutes of it
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # a fresh copy, never the cached instance of models.load_sentence_transformer (training mutates it)
    from pyterrier_tot.console import quiet_loading

    device = training_device(device)
    with quiet_loading():
        model = SentenceTransformer(resolve_model(base_model), device=device)
    model.max_seq_length = max_seq_length
    if freeze_layers:
        freeze_lower_layers(model, int(freeze_layers))
    # the model's prompts (nomic: "search_query: " / "search_document: ") as it will be used; none for MiniLM, mpnet
    loader = DistinctTextBatches([InputExample(texts=ex) for ex in prompted_examples(model, pairs)],
                                 batch_size=batch_size)
    steps = len(loader) if not max_steps else min(max_steps, len(loader))
    loss = MultipleNegativesRankingLoss(model)
    t0 = time.time()
    meta = {"kind": kind, "base_model": str(base_model or "sentence-transformers/all-MiniLM-L6-v2"),
            "n_pairs": len(pairs), "n_negatives": len(pairs[0]) - 2,
            "loss": "MultipleNegativesRankingLoss", **params, "pairs_digest": digest, **(extra_metadata or {}),
            "device": device_label(device)}
    epoch_losses: List[float] = []

    def on_epoch(epoch: int, mean_loss: float) -> None:
        epoch_losses.append(mean_loss)
        if epoch in targets:
            info = {**meta, "epochs": epoch, "steps": steps * epoch, "seconds": round(time.time() - t0, 1),
                    "epoch_losses": list(epoch_losses)}
            if epoch != epochs:
                info["schedule_epochs"] = schedule_epochs
            _save_model(model, targets[epoch], info, overwrite[epoch])

    _fit(model, loader, loss, epochs, steps, steps * schedule_epochs,
         int(math.ceil(warmup_ratio * steps * schedule_epochs)), lr, amp, on_epoch,
         f"training {kind}" if show_progress_bar else None, device)
    return out


def training_metadata(path) -> dict:
    """The metadata JSON written next to a fine-tuned model (``path``: its folder or its BiEncoderModel)."""
    return json.loads((Path(str(path)) / METADATA_FILE).read_text())


def train_base_retriever(topics: pd.DataFrame, qrels: pd.DataFrame, corpus,
                         output_dir: Union[str, Path, None] = None, doc_fields: Sequence[str] = ("title", "text"),
                         **kwargs) -> Path:
    """Fine-tune the base retriever on (full query, gold book title + text) pairs. ``corpus``: a corpus frame or a
    BookIndex, streamed or not (only the gold books are read, by docno)."""
    pairs = build_pairs(topics, qrels, corpus, "query", doc_fields)
    # what reuse is checked against: the training queries and their text
    meta = {"field": "+".join(doc_fields), **training_record(topics)}
    return train_biencoder(pairs, output_dir, kind="base", extra_metadata=meta, **kwargs)


def train_field_expert(field: str, clues: pd.DataFrame, qrels: pd.DataFrame, corpus: pd.DataFrame,
                       output_dir: Union[str, Path, None] = None, book_field: Optional[str] = None,
                       **kwargs) -> Path:
    """Fine-tune an expert for clue ``field`` on (clue, gold book field) pairs (queries with an N/A clue are
    left out). A model trained on the same pairs with the same settings is reused (``reuse=False``: trained
    again)."""
    pairs = build_field_pairs(field, clues, qrels, corpus, book_field)
    kwargs.setdefault("reuse", True)  # the same pairs and settings: the model trained before (by any process)
    return train_biencoder(pairs, output_dir, kind=f"expert-{field}",
                           extra_metadata={"field": field, "book_field": book_field or FIELD_FOR_CLUE[field]},
                           **kwargs)


def __getattr__(name: str):
    # clue_form_queries lived here; it is a clue helper, beside the rule clue extractor now (read lazily, so the
    # training loop imports no PyTerrier stage)
    if name == "clue_form_queries":
        from pyterrier_tot.decomposition.rule_clue_extractor import clue_form_queries

        return clue_form_queries
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
