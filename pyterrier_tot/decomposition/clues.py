"""The clue vocabulary shared by the decomposer, the rule extractor, the field experts and the cover ranker.

A clue frame is a query frame with one column per field, ``clue_<field>``; a value that is ``None`` (or empty)
means N/A: the query says nothing usable about that field. ``clue_year`` holds the latest possible publication
year as an integer (``pandas.NA`` when unknown).
"""
from __future__ import annotations

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
