"""The user simulator: an LLM with oracle access to the gold book (its title removed) that answers clarification
questions vaguely and never names the book.

    sim = UserSimulator(llm, index)
    sim.answer(["Was it set in a city?"], ["3264295"])     # -> ["I think it was a small town, not a city."]

Every answer is checked: one that names the book (title) or one of its characters (capitalised names of its
description) is asked again with another seed (``max_regenerations`` times); if it still leaks, the names are
redacted (``.redacted`` counts it). An LLM failure answers "I don't remember." with a warning (``.failures``),
so a game never loses a query. EIG and KL selection use the same class on candidate books (the system's own
model of a user), never on the gold book.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import List, Sequence, Union

from pyterrier_tot.clarinet.leaks import forbidden, leaked, redact
from pyterrier_tot.clarinet.questions import book_card
from pyterrier_tot.llm.templates import load_prompt

NO_MEMORY = "I don't remember."


def clean_answer(text) -> str:
    """The first paragraph of an answer, on one line, without a leading label."""
    if not text:
        return ""
    s = re.split(r"\n\s*\n", str(text).strip(), maxsplit=1)[0]
    s = re.sub(r"^\s*(?:a|answer)\s*:\s*", "", " ".join(s.split()), flags=re.IGNORECASE)
    return s.strip().strip('"').strip()


class UserSimulator:
    """Answers ``questions`` about the books ``docnos`` (one book per question) through ``llm``."""

    def __init__(self, llm, index, max_regenerations: int = 1, description_chars: int = 600, max_tokens: int = 60,
                 characters: bool = True, prompt_dir: Union[str, Path, None] = None):
        self.llm, self.index = llm, index
        self.max_regenerations, self.description_chars = int(max_regenerations), int(description_chars)
        self.max_tokens, self.characters = int(max_tokens), characters
        self.prompt = load_prompt("clarinet_answer", prompt_dir)
        self.leaks = self.redacted = self.failures = 0

    def notes(self, book) -> str:
        return book_card(book, title=False, max_chars=self.description_chars)

    def answer(self, questions: Sequence[str], docnos: Sequence[str]) -> List[str]:
        if len(questions) != len(docnos):
            raise ValueError(f"{len(questions)} questions for {len(docnos)} books")
        if not questions:
            return []
        books = self.index.books_of(list(dict.fromkeys(map(str, docnos)))).set_index("docno", drop=False)
        cards = {d: self.notes(books.loc[d]) for d in books.index}
        names = {d: forbidden(books.loc[d, "title"], books.loc[d].get("text", ""), self.characters)
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
        for i in todo:  # still leaking after the regenerations
            self.redacted += 1
            out[i] = redact(out[i], names[str(docnos[i])], "that")
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
