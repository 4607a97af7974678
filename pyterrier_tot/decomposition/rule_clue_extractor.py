"""RuleClueExtractor: per-field clues from a ToT query with regular expressions and word lists, no LLM.

Adds the clue columns of :mod:`pyterrier_tot.decomposition.clues` (``clue_title``, ``clue_author``, ``clue_date``,
``clue_cover``, ``clue_genre``, ``clue_plot``) and ``clue_year`` (latest possible publication year, see
:mod:`pyterrier_tot.decomposition.date_resolver`); None means N/A. Fast enough for thousands of queries a second.

- title: quoted strings, or the words after "called", "titled", "the title was/had/is" (up to punctuation);
- author: the capitalised name after "by", "written by", "the author was/is" (one to three words);
- date: the date phrases found (years, decades, ranges, "N years ago");
- cover: the sentences that mention the cover;
- genre: genre words and phrases from ``resources/genres.txt``;
- plot: the query with cover sentences removed (the rest of the description).
"""
from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Dict, List, Optional, Sequence

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.util import is_missing, require_columns
from pyterrier_tot.checks import check_query_frame
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, YEAR_COLUMN, clue_column
from pyterrier_tot.decomposition.date_resolver import date_mentions

_SENT_RE = re.compile(r"(?<=[.!?\n])\s+")
_QUOTED_RE = re.compile(r"[\"“”]([^\"“”\n]{2,80})[\"“”]")
_TITLE_RE = re.compile(r"\b(?:(?:book|novel|it|story|series|one)\s+(?:was|is|might be|may be|might have been)?\s*"
                       r"(?:called|titled|entitled|named)|the title (?:was|is|had|might have been|may have been)"
                       r"(?: something like)?)\s+(?P<t>[^.,;!?\n()]{2,60})", re.I)
_AUTHOR_RE = re.compile(r"\b(?:written by|authored by|author (?:was|is|named)|by)\s+"
                        r"(?P<a>[A-Z][a-zA-Z.'-]+(?:\s+[A-Z][a-zA-Z.'-]+){0,2})")
_COVER_RE = re.compile(r"\b(?:cover|covers|illustrated|illustration on the front|front of the book)\b", re.I)
_NOT_AUTHORS = {"The", "A", "An", "I", "My", "It", "This", "That", "Then", "There", "Reddit", "Amazon", "Goodreads"}


@functools.lru_cache(maxsize=1)
def genre_lexicon() -> List[str]:
    text = resources.files("pyterrier_tot").joinpath("resources/genres.txt").read_text(encoding="utf8")
    words = [ln.strip().lower() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return sorted(set(words), key=len, reverse=True)


@functools.lru_cache(maxsize=1)
def _genre_re():
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(g) for g in genre_lexicon()) + r")(?![\w-])", re.I)


def extract_clues(query: str, reference_year: Optional[int] = None) -> Dict[str, object]:
    """The clue dict (``clue_<field>`` and ``clue_year``) of one query."""
    text = str(query or "")
    sentences = [s.strip() for s in _SENT_RE.split(text) if s.strip()]
    titles = [m.group(1).strip() for m in _QUOTED_RE.finditer(text) if len(m.group(1).split()) <= 8]
    titles += [re.split(r"\s+by\s+", m.group("t").strip())[0] for m in _TITLE_RE.finditer(text)]
    authors = [m.group("a") for m in _AUTHOR_RE.finditer(text) if m.group("a").split()[0] not in _NOT_AUTHORS]
    dates = date_mentions(text, reference_year)
    cover = [s for s in sentences if _COVER_RE.search(s)]
    genres = []
    for m in _genre_re().finditer(text):
        g = m.group(1).lower()
        if g not in genres:
            genres.append(g)
    plot = " ".join(s for s in sentences if s not in cover).strip()
    out = {
        clue_column("title"): "; ".join(dict.fromkeys(titles)) or None,
        clue_column("author"): "; ".join(dict.fromkeys(authors)) or None,
        clue_column("date"): "; ".join(d[2] for d in dates) or None,
        clue_column("cover"): " ".join(cover) or None,
        clue_column("genre"): ", ".join(genres) or None,
        clue_column("plot"): plot or None,
        YEAR_COLUMN: min(d[1] for d in dates) if dates else None,
    }
    return out


class RuleClueExtractor(pt.Transformer):
    """Adds per-field clue columns to a query frame with rules only (see the module docstring)."""

    def __init__(self, reference_year: Optional[int] = None, query_column: str = "query"):
        self.reference_year = reference_year
        self.query_column = query_column

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=[self.query_column])
        check_query_frame(inp, repr(self), self.query_column)
        out = inp.copy()
        rows = [extract_clues(q, self.reference_year) for q in out[self.query_column].tolist()]
        clues = pd.DataFrame(rows, columns=[*CLUE_COLUMNS, YEAR_COLUMN], index=out.index)
        for col in CLUE_COLUMNS:
            out[col] = clues[col].astype(object).where(clues[col].notna(), None)
        out[YEAR_COLUMN] = clues[YEAR_COLUMN].astype("Int64")
        return out

    def settings(self) -> dict:
        """What changes its clues (:mod:`pyterrier_tot._plumbing.cache_key`)."""
        return {"reference_year": self.reference_year, "query_column": self.query_column}

    def __repr__(self):
        args = [] if self.reference_year is None else [f"reference_year={self.reference_year}"]
        if self.query_column != "query":
            args.append(f"query_column={self.query_column!r}")
        return f"RuleClueExtractor({', '.join(args)})"


def clue_form_queries(clues: pd.DataFrame, fields: Sequence[str] = ("title", "author", "cover", "genre"),
                      min_chars: int = 20) -> pd.DataFrame:
    """The short "clue form" of each query: its non-N/A clues of ``fields`` joined with ``. `` (``qid, query``);
    queries whose form is shorter than ``min_chars`` or made of genres alone are dropped. Used as
    extra training anchors beside the full query."""
    cols = [clue_column(f) for f in fields if clue_column(f) in clues.columns]
    require_columns(clues, ["qid"], "clue_form_queries")
    text = clues[cols].apply(lambda r: ". ".join(str(v).strip() for v in r if not is_missing(v) and str(v).strip()),
                             axis=1) if cols else pd.Series("", index=clues.index)
    # a form made of genres alone ("fantasy, young adult") names no book: one clue of another field is required
    named = [c for c in cols if c != clue_column("genre")]
    has_named = clues[named].apply(lambda r: any(not is_missing(v) and str(v).strip() for v in r), axis=1) \
        if named else pd.Series(False, index=clues.index)
    out = pd.DataFrame({"qid": clues["qid"].astype(str), "query": text})
    return out[has_named.to_numpy() & (out["query"].str.len() >= max(1, min_chars)).to_numpy()].reset_index(drop=True)
