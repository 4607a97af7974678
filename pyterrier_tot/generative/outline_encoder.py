"""Outline-oriented encoding of long books (optional encoder module): bi-level positions + retentive attention.

A book is read as a sequence of *segments* (e.g. chapters), each a run of tokens tagged with the index of the
section it belongs to.

- :class:`BiLevelPositionalEncoding`: every token gets a learned absolute embedding of its position *within its
  section* (positions restart at each section, so no position is ever larger than the longest section), and
  attention queries and keys are rotated by the *section index* (rotary encoding), so the score between two
  tokens depends on how many sections apart they are, not on how many tokens.
- :class:`RetentiveAttention`: multi-head softmax attention inside a segment, plus a linear-attention memory
  carried from segment to segment: for segment ``s``, ``C_mem = σ(Q) M_{s-1} / (σ(Q) z_{s-1})`` with
  ``σ = ELU + 1``, then ``M_s = M_{s-1} + σ(K)ᵀ V`` and ``z_s = z_{s-1} + Σ_t σ(K_t)``; the two contexts are mixed
  by a learned gate per head, ``sigmoid(α) · C_mem + (1 − sigmoid(α)) · C``. With the gate closed
  (``sigmoid(α) = 0``) the layer is standard multi-head attention.
- :class:`OutlineEncoder`: embeddings + bi-level positions + ``layers`` blocks of retentive attention and a
  feed-forward network, over a list of segments.

The module is standalone (PyTorch); it is not wired into the Hugging Face T5 encoder used by the retriever,
which a GPU-scale run would do by replacing the encoder's self-attention layers with :class:`RetentiveAttention`.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

Memory = Tuple[torch.Tensor, torch.Tensor]  # (M [B, H, d, d], z [B, H, d])


def local_positions(section_index: torch.Tensor) -> torch.Tensor:
    """Position of each token within its section (0, 1, ... restarting where ``section_index`` changes)."""
    b, t = section_index.shape
    idx = torch.arange(t, device=section_index.device).expand(b, t)
    start = torch.ones_like(section_index, dtype=torch.bool)
    start[:, 1:] = section_index[:, 1:] != section_index[:, :-1]
    first = torch.where(start, idx, torch.zeros_like(idx)).cummax(dim=1).values
    return idx - first


def rotate(x: torch.Tensor, position: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary encoding of ``x [B, H, T, d]`` (``d`` even) by ``position [B, T]``."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angle = position.to(torch.float32)[:, None, :, None] * inv  # [B, 1, T, d/2]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class BiLevelPositionalEncoding(nn.Module):
    """Absolute positions within a section (added to the embeddings) + rotary section index (for attention)."""

    def __init__(self, d_model: int, max_section_tokens: int = 512, base: float = 10000.0):
        super().__init__()
        self.local = nn.Embedding(max_section_tokens, d_model)
        self.base = base

    def forward(self, x: torch.Tensor, section_index: torch.Tensor) -> torch.Tensor:
        pos = local_positions(section_index).clamp(max=self.local.num_embeddings - 1)
        return x + self.local(pos)

    def rotate(self, x: torch.Tensor, section_index: torch.Tensor) -> torch.Tensor:
        return rotate(x, section_index, self.base)


def _sigma(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


class RetentiveAttention(nn.Module):
    """Multi-head attention with a gated linear-attention memory across segments (see module docs)."""

    def __init__(self, d_model: int, heads: int = 4, rotary_base: float = 10000.0, eps: float = 1e-6):
        super().__init__()
        if d_model % heads or (d_model // heads) % 2:
            raise ValueError(f"d_model {d_model} must split into {heads} heads of even size")
        self.h, self.d = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.alpha = nn.Parameter(torch.zeros(heads))  # the gate starts half open
        self.rotary_base, self.eps = rotary_base, eps

    def _split(self, x: torch.Tensor):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        return q, k, v  # each [B, H, T, d]

    def empty_memory(self, batch: int, device=None, dtype=torch.float32) -> Memory:
        return (torch.zeros(batch, self.h, self.d, self.d, device=device, dtype=dtype),
                torch.zeros(batch, self.h, self.d, device=device, dtype=dtype))

    def local_context(self, q, k, v, section_index, mask):
        qr, kr = rotate(q, section_index, self.rotary_base), rotate(k, section_index, self.rotary_base)
        att_mask = None if mask is None else mask[:, None, None, :].bool()
        return F.scaled_dot_product_attention(qr, kr, v, attn_mask=att_mask)

    def memory_context(self, q, memory: Memory) -> torch.Tensor:
        m, z = memory
        sq = _sigma(q)
        num = torch.einsum("bhtd,bhde->bhte", sq, m)
        den = torch.einsum("bhtd,bhd->bht", sq, z).unsqueeze(-1)
        return num / (den + self.eps)

    def update(self, k, v, memory: Memory, mask=None) -> Memory:
        sk = _sigma(k)
        if mask is not None:
            sk = sk * mask[:, None, :, None].to(sk.dtype)
        m, z = memory
        return m + torch.einsum("bhtd,bhte->bhde", sk, v), z + sk.sum(dim=2)

    def combine(self, local: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.alpha)[None, :, None, None]
        ctx = g * mem + (1 - g) * local
        b, _, t, _ = ctx.shape
        return self.out(ctx.transpose(1, 2).reshape(b, t, self.h * self.d))

    def forward(self, x: torch.Tensor, section_index: Optional[torch.Tensor] = None,
                memory: Optional[Memory] = None, mask: Optional[torch.Tensor] = None):
        """One segment ``x [B, T, D]``: returns the output and the memory to pass to the next segment."""
        b, t, _ = x.shape
        if section_index is None:
            section_index = torch.zeros(b, t, dtype=torch.long, device=x.device)
        memory = memory if memory is not None else self.empty_memory(b, x.device, x.dtype)
        q, k, v = self._split(x)
        out = self.combine(self.local_context(q, k, v, section_index, mask), self.memory_context(q, memory))
        return out, self.update(k, v, memory, mask)

    def forward_segments(self, segments: Sequence[torch.Tensor],
                         section_indices: Optional[Sequence[torch.Tensor]] = None) -> List[torch.Tensor]:
        """The recurrence over segments (memory carried from one to the next)."""
        memory, outs = None, []
        for i, seg in enumerate(segments):
            out, memory = self(seg, None if section_indices is None else section_indices[i], memory)
            outs.append(out)
        return outs

    def unrolled(self, segments: Sequence[torch.Tensor],
                 section_indices: Optional[Sequence[torch.Tensor]] = None) -> List[torch.Tensor]:
        """The same outputs computed without recurrence: segment ``s`` reads a memory summed directly over the
        keys and values of all earlier segments (a check of :meth:`forward_segments`)."""
        parts = [self._split(seg) for seg in segments]
        outs = []
        for s, seg in enumerate(segments):
            b, t, _ = seg.shape
            sec = section_indices[s] if section_indices is not None else torch.zeros(b, t, dtype=torch.long)
            if s:
                ks = torch.cat([parts[j][1] for j in range(s)], dim=2)
                vs = torch.cat([parts[j][2] for j in range(s)], dim=2)
                memory = (torch.einsum("bhtd,bhte->bhde", _sigma(ks), vs), _sigma(ks).sum(dim=2))
            else:
                memory = self.empty_memory(b, seg.device, seg.dtype)
            q, k, v = parts[s]
            outs.append(self.combine(self.local_context(q, k, v, sec, None), self.memory_context(q, memory)))
        return outs


class OutlineEncoder(nn.Module):
    """Token embeddings + bi-level positions + ``layers`` blocks of retentive attention and feed-forward, over a
    book given as segments (``[B, T_s]`` token ids each, with their section indices)."""

    def __init__(self, vocab_size: int, d_model: int = 64, heads: int = 4, layers: int = 2,
                 max_section_tokens: int = 512):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.positions = BiLevelPositionalEncoding(d_model, max_section_tokens)
        self.attn = nn.ModuleList(RetentiveAttention(d_model, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                               nn.Linear(4 * d_model, d_model)) for _ in range(layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(layers))

    def forward(self, segments: Sequence[torch.Tensor], section_indices: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        hidden = [self.positions(self.embed(ids), sec) for ids, sec in zip(segments, section_indices)]
        for attn, ffn, n1, n2 in zip(self.attn, self.ffn, self.norm1, self.norm2):
            memory, nxt = None, []
            for h, sec in zip(hidden, section_indices):
                a, memory = attn(n1(h), sec, memory)
                h = h + a
                nxt.append(h + ffn(n2(h)))
            hidden = nxt
        return hidden
