"""The bi-encoder's optimisation loop: batches without repeated texts, sentence-transformers' ``old_fit`` loop
(AdamW, linear warm-up and decay, bf16 autocast on request), frozen lower layers, and the atomic save of each
checkpoint. :func:`~pyterrier_tot.recipe.expert_training.train_biencoder` is the entry point; this module is its
engine room (no pairs, no caching decisions)."""
from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Callable, Optional

from pyterrier_tot._plumbing.artifact import building, write_meta
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.models.loading import TRAINING_FILE, BiEncoderModel

METADATA_FILE = TRAINING_FILE


def _dimension(model) -> int:
    # renamed get_embedding_dimension in sentence-transformers 6; the old name warns there
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return get()


class DistinctTextBatches:
    """Batches in which no text appears twice (an in-batch negative must not be some example's own positive),
    drawn in order from a list reshuffled at the start and at every wrap-around, as sentence-transformers'
    ``NoDuplicatesDataLoader`` draws them (so training takes the same steps), except that a batch that cannot be
    filled (a few queries naming the same books, hard negatives that are other queries' answers) is emitted
    short after one pass without a usable example, where that loader would wait for ever."""

    def __init__(self, examples: list, batch_size: int):
        self.examples = list(examples)
        self.batch_size = batch_size
        self.collate_fn = None
        self._at = 0
        random.shuffle(self.examples)

    def __len__(self) -> int:
        return len(self.examples) // self.batch_size

    def _next_example(self):
        example = self.examples[self._at]
        self._at += 1
        if self._at >= len(self.examples):
            self._at = 0
            random.shuffle(self.examples)
        return example

    def __iter__(self):
        for _ in range(len(self)):
            batch, seen, misses = [], set(), 0
            while len(batch) < self.batch_size and misses < len(self.examples):
                example = self._next_example()
                keys = {str(t).strip().lower() for t in example.texts}
                if keys & seen:
                    misses += 1
                    continue
                batch.append(example)
                seen |= keys
                misses = 0
            yield self.collate_fn(batch) if self.collate_fn is not None else batch


def _fit(model, loader, loss, epochs: int, steps: int, schedule_steps: int, warmup_steps: int, lr: float,
         amp: bool, on_epoch: Callable[[int, float], None], desc: Optional[str], device: str = "cpu") -> None:
    """The optimisation loop of sentence-transformers' ``old_fit`` (AdamW, weight decay 0.01 except biases and
    LayerNorm, linear warm-up then decay over ``schedule_steps``, gradients clipped at norm 1), run for ``epochs``
    epochs of ``steps``; ``amp``: forward passes under bfloat16 autocast (weights and optimiser stay fp32).
    ``on_epoch(e, mean_loss)`` runs after epoch ``e`` (1-based); ``desc``: the bar's label (None: no bar)."""
    import torch
    import transformers

    no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
    named = [(n, p) for n, p in loss.named_parameters() if p.requires_grad]  # frozen layers: not optimised
    groups = [{"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps,
                                                             num_training_steps=schedule_steps)
    loader.collate_fn = model.smart_batching_collate
    batches = iter(loader)
    # one labelled bar over all steps, redrawn at most every 30 s: a log file gets a line per half minute, not per step
    bar = progress_bar(total=epochs * steps, desc=desc or "training", unit="step", training=True, mininterval=30,
                       disable=desc is None)
    for epoch in range(1, epochs + 1):
        loss.zero_grad()
        loss.train()
        total = 0.0
        for _ in range(steps):
            try:
                features, labels = next(batches)
            except StopIteration:
                batches = iter(loader)
                features, labels = next(batches)
            if device != "cpu":
                features = [{k: v.to(device) if hasattr(v, "to") else v for k, v in f.items()} for f in features]
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if amp else contextlib.nullcontext():
                value = loss(features, labels)
            value.backward()
            torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
            total += float(value.detach())
            bar.update(1)
        mean = round(total / max(1, steps), 4)
        bar.set_postfix(epoch=epoch, loss=mean)
        on_epoch(epoch, mean)
    bar.close()


def _save_model(model, out: Path, meta: dict, overwrite: bool) -> None:
    with building(out, overwrite=overwrite) as tmp:
        model.save(str(tmp), safe_serialization=True)
        (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2))
        summary = {k: meta[k] for k in ("kind", "base_model", "n_pairs", "steps") if k in meta}
        if "field" in meta:
            summary["field"] = meta["field"]
        write_meta(tmp, BiEncoderModel.ARTIFACT_TYPE, BiEncoderModel.ARTIFACT_FORMAT, **summary,
                   embedding_dim=_dimension(model), training_file=METADATA_FILE)


def freeze_lower_layers(model, n: int) -> int:
    """Freeze the embeddings and the lowest ``n`` transformer layers of a sentence-transformers ``model`` (a
    BERT-family encoder: its ``embeddings`` and ``encoder.layer``); returns the parameters left trainable."""
    encoder = model[0].auto_model
    blocks = getattr(getattr(encoder, "encoder", None), "layer", None)
    if blocks is None or not hasattr(encoder, "embeddings"):
        raise ValueError(f"freeze_layers: {type(encoder).__name__} has no embeddings / encoder.layer to freeze")
    if not 0 <= n <= len(blocks):
        raise ValueError(f"freeze_layers={n}: the model has {len(blocks)} layers")
    for part in [encoder.embeddings, *list(blocks)[:n]]:
        for p in part.parameters():
            p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
