"""Epistemic hedge removal for tip-of-the-tongue queries.

ToT requests are full of uncertainty markers ("I think", "if I recall", "maybe", "apparently") that carry no
description of the book but still add terms to a BM25 query. :class:`HedgeRemover` strips them from ``query``
(the original stays in ``query_0``) using a lexicon of phrases shipped in ``resources/hedges.txt``::

    import pyterrier_tot as ptt
    pipe = ptt.HedgeRemover() >> index.bm25()
    ptt.HedgeRemover(count=True)(topics)        # adds hedge_count and hedge_density (hedges per 100 words)

Matching rules: case-insensitive, whole words only ("maybe" yes, "maybelline" no), the longest phrase at a
position wins ("if I recall correctly" before "if I recall" before "I recall"), a space in a lexicon entry
matches any whitespace run, an apostrophe matches ``'``, ``’`` or nothing. Text inside double quotes is left
alone (``protect_quotes``) because quoted text is usually a remembered title or line.

Negations: an entry starting with ``!`` in the lexicon ("!I don't think") is a *negated-belief* hedge;
dropping it would turn "I don't think it was a sequel" into "it was a sequel". ``negations="keep"`` (default)
leaves these phrases untouched, ``"not"`` replaces them by the single word "not" (so downstream negation
handling still sees a cue), ``"drop"`` removes them like any other hedge. Single-word hedges never swallow a
neighbouring "not": "probably not a sequel" becomes "not a sequel".
"""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot.checks import check_query_frame

NEGATION_MODES = ("keep", "not", "drop")
LexiconArg = Union[None, str, Path, Iterable[str]]
_WORDS = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def read_lexicon(source: LexiconArg = None) -> List[str]:
    """Lexicon entries (``!`` prefix kept) from the packaged file (``None``), a file path or an iterable."""
    if source is None:
        text = resources.files("pyterrier_tot").joinpath("resources/hedges.txt").read_text(encoding="utf8")
        lines = text.splitlines()
    elif isinstance(source, (str, Path)) and Path(source).is_file():
        lines = Path(source).read_text(encoding="utf8").splitlines()
    elif isinstance(source, str):
        raise FileNotFoundError(f"hedge lexicon file {source!r} not found (pass a list of markers for literal entries)")
    else:
        lines = list(source)
    out = []
    for line in lines:
        if not isinstance(line, str):
            raise TypeError(f"hedge lexicon entries must be strings, got {line!r}")
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _entry_pattern(entry: str) -> str:
    parts = []
    for word in entry.split():
        pieces = [re.escape(p) for p in re.split(r"['’]", word)]
        parts.append("['’]?".join(pieces))
    return r"\s+".join(parts)


def _normal_key(entry: str) -> str:
    return " ".join(re.sub(r"['’]", "", entry.lower()).split())


# --- tidying after deletions -------------------------------------------------------------------------------
_GAP = "\x00"  # marks where a hedge was cut out
_TIDY = [
    (re.compile(r"[ \t]*,[ \t]*\x00[ \t]*,[ \t]*"), " "),       # "was, I think, a" -> "was a"
    (re.compile(r"[(\[][ \t]*\x00[ \t]*[)\]]"), ""),     # "(maybe)" -> ""
    (re.compile(r"\x00"), " "),
    (re.compile(r"[ \t]{2,}"), " "),
    (re.compile(r"[ \t]+([,.;:!?)\]])"), r"\1"),
    (re.compile(r"([(\[])[ \t]+"), r"\1"),
    (re.compile(r"\(\s*[,;]?\s*\)"), ""),
    (re.compile(r",(\s*,)+"), ","),
    (re.compile(r"[,;](\s*[.!?])"), r"\1"),
    (re.compile(r"(^|[.!?(\n]|:)([ \t]*)[,;][ \t]*"), r"\1\2"),
    (re.compile(r",([^\s\d])"), r", \1"),
    (re.compile(r"[ \t]{2,}"), " "),
    (re.compile(r"^[ \t]+|[ \t]+$", re.M), ""),
]


def _tidy(text: str) -> str:
    for _ in range(2):
        for pat, rep in _TIDY:
            text = pat.sub(rep, text)
    return text.strip()


class HedgeRemover(pt.Transformer):
    """Removes epistemic hedges from ``query`` (original kept in ``query_0``).

    :param extra: more markers (iterable of strings or a lexicon file) added to the lexicon.
    :param lexicon: a lexicon replacing the packaged one (iterable or file); ``None`` = packaged list.
    :param negations: ``"keep"`` | ``"not"`` | ``"drop"`` for negated-belief hedges (see module doc).
    :param count: add ``hedge_count`` and ``hedge_density`` (hedges per 100 words of the original query).
    :param remove: set ``False`` to only count (the query is left as it is; still pushed to ``query_0``).
    :param protect_quotes: leave text inside double quotes untouched.
    """

    @keyword_settings
    def __init__(self, extra: LexiconArg = None, *, lexicon: LexiconArg = None, negations: str = "keep",
                 count: bool = False, remove: bool = True, protect_quotes: bool = True):
        if negations not in NEGATION_MODES:
            raise ValueError(f"negations must be one of {NEGATION_MODES}, not {negations!r}")
        # as given, for the repr (a list of markers, or a file path)
        self._extra_arg = list(extra) if isinstance(extra, (list, tuple, set)) else extra
        self._lexicon_arg = list(lexicon) if isinstance(lexicon, (list, tuple, set)) else lexicon
        self.negations = negations
        self.count = count
        self.remove = remove
        self.protect_quotes = protect_quotes
        self.custom_lexicon = lexicon is not None
        self.n_extra = 0
        entries = read_lexicon(lexicon)
        if extra is not None:
            more = read_lexicon(extra)
            self.n_extra = len(more)
            entries = entries + more
        if not entries:
            raise ValueError("HedgeRemover: the hedge lexicon is empty")
        seen = {}
        for e in entries:
            negated = e.startswith("!")
            phrase = e[1:].strip() if negated else e
            if not phrase:
                continue
            key = _normal_key(phrase)
            apostrophes = phrase.count("'") + phrase.count("’")
            if key in seen and seen[key][0].count("'") + seen[key][0].count("’") > apostrophes:
                phrase = seen[key][0]  # keep the spelling with apostrophes: it matches both forms
            seen[key] = (phrase, negated)  # later entries (the user's) override the negation flag
        self.entries: List[Tuple[str, bool]] = sorted(seen.values(), key=lambda pn: (-len(_normal_key(pn[0])), pn[0]))
        alternatives = "|".join(_entry_pattern(p) for p, _ in self.entries)
        self._regex = re.compile(rf"(?<![\w'’])(?:{alternatives})(?![\w'’])", re.IGNORECASE | re.UNICODE)
        self._negated = {_normal_key(p) for p, n in self.entries if n}

    # ------------------------------------------------------------------ core
    def _spans(self, text: str) -> List[Tuple[int, int, bool]]:
        """(start, end, negated?) of every hedge in ``text`` outside protected quotes."""
        protected = []
        if self.protect_quotes:
            protected = [m.span() for m in re.finditer(r"\"[^\"\n]*\"|“[^”\n]*”", text)]
        spans = []
        for m in self._regex.finditer(text):
            if any(a <= m.start() < b for a, b in protected):
                continue
            spans.append((m.start(), m.end(), _normal_key(m.group(0)) in self._negated))
        return spans

    def find(self, text: str) -> List[str]:
        """The hedge phrases found in ``text``, in order (negated-belief ones included)."""
        return [text[a:b] for a, b, _ in self._spans(str(text))]

    def count_hedges(self, text: str) -> int:
        return len(self._spans(str(text)))

    def clean(self, text: str) -> str:
        """``text`` without its hedges, punctuation and spacing tidied."""
        text = str(text)
        spans = self._spans(text)
        if not spans:
            return text
        out, pos = [], 0
        for a, b, negated in spans:
            out.append(text[pos:a])
            if negated and self.negations == "keep":
                out.append(text[a:b])
            elif negated and self.negations == "not":
                out.append(" not ")
            else:
                out.append(_GAP)
            pos = b
        out.append(text[pos:])
        return _tidy("".join(out))

    # ------------------------------------------------------------------ transformer
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        check_query_frame(inp, repr(self))
        out = pt.model.push_queries(inp, keep_original=True)
        originals = out["query_0"]
        if self.remove:
            cleaned = [self.clean(q) for q in originals]
            # never hand an empty query downstream: a query made only of hedges keeps its original text
            out["query"] = [c if c.strip() else q for c, q in zip(cleaned, originals)]
        if self.count:
            counts = np.array([self.count_hedges(q) for q in originals], dtype=int)
            words = np.array([len(_WORDS.findall(q)) for q in originals], dtype=float)
            out["hedge_count"] = counts
            out["hedge_density"] = np.where(words > 0, 100.0 * counts / np.maximum(words, 1.0), 0.0)
        return out

    def __repr__(self):
        return code_repr(self, [], {"extra": self._extra_arg, "lexicon": self._lexicon_arg,
                                    "negations": self.negations, "count": self.count, "remove": self.remove,
                                    "protect_quotes": self.protect_quotes})


def hedge_statistics(queries: Iterable[str], remover: Optional[HedgeRemover] = None) -> dict:
    """Hedge counts of ``queries``: mean/median/max and the buckets 0, 1-2, 3-5, 6-11, 12+ (paper's analysis)."""
    remover = remover or HedgeRemover()
    counts = np.array([remover.count_hedges(q) for q in queries], dtype=int)
    if len(counts) == 0:
        return {"n": 0}
    buckets = {"0": (0, 0), "1-2": (1, 2), "3-5": (3, 5), "6-11": (6, 11), "12+": (12, 10**9)}
    return {
        "n": int(len(counts)),
        "mean": round(float(counts.mean()), 3),
        "median": float(np.median(counts)),
        "max": int(counts.max()),
        "share_with_hedge": round(float((counts > 0).mean()), 4),
        "buckets": {k: int(((counts >= lo) & (counts <= hi)).sum()) for k, (lo, hi) in buckets.items()},
    }
