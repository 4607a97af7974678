"""Simulated users: who answers the clarification questions in a game. Each has
``answer(questions, docnos) -> answers`` (one book per question: the book the user is looking for).

- :class:`OracleUser` (deterministic, no LLM): the sentence of the book's description most similar to the
  question, names of the book removed, cut to ``words`` words. Reproducible and free, so games on every
  validation query cost seconds; the selection rules use it as the system's own model of a user, too.
- :class:`UserSimulator` (the paper's): an LLM with the book's notes (title hidden) answers vaguely in one
  sentence. An answer that names the book or one of its characters is asked again with another seed
  (``max_regenerations`` times); one that still leaks is withheld ("I don't remember.", ``.withheld``), never
  garbled. An LLM failure also answers "I don't remember." with a warning (``.failures``).
- :class:`ConstantUser` (a control): the same answer to everything, e.g. "I don't remember." or "No.".
- :class:`WrongBookUser` (a control): another user answering about a different book than the one sought.

Example::

    sim = OracleUser(index, encoder=encode)
    sim.answer(["Where was it set?"], ["3264295"])       # -> ['a racially divided small town, ...']
"""
from __future__ import annotations

import random
import re
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from pyterrier_tot.clarinet.leaks import NameStats, forbidden, leaked, remove_names
from pyterrier_tot.clarinet.questions import book_card
from pyterrier_tot.llm.templates import load_prompt

NO_MEMORY = "I don't remember."
_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z0-9])")
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = set("""a an the and or but of to in on at for with from by as is was were be been it its this that these those
there their they them he she his her him i you we my your our did does do what which who whom whose when where why how
any anything about remember story book books character characters main was were happen happens happened take place""".
             split())


def clean_answer(text) -> str:
    """The first paragraph of an answer, on one line, without a leading label."""
    if not text:
        return ""
    s = re.split(r"\n\s*\n", str(text).strip(), maxsplit=1)[0]
    s = re.sub(r"^\s*(?:a|answer)\s*:\s*", "", " ".join(s.split()), flags=re.IGNORECASE)
    return s.strip().strip('"').strip()


def sentences(text: str) -> List[str]:
    """``text`` cut into sentences (a description without punctuation is one sentence)."""
    parts = [" ".join(p.split()) for p in _SENTENCE.split(str(text or "").strip())]
    return [p for p in parts if p]


def _stem(w: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def _bag(text: str) -> set:
    return {_stem(w) for w in _TOKEN.findall(str(text).lower()) if w not in _STOP}


class OracleUser:
    """Answers from the book's own description (see the module doc). ``encoder(texts) -> embeddings`` picks the
    sentence by cosine similarity (e.g. the retriever's sentence encoder); without one, by word overlap.
    ``words``: the answer's length cap. ``stats``: corpus name statistics (default: from ``index``)."""

    def __init__(self, index, encoder: Optional[Callable] = None, words: int = 8, stats: Optional[NameStats] = None):
        if words < 1:
            raise ValueError(f"words must be at least 1, not {words!r}")
        self.index, self.encoder, self.words = index, encoder, int(words)
        self.stats = stats
        self._books: Dict[str, tuple] = {}
        self._emb: Dict[str, np.ndarray] = {}
        self._qemb: Dict[str, np.ndarray] = {}

    def _book(self, docno: str) -> tuple:
        if docno not in self._books:
            if self.stats is None:
                self.stats = NameStats.of(self.index)
            book = self.index.books_of([docno]).iloc[0]
            names = forbidden(book["title"], book.get("text", ""), stats=self.stats)
            self._books[docno] = (sentences(book.get("text", "") or ""), names)
        return self._books[docno]

    def _embeddings(self, docno: str, sents: List[str]) -> np.ndarray:
        if docno not in self._emb:
            e = np.asarray(self.encoder(sents), dtype=float) if sents else np.zeros((0, 1))
            self._emb[docno] = e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
        return self._emb[docno]

    def _encode_questions(self, questions: Sequence[str]) -> None:
        new = [q for q in dict.fromkeys(questions) if q not in self._qemb]
        if new:
            e = np.asarray(self.encoder(new), dtype=float)
            e = e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
            self._qemb.update(zip(new, e))

    def best_sentence(self, question: str, docno: str) -> str:
        """The sentence of the book's description closest to ``question`` (empty when it has none)."""
        sents, _ = self._book(str(docno))
        if not sents:
            return ""
        if self.encoder is not None:
            self._encode_questions([question])
            return sents[int(np.argmax(self._embeddings(str(docno), sents) @ self._qemb[question]))]
        qb = _bag(question)
        overlap = [len(qb & _bag(s)) / (1 + len(_bag(s))) ** 0.5 for s in sents]
        return sents[int(np.argmax(overlap))]  # ties: the earliest sentence, which introduces the story

    def answer(self, questions: Sequence[str], docnos: Sequence[str]) -> List[str]:
        if len(questions) != len(docnos):
            raise ValueError(f"{len(questions)} questions for {len(docnos)} books")
        out = []
        if self.encoder is not None:
            self._encode_questions(list(questions))
        for q, d in zip(questions, docnos):
            _, names = self._book(str(d))
            text = remove_names(self.best_sentence(q, str(d)), names)
            words = text.split()[: self.words]
            out.append(" ".join(words).rstrip(",;:") if words else NO_MEMORY)
        return out

    def __repr__(self):
        how = "embedding" if self.encoder is not None else "word overlap"
        return f"OracleUser(words={self.words}, {how})"


class ConstantUser:
    """The same ``text`` for every question (uninformative controls: "I don't remember.", "No.")."""

    def __init__(self, text: str = NO_MEMORY):
        self.text = str(text)

    def answer(self, questions: Sequence[str], docnos: Sequence[str]) -> List[str]:
        return [self.text] * len(questions)

    def __repr__(self):
        return f"ConstantUser({self.text!r})"


class WrongBookUser:
    """``user`` answering about another book of ``index`` than the one asked about (drawn per book, seeded):
    the control that shows what grounded answers are worth."""

    def __init__(self, user, index, seed: int = 0):
        self.user, self.index, self.seed = user, index, int(seed)
        self._docnos = [str(d) for d in index.docnos]
        self.swapped: Dict[str, str] = {}

    def other(self, docno: str) -> str:
        docno = str(docno)
        if docno not in self.swapped:
            rng = random.Random(f"{self.seed}/{docno}")
            pick = docno
            while pick == docno and len(self._docnos) > 1:
                pick = self._docnos[rng.randrange(len(self._docnos))]
            self.swapped[docno] = pick
        return self.swapped[docno]

    def answer(self, questions: Sequence[str], docnos: Sequence[str]) -> List[str]:
        return self.user.answer(questions, [self.other(d) for d in docnos])

    def __repr__(self):
        return f"WrongBookUser({self.user!r}, seed={self.seed})"


class UserSimulator:
    """Answers ``questions`` about the books ``docnos`` (one book per question) through ``llm``."""

    def __init__(self, llm, index, max_regenerations: int = 1, description_chars: int = 600, max_tokens: int = 60,
                 characters: bool = True, prompt_dir: Union[str, Path, None] = None):
        self.llm, self.index = llm, index
        self.max_regenerations, self.description_chars = int(max_regenerations), int(description_chars)
        self.max_tokens, self.characters = int(max_tokens), characters
        self.prompt = load_prompt("clarinet_answer", prompt_dir)
        self.leaks = self.withheld = self.failures = 0

    def notes(self, book) -> str:
        return book_card(book, title=False, max_chars=self.description_chars)

    def answer(self, questions: Sequence[str], docnos: Sequence[str]) -> List[str]:
        if len(questions) != len(docnos):
            raise ValueError(f"{len(questions)} questions for {len(docnos)} books")
        if not questions:
            return []
        stats = NameStats.of(self.index) if self.characters else None
        books = self.index.books_of(list(dict.fromkeys(map(str, docnos)))).set_index("docno", drop=False)
        cards = {d: self.notes(books.loc[d]) for d in books.index}
        names = {d: forbidden(books.loc[d, "title"], books.loc[d].get("text", ""), self.characters, stats)
                 for d in books.index}
        texts = [f"Notes on the book: {cards[str(d)]}\n\nQuestion: {q}" for q, d in zip(questions, docnos)]
        out: List[str] = [""] * len(texts)
        todo = list(range(len(texts)))
        for attempt in range(self.max_regenerations + 1):
            extra = {} if attempt == 0 else {"seed": attempt, "temperature": 0.7}
            answers = self.llm.chat_many([self.prompt.messages(texts[i]) for i in todo],
                                         prompt_version=self.prompt.version, desc="simulated answers",
                                         max_tokens=self.max_tokens, **extra)
            left = []
            for i, a in zip(todo, answers):
                a = clean_answer(a)
                if a and leaked(a, names[str(docnos[i])]):
                    self.leaks += 1
                    left.append(i)
                out[i] = a
            todo = left
            if not todo:
                break
        for i in todo:  # still leaking after the regenerations: withheld, not garbled
            self.withheld += 1
            out[i] = NO_MEMORY
        failed = [i for i, a in enumerate(out) if not a]
        if failed:
            self.failures += len(failed)
            warnings.warn(f"{self!r}: {len(failed)} answer(s) failed or came back empty; they read "
                          f"{NO_MEMORY!r}", stacklevel=2)
            for i in failed:
                out[i] = NO_MEMORY
        return out

    def __repr__(self):
        return f"UserSimulator({self.llm!r}, max_regenerations={self.max_regenerations})"
