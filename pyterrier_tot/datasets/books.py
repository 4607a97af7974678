"""The book data model shared by every loader and stage.

A book is a ``docno`` plus named fields. Missing fields take documented defaults:

========== ================================ ==================
field      meaning                          default
========== ================================ ==================
title      book title                       ``""``
author     author name(s), comma separated  ``""``
text       description / blurb / plot       ``""``
genres     genre tags, comma separated      ``""``
year       first publication year (int)     ``None`` (unknown)
cover      cover image path or URL          ``""`` (no cover)
url        where the record comes from      ``""``
========== ================================ ==================
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Iterable, Iterator, List, Optional

import pandas as pd

BOOK_FIELDS = ("title", "author", "text", "genres", "year", "cover", "url")
TEXT_FIELDS = ("title", "author", "text", "genres")

_YEAR_RE = re.compile(r"(?<!\d)(1[0-9]{3}|20[0-9]{2})(?!\d)")


def parse_year(value: Any) -> Optional[int]:
    """A four-digit year from an int, a float, a date string ("March 3, 1999", "1999-03-03", "c. 1850")
    or ``None``. Returns ``None`` when no plausible year (1000-2099) is found."""
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int,)):
        return value if 1000 <= value <= 2099 else None
    if isinstance(value, float):
        if value != value:  # NaN
            return None
        return parse_year(int(value))
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    m = _YEAR_RE.search(str(value))
    return int(m.group(1)) if m else None


def _join(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple, set)):
        return ", ".join(str(v).strip() for v in value if v is not None and str(v).strip())
    try:
        if pd.isna(value):
            return ""
    except (TypeError, ValueError):
        pass
    return str(value).strip()


@dataclass
class Book:
    docno: str
    title: str = ""
    author: str = ""
    text: str = ""
    genres: str = ""
    year: Optional[int] = None
    cover: str = ""
    url: str = ""

    def __post_init__(self):
        if self.docno is None or str(self.docno).strip() == "":
            raise ValueError("a book needs a non-empty docno")
        self.docno = str(self.docno)
        for name in ("title", "author", "text", "genres", "cover", "url"):
            setattr(self, name, _join(getattr(self, name)))
        self.year = parse_year(self.year)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Book":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def books_to_frame(books: Iterable[Book]) -> pd.DataFrame:
    """A DataFrame with one row per book and the columns ``docno`` + ``BOOK_FIELDS`` (year as Int64)."""
    rows = [b.to_dict() for b in books]
    df = pd.DataFrame(rows, columns=["docno", *BOOK_FIELDS])
    df["year"] = df["year"].astype("Int64")
    return df


def book_iter(books: Iterable[Book], fields: Optional[List[str]] = None) -> Iterator[Dict[str, Any]]:
    """PyTerrier corpus iterator (dicts with ``docno`` and the book fields)."""
    for b in books:
        d = b.to_dict()
        if fields is not None:
            d = {k: d[k] for k in ["docno", *fields]}
        yield d
