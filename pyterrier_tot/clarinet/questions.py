"""Question generation: the :class:`Clarifier` asks the next clarification question of each query::

    clarifier = Clarifier(llm, index, retriever=index.dense(model) % 10, pool_size=20, selection=selection("eig"),
                          answerer=OracleUser(index, encode), encoder=encode)
    clarifier(frame)          # frame: qid, query (+ query_0: the initial request, history: [(question, answer)])
    Clarifier(None, pool=GENERIC_QUESTIONS, selection=selection("first"))    # no LLM: a fixed (cached) pool

The prompt (``prompts/clarinet_question.txt``) holds the initial request, the questions asked so far with their
answers, and the top candidates whose probability reaches 50% (at most 3) with title, description, rank and
probability. One LLM call, sampled at ``pool_temperature`` (0.8, as in the paper), writes a pool of
``pool_size`` questions; the selection (random by default, or EIG / KL) picks one. A question is dropped when it
names a shown candidate or one of its characters (or a name in the row's ``forbid`` list), copies a few-shot
example of the prompt (``.copied``), or repeats a question already in the pool or asked before: by string, and
with an ``encoder``, by meaning (cosine at least ``dedup``). A pool left with fewer than ``min_pool``
questions (default half the pool) is asked for again with another seed up to ``max_regenerations`` times, and
a query left without questions gets a generic one (counted in ``.fallbacks``).

Without an LLM the pool is given: a list of questions for every query, a dict qid -> list (a pool cached from an
earlier run), each minus the questions already asked and any that names a shown candidate.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import Shown, code_repr, keyword_settings
from pyterrier_tot._plumbing.util import is_missing
from pyterrier_tot.checks import check_query_frame
from pyterrier_tot.clarinet.cards import book_card
from pyterrier_tot.clarinet.distribution import RetrievalDistribution, top_mass
from pyterrier_tot.clarinet.leaks import NameStats, forbidden, leaked
from pyterrier_tot.clarinet.selection import RandomSelection
from pyterrier_tot.llm.templates import load_prompt

#: A generic pool for LLM-free games: questions any book's description may answer.
GENERIC_QUESTIONS = (
    "What else do you remember about the story?", "Where and when does the story take place?",
    "Who is the main character, and what happens to them?", "How did the book end?",
    "Was the main character a child, a teenager or an adult?", "Was there any magic or anything supernatural?",
    "Did the story involve a family, and what was going on in it?", "Was there a romance in the story?",
    "Was there a crime, a mystery or a murder?", "Was it set in a school?", "Were there animals in the story?",
    "Was it set in the past, the present or the future?", "Was there a war or a battle?",
    "Did someone die in the story?", "Was the story funny, sad or scary?", "Did the characters go on a journey?",
    "Was the main character a girl or a boy?", "Was there a secret that came out?",
    "Did the story take place in a city, a small town or the countryside?", "What kind of danger did they face?",
    "Was there a friendship at the heart of the story?", "Did the main character have a special power or gift?",
    "Was there another world, a spaceship or a far-off land?", "What did the main character want most?",
)
#: Asked when every generated question leaked or repeated (in this order, skipping ones already asked).
FALLBACK_QUESTIONS = ("What else do you remember about the story?", "Where and when does the story take place?",
                      "Who is the main character, and what happens to them?", "How did the book end?",
                      "Do you remember anything about the cover?", "Roughly when did you read it, and at what age?")
_NUMBERING = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d*[:.)]|question\s*\d*[:.)])\s*", re.IGNORECASE)

Candidates = Tuple[List[str], np.ndarray]  # docnos best first, their probabilities


def history_of(value) -> List[Tuple[str, str]]:
    """A ``history`` cell as (question, answer) pairs (None / NaN: no turns yet)."""
    if value is None or (not isinstance(value, (list, tuple)) and is_missing(value)):
        return []
    out = []
    for turn in value:
        if isinstance(turn, dict):
            out.append((str(turn.get("question", "")), str(turn.get("answer", ""))))
        else:
            q, a = turn
            out.append((str(q), str(a)))
    return out


def format_history(history: Sequence[Tuple[str, str]]) -> str:
    return "\n".join(f"Q: {q}\nA: {a}" for q, a in history) if history else "(none)"


def parse_questions(text: Optional[str]) -> List[str]:
    """The questions in an LLM answer: one per line, numbering and labels removed; lines that are not
    questions are kept only when no line is one."""
    if not text:
        return []
    lines = [_NUMBERING.sub("", line).strip().strip('"') for line in str(text).splitlines()]
    lines = [line for line in lines if len(line.split()) >= 3]
    asked = [line[: line.index("?") + 1] for line in lines if "?" in line]
    return asked or lines[:1]


def _same(a: str, b: str) -> bool:
    return re.sub(r"\W+", " ", a.lower()).strip() == re.sub(r"\W+", " ", b.lower()).strip()


def few_shot_questions(prompt) -> List[str]:
    """The example questions of a question prompt's few-shot turns (a small model copies them; they are dropped
    from pools and from the generator's training targets)."""
    return [q for m in prompt.template if m["role"] == "assistant" for q in parse_questions(m["content"])]


def _unit(e) -> np.ndarray:
    e = np.asarray(e, dtype=float)
    return e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)


class Clarifier(pt.Transformer):
    """Adds ``question``: the next clarification question of each query (see the module doc)."""

    @keyword_settings
    def __init__(self, llm=None, index=None, *, retriever: Optional[pt.Transformer] = None, pool_size: int = 20,
                 selection=None, k: int = 10, temperature: float = 0.05, mass: float = 0.5, max_candidates: int = 3,
                 max_regenerations: int = 1, min_pool: Optional[int] = None, query_chars: int = 1500,
                 description_chars: int = 300, answerer=None, encoder=None, pool=None,
                 pool_temperature: Optional[float] = 0.8, dedup: Optional[float] = 0.9,
                 prompt_dir: Union[str, Path, None] = None, max_tokens: Optional[int] = None):
        if retriever is not None and index is None:
            raise ValueError("Clarifier: a retriever needs the index its docnos come from (index=...)")
        if llm is None and pool is None:
            raise ValueError("Clarifier needs an llm to write question pools, or pool=... (a list of questions, or "
                             "a dict qid -> list)")
        self.llm, self.index, self.retriever, self.pool = llm, index, retriever, pool
        self.pool_size, self.k = int(pool_size), int(k)
        self.mass, self.max_candidates = float(mass), int(max_candidates)
        self.distribution = RetrievalDistribution(k=k, temperature=temperature)
        self.selection = selection if selection is not None else RandomSelection()
        self.max_regenerations = int(max_regenerations)
        self.max_tokens = int(max_tokens) if max_tokens else 24 * self.pool_size + 24
        self.pool_temperature = pool_temperature
        self.dedup = dedup
        # a small model often writes fewer questions than asked; half a pool is worth no second call
        self.min_pool = int(min_pool) if min_pool is not None else max(1, self.pool_size // 2)
        self.query_chars, self.description_chars = int(query_chars), int(description_chars)
        self.answerer, self.encoder = answerer, encoder
        if getattr(self.selection, "needs_answers", False) and answerer is None:
            raise ValueError(f"Clarifier: {self.selection!r} needs answerer= (a simulated user playing each "
                             "candidate, e.g. OracleUser(index, encoder))")
        if getattr(self.selection, "needs_encoder", False) and encoder is None:
            raise ValueError(f"Clarifier: {self.selection!r} needs encoder= (texts -> embeddings, e.g. a "
                             "SentenceTransformer's encode)")
        self.prompt_dir = prompt_dir
        self.prompt = load_prompt("clarinet_question", prompt_dir)
        self.examples = few_shot_questions(self.prompt)
        self.leaks = self.fallbacks = self.failures = self.copied = self.duplicates = 0
        self._stats: Optional[NameStats] = None

    # -- the prompt ----------------------------------------------------------------------------------------------
    def candidates(self, inp: pd.DataFrame) -> Dict[str, Candidates]:
        """qid → (docnos, probabilities) of the retriever's distribution on each row's ``query``."""
        if self.retriever is None or len(inp) == 0:
            return {}
        res = self.distribution(self.retriever(inp[["qid", "query"]]))
        return {qid: (g["docno"].astype(str).tolist(), g["prob"].to_numpy(float))
                for qid, g in res.sort_values(["qid", "rank"]).groupby("qid", sort=False)}

    def shown(self, cands: Optional[Candidates]) -> pd.DataFrame:
        """The candidate books the prompt shows (probability mass ``mass``, at most ``max_candidates``)."""
        if not cands or self.index is None or len(cands[0]) == 0:
            return pd.DataFrame(columns=["docno", "title", "text", "prob", "rank"])
        docnos, probs = cands
        n = top_mass(probs, self.mass, self.max_candidates)
        books = self.index.books_of(docnos[:n]).reset_index(drop=True)
        return books.assign(prob=probs[:n], rank=np.arange(1, n + 1))

    def prompt_text(self, initial: str, history: Sequence[Tuple[str, str]], shown: pd.DataFrame) -> str:
        cands = "\n".join(f"[{int(b['rank'])}] probability {b['prob']:.2f}: "
                          f"{book_card(b, max_chars=self.description_chars)}" for _, b in shown.iterrows())
        return (f"Request: {' '.join(str(initial).split())[: self.query_chars]}\n\n"
                f"Likeliest books:\n{cands or '(none yet)'}\n\nQuestions already asked:\n{format_history(history)}")

    def messages(self, text: str, n: Optional[int] = None) -> List[Dict[str, str]]:
        msgs = self.prompt.messages(text)
        msgs[0]["content"] = msgs[0]["content"].replace("{n}", str(n or self.pool_size))
        return msgs

    # -- the pool ------------------------------------------------------------------------------------------------
    def _banned(self, shown: pd.DataFrame, forbid: Sequence[str]) -> List[str]:
        if self.index is not None and self._stats is None and len(shown):
            self._stats = NameStats.of(self.index)
        names = [n for _, b in shown.iterrows() for n in forbidden(b["title"], b.get("text", ""), stats=self._stats)]
        return names + [n for f in forbid for n in forbidden(f, characters=False)]

    def _admit(self, pool: List[str], new: Sequence[str], banned: Sequence[str], asked: Sequence[str],
               generated: bool = True) -> None:
        """Adds to ``pool`` the questions of ``new`` that leak nothing and repeat nothing (by string; generated
        questions also by meaning, and never a few-shot example)."""
        fresh = []
        for q in new:
            if leaked(q, banned):
                self.leaks += 1
            elif generated and any(_same(q, e) for e in self.examples):
                self.copied += 1
            elif any(_same(q, p) for p in list(pool) + list(asked) + fresh):
                self.duplicates += 1
            else:
                fresh.append(q)
        if not fresh:
            return
        if self.encoder is None or self.dedup is None or not generated:
            pool.extend(fresh)
            return
        ref_text = list(self.examples) + list(asked) + list(pool)
        emb = _unit(self.encoder(ref_text + fresh))
        ref, cand = emb[: len(ref_text)], emb[len(ref_text):]
        n_examples = len(self.examples)
        for q, e in zip(fresh, cand):
            sims = ref @ e if len(ref) else np.zeros(0)
            if len(sims) and sims.max() >= self.dedup:
                if int(np.argmax(sims)) < n_examples:
                    self.copied += 1
                else:
                    self.duplicates += 1
                continue
            pool.append(q)
            ref = np.vstack([ref, e[None, :]]) if len(ref) else e[None, :]

    def _given(self, qid: str) -> List[str]:
        if isinstance(self.pool, dict):
            return list(self.pool.get(qid, self.pool.get(str(qid), [])))
        return list(self.pool)

    def pools(self, rows: List[dict], cands: Dict[str, Candidates]) -> Tuple[List[List[str]], List[str]]:
        """One question pool per row (leak-free, new), and the prompt text each was asked with."""
        texts, banned = [], []
        for r in rows:
            shown = self.shown(cands.get(r["qid"]))
            texts.append(self.prompt_text(r["initial"], r["history"], shown))
            banned.append(self._banned(shown, r["forbid"]))
        pools: List[List[str]] = [[] for _ in rows]
        if self.llm is None:
            for i, r in enumerate(rows):
                self._admit(pools[i], self._given(r["qid"]), banned[i], [h for h, _ in r["history"]], False)
        else:
            todo = list(range(len(rows)))
            for attempt in range(self.max_regenerations + 1):
                if not todo:
                    break
                extra = {"temperature": self.pool_temperature} if self.pool_temperature is not None else {}
                if attempt:
                    extra = {"seed": attempt, "temperature": self.pool_temperature or 0.8}
                answers = self.llm.chat_many([self.messages(texts[i]) for i in todo],
                                             prompt_version=self.prompt.version, desc="CLARINET questions",
                                             max_tokens=self.max_tokens, **extra)
                for i, a in zip(todo, answers):
                    if a is None:
                        self.failures += 1
                    self._admit(pools[i], parse_questions(a), banned[i], [h for h, _ in rows[i]["history"]])
                todo = [i for i in todo if len(pools[i]) < self.min_pool]
        for i, r in enumerate(rows):
            if not pools[i]:
                self.fallbacks += 1
                asked = [h for h, _ in r["history"]]
                pools[i] = [next((q for q in FALLBACK_QUESTIONS if not any(_same(q, h) for h in asked)),
                                 FALLBACK_QUESTIONS[0])]
            pools[i] = pools[i][: self.pool_size] if self.llm is not None else pools[i]
        return pools, texts

    def ask(self, inp: pd.DataFrame, cands: Optional[Dict[str, Candidates]] = None,
            turn: int = 0) -> Tuple[List[str], List[List[str]], List[str]]:
        """The chosen question, the pool and the prompt text of each row; ``cands`` (qid → (docnos, probs))
        replaces the retriever's distribution (a game passes its own belief)."""
        cands = self.candidates(inp) if cands is None else cands
        before = self.fallbacks
        rows = [{"qid": str(r["qid"]), "initial": r.get("query_0", r["query"]) if not is_missing(
                     r.get("query_0")) else r["query"], "history": history_of(r.get("history")),
                 "forbid": [f for f in (r.get("forbid") if isinstance(r.get("forbid"), (list, tuple)) else [])]}
                for r in inp.to_dict("records")]
        pools, texts = self.pools(rows, cands)
        chosen = []
        for r, pool in zip(rows, pools):
            docnos, probs = cands.get(r["qid"], ([], np.zeros(0)))
            i = self.selection.choose(pool, qid=r["qid"], turn=turn, docnos=docnos, probs=probs,
                                      answer=getattr(self.answerer, "answer", None), encode=self.encoder)
            chosen.append(pool[max(i, 0)])
        if self.fallbacks > before and self.llm is not None:
            warnings.warn(f"{self!r}: {self.fallbacks - before} of {len(rows)} query(ies) got a generic question "
                          "(every generated one leaked a name, repeated, or the LLM failed)", stacklevel=2)
        return chosen, pools, texts

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        out = inp.copy()
        if len(inp) == 0:
            return out.assign(question=pd.Series(dtype=object))
        check_query_frame(inp, repr(self))
        if "query_0" in inp.columns:
            check_query_frame(inp, repr(self), "query_0")
        out["question"] = self.ask(inp)[0]
        return out

    def __repr__(self):
        # the call that makes it, settings that are not the default by name (a question pool and an encoder as
        # what they are)
        pool = None if self.pool is None else Shown(f"pools for {len(self.pool)} queries" if isinstance(
            self.pool, dict) else f"pool of {len(self.pool)} questions")
        default_selection = type(self.selection) is RandomSelection and repr(self.selection) == repr(RandomSelection())
        settings = {"retriever": self.retriever, "pool": pool, "pool_size": self.pool_size,
                    "selection": None if default_selection else self.selection, "k": self.k,
                    "temperature": self.distribution.temperature, "mass": self.mass,
                    "max_candidates": self.max_candidates, "max_regenerations": self.max_regenerations,
                    "min_pool": None if self.min_pool == max(1, self.pool_size // 2) else self.min_pool,
                    "query_chars": self.query_chars, "description_chars": self.description_chars,
                    "answerer": self.answerer, "encoder": None if self.encoder is None else Shown("encoder"),
                    "pool_temperature": self.pool_temperature, "dedup": self.dedup, "prompt_dir": self.prompt_dir,
                    "max_tokens": None if self.max_tokens == 24 * self.pool_size + 24 else self.max_tokens}
        return code_repr(self, [self.llm] if self.index is None else [self.llm, self.index], settings)
