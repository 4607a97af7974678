"""A book as the CLARINET prompts show it: :func:`book_card` writes the notes on a candidate that the question
prompt (:class:`~pyterrier_tot.clarinet.questions.Clarifier`), the simulated user and the answer likelihoods
(:class:`~pyterrier_tot.clarinet.likelihood.LLMLikelihood`) all read, so all three see the same text."""
from __future__ import annotations

from pyterrier_tot._plumbing.util import is_missing


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
