"""Fine-tuning an open_clip model on (cover clue, cover image) pairs, as in the paper (section 2.3).

The loss is CLIP's symmetric InfoNCE: cross-entropy of the in-batch text->image and image->text similarity
logits (scaled by the model's learned temperature), averaged over both directions. When two pairs in a batch
show the same cover (same ``docno``), both count as positives (soft targets), so duplicates are not punished.

Defaults follow the paper: batch size 4, learning rate 5e-5, weight decay 0.2, 10 epochs, AdamW. As in
open_clip's own training, weight decay is not applied to gains, biases and the temperature. The checkpoint
with the best top-1 text->image accuracy on the validation split is kept; the model as given counts as
"epoch 0", so if no epoch beats it the untuned weights are returned (and ``best_epoch`` says 0).

>>> tuned = finetune_clip(ClipModel.from_pretrained('ViT-B-32', 'openai'), train_pairs, output_dir='cover-clip')
>>> ClipCheckpoint('cover-clip').model()     # loads it back (also: ClipModel.load('cover-clip'))
"""
from __future__ import annotations

import copy
import math
import random
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from pyterrier_tot._plumbing.util import is_missing
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.covers.clip_model import (
    COVER_COLUMN,
    LONG_CLUE_MODES,
    ClipCheckpoint,  # noqa: F401  (re-exported: its old home, and setup.cfg's entry point names it here)
    ClipModel,
)
from pyterrier_tot.covers.images import load_cover

PAPER_DEFAULTS = {"batch_size": 4, "lr": 5e-5, "weight_decay": 0.2, "epochs": 10, "optimizer": "adamw"}


def _pairs_frame(pairs, who: str) -> pd.DataFrame:
    df = pairs.copy() if isinstance(pairs, pd.DataFrame) else pd.DataFrame(list(pairs))
    clue_col = COVER_COLUMN if COVER_COLUMN in df.columns else ("clue" if "clue" in df.columns else None)
    cover_col = "cover" if "cover" in df.columns else ("image" if "image" in df.columns else None)
    if clue_col is None or cover_col is None:
        raise KeyError(f"{who} needs columns {COVER_COLUMN!r} (or 'clue') and 'cover' (path/URL/PIL image, or "
                       f"'image'); got {list(df.columns)}")
    out = pd.DataFrame({"clue": df[clue_col].to_numpy(), "cover": df[cover_col].to_numpy()})
    if "docno" in df.columns:
        out["group"] = df["docno"].astype(str).to_numpy()
    else:
        out["group"] = [c if isinstance(c, str) else f"#{i}" for i, c in enumerate(out["cover"])]
    return out


class _Encoded:
    """Pairs with their images loaded and preprocessed once (no augmentation)."""

    def __init__(self, model: ClipModel, pairs: pd.DataFrame, who: str, image_root=None):
        import torch

        keep, images, dropped = [], {}, {"clue": 0, "cover": 0}
        for i, row in enumerate(pairs.itertuples(index=False)):
            if is_missing(row.clue):
                dropped["clue"] += 1
                continue
            if row.group not in images:
                im, status = load_cover(row.cover, image_root=image_root)
                images[row.group] = model.preprocess_images([im])[0] if im is not None else None
            if images[row.group] is None:
                dropped["cover"] += 1
                continue
            keep.append(i)
        if dropped["clue"] or dropped["cover"]:
            warnings.warn(f"{who}: dropped {dropped['clue']} pair(s) with an N/A clue and {dropped['cover']} with "
                          f"a missing/unreadable cover", stacklevel=3)
        kept = pairs.iloc[keep].reset_index(drop=True)
        if len(kept) == 0:
            raise ValueError(f"{who}: no usable (clue, cover) pairs")
        self.clues: List[str] = [str(c) for c in kept["clue"]]
        self.groups: List[str] = list(kept["group"])
        self.cover_ids: List[str] = list(dict.fromkeys(self.groups))  # distinct covers, first-seen order
        gid = {g: j for j, g in enumerate(self.cover_ids)}
        self.target = np.array([gid[g] for g in self.groups])
        self.images = torch.stack([images[g] for g in self.cover_ids])  # one tensor per distinct cover

    def __len__(self):
        return len(self.clues)


def retrieval_accuracy(model: ClipModel, clues: Sequence[str], images, target: Sequence[int],
                       ks: Sequence[int] = (1, 5), long_clues: str = "chunk", batch_size: int = 64) -> Dict[str, float]:
    """Text->image retrieval accuracy: for each clue, is its cover (``images[target[i]]``) among the top-k of
    all ``images``? ``images`` is a list of PIL images or a preprocessed tensor ``[n, 3, H, W]``."""
    import torch

    target = np.asarray(target)
    if isinstance(images, torch.Tensor):
        with torch.inference_mode():
            model.model.eval()
            img = torch.cat([model.model.encode_image(images[s:s + batch_size].to(model.device), normalize=True)
                             for s in range(0, len(images), batch_size)]).float().cpu().numpy()
    else:
        img = model.encode_images(list(images), batch_size=batch_size)
    txt = model.encode_texts(list(clues), batch_size=batch_size, long_clues=long_clues)
    sims = txt @ img.T
    true = sims[np.arange(len(target)), target]
    # rank of the true cover = number of covers scoring strictly higher (ties resolved in its favour)
    rank = (sims > true[:, None]).sum(1)
    out = {f"top{k}": float((rank < k).mean()) for k in ks}
    out["n_queries"] = int(len(target))
    out["n_covers"] = int(img.shape[0])
    out["chance_top1"] = 1.0 / img.shape[0]
    return out


class CoverClipTrainer:
    """Contrastive fine-tuning of a :class:`ClipModel` on cover clues; see the module docstring.

    Pairs are a DataFrame or an iterable of dicts with ``clue_cover`` (or ``clue``), ``cover`` (path, URL or
    PIL image) and optionally ``docno`` (which cover: pairs sharing a docno share a cover). Pairs with an N/A
    clue or an unusable cover are dropped with a warning.
    """

    def __init__(self, model: Union[ClipModel, str, tuple, dict], *, batch_size: int = 4, lr: float = 5e-5,
                 weight_decay: float = 0.2, epochs: int = 10, optimizer: str = "adamw", seed: int = 0,
                 long_clues: str = "chunk", train_long_clues: str = "truncate", max_grad_norm: Optional[float] = None,
                 image_root=None, verbose: bool = True):
        if optimizer not in ("adam", "adamw"):
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {optimizer!r}")
        if long_clues not in LONG_CLUE_MODES or train_long_clues not in LONG_CLUE_MODES:
            raise ValueError(f"long_clues / train_long_clues must be in {LONG_CLUE_MODES}")
        if batch_size < 2:
            raise ValueError("batch_size must be >= 2 for an in-batch contrastive loss")
        self.model = ClipModel.resolve(model)
        self.batch_size, self.lr, self.weight_decay = int(batch_size), float(lr), float(weight_decay)
        self.epochs, self.optimizer, self.seed = int(epochs), optimizer, int(seed)
        self.long_clues, self.train_long_clues = long_clues, train_long_clues
        self.max_grad_norm = max_grad_norm
        self.image_root = image_root
        self.verbose = verbose
        self.history: List[Dict[str, Any]] = []
        self.best_epoch: Optional[int] = None

    def __repr__(self):
        return (f"CoverClipTrainer({self.model!r}, batch_size={self.batch_size}, lr={self.lr}, "
                f"weight_decay={self.weight_decay}, epochs={self.epochs}, optimizer={self.optimizer!r})")

    def settings(self) -> Dict[str, Any]:
        return {"batch_size": self.batch_size, "lr": self.lr, "weight_decay": self.weight_decay,
                "epochs": self.epochs, "optimizer": self.optimizer, "seed": self.seed,
                "long_clues": self.long_clues, "train_long_clues": self.train_long_clues,
                "max_grad_norm": self.max_grad_norm, "loss": "symmetric InfoNCE (CLIP)"}

    @staticmethod
    def split(pairs, val_fraction: float = 0.1, seed: int = 0) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """Split pairs by cover (docno), so no validation cover is seen in training."""
        df = _pairs_frame(pairs, "CoverClipTrainer.split")
        groups = list(dict.fromkeys(df["group"]))
        random.Random(seed).shuffle(groups)
        n_val = max(1, int(round(len(groups) * val_fraction)))
        if n_val >= len(groups):
            raise ValueError(f"need at least 2 distinct covers to split, got {len(groups)}")
        val = set(groups[:n_val])
        mask = df["group"].isin(val)
        return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)

    def _param_groups(self):
        decay, no_decay = [], []
        for n, p in self.model.model.named_parameters():
            if not p.requires_grad:
                continue
            if p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n:
                no_decay.append(p)
            else:
                decay.append(p)
        return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": self.weight_decay}]

    def evaluate(self, data: _Encoded) -> Dict[str, float]:
        return retrieval_accuracy(self.model, data.clues, data.images, data.target, long_clues=self.long_clues)

    def fit(self, train, val=None, *, val_fraction: float = 0.1, output_dir: Optional[Union[str, Path]] = None,
            metadata: Optional[Dict[str, Any]] = None, overwrite: bool = False) -> ClipModel:
        """Train, keep the best epoch by validation top-1, write it to ``output_dir`` (if given) and return it.

        Without ``val``, ``val_fraction`` of the training covers are held out (see :meth:`split`). An existing
        ``output_dir`` raises before training unless ``overwrite``.
        """
        import torch
        import torch.nn.functional as F

        if output_dir is not None and Path(output_dir).exists() and not overwrite:
            # found out now, not after an hour of training
            raise FileExistsError(f"{output_dir} already exists; pass overwrite=True to replace it")
        if val is None:
            train, val = self.split(train, val_fraction, self.seed)
        train_df = _pairs_frame(train, "CoverClipTrainer.fit(train)")
        val_df = _pairs_frame(val, "CoverClipTrainer.fit(val)")
        m = self.model
        tr = _Encoded(m, train_df, "CoverClipTrainer.fit(train)", self.image_root)
        va = _Encoded(m, val_df, "CoverClipTrainer.fit(val)", self.image_root)
        if len(tr) < 2:
            raise ValueError("need at least 2 training pairs")

        tokens = torch.cat([m._chunk_tokens(c, "truncate")[0] for c in tr.clues]) \
            if self.train_long_clues == "truncate" else None
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        opt_cls = torch.optim.AdamW if self.optimizer == "adamw" else torch.optim.Adam
        opt = opt_cls(self._param_groups(), lr=self.lr)
        self.history = []
        t0 = time.time()
        base = self.evaluate(va)
        self.history.append({"epoch": 0, "train_loss": None, **{k: base[k] for k in ("top1", "top5")}})
        best_top1, self.best_epoch = base["top1"], 0
        best_state = copy.deepcopy({k: v.detach().cpu().clone() for k, v in m.model.state_dict().items()})
        target_t = torch.as_tensor(tr.target)
        epochs = range(1, self.epochs + 1)
        if self.verbose:
            epochs = progress_bar(epochs, desc="fine-tuning CLIP", unit="epoch", training=True)
        for epoch in epochs:
            m.model.train()
            order = rng.permutation(len(tr))
            losses = []
            for s in range(0, len(order), self.batch_size):
                b = order[s:s + self.batch_size]
                if len(b) < 2:
                    continue  # a batch of one has no negatives
                bt = target_t[b]
                imgs = tr.images[bt].to(m.device)
                if tokens is not None:
                    text_emb = m.model.encode_text(tokens[b].to(m.device), normalize=True)
                else:
                    text_emb = self._encode_text_chunked([tr.clues[i] for i in b])
                img_emb = m.model.encode_image(imgs, normalize=True)
                scale = m.model.logit_scale.exp()
                logits = scale * text_emb @ img_emb.T
                same = (bt[:, None] == bt[None, :]).float().to(m.device)
                soft = same / same.sum(1, keepdim=True)
                loss = 0.5 * (-(soft * F.log_softmax(logits, 1)).sum(1).mean()
                              - (soft * F.log_softmax(logits.T, 1)).sum(1).mean())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if self.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(m.model.parameters(), self.max_grad_norm)
                opt.step()
                with torch.no_grad():  # as in CLIP: keep the temperature below 100
                    m.model.logit_scale.clamp_(0, math.log(100))
                losses.append(float(loss.detach()))
            m.model.eval()
            acc = self.evaluate(va)
            self.history.append({"epoch": epoch, "train_loss": float(np.mean(losses)) if losses else None,
                                 "top1": acc["top1"], "top5": acc["top5"]})
            if acc["top1"] > best_top1:
                best_top1, self.best_epoch = acc["top1"], epoch
                best_state = {k: v.detach().cpu().clone() for k, v in m.model.state_dict().items()}
        m.model.load_state_dict(best_state)
        m.model.eval()
        m.invalidate_fingerprint()
        self.train_seconds = time.time() - t0
        if output_dir is not None:
            meta = {"training": self.settings(), "history": self.history, "best_epoch": self.best_epoch,
                    "best_val_top1": best_top1, "n_train_pairs": len(tr), "n_val_pairs": len(va),
                    "n_val_covers": len(va.cover_ids), "train_seconds": self.train_seconds}
            meta.update(metadata or {})
            m.save(output_dir, metadata=meta, overwrite=overwrite)
            base_source = m.source
            m.source = {"kind": "checkpoint", "path": str(Path(output_dir)), "base_model": base_source}
        return m

    def _encode_text_chunked(self, clues: List[str]):
        import torch

        embs = []
        for c in clues:
            toks = self.model._chunk_tokens(c, "chunk")[0].to(self.model.device)
            e = self.model.model.encode_text(toks, normalize=True).mean(0)
            embs.append(e / e.norm().clamp_min(1e-12))
        return torch.stack(embs)


def finetune_clip(model: Union[ClipModel, str, tuple, dict], train, val=None, *,
                  output_dir: Optional[Union[str, Path]] = None, **kwargs) -> ClipModel:
    """Fine-tune ``model`` on (clue, cover) pairs with the paper's defaults (overridable via ``kwargs``:
    batch_size, lr, weight_decay, epochs, optimizer, seed, ...); see :class:`CoverClipTrainer`.

    Note: the model is trained in place; the returned object is the same :class:`ClipModel`, holding the best
    validation epoch's weights.
    """
    fit_kw = {k: kwargs.pop(k) for k in ("val_fraction", "metadata", "overwrite") if k in kwargs}
    return CoverClipTrainer(model, **kwargs).fit(train, val, output_dir=output_dir, **fit_kw)
