"""Question generation: the :class:`Clarifier` asks the next clarification question of each query.

    clarifier = Clarifier(llm, index, retriever=index.dense(model) % 10, pool_size=8, selection=selection("eig"))
    clarifier(frame)          # frame: qid, query (+ query_0: the initial request, history: [(question, answer)])

The prompt (``prompts/clarinet_question.txt``) holds the initial request, the questions asked so far with their
answers, and the top candidates whose probability reaches 50% (at most 3) with title, description, rank and
probability. One LLM call writes a pool of ``pool_size`` questions; the selection (random by default, or EIG /
KL) picks one. A question that names a shown candidate or one of its characters (or a name in the row's
``forbid`` list), or repeats an earlier question, is dropped; a pool left with fewer than ``min_pool`` questions
(default half the pool) is regenerated with another seed up to ``max_regenerations`` times, and a query left
without questions gets a generic one (counted in ``.fallbacks``).
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

from pyterrier_tot._util import is_missing
from pyterrier_tot.clarinet.distribution import RetrievalDistribution, top_mass
from pyterrier_tot.clarinet.leaks import forbidden, leaked
from pyterrier_tot.clarinet.selection import RandomSelection
from pyterrier_tot.llm.templates import load_prompt
from pyterrier_tot.policy import check_query_frame

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


def book_card(book, title: bool = True, max_chars: int = 300) -> str:
    """A book as prompt text: title (unless hidden), description cut at ``max_chars``, year, author, genres."""
    parts = []
    if title:
        parts.append(f"{book.get('title', '')}.")
    text = " ".join(str(book.get("text", "") or "").split())
    parts.append(text[:max_chars] + ("..." if len(text) > max_chars else ""))
    for field, label in (("author", "Author"), ("genres", "Genres")):
        if not is_missing(book.get(field)) and str(book.get(field)).strip():
            parts.append(f"{label}: {book.get(field)}.")
    if not is_missing(book.get("year")):
        parts.append(f"Published {int(float(book.get('year')))}.")
    return " ".join(p for p in parts if p)


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


class Clarifier(pt.Transformer):
    """Adds ``question``: the next clarification question of each query (see the module doc)."""

    def __init__(self, llm, index=None, retriever: Optional[pt.Transformer] = None, pool_size: int = 1,
                 selection=None, k: int = 10, temperature: float = 0.05, mass: float = 0.5, max_candidates: int = 3,
                 max_regenerations: int = 1, min_pool: Optional[int] = None, query_chars: int = 1500,
                 description_chars: int = 300,
                 answerer=None, encoder=None, prompt_dir: Union[str, Path, None] = None, max_tokens: int = 160):
        if retriever is not None and index is None:
            raise ValueError("Clarifier: a retriever needs the index its docnos come from (index=...)")
        self.llm, self.index, self.retriever = llm, index, retriever
        self.pool_size, self.k = int(pool_size), int(k)
        self.mass, self.max_candidates = float(mass), int(max_candidates)
        self.distribution = RetrievalDistribution(k=k, temperature=temperature)
        self.selection = selection if selection is not None else RandomSelection()
        self.max_regenerations, self.max_tokens = int(max_regenerations), int(max_tokens)
        # a small model often writes fewer questions than asked; half a pool is worth no second call
        self.min_pool = int(min_pool) if min_pool is not None else max(1, self.pool_size // 2)
        self.query_chars, self.description_chars = int(query_chars), int(description_chars)
        self.answerer, self.encoder = answerer, encoder
        if getattr(self.selection, "needs_answers", False) and (answerer is None or encoder is None):
            raise ValueError(f"Clarifier: {self.selection!r} needs answerer= (a UserSimulator playing each candidate) "
                             "and encoder= (texts -> embeddings, e.g. a SentenceTransformer's encode)")
        self.prompt = load_prompt("clarinet_question", prompt_dir)
        self.leaks = self.fallbacks = self.failures = 0

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
    def pools(self, rows: List[dict], cands: Dict[str, Candidates]) -> Tuple[List[List[str]], List[str]]:
        """One question pool per row (leak-free, new), and the prompt text each was asked with."""
        texts, names = [], []
        for r in rows:
            shown = self.shown(cands.get(r["qid"]))
            texts.append(self.prompt_text(r["initial"], r["history"], shown))
            banned = [n for _, b in shown.iterrows() for n in forbidden(b["title"], b.get("text", ""))]
            names.append(banned + [n for f in r["forbid"] for n in forbidden(f, characters=False)])
        pools: List[List[str]] = [[] for _ in rows]
        todo = list(range(len(rows)))
        for attempt in range(self.max_regenerations + 1):
            if not todo:
                break
            extra = {} if attempt == 0 else {"seed": attempt, "temperature": 0.8}
            answers = self.llm.chat_many([self.messages(texts[i]) for i in todo], prompt_version=self.prompt.version,
                                         desc="CLARINET questions", max_tokens=self.max_tokens, **extra)
            for i, a in zip(todo, answers):
                if a is None:
                    self.failures += 1
                for q in parse_questions(a):
                    if leaked(q, names[i]):
                        self.leaks += 1
                    elif not any(_same(q, p) for p in pools[i] + [h for h, _ in rows[i]["history"]]):
                        pools[i].append(q)
            todo = [i for i in todo if len(pools[i]) < self.min_pool]
        for i, r in enumerate(rows):
            if not pools[i]:
                self.fallbacks += 1
                asked = [h for h, _ in r["history"]]
                pools[i] = [next((q for q in FALLBACK_QUESTIONS if not any(_same(q, h) for h in asked)),
                                 FALLBACK_QUESTIONS[0])]
            pools[i] = pools[i][: self.pool_size]
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
        if self.fallbacks > before:
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
        return (f"Clarifier({self.llm!r}, retriever={self.retriever!r}, pool_size={self.pool_size}, "
                f"selection={self.selection!r})")
