"""Resolve date mentions in a ToT query to the latest possible publication year of the book.

A person who read a book "in the late 90s" or "15 years ago" tells us the book existed by then: the
latest possible publication year is the upper end of the earliest such mention. Years before 1900 are
ignored (usually a story's setting, not a reading date).
"""
from __future__ import annotations

import datetime as _dt
import re
from typing import List, Optional, Tuple

_WORDNUM = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40,
            "a few": 3, "several": 5, "a couple of": 2, "a couple": 2}
_DECADE = r"(?:(?P<c>19|20)?(?P<d>[0-9])0'?s)"
_MOD = r"(?P<mod>early|mid|middle|late)?[\s-]*"
_PATTERNS = [
    ("range", re.compile(r"(?<!\d)(?P<a>(?:19|20)\d\d)\s*(?:-|–|to|and)\s*(?P<b>(?:19|20)?\d\d)(?!\d)", re.I)),
    ("decade", re.compile(r"\b" + _MOD + r"(?<![\d])" + _DECADE + r"(?![\w])", re.I)),
    ("ago", re.compile(r"\b(?P<n>\d{1,2}|" + "|".join(sorted(_WORDNUM, key=len, reverse=True))
                       + r")\+?\s+(?:or so\s+)?years?\s+ago\b", re.I)),
    ("before", re.compile(r"\b(?:before|pre|prior to|no later than|by)\s+(?P<y>(?:19|20)\d\d)\b", re.I)),
    ("year", re.compile(r"(?<![\d$#])(?P<y>(?:19|20)\d\d)(?!\d|s\b|'s)")),
]


def _decade_upper(century: Optional[str], digit: str, mod: Optional[str]) -> int:
    d = int(digit)
    start = int(century) * 100 + d * 10 if century else (1900 + d * 10 if d >= 3 else 2000 + d * 10)
    mod = (mod or "").lower()
    return start + {"early": 3, "mid": 6, "middle": 6, "late": 9}.get(mod, 9)


def date_mentions(text: str, reference_year: Optional[int] = None) -> List[Tuple[int, int, str]]:
    """All date mentions as (position, latest possible year, matched text), in text order."""
    ref = reference_year or _dt.date.today().year
    found, taken = [], []
    for kind, pat in _PATTERNS:
        for m in pat.finditer(text or ""):
            if any(s <= m.start() < e for s, e in taken):
                continue
            if kind == "range":
                b = m.group("b")
                year = int(b) if len(b) == 4 else int(m.group("a")[:2] + b)
            elif kind == "decade":
                year = _decade_upper(m.group("c"), m.group("d"), m.group("mod"))
            elif kind == "ago":
                n = m.group("n").lower()
                year = ref - (int(n) if n.isdigit() else _WORDNUM[n])
            else:
                year = int(m.group("y"))
            if 1900 <= year <= ref + 1:
                found.append((m.start(), min(year, ref), m.group(0).strip()))
                taken.append((m.start(), m.end()))
    return sorted(found)


def latest_possible_year(text: str, reference_year: Optional[int] = None) -> Optional[int]:
    """The latest possible publication year implied by ``text`` (None when it mentions no usable date)."""
    mentions = date_mentions(text, reference_year)
    return min(y for _, y, _ in mentions) if mentions else None
