"""The date expert: a symbolic scorer comparing a book's publication year with the clue's latest possible year.

    from pyterrier_tot.decomposition.date_expert import DateExpert
    candidates >> DateExpert(index)                 # hard: 1 if year <= clue_year else 0
    candidates >> DateExpert(index, soft=True)      # soft: exp(-(year - clue_year) / tau) after clue_year

Truth table (``neutral`` defaults to 1.0, i.e. "cannot rule the book out", as the paper gives books without a
date the earliest date in the collection):

==============================  ========  ===================================
book year vs ``clue_year``      hard      soft (tau = 5)
==============================  ========  ===================================
year <= clue_year               1.0       1.0
year >  clue_year               0.0       exp(-(year - clue_year) / tau)
year unknown                    neutral   neutral
clue_year N/A                   neutral   neutral
==============================  ========  ===================================

Scorer mode only: the input is a result frame (``qid``, ``docno``, ``clue_year``); book years come from a
``year`` column of the input when present, else from the ``BookIndex`` corpus (without an index the ``year``
column is a declared input). Missing columns raise ``pt.validate.InputValidationError``, which here is also a
``ValueError``. ``clue_year`` may be an int, a float, a numeric string or a date string ("around 2005"), parsed
with ``pyterrier_tot.datasets.books.parse_year``.
A docno the index does not hold is not a book with an unknown year: it raises ``UnknownDocnoError`` (or scores
NaN with ``unknown_docnos="nan"``).

A corpus without years (Reddit-TOMT: title and text only) makes every score neutral, so the expert ranks
nothing: the first call on such an index warns (:class:`NoDatesWarning`, once per expert), and
:func:`corpus_has_dates` / :meth:`DateExpert.acts` tell beforehand, so a recipe can leave the expert out::

    experts = {...}
    if corpus_has_dates(index):          # or DateExpert.acts(index)
        experts["date"] = DateExpert(index)
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import SettingsEquality, code_repr, keyword_settings
from pyterrier_tot._plumbing.util import ColumnsValueError, empty_scored, explain_columns, is_missing
from pyterrier_tot.checks import (
    CheckedIndex,
    add_ranks,
    check_number,
    check_result_frame,
    check_unknown_docnos_arg,
    index_of,
    unknown_docnos,
)
from pyterrier_tot.datasets.books import parse_year
from pyterrier_tot.decomposition.clues import YEAR_COLUMN

#: Score when the book year or the clue year is unknown.
DATE_NEUTRAL = 1.0
#: How many documents of a streamed corpus (too large to hold) :func:`corpus_has_dates` reads.
STREAMED_SAMPLE = 1000


class NoDatesWarning(UserWarning):
    """The date expert runs on a corpus whose books carry no year: every score is neutral."""


def _years(values: pd.Series) -> pd.Series:
    return values.map(lambda v: np.nan if is_missing(v) else (parse_year(v) or np.nan)).astype(float)


def corpus_has_dates(index) -> bool:
    """Whether any book of ``index`` (a :class:`~pyterrier_tot.index.BookIndex`) has a publication year, i.e.
    whether a :class:`DateExpert` over it can score anything but the neutral value. Reads the ``year`` column of
    an in-memory corpus (milliseconds for thousands of books); a streamed corpus is judged on its first
    :data:`STREAMED_SAMPLE` documents. Reddit-TOMT: False; Goodreads / WhatsThatBook books with years: True.
    A :class:`~pyterrier_tot.checks.CheckedIndex` answers from what its entry learnt (and learns it once)."""
    if isinstance(index, CheckedIndex):
        if index.has_dates is None:
            index.has_dates = _has_dates(index.index)
        return index.has_dates
    return _has_dates(index_of(index, "corpus_has_dates"))


def _has_dates(index) -> bool:
    if getattr(index, "streamed", False):
        store = getattr(index, "_store", None)
        if store is None:
            return True  # cannot tell: let the expert run
        rows = store.iter_rows()
        try:
            return any(parse_year(r.get("year")) is not None for r in itertools.islice(rows, STREAMED_SAMPLE))
        finally:
            rows.close()
    corpus = index.corpus
    return "year" in corpus.columns and bool(_years(corpus["year"]).notna().any())


class DateExpert(SettingsEquality, pt.Transformer):
    """Scores candidates 1 when the book is not newer than the clue's latest possible year (see module docs)."""

    @keyword_settings
    def __init__(self, index=None, *, soft: bool = False, tau: float = 5.0, neutral: float = DATE_NEUTRAL,
                 clue: str = YEAR_COLUMN, year_column: str = "year", unknown_docnos: str = "raise"):
        check_number(tau, "tau", "DateExpert", low=0, low_open=True)
        check_number(neutral, "neutral", "DateExpert")
        # an entry that learnt the corpus has years spares the check before the first scoring
        learnt = isinstance(index, CheckedIndex) and bool(index.has_dates)
        self.index = None if index is None else index_of(index, "DateExpert")
        self.soft = soft
        self.tau = float(tau)
        self.neutral = float(neutral)
        self.clue = clue
        self.year_column = year_column
        # a docno the index does not hold has no year; scoring it neutral would make a score up
        self.unknown_docnos = check_unknown_docnos_arg(unknown_docnos)
        self._book_years = None
        self._dates_checked = learnt

    @staticmethod
    def acts(index) -> bool:
        """Whether a date expert over ``index`` can score anything but ``neutral``: False when no book there has
        a year (:func:`corpus_has_dates`). ``DateExpert.acts(index)``; ``None`` (years from the input's ``year``
        column, which cannot be judged beforehand) gives True."""
        return True if index is None else corpus_has_dates(index)

    def _warn_without_dates(self) -> None:
        if self._dates_checked:
            return
        self._dates_checked = True
        if not corpus_has_dates(self.index):
            warnings.warn(f"{self!r}: no book of {self.index!r} has a publication year, so every candidate scores "
                          f"the neutral {self.neutral:g} and this expert ranks nothing; leave it out on this corpus "
                          "(check with corpus_has_dates(index) or DateExpert.acts(index))", NoDatesWarning,
                          stacklevel=3)

    def book_years(self) -> pd.Series:
        if self._book_years is None:
            if self.index is None:
                raise ValueError(f"{self!r}: the input has no {self.year_column!r} column and no BookIndex was given")
            corpus = self.index.corpus
            self._book_years = pd.Series(_years(corpus["year"]).to_numpy(), index=corpus["docno"].astype(str).values)
        return self._book_years

    def score_years(self, book_year: np.ndarray, clue_year: np.ndarray) -> np.ndarray:
        """Vectorised scores for arrays of book years and clue years (NaN = unknown)."""
        book_year = np.asarray(book_year, dtype=float)
        clue_year = np.asarray(clue_year, dtype=float)
        gap = book_year - clue_year
        with np.errstate(invalid="ignore", over="ignore"):
            after = np.exp(-np.clip(gap, 0, None) / self.tau) if self.soft else np.zeros_like(gap)
            score = np.where(gap <= 0, 1.0, after)
        return np.where(np.isnan(gap), self.neutral, score)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # without an index the books' years can only come from the frame, so the column is part of the declaration
        needs = [self.clue] if self.index is not None else [self.clue, self.year_column]
        if "docno" not in inp.columns:
            hint = f"is a scorer: give it a result frame (qid, docno, {self.clue}), e.g. retriever >> DateExpert(index)"
        elif self.index is None and self.clue in inp.columns:
            hint = f"the input has no {self.year_column!r} column and no BookIndex was given"
        else:
            hint = f"needs a result frame with the column(s) {needs}"
        with explain_columns(repr(self), hint, ColumnsValueError):
            pta.validate.result_frame(inp, extra_columns=needs)
        if len(inp) == 0:
            return empty_scored(inp)
        check_result_frame(inp, repr(self))
        out = inp.copy()
        unknown = np.zeros(len(out), dtype=bool)
        if self.year_column not in out.columns:
            self._warn_without_dates()  # the years come from the index
        if self.year_column in out.columns:
            years = _years(out[self.year_column]).to_numpy()
        elif getattr(self.index, "streamed", False):
            # a streamed corpus is not held in memory: read the years of these candidates only
            unknown = unknown_docnos(out, self.index.docnos, repr(self), self.unknown_docnos)
            known = out.loc[~unknown, "docno"].astype(str).unique()
            books = self.index.books_of(known) if len(known) else pd.DataFrame(columns=["docno", "year"])
            lookup = pd.Series(_years(books["year"]).to_numpy(), index=books["docno"].astype(str).values)
            years = lookup.reindex(out["docno"].astype(str).values).to_numpy()
        else:
            unknown = unknown_docnos(out, self.book_years().index, repr(self), self.unknown_docnos)
            years = self.book_years().reindex(out["docno"].astype(str).values).to_numpy()
        clue_years = _years(out[self.clue]).to_numpy()
        out["score"] = np.where(unknown, np.nan, self.score_years(years, clue_years))
        return add_ranks(out)

    def settings(self) -> dict:
        """What changes its scores (the cache key of fits over them, :mod:`pyterrier_tot._plumbing.cache_key`)."""
        return {"soft": self.soft, "tau": self.tau if self.soft else None, "neutral": self.neutral,
                "clue": self.clue, "year_column": self.year_column}

    def __repr__(self):
        return code_repr(self, [self.index] if self.index is not None else [], {
            "soft": self.soft, "tau": self.tau if self.soft else 5.0, "neutral": self.neutral, "clue": self.clue,
            "year_column": self.year_column, "unknown_docnos": self.unknown_docnos})

    def _legacy_repr(self):
        """The repr that keyed fitted weights before settings did (``recipe.weights._legacy_repr``)."""
        kind = f"soft, tau={self.tau:g}" if self.soft else "hard"
        unknown = "" if self.unknown_docnos == "raise" else f", unknown_docnos={self.unknown_docnos!r}"
        return f"DateExpert({kind}, neutral={self.neutral:g}{unknown})"
