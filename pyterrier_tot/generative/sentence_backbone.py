"""A backbone that starts from a pretrained sentence encoder: MiniLM reads the request, a small decoder writes the id.

No pretrained sequence-to-sequence weights exist offline, and a causal LM cut to fit two CPU cores forgets what
its pretraining gave it. This backbone keeps the pretrained part where it matters, on the query side: a
sentence-transformers encoder (MiniLM, or the recipe's fine-tuned MiniLM) turns the source into vectors, and a
small transformer decoder (two layers by default, trained from scratch) writes the identifier tokens.

- ``states="pooled"``: the decoder sees the mean-pooled, L2-normalised sentence vector (the one dense retrieval
  uses); ``states="tokens"``: it cross-attends over the encoder's token states (the pooled vector still starts
  the decoding).
- ``train_encoder=0`` freezes the encoder: its outputs are computed once per distinct source and cached, so an
  epoch costs the decoder alone. ``train_encoder=n`` fine-tunes the top ``n`` encoder layers (``-1``: all) at
  ``encoder_lr`` beside the decoder.
- ``precision="bf16"`` runs the encoder and the decoder under bfloat16 autocast (weights and the loss stay
  fp32): about 2-3x faster on CPUs with AMX or AVX512-BF16. ``cache=`` shares the frozen encoder's outputs
  between backbones over the same encoder (an ablation that trains several decoders encodes each source once).
- Targets use a compact vocabulary built from the corpus identifiers (:class:`IdVocab`): the WordPiece pieces of
  text ids such as titles (their embeddings start from the encoder's word embeddings) and, with
  ``codes=True``, one token per level and cluster of a semantic id (``"3-0-7"`` → ``<0:3> <1:0> <2:7>``;
  ``"3-0 # Title"`` → codes, then the title's pieces).

:meth:`SentenceBackbone.search` (constrained beam search over an
:class:`~pyterrier_tot.generative.trie.IdTrie`) and :meth:`SentenceBackbone.score` (teacher forcing) give the
same summed log-probabilities under the full softmax of the decoder, so retrieve and score modes share a scale.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from pyterrier_tot.generative.sentence_model import (
    EOS,
    PAD,
    IdVocab,
    SentenceIdModel,
    split_identifier,
)

SENTENCE = "sentence"
_ENCODER_DIR, _CONFIG = "encoder", "sentence_backbone.json"


class SentenceBackbone:
    """The :class:`~pyterrier_tot.generative.backbones.Backbone` interface over a :class:`SentenceIdModel`
    (build one with :func:`sentence_backbone`)."""

    kind = SENTENCE
    cue = ""

    def __init__(self, model: SentenceIdModel, tokenizer, vocab: IdVocab, codes: bool, name: str,
                 train_encoder: int = 0, encoder_lr: float = 2e-5, config: Optional[dict] = None,
                 precision: str = "fp32", cache: Optional[dict] = None, device: str = "cpu"):
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', not {precision!r}")
        self.model, self.tokenizer, self.vocab, self.codes, self.name = model, tokenizer, vocab, codes, name
        self.eos, self.pad = vocab.index[EOS], vocab.index[PAD]
        self.encoder_lr, self.config = encoder_lr, dict(config or {})
        self.train_encoder = int(train_encoder)
        for p in model.encoder.parameters():
            p.requires_grad_(False)
        if self.train_encoder:
            blocks = list(model.encoder.encoder.layer)
            for block in blocks if self.train_encoder < 0 else blocks[-self.train_encoder:]:
                for p in block.parameters():
                    p.requires_grad_(True)
        model.frozen_encoder = self.train_encoder == 0
        self.precision = precision
        self._memo: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {} if cache is None else cache
        self.device = "cpu"
        self.to(device)

    def to(self, device: str) -> "SentenceBackbone":
        """Move the model to ``device`` (``"cpu"``, ``"cuda"``, ...); remembered encoder outputs are dropped."""
        device = str(device)
        if device != self.device:
            self.model.to(device)
            self._memo.clear()
            self.device = device
        return self

    def _autocast(self):
        return torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    # ---------------------------------------------------------------- token ids
    def source_ids(self, text: str, max_tokens: int) -> List[int]:
        ids = self.tokenizer(str(text), add_special_tokens=True, truncation=True,
                             max_length=max(2, max_tokens))["input_ids"]
        return list(ids)

    def target_ids(self, identifier: str) -> List[int]:
        toks = split_identifier(identifier, self.tokenizer, self.codes)
        missing = [t for t in toks if t not in self.vocab.index]
        if missing:
            raise ValueError(f"identifier {identifier!r} has tokens the decoder does not know: {missing[:5]}; "
                             "build the backbone over all identifiers")
        return [self.vocab.index[t] for t in toks] + [self.eos]

    # ---------------------------------------------------------------- the encoder side, cached when frozen
    def memory(self, sources: Sequence[Sequence[int]]):
        """(pooled [B, dim], token states [B, L, dim] or None, mask [B, L] or None) of the sources. A frozen
        encoder's outputs are remembered during training (each distinct source is encoded once per run)."""
        keep = self.model.frozen_encoder and torch.is_grad_enabled()
        keys = [tuple(s) for s in sources]
        todo = [k for k in dict.fromkeys(keys) if k not in self._memo]
        fresh = {}
        if todo:
            pad_id = self.tokenizer.pad_token_id or 0
            n = max(len(k) for k in todo)
            ids = torch.full((len(todo), n), pad_id, dtype=torch.long)
            mask = torch.zeros((len(todo), n), dtype=torch.long)
            for i, k in enumerate(todo):
                ids[i, :len(k)], mask[i, :len(k)] = torch.tensor(k), 1
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.model.frozen_encoder), self._autocast():
                pooled, hidden = self.model.encode(ids.to(self.device), mask.to(self.device))
            tokens = self.model.states == "tokens"
            for i, k in enumerate(todo):
                fresh[k] = (pooled[i], hidden[i, :len(k)] if tokens else None)
                if keep:  # token states in half precision: they are the bulk of the cache
                    self._memo[k] = (pooled[i].detach(), hidden[i, :len(k)].detach().half() if tokens else None)
        got = [fresh[k] if k in fresh else self._memo[k] for k in keys]
        pooled = torch.stack([g[0] for g in got])
        if self.model.states != "tokens":
            return pooled, None, None
        n = max(g[1].shape[0] for g in got)
        states = torch.zeros((len(got), n, got[0][1].shape[-1]), device=self.device)
        mask = torch.zeros((len(got), n), dtype=torch.long, device=self.device)
        for i, (_, st) in enumerate(got):
            states[i, :st.shape[0]], mask[i, :st.shape[0]] = st.float(), 1
        return pooled, states, mask

    def clear_cache(self) -> None:
        self._memo.clear()

    # ---------------------------------------------------------------- training interface (see training.train)
    def batch(self, sources: Sequence[List[int]], targets: Sequence[List[int]]) -> dict:
        n = max(len(t) for t in targets)
        labels = torch.full((len(targets), n), -100, dtype=torch.long)
        for i, t in enumerate(targets):
            labels[i, :len(t)] = torch.tensor(t)
        # attention_mask: one entry per source token (training.train counts tokens with it)
        return {"sources": list(sources), "labels": labels.to(self.device),
                "attention_mask": torch.ones(sum(len(s) for s in sources), dtype=torch.long)}

    def target_logits(self, batch: dict):
        labels = batch["labels"]
        pooled, tokens, mask = self.memory(batch["sources"])
        prev = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1].clamp(min=0)], dim=1)
        with self._autocast():
            logits = self.model.decode(pooled, tokens, mask, prev).float()
        keep = labels >= 0
        return logits[keep], labels[keep], keep.nonzero()[:, 0]

    def trainable_parameters(self) -> List[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def param_groups(self, lr: float) -> list:
        """The decoder at ``lr``, the trained encoder layers (if any) at ``encoder_lr``."""
        enc = [p for p in self.model.encoder.parameters() if p.requires_grad]
        rest = [p for n, p in self.model.named_parameters() if p.requires_grad and not n.startswith("encoder.")]
        return [{"params": rest, "lr": lr}] + ([{"params": enc, "lr": self.encoder_lr}] if enc else [])

    # ---------------------------------------------------------------- decoding
    @torch.inference_mode()
    def score(self, sources: Sequence[List[int]], targets: Sequence[List[int]], batch_size: int = 256) -> np.ndarray:
        """Teacher-forced ``log P(target | source)`` of each pair (each distinct source encoded once)."""
        self.model.eval()
        out = np.zeros(len(sources), dtype=np.float64)
        for start in range(0, len(sources), batch_size):
            rows = range(start, min(start + batch_size, len(sources)))
            batch = self.batch([sources[i] for i in rows], [list(targets[i]) for i in rows])
            logits, labels, which = self.target_logits(batch)
            lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            out[start:start + len(rows)] = torch.zeros(len(rows), dtype=torch.float64, device=lp.device).index_add_(
                0, which, lp.double()).cpu().numpy()
        return out

    @torch.inference_mode()
    def search(self, sources: Sequence[List[int]], trie, num_beams: int = 10, batch_size: int = 32,
               max_new_tokens: Optional[int] = None) -> List[List[Tuple[Tuple[int, ...], float]]]:
        """Constrained beam search: up to ``num_beams`` (identifier tokens, log-likelihood) per source, best first,
        each complete in ``trie``."""
        self.model.eval()
        limit = max_new_tokens or max((len(s) for s in trie), default=1)
        results: List[List[Tuple[Tuple[int, ...], float]]] = []
        for start in range(0, len(sources), batch_size):
            chunk = list(sources[start:start + batch_size])
            pooled, tokens, mask = self.memory(chunk)
            beams = [[((), 0.0)] for _ in chunk]
            done: List[List[Tuple[Tuple[int, ...], float]]] = [[] for _ in chunk]
            for _ in range(limit):
                flat = [(q, seq, s) for q, bs in enumerate(beams) for seq, s in bs]
                if not flat:
                    break
                idx = torch.tensor([q for q, _, _ in flat], device=self.device)
                t = max(len(seq) for _, seq, _ in flat) + 1
                prev = torch.zeros((len(flat), t), dtype=torch.long)
                for i, (_, seq, _) in enumerate(flat):
                    if seq:
                        prev[i, 1:len(seq) + 1] = torch.tensor(seq, dtype=torch.long)
                lens = torch.tensor([len(seq) for _, seq, _ in flat], device=self.device)
                with self._autocast():
                    logits = self.model.decode(pooled[idx], tokens[idx] if tokens is not None else None,
                                               mask[idx] if mask is not None else None, prev.to(self.device))
                # one copy to the host per step: the trie's allowed tokens are read beam by beam
                lp = torch.log_softmax(logits[torch.arange(len(flat), device=self.device), lens].float(), -1).cpu()
                cands: List[list] = [[] for _ in chunk]
                for i, (q, seq, s) in enumerate(flat):
                    allowed = trie.allowed(seq)
                    if not allowed:
                        continue
                    vals = lp[i, allowed].tolist()
                    cands[q] += [(seq + (tok,), s + v) for tok, v in zip(allowed, vals)]
                for q in range(len(chunk)):
                    ranked = sorted(cands[q], key=lambda c: -c[1])
                    beams[q] = []
                    for seq, s in ranked:
                        if seq[-1] == self.eos:
                            if trie.complete(seq):
                                done[q].append((seq, s))
                        elif len(beams[q]) < num_beams:
                            beams[q].append((seq, s))
                    done[q] = sorted(done[q], key=lambda c: -c[1])[:num_beams]
                    # scores only fall as a sequence grows: stop once no live beam can enter the finished top k
                    if len(done[q]) >= num_beams and (not beams[q] or beams[q][0][1] <= done[q][-1][1]):
                        beams[q] = []
            results += [sorted(d, key=lambda c: -c[1]) for d in done]
        return results

    # ---------------------------------------------------------------- saving
    def save_to(self, folder: Path) -> dict:
        """Write the weights, the encoder config and tokenizer, and the decoder settings; returns the meta."""
        from safetensors.torch import save_model

        folder = Path(folder)
        self.model.encoder.config.save_pretrained(folder / _ENCODER_DIR)
        self.tokenizer.save_pretrained(folder / _ENCODER_DIR)
        save_model(self.model, str(folder / "model.safetensors"))  # (safetensors copies GPU tensors to the host)
        cfg = {**self.config, "vocab": self.vocab.tokens, "codes": self.codes, "name": self.name,
               "precision": self.precision}
        (folder / _CONFIG).write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf8")
        return {"kind": SENTENCE, "backbone": self.name}

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "SentenceBackbone":
        from safetensors.torch import load_model
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        folder = Path(folder)
        cfg = json.loads((folder / _CONFIG).read_text(encoding="utf8"))
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(folder / _ENCODER_DIR))
        vocab = IdVocab(cfg["vocab"][3:])
        model = SentenceIdModel(encoder, len(vocab), **_arch(cfg))
        load_model(model, str(folder / "model.safetensors"))
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(folder / _ENCODER_DIR)
        return cls(model, tokenizer, vocab, cfg["codes"], cfg["name"], config=cfg,
                   precision=cfg.get("precision", "fp32"))

    def __repr__(self):
        n = sum(p.numel() for p in self.model.parameters())
        t = sum(p.numel() for p in self.trainable_parameters())
        return f"SentenceBackbone({self.name!r}, {n / 1e6:.2f}M parameters, {t / 1e6:.2f}M trainable)"


_ARCH = ("d_model", "layers", "heads", "ff", "max_len", "states", "pooling", "dropout")


def _arch(cfg: dict) -> dict:
    return {k: cfg[k] for k in _ARCH if k in cfg}


def sentence_backbone(identifiers, model=None, codes: bool = False, states: str = "pooled", train_encoder: int = 0,
                      layers: int = 2, heads: int = 6, d_model: Optional[int] = None, max_len: int = 64,
                      dropout: float = 0.1, encoder_lr: float = 2e-5, precision: str = "fp32",
                      cache: Optional[dict] = None, seed: int = 0, device: str = "cpu") -> SentenceBackbone:
    """A :class:`SentenceBackbone` for ``identifiers`` (the id strings, or a docno → id dict).

    :param model: a sentence-transformers model (name, folder or fine-tuned artifact; default MiniLM), resolved
        offline by :func:`pyterrier_tot.models.resolve_model`
    :param codes: the identifiers start with a semantic code path (``"3-0-7"`` or ``"3-0 # Title"``)
    :param states: ``"pooled"`` or ``"tokens"`` (see the module docs)
    :param train_encoder: 0 freezes the encoder; ``n`` trains its top ``n`` layers; -1 all of them
    :param precision: ``"fp32"`` or ``"bf16"`` (autocast; see the module docs)
    :param cache: a dict shared with other backbones over the same encoder, states and precision (frozen only)
    :param device: where the model trains and decodes (``"cuda"`` on a GPU; :meth:`SentenceBackbone.to` moves it)
    """
    from pyterrier_tot.models.loading import load_sentence_transformer, resolve_model

    torch.manual_seed(seed)
    st = load_sentence_transformer(resolve_model(model))
    import copy

    encoder = copy.deepcopy(st[0].auto_model).float()  # the cached SentenceTransformer stays untouched
    tokenizer = st.tokenizer
    pooling = "cls" if getattr(st[1], "pooling_mode_cls_token", False) else "mean"
    ids = list(identifiers.values()) if isinstance(identifiers, dict) else list(identifiers)
    vocab = IdVocab()
    for ident in ids:
        for tok in split_identifier(ident, tokenizer, codes):
            vocab.add(tok)
    d = d_model or encoder.config.hidden_size
    cfg = {"d_model": d, "layers": layers, "heads": heads, "ff": 4 * d, "max_len": max_len, "states": states,
           "pooling": pooling, "dropout": dropout, "model": str(getattr(model, "path", model) or "MiniLM"),
           "train_encoder": train_encoder}
    net = SentenceIdModel(encoder, len(vocab), **_arch(cfg))
    if d == encoder.config.hidden_size:  # text pieces start from the encoder's own word embeddings
        words = encoder.get_input_embeddings().weight
        with torch.no_grad():
            for tok, i in vocab.index.items():
                wid = tokenizer.convert_tokens_to_ids(tok)
                if not tok.startswith("<") and tok not in (PAD, EOS) and wid != tokenizer.unk_token_id:
                    net.embed.weight[i] = words[wid]
    base = Path(str(cfg["model"])).name
    enc = "frozen" if train_encoder == 0 else ("all" if train_encoder < 0 else f"top {train_encoder}")
    name = f"{base}[{states}, encoder {enc}] + decoder {layers}x{d}"
    return SentenceBackbone(net, tokenizer, vocab, codes, name, train_encoder, encoder_lr, cfg, precision, cache,
                            device)
