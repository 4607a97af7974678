"""Multi-task training of a generative retriever: indexing and retrieval pairs in one shuffled stream.

The loss is token cross-entropy on the identifier tokens with label smoothing 0.1 (the sum of the indexing and
the retrieval loss, as both tasks share batches). Progress shows through ``pt.tqdm``. With ``checkpoint_dir``
the trainable weights (safetensors), the optimiser state (``torch.save``, read back with ``weights_only=True``)
and the step reached are saved every ``checkpoint_every`` steps; calling :func:`train` again with the same
pairs, seed and folder resumes after the last saved step (the batch order is a function of the seed), so a
killed run loses at most ``checkpoint_every`` steps. ``max_seconds`` stops early at a step boundary (after a
checkpoint), for fixed CPU budgets.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import torch

from pyterrier_tot._plumbing.artifact import build_lock
from pyterrier_tot._plumbing.util import differing
from pyterrier_tot.generative.backbones import Backbone

LABEL_SMOOTHING = 0.1
_STATE, _OPTIM, _PROGRESS = "trainable.safetensors", "optimizer.pt", "progress.json"


def _trainable(backbone: Backbone) -> dict:
    return {n: p for n, p in backbone.model.named_parameters() if p.requires_grad}


def save_checkpoint(folder: Union[str, Path], backbone: Backbone, optimizer, progress: dict) -> None:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".partial"
    tmp.mkdir(exist_ok=True)
    save_file({n: p.detach().contiguous().clone() for n, p in _trainable(backbone).items()}, str(tmp / _STATE))
    torch.save(optimizer.state_dict(), tmp / _OPTIM)
    (tmp / _PROGRESS).write_text(json.dumps(progress))
    for name in (_STATE, _OPTIM, _PROGRESS):  # the progress file last: it says the other two are complete
        (tmp / name).replace(folder / name)
    tmp.rmdir()


def load_checkpoint(folder: Union[str, Path], backbone: Backbone, optimizer,
                    run: Optional[dict] = None) -> Optional[dict]:
    """The progress of the checkpoint in ``folder`` (None when there is none), its weights and optimizer state
    loaded into ``backbone`` and ``optimizer``. ``run``: what the resuming run is (its steps, seed, settings, pairs);
    a checkpoint that recorded another run raises ValueError naming what differs, before anything is loaded."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / _PROGRESS).is_file():
        return None
    progress = json.loads((folder / _PROGRESS).read_text())
    known = {k: v for k, v in (run or {}).items() if k in progress}  # an older checkpoint records steps and seed
    if any(progress[k] != v for k, v in known.items()):
        raise ValueError(f"checkpoint {folder} is of another run ({differing({k: progress[k] for k in known}, known)})"
                         "; use a new folder")
    missing, unexpected = backbone.model.load_state_dict(load_file(str(folder / _STATE)), strict=False)
    if unexpected:
        raise ValueError(f"checkpoint {folder} does not fit this backbone: unexpected weights {unexpected[:3]}")
    optimizer.load_state_dict(torch.load(folder / _OPTIM, weights_only=True))
    return progress


def _run_digest(backbone: Backbone, pairs: pd.DataFrame, **settings) -> str:
    """A hash of the backbone's name, the pairs (source, target, task) in order and the training settings."""
    import hashlib

    cols = [c for c in ("source", "target", "task") if c in pairs.columns]
    rows = pairs[cols].astype(str).to_numpy().tolist()
    text = json.dumps({"backbone": backbone.name, "pairs": rows, **settings}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def tokenise_pairs(backbone: Backbone, pairs: pd.DataFrame, max_source_tokens: int = 64):
    """(source ids, target ids) lists of a pairs frame (columns ``source``, ``target``)."""
    sources = [backbone.source_ids(s, max_source_tokens) for s in pairs["source"]]
    targets = [backbone.target_ids(t) for t in pairs["target"]]
    return sources, targets


def train(backbone: Backbone, pairs: pd.DataFrame, epochs: float = 1.0, batch_size: int = 8, lr: float = 5e-4,
          label_smoothing: float = LABEL_SMOOTHING, max_source_tokens: int = 64, weight_decay: float = 0.0,
          checkpoint_dir: Union[str, Path, None] = None, checkpoint_every: int = 50,
          max_seconds: Optional[float] = None, seed: int = 0, verbose: bool = True,
          schedule: str = "constant", warmup: float = 0.05) -> dict:
    """Train ``backbone`` in place on ``pairs`` (columns ``source``, ``target``, optionally ``task``).

    ``epochs`` may be fractional. ``schedule="linear"``: the learning rate rises over the first ``warmup``
    share of the steps and then falls linearly to zero (``"constant"``: ``lr`` throughout). Returns
    statistics: steps, pairs seen, tokens, seconds, tokens/s, the mean loss of the last 50 steps, and whether
    the run resumed or stopped on ``max_seconds``."""
    if len(pairs) == 0:
        raise ValueError("train: no training pairs")
    sources, targets = tokenise_pairs(backbone, pairs, max_source_tokens)
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(pairs)) for _ in range(int(np.ceil(epochs)))])
    order = order[:int(round(epochs * len(pairs)))]
    steps = int(np.ceil(len(order) / batch_size))
    # a backbone may give parts of itself their own learning rate (a pretrained encoder beside a new decoder)
    params = backbone.param_groups(lr) if hasattr(backbone, "param_groups") else backbone.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if schedule not in ("constant", "linear"):
        raise ValueError(f"schedule must be 'constant' or 'linear', not {schedule!r}")
    ramp = max(1, int(warmup * steps))
    scale = (lambda i: min((i + 1) / ramp, max(0.0, (steps - i) / max(1, steps - ramp)))) \
        if schedule == "linear" else (lambda i: 1.0)
    base_lrs = [g["lr"] for g in optimizer.param_groups]
    done, resumed = 0, False
    # what this run is: a checkpoint of other pairs or settings (of the same length) is never resumed as this one
    run = {"steps": steps, "seed": seed, "run": _run_digest(backbone, pairs, epochs=epochs, batch_size=batch_size,
                                                             lr=lr, label_smoothing=label_smoothing,
                                                             max_source_tokens=max_source_tokens,
                                                             weight_decay=weight_decay, schedule=schedule,
                                                             warmup=warmup)}
    with contextlib.ExitStack() as lock:
        if checkpoint_dir is not None:
            # the whole run holds the checkpoint's build lock: a second process training the same run waits, then
            # resumes from the finished checkpoint (no step left to train) instead of training beside the first
            lock.enter_context(build_lock(checkpoint_dir))
            progress = load_checkpoint(checkpoint_dir, backbone, optimizer, run)
            if progress is not None:
                done, resumed = int(progress["step"]), True
        model = backbone.model
        model.train()
        t0, tokens, losses, stopped = time.perf_counter(), 0, [], False
        bar = pt.tqdm(range(done, steps), desc=f"training {backbone.name}", unit="step", disable=not verbose,
                      mininterval=10)  # a redraw every 10 s, not every step
        step = done
        for step in bar:
            rows = order[step * batch_size:(step + 1) * batch_size]
            batch = backbone.batch([sources[i] for i in rows], [targets[i] for i in rows])
            for g, base_lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = base_lr * scale(step)
            logits, labels, _ = backbone.target_logits(batch)
            loss = torch.nn.functional.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tokens += int(batch["attention_mask"].sum()) + (int((batch["labels"] >= 0).sum())
                                                             if backbone.kind != "causal" else 0)
            losses.append(float(loss.detach()))
            last = step + 1 == steps
            over = max_seconds is not None and time.perf_counter() - t0 > max_seconds
            if checkpoint_dir is not None and ((step + 1) % checkpoint_every == 0 or last or over):
                save_checkpoint(checkpoint_dir, backbone, optimizer, {"step": step + 1, **run})
            if verbose:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}", refresh=False)
            if over and not last:
                stopped = True
                break
        model.eval()
    secs = time.perf_counter() - t0
    ran = len(losses)
    return {"steps": steps, "steps_run": ran, "step_reached": done + ran, "resumed": resumed,
            "stopped_on_time": stopped, "pairs_seen": min(len(order), (done + ran) * batch_size),
            "tokens": tokens, "seconds": round(secs, 2), "tokens_per_s": round(tokens / secs, 1) if secs else None,
            "loss_last50": float(np.mean(losses[-50:])) if losses else None, "batch_size": batch_size, "lr": lr,
            "label_smoothing": label_smoothing, "epochs": epochs, "max_source_tokens": max_source_tokens,
            "schedule": schedule}
