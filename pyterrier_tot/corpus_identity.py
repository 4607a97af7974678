"""A corpus's identity (its fingerprint): what makes two corpora the same for the indexes, vectors and fitted
weights kept for them."""
from __future__ import annotations

import hashlib

import pandas as pd

from pyterrier_tot.datasets.books import BOOK_FIELDS, parse_year

#: Book fields besides title and text that experts read (the url is a link, never scored): part of a corpus's
#: fingerprint wherever a corpus fills any of them.
EXTRA_FIELDS = tuple(f for f in BOOK_FIELDS if f not in ("title", "text", "url"))


def cell(value, field: str = "") -> str:
    """One book field as the fingerprint reads it: missing as "", a year as its four digits."""
    if field == "year":  # 1996, 1996.0 and "1996" are one year
        value = parse_year(value)
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)


def frame_fingerprint(corpus: pd.DataFrame, legacy: bool = False) -> str:
    """The corpus's identity: its docnos, titles and texts, and the other book fields experts read (author, genres,
    year, cover) where any book has one, so a loader that fixes an author or a year makes another corpus (its
    indexes and fitted weights are not reused). A corpus of titles and texts alone keeps the fingerprint it always
    had; ``legacy``: the fingerprint of titles and texts alone (what folders built before the other fields counted
    recorded)."""
    digest = hashlib.sha1(
        "\n".join(corpus["docno"]).encode() + str(len(corpus)).encode()
        + hashlib.sha1(pd.util.hash_pandas_object(corpus[["title", "text"]], index=False).values.tobytes()).digest())
    extra = pd.DataFrame({f: [cell(v, f) for v in corpus[f]] for f in EXTRA_FIELDS if f in corpus.columns})
    if not legacy and len(extra.columns) and (extra != "").to_numpy().any():
        digest.update(b"fields:" + ",".join(extra.columns).encode()
                      + pd.util.hash_pandas_object(extra, index=False).values.tobytes())
    return digest.hexdigest()[:16]
