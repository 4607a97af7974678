"""The clue vocabulary shared by the decomposer, the rule extractor, the field experts and the cover ranker.

A clue frame is a query frame with one column per field, ``clue_<field>``; a value that is ``None`` (or empty)
means N/A: the query says nothing usable about that field. ``clue_year`` holds the latest possible publication
year as an integer (``pandas.NA`` when unknown). Pandas operations bring other spellings of N/A in (an outer
merge or a ``reindex`` writes NaN, a pandas 3 string column holds NaN, a JSON cache gives ""):
:func:`clues_na_as_none` puts the one documented N/A back.
"""
from __future__ import annotations

import pandas as pd

#: Fields a ToT book query is decomposed into, in a fixed order.
CLUE_FIELDS = ("title", "author", "date", "cover", "genre", "plot")

#: Name of the column holding a field's clue.
def clue_column(field: str) -> str:
    if field not in CLUE_FIELDS:
        raise ValueError(f"unknown clue field {field!r}; expected one of {CLUE_FIELDS}")
    return f"clue_{field}"

CLUE_COLUMNS = tuple(clue_column(f) for f in CLUE_FIELDS)

#: Integer "latest possible publication year" resolved from the date clue.
YEAR_COLUMN = "clue_year"

#: Which book field each clue is matched against by default (see pyterrier_tot.datasets.books).
FIELD_FOR_CLUE = {
    "title": "title",
    "author": "author",
    "genre": "genres",
    "plot": "text",
    "cover": "cover",
    "date": "year",
}


def _na(value) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def clues_na_as_none(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with one N/A per clue column: ``None`` in each ``clue_<field>`` column present (object dtype; NaN,
    ``pandas.NA`` and blank text become ``None``) and ``pandas.NA`` in an integer ``clue_year`` (``Int64``; a
    ``clue_year`` holding date text keeps it, with ``None`` for N/A). Other columns and clue text are unchanged;
    ``df`` is not modified."""
    out = df
    for col in [c for c in CLUE_COLUMNS if c in df.columns]:
        values = df[col]
        na = values.map(_na).to_numpy(dtype=bool)
        if values.dtype == object and not any(values[na].map(lambda v: v is not None)):
            continue  # already object with None as its only N/A
        out = df.copy() if out is df else out
        out[col] = pd.Series([None if m else v for v, m in zip(values.tolist(), na)], index=df.index, dtype=object)
    if YEAR_COLUMN in df.columns and str(df[YEAR_COLUMN].dtype) != "Int64":
        values = df[YEAR_COLUMN]
        na = values.map(_na).to_numpy(dtype=bool)
        rest = values[~na]
        out = df.copy() if out is df else out
        numeric = pd.to_numeric(rest, errors="coerce")
        if numeric.notna().all() and (numeric == numeric.round()).all():
            out[YEAR_COLUMN] = pd.array([pd.NA if m else int(v) for v, m in
                                         zip(pd.to_numeric(values.where(~na), errors="coerce"), na)], dtype="Int64")
        else:
            out[YEAR_COLUMN] = pd.Series([None if m else v for v, m in zip(values.tolist(), na)], index=df.index,
                                         dtype=object)
    return out
