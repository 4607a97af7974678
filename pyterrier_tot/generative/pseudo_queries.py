"""More training requests per book, from sources that need no model, and the LLM requests written once to a file.

A generative retriever learns to answer requests from (request, identifier) pairs; one or two real requests per
book are far too few. Cheap sources, each returning the pairs frame of :mod:`~pyterrier_tot.generative.pairs`
(``source``, ``target``, ``task``, ``docno``):

- :func:`keyphrase_queries`: TextRank keyphrases of the description (``summa``), a few at a time, in random order
  (``retrieve:keyphrases``);
- :func:`template_queries`: tip-of-the-tongue request templates (``resources/tot_templates.txt``) filled with a
  span of the description and its keyphrases (``retrieve:template``);
- :func:`clue_form_pairs`: the short rule-clue form of each training request (title, author, cover and genre
  clues of :class:`~pyterrier_tot.decomposition.rule_clue_extractor.RuleClueExtractor`) → its book
  (``retrieve:clues``);
- random spans: :func:`~pyterrier_tot.generative.pairs.cheap_pseudo_queries` (``retrieve:span``).

Keyphrases made only of title words are left out, since a reader who remembered the title would not ask.

LLM requests cost seconds each, so they are written once: :func:`write_pseudo_queries` stores the output of
:func:`~pyterrier_tot.generative.pairs.llm_pseudo_queries` as JSON lines (``docno``, ``source``, ``task``) and
:func:`read_pseudo_queries` turns the file back into pairs for any identifier map.
"""
from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Union

import numpy as np
import pandas as pd

from pyterrier_tot.generative.pairs import _frame, _text

_WORD = re.compile(r"\w+")
_FIELDS = re.compile(r"\{(span|k1|k2|k3)\}")


def load_templates(path: Union[str, Path, None] = None) -> List[str]:
    """The request templates (the packaged ``resources/tot_templates.txt`` unless ``path``)."""
    text = Path(path).read_text(encoding="utf8") if path else \
        resources.files("pyterrier_tot").joinpath("resources/tot_templates.txt").read_text(encoding="utf8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def keyphrases(text: str, title: str = "", limit: int = 8) -> List[str]:
    """TextRank keyphrases of ``text``, best first, without those made only of ``title`` words."""
    from summa import keywords

    try:
        scored = keywords.keywords(text, scores=True)
    except (ValueError, IndexError, ZeroDivisionError):
        scored = []
    # ties (equal TextRank scores up to float noise) in alphabetical order, so every machine ranks them alike
    found = [k for k, _ in sorted(scored, key=lambda ks: (-round(float(ks[1]), 6), ks[0]))]
    title_words = {w.lower() for w in _WORD.findall(title or "")}
    return [k for k in found if not set(_WORD.findall(k.lower())) <= title_words][:limit]


def _books(books: pd.DataFrame, ids: Dict[str, str], text_field: str):
    titles = books["title"] if "title" in books.columns else pd.Series([""] * len(books), index=books.index)
    for docno, text, title in zip(books["docno"].astype(str), books[text_field].map(_text), titles.map(_text)):
        if docno in ids and text:
            yield docno, text, title


def keyphrase_queries(books: pd.DataFrame, ids: Dict[str, str], n: int = 2, per_query: int = 4,
                      text_field: str = "text", seed: int = 0) -> pd.DataFrame:
    """``n`` requests per book, each ``per_query`` of its keyphrases in random order; a book with fewer than two
    keyphrases gets none."""
    rng = np.random.default_rng(seed)
    rows = []
    for docno, text, title in _books(books, ids, text_field):
        phrases = keyphrases(text, title)
        if len(phrases) < 2:
            continue
        seen = set()
        for _ in range(n):
            pick = rng.permutation(len(phrases))[:per_query]
            query = ", ".join(phrases[i] for i in pick)
            if query not in seen:
                seen.add(query)
                rows.append((query, ids[docno], "retrieve:keyphrases", docno))
    return _frame(rows)


def _span(words: List[str], rng, lo: int = 8, hi: int = 20) -> str:
    size = int(rng.integers(min(lo, len(words)), min(hi, len(words)) + 1))
    start = int(rng.integers(0, len(words) - size + 1))
    return " ".join(words[start:start + size]).strip().rstrip(".,;:!?")


def template_queries(books: pd.DataFrame, ids: Dict[str, str], n: int = 2, templates: Optional[List[str]] = None,
                     text_field: str = "text", seed: int = 0) -> pd.DataFrame:
    """``n`` requests per book from random templates; a template whose keyphrase slots the book cannot fill is
    drawn again (books with no keyphrase use the span-only templates)."""
    templates = templates or load_templates()
    rng = np.random.default_rng(seed)
    rows = []
    for docno, text, title in _books(books, ids, text_field):
        words = text.split()
        if len(words) < 4:
            continue
        phrases = keyphrases(text, title)
        usable = [t for t in templates if max((int(f[1]) for f in _FIELDS.findall(t) if f != "span"), default=0)
                  <= len(phrases)]
        if not usable:
            continue
        for _ in range(n):
            tpl = usable[int(rng.integers(len(usable)))]
            order = rng.permutation(len(phrases))
            fill = {"span": _span(words, rng), **{f"k{i + 1}": phrases[j] for i, j in enumerate(order[:3])}}
            query = _FIELDS.sub(lambda m, fill=fill: fill[m.group(1)], tpl)
            rows.append((query, ids[docno], "retrieve:template", docno))
    return _frame(rows)


def clue_form_pairs(topics: pd.DataFrame, qrels: pd.DataFrame, ids: Dict[str, str]) -> pd.DataFrame:
    """The rule-clue form of each training request → the book-id of its relevant books (``label > 0``)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, clue_form_queries
    from pyterrier_tot.generative.pairs import retrieval_pairs

    if len(topics) == 0:
        return _frame([])
    forms = clue_form_queries(RuleClueExtractor()(topics[["qid", "query"]].astype({"qid": str})))
    return retrieval_pairs(forms, qrels, ids).assign(task="retrieve:clues")


def write_pseudo_queries(pairs: pd.DataFrame, path: Union[str, Path], **meta) -> Path:
    """Write pseudo-queries (a pairs frame) as JSON lines (``docno``, ``source``, ``task``); ``meta`` (model,
    prompt version, ...) goes to the first line as ``{"meta": {...}}``. Written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".partial")
    with open(tmp, "w", encoding="utf8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for docno, source, task in zip(pairs["docno"], pairs["source"], pairs["task"]):
            f.write(json.dumps({"docno": str(docno), "source": source, "task": task}, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def read_pseudo_queries(path: Union[str, Path], ids: Dict[str, str]) -> pd.DataFrame:
    """The pairs of a file from :func:`write_pseudo_queries`, their targets from ``ids`` (rows of books ``ids``
    does not know are dropped); ``.attrs["meta"]`` holds the file's metadata."""
    rows, meta = [], {}
    with open(path, encoding="utf8") as f:
        for line in f:
            rec = json.loads(line)
            if "meta" in rec:
                meta = rec["meta"]
            elif rec["docno"] in ids and _text(rec.get("source")):
                rows.append((rec["source"], ids[rec["docno"]], rec.get("task", "retrieve:llm"), rec["docno"]))
    out = _frame(rows)
    out.attrs["meta"] = meta
    return out
