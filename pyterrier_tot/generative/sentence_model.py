"""The model inside the sentence-encoder generative backbone: a pretrained encoder (BERT family) reads the
request, a small transformer decoder writes an identifier's tokens from a compact vocabulary (:class:`IdVocab`).
:mod:`~pyterrier_tot.generative.sentence_backbone` wraps it as a
:class:`~pyterrier_tot.generative.backbones.Backbone` (training, decoding, saving)."""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from pyterrier_tot.generative.identifiers import SEP

PAD, EOS, SEPARATOR = "[PAD]", "[EOS]", "#"
_CODE = re.compile(r"^\d+(?:-\d+)*$")


class IdVocab:
    """Token strings of the decoder (``[PAD]`` 0, ``[EOS]`` 1, ``#`` 2, then the others in first-seen order)."""

    def __init__(self, tokens: Sequence[str] = ()):
        self.tokens: List[str] = [PAD, EOS, SEPARATOR]
        self.index: Dict[str, int] = {t: i for i, t in enumerate(self.tokens)}
        for t in tokens:
            self.add(t)

    def add(self, token: str) -> int:
        if token not in self.index:
            self.index[token] = len(self.tokens)
            self.tokens.append(token)
        return self.index[token]

    def __len__(self) -> int:
        return len(self.tokens)


def split_identifier(identifier: str, tokenizer, codes: bool) -> List[str]:
    """The decoder's token strings of one identifier (see the module docs)."""
    out: List[str] = []
    for i, part in enumerate(str(identifier).split(SEP)):
        if i:
            out.append(SEPARATOR)
        if codes and i == 0:
            if not _CODE.match(part.strip()):
                raise ValueError(f"codes=True: identifier {identifier!r} does not start with a code such as '3-0-7'")
            out += [f"<{lvl}:{c}>" for lvl, c in enumerate(part.strip().split("-"))]
        else:
            out += tokenizer.tokenize(part) or ["[UNK]"]
    return out


class SentenceIdModel(nn.Module):
    """Encoder (a Hugging Face BERT-family model) + a small transformer decoder over an :class:`IdVocab`."""

    def __init__(self, encoder, vocab_size: int, d_model: int = 384, layers: int = 2, heads: int = 6,
                 ff: Optional[int] = None, max_len: int = 64, states: str = "pooled", pooling: str = "mean",
                 dropout: float = 0.1):
        super().__init__()
        if states not in ("pooled", "tokens"):
            raise ValueError(f"states must be 'pooled' or 'tokens', not {states!r}")
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
        self.encoder, self.states, self.pooling, self.max_len = encoder, states, pooling, max_len
        dim = encoder.config.hidden_size
        self.proj = nn.Linear(dim, d_model)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len + 1, d_model)
        layer = nn.TransformerDecoderLayer(d_model, heads, ff or 4 * d_model, dropout, batch_first=True,
                                           norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size)
        self.frozen_encoder = False

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen_encoder:
            self.encoder.eval()  # its cached outputs must not depend on dropout
        return self

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(pooled [B, dim], token states [B, L, dim]) of the sources."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            m = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
        return nn.functional.normalize(pooled.float(), dim=-1), hidden.float()

    def decode(self, pooled: torch.Tensor, tokens: Optional[torch.Tensor], token_mask: Optional[torch.Tensor],
               prev: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of the next identifier token after each prefix of ``prev`` [B, T] (``prev[:, 0]`` is
        ignored: the first position reads the projected sentence vector)."""
        b, t = prev.shape
        if t > self.max_len:
            raise ValueError(f"identifier of {t} tokens is longer than the decoder's max_len {self.max_len}")
        start = self.proj(pooled).unsqueeze(1)
        x = torch.cat([start, self.embed(prev[:, 1:])], dim=1) + self.pos(torch.arange(t, device=prev.device))
        if self.states == "tokens" and tokens is not None:
            memory, pad_mask = self.proj(tokens), ~token_mask.bool()
        else:
            memory, pad_mask = start, None
        causal = torch.triu(torch.full((t, t), float("-inf"), device=prev.device), diagonal=1)
        h = self.decoder(x, memory, tgt_mask=causal, memory_key_padding_mask=pad_mask)
        return self.out(self.norm(h))
