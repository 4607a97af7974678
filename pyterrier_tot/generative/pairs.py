"""Training pairs of a generative retriever: (source text, identifier).

Indexing pairs (:func:`indexing_pairs`, book text forms → book-id; :func:`outline_pairs`, chapter / section
text → chapter- / section-id) teach the model the corpus; retrieval pairs (:func:`retrieval_pairs`, training
queries → book-id) and pseudo-queries teach it to answer requests. Pseudo-queries come two ways: cheap ones
without a model (:func:`cheap_pseudo_queries`: random word spans of the description, the DSI-style stand-in),
and LLM ones (:func:`llm_pseudo_queries`) through :class:`pyterrier_tot.LLM` with the packaged prompts
``generative_pseudo_query_single`` (one chapter) and ``generative_pseudo_query_multi`` (several chapters). An
LLM request that fails gives no pairs for that book and is counted, never an exception.

Every function returns a frame with columns ``source``, ``target``, ``task`` and ``docno``.
"""
from __future__ import annotations

import re
import warnings
from typing import Dict, Optional, Sequence

import numpy as np
import pandas as pd

COLUMNS = ["source", "target", "task", "docno"]
#: Text forms of a book used for indexing (the paper's keywords, summary, leading text, whole text).
FORMS = ("keywords", "summary", "lead", "description")
_SENT = re.compile(r"(?<=[.!?])\s+")


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip()


def keywords_of(text: str, words: int = 12) -> str:
    """TextRank keywords (``summa``), comma-separated; empty when the text is too short to rank."""
    from summa import keywords

    try:
        return ", ".join(keywords.keywords(text, words=words, split=True))
    except (ValueError, IndexError, ZeroDivisionError):
        return ""


def summary_of(text: str, words: int = 40) -> str:
    """A TextRank extractive summary (``summa``); empty when the text has too few sentences."""
    from summa import summarizer

    try:
        return summarizer.summarize(text, words=words).replace("\n", " ").strip()
    except (ValueError, IndexError, ZeroDivisionError):
        return ""


def lead_of(text: str, sentences: int = 2) -> str:
    return " ".join(_SENT.split(text)[:sentences]).strip()


def _form(form: str, text: str, keyword_words: int, summary_words: int) -> str:
    if form == "keywords":
        return keywords_of(text, keyword_words)
    if form == "summary":
        return summary_of(text, summary_words)
    return lead_of(text) if form == "lead" else text


def indexing_pairs(books: pd.DataFrame, ids: Dict[str, str], forms: Sequence[str] = FORMS,
                   text_field: str = "text", keyword_words: int = 12, summary_words: int = 40) -> pd.DataFrame:
    """Book text forms → book-id. A form that comes out empty (TextRank on a two-sentence blurb) or equal to a
    form already made for that book is left out."""
    unknown = set(forms) - set(FORMS)
    if unknown:
        raise ValueError(f"unknown indexing forms {sorted(unknown)}; choose from {FORMS}")
    rows = []
    for docno, text in zip(books["docno"].astype(str), books[text_field].map(_text)):
        if docno not in ids or not text:
            continue
        seen = set()
        for form in forms:
            src = _form(form, text, keyword_words, summary_words)
            if src and src not in seen:
                seen.add(src)
                rows.append((src, ids[docno], f"index:{form}", docno))
    return _frame(rows)


def outline_pairs(outline_ids: pd.DataFrame, docno: str) -> pd.DataFrame:
    """Chapter text → chapter-id and section text → section-id of one book (from
    :func:`~pyterrier_tot.generative.identifiers.outline_ids`)."""
    rows = [(t, i, f"index:{lvl}", docno) for t, i, lvl in zip(outline_ids["text"], outline_ids["id"],
                                                                 outline_ids["level"]) if _text(t)]
    return _frame(rows)


def retrieval_pairs(topics: pd.DataFrame, qrels: pd.DataFrame, ids: Dict[str, str]) -> pd.DataFrame:
    """Training query → book-id of each relevant book (``label > 0``) the identifier map knows."""
    rel = qrels[qrels["label"] > 0][["qid", "docno"]].astype(str)
    merged = topics[["qid", "query"]].astype({"qid": str}).merge(rel, on="qid")
    rows = [(q, ids[d], "retrieve:query", d) for q, d in zip(merged["query"], merged["docno"]) if d in ids and _text(q)]
    return _frame(rows)


def cheap_pseudo_queries(books: pd.DataFrame, ids: Dict[str, str], n: int = 2, min_words: int = 8,
                         max_words: int = 24, text_field: str = "text", seed: int = 0) -> pd.DataFrame:
    """``n`` random word spans of each book's text → book-id (no model needed)."""
    rng = np.random.default_rng(seed)
    rows = []
    for docno, text in zip(books["docno"].astype(str), books[text_field].map(_text)):
        words = text.split()
        if docno not in ids or len(words) < min_words:
            continue
        for _ in range(n):
            size = int(rng.integers(min_words, min(max_words, len(words)) + 1))
            start = int(rng.integers(0, len(words) - size + 1))
            rows.append((" ".join(words[start:start + size]), ids[docno], "retrieve:span", docno))
    return _frame(rows)


def _parse_queries(answer: Optional[str], n: int) -> list:
    if not answer:
        return []
    lines = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip() for line in answer.splitlines()]
    return [line for line in lines if len(line.split()) >= 3][:n]


def llm_pseudo_queries(books: pd.DataFrame, ids: Dict[str, str], llm, n: int = 4, kind: str = "single",
                       chapters_field: Optional[str] = None, text_field: str = "text", max_chars: int = 2000,
                       seed: int = 0, max_tokens: Optional[int] = None) -> pd.DataFrame:
    """``n`` LLM pseudo-queries per book → book-id.

    :param kind: ``single`` (one chapter: a random chapter, or the description when there is no outline),
        ``multi`` (two to three chapters joined by ``" # "``; books with fewer than two chapters use their
        description split in halves) or ``tot`` (the description, and a tip-of-the-tongue request as a reader
        who half remembers the book would write it: prompt ``generative_pseudo_query_tot``)
    :param chapters_field: a column holding each book's list of chapter texts (optional)
    :param max_tokens: the answer's token budget (default: the LLM's)
    """
    from pyterrier_tot.llm.templates import load_prompt

    if kind not in ("single", "multi", "tot"):
        raise ValueError(f"kind must be 'single', 'multi' or 'tot', not {kind!r}")
    prompt = load_prompt(f"generative_pseudo_query_{kind}")
    rng = np.random.default_rng(seed)
    docnos, requests = [], []
    for _, book in books.iterrows():
        docno = str(book["docno"])
        text = _text(book.get(text_field))
        chapters = [c for c in (book.get(chapters_field) if chapters_field else None) or [] if _text(c)]
        if kind == "tot":
            chapters = [text] if text else []
        elif not chapters and text:
            chapters = [text] if kind == "single" else [s for s in _halves(text) if s]
        if docno not in ids or not chapters:
            continue
        if kind in ("single", "tot"):
            body = chapters[int(rng.integers(len(chapters)))]
        else:
            pick = sorted(rng.choice(len(chapters), size=min(len(chapters), 3), replace=False))
            body = " # ".join(chapters[i] for i in pick)
        docnos.append(docno)
        requests.append(prompt.messages(f"Write {n} requests.\n\n{body[:max_chars]}"))
    budget = {"max_tokens": int(max_tokens)} if max_tokens else {}
    answers = llm.chat_many(requests, prompt_version=prompt.version, desc=f"pseudo-queries ({kind})", **budget) \
        if requests else []
    rows, failed = [], 0
    for docno, answer in zip(docnos, answers):
        qs = _parse_queries(answer, n)
        failed += not qs
        rows += [(q, ids[docno], f"retrieve:llm-{kind}", docno) for q in qs]
    if failed:
        warnings.warn(f"llm_pseudo_queries: {failed} of {len(docnos)} book(s) got no usable pseudo-query "
                      "(failed request or unparseable answer); they keep their other pairs", stacklevel=2)
    out = _frame(rows)
    out.attrs["failed_books"] = failed
    return out


def _halves(text: str) -> list:
    sents = _SENT.split(text)
    mid = max(1, len(sents) // 2)
    return [" ".join(sents[:mid]), " ".join(sents[mid:])]
