"""Constrained beam search over a prefix trie, and teacher-forced scoring of given identifiers.

:func:`constrained_search` runs ``transformers``' beam search with ``prefix_allowed_tokens_fn`` answering from an
:class:`~pyterrier_tot.generative.trie.IdTrie` (seq2seq models), or, for a causal LM, a beam search of its own
that encodes the source once and copies its keys and values to the beams (a long prompt is not encoded once per
beam); the returned sequences are checked against the trie once more (beam search pads its beam with dead
hypotheses when fewer valid ids exist than beams), so only complete, valid identifiers come back. Scores are
summed token log-probabilities under the model's full softmax (``length_penalty=0``), the same quantity
:func:`score_targets` computes by teacher forcing, so a retrieved id and a scored candidate are on one scale.

For a causal backbone, :func:`score_targets` encodes each distinct source once and scores all its candidates
from the cached keys and values (the query is the long part; identifiers are a dozen tokens).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from pyterrier_tot.generative.backbones import CAUSAL, Backbone, _pad
from pyterrier_tot.generative.trie import IdTrie


def _trim(seq: Sequence[int], eos: int) -> Tuple[int, ...]:
    seq = list(seq)
    return tuple(seq[:seq.index(eos) + 1]) if eos in seq else tuple(seq)


@torch.inference_mode()
def constrained_search(backbone: Backbone, sources: Sequence[List[int]], trie: IdTrie, num_beams: int = 10,
                       batch_size: int = 8, max_new_tokens: int = None) -> List[List[Tuple[Tuple[int, ...], float]]]:
    """For each source (token ids), up to ``num_beams`` (identifier tokens, log-likelihood), best first; every
    identifier returned is complete in ``trie``. A backbone with its own ``search`` (the sentence-encoder
    backbone) decodes with it."""
    if hasattr(backbone, "search"):
        return backbone.search(sources, trie, num_beams, batch_size, max_new_tokens)
    model, eos = backbone.model, backbone.eos
    if max_new_tokens is None:
        max_new_tokens = max((len(s) for s in trie), default=1)
    model.eval()
    if backbone.kind == CAUSAL and _has_reorderable_cache(model):
        return [_causal_search(backbone, list(s), trie, num_beams, max_new_tokens) for s in sources]
    out: List[List[Tuple[Tuple[int, ...], float]]] = []
    for start in range(0, len(sources), batch_size):
        chunk = [list(s) for s in sources[start:start + batch_size]]
        causal = backbone.kind == CAUSAL
        enc = _pad(chunk, backbone.pad, left=causal)
        skip = enc["input_ids"].shape[1] if causal else 1  # the prompt, or the decoder start token

        def allowed(_batch_id, ids, skip=skip):
            nxt = trie.allowed(ids[skip:].tolist())
            return nxt if nxt else [eos]  # a finished or dead beam: nothing valid follows

        beam = {"num_beams": num_beams, "num_return_sequences": num_beams, "length_penalty": 0.0,
                "early_stopping": True} if num_beams > 1 else {}
        gen = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                             max_new_tokens=max_new_tokens, prefix_allowed_tokens_fn=allowed, do_sample=False,
                             output_scores=True, return_dict_in_generate=True, pad_token_id=backbone.pad,
                             eos_token_id=eos, **beam,
                             **({"decoder_start_token_id": backbone.decoder_start} if not causal else {}))
        seqs = gen.sequences[:, skip:].tolist()
        if num_beams > 1:
            scores = gen.sequences_scores.tolist()
        else:  # greedy search keeps no sequence score: score the ids it found by teacher forcing
            found = [list(_trim(s, eos)) for s in seqs]
            scores = score_targets(backbone, chunk, found).tolist()
        for i in range(len(chunk)):
            hits, seen = [], set()
            for j in range(i * num_beams, (i + 1) * num_beams):
                seq = _trim(seqs[j], eos)
                if seq in seen or not np.isfinite(scores[j]) or not trie.complete(seq):
                    continue
                seen.add(seq)
                hits.append((seq, float(scores[j])))
            out.append(sorted(hits, key=lambda h: -h[1]))
    return out


def _has_reorderable_cache(model) -> bool:
    try:
        from transformers import DynamicCache
    except ImportError:  # pragma: no cover
        return False
    return hasattr(DynamicCache, "reorder_cache") and getattr(model.config, "use_cache", True)


def _causal_search(backbone: Backbone, src: List[int], trie: IdTrie, num_beams: int,
                   max_new_tokens: int) -> List[Tuple[Tuple[int, ...], float]]:
    """Beam search for one source of a causal LM that reads the source once: its keys and values are computed
    once and copied to the beams (``transformers``' beam search would encode a long prompt once per beam)."""
    model, eos = backbone.model, backbone.eos
    out = model(input_ids=torch.tensor([src]), use_cache=True, logits_to_keep=1)
    cache, lp = out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), -1)
    beams: List[Tuple[Tuple[int, ...], float]] = [((), 0.0)]
    done: List[Tuple[Tuple[int, ...], float]] = []
    for _ in range(max_new_tokens):
        cands = []
        for i, (seq, score) in enumerate(beams):
            allowed = trie.allowed(seq)
            if allowed:
                cands += [(i, seq + (t,), score + v) for t, v in zip(allowed, lp[i, allowed].tolist())]
        cands.sort(key=lambda c: -c[2])
        live = []
        for i, seq, score in cands:
            if seq[-1] == eos:  # a trie sequence ends with the end token, so this one is complete
                done.append((seq, score))
            elif len(live) < num_beams:
                live.append((i, seq, score))
        done = sorted(done, key=lambda d: -d[1])[:num_beams]
        # scores only fall as a sequence grows: stop once no live beam can enter the finished top k
        if not live or (len(done) >= num_beams and live[0][2] <= done[-1][1]):
            break
        cache.reorder_cache(torch.tensor([i for i, _, _ in live]))
        out = model(input_ids=torch.tensor([[seq[-1]] for _, seq, _ in live]), past_key_values=cache, use_cache=True)
        cache, lp = out.past_key_values, torch.log_softmax(out.logits[:, -1].float(), -1)
        beams = [(seq, score) for _, seq, score in live]
    return [d for d in done if np.isfinite(d[1]) and trie.complete(d[0])]


@torch.inference_mode()
def score_targets(backbone: Backbone, sources: Sequence[List[int]], targets: Sequence[List[int]],
                  batch_size: int = 32) -> np.ndarray:
    """Teacher-forced log-likelihood ``log P(target | source)`` (summed over the target tokens) of each pair."""
    if hasattr(backbone, "score"):
        return backbone.score(sources, targets, batch_size)
    backbone.model.eval()
    scores = np.zeros(len(sources), dtype=np.float64)
    if backbone.kind == CAUSAL:
        groups: Dict[tuple, List[int]] = defaultdict(list)
        for i, s in enumerate(sources):
            groups[tuple(s)].append(i)
        for src, rows in groups.items():
            for start in range(0, len(rows), batch_size):
                part = rows[start:start + batch_size]
                scores[part] = _causal_prefix_scores(backbone, list(src), [list(targets[i]) for i in part])
        return scores
    for start in range(0, len(sources), batch_size):
        rows = list(range(start, min(start + batch_size, len(sources))))
        scores[rows] = _batch_scores(backbone, [list(sources[i]) for i in rows], [list(targets[i]) for i in rows])
    return scores


def _batch_scores(backbone: Backbone, sources, targets) -> np.ndarray:
    logits, labels, rows = backbone.target_logits(backbone.batch(sources, targets))
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return torch.zeros(len(sources), dtype=torch.float64).index_add_(0, rows, picked.double()).numpy()


def _causal_prefix_scores(backbone: Backbone, src: List[int], targets: List[List[int]]) -> np.ndarray:
    model = backbone.model
    prefix = torch.tensor([src])
    first = model(input_ids=prefix, use_cache=True, logits_to_keep=1)
    cache = first.past_key_values
    n = len(targets)
    if hasattr(cache, "batch_repeat_interleave"):
        cache.batch_repeat_interleave(n)
    else:  # a model without a repeatable cache: score the full sequences
        return _batch_scores(backbone, [src] * n, targets)
    tgt = _pad(targets, backbone.pad, left=False)
    mask = torch.cat([torch.ones(n, len(src), dtype=torch.long), tgt["attention_mask"]], dim=1)
    rest = model(input_ids=tgt["input_ids"], attention_mask=mask, past_key_values=cache, use_cache=True)
    # the prefix's last position predicts the first identifier token; each target position the next one
    logits = torch.cat([first.logits[:, -1:].expand(n, -1, -1), rest.logits[:, :-1]], dim=1)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt["input_ids"].unsqueeze(-1)).squeeze(-1)
    return (logp * tgt["attention_mask"]).sum(-1).double().numpy()
