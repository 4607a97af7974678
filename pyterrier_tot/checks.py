"""The bad-input policy, written once: the checks every public stage runs at its entry.

The rules (the per-stage table is ``docs/robustness.rst``; ``tests/conventions/test_bad_inputs.py`` asserts every cell):

- every input qid is in the output, or the call raises an error naming it. The one exception is a retriever
  that finds nothing for a valid query (or a clue expert whose clue is N/A): the qid has no rows, as a ranking
  with nothing in it, and a :class:`~pyterrier_tot.errors.NoResultsWarning` names it (and ``.empty_results``
  counts it) — except for N/A clues, which are documented to yield nothing;
- a score is never made up: a docno the stage must look up and cannot find raises
  :class:`~pyterrier_tot.errors.UnknownDocnoError` naming it, or, where the stage takes
  ``unknown_docnos="nan"``, scores NaN with an :class:`~pyterrier_tot.errors.UnknownDocnoWarning`;
- errors are raised at the stage's entry and name the column, the value or the qid;
- constructor arguments are checked when the stage is built (:func:`check_int`, :func:`check_number`,
  :func:`check_index`, :func:`check_llm`), not when it first runs: a wrong one raises naming the stage,
  the argument and the value.

Query text (checked by every stage that reads it): None, NaN, blank or whitespace-only text raises
:class:`~pyterrier_tot.errors.BadInputError`; a non-string value raises
:class:`~pyterrier_tot.errors.BadInputTypeError` (also a ``TypeError``). Long text, control characters and any
script are accepted (stages cut or tokenise as they document). A query frame with a qid twice raises; a result
frame with a (qid, docno) pair twice raises; a NaN or infinite ``score`` raises in the stages that read it.
"""
from __future__ import annotations

import warnings
from typing import Iterable, List, Optional, Sequence, Set

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot.errors import (
    BadInputError,
    BadInputTypeError,
    NoResultsWarning,
    UnknownDocnoError,
    UnknownDocnoWarning,
)

#: Values of a stage's ``unknown_docnos`` argument.
UNKNOWN_DOCNOS = ("raise", "nan")
_SHOW = 5  # how many offending qids / docnos a message lists


def _first(values: Iterable, n: int = _SHOW) -> list:
    out = []
    for v in values:
        if v not in out:
            out.append(v)
        if len(out) >= n:
            break
    return out


def check_query_text(df: pd.DataFrame, who: str, column: str = "query") -> None:
    """Raise naming the qids whose ``column`` is None, NaN, blank or not a string (every row is checked).

    A value missing (None / NaN) is reported as a missing value of that column, not as an empty query; when
    other rows of the same qid hold the text, the message says so (an outer merge of two rankings lost it,
    see :func:`fill_query_columns`)."""
    if len(df) == 0 or column not in df.columns:
        return
    try:  # one check per distinct (qid, text): result frames repeat the text on every row of a query
        pairs = df[["qid", column]].drop_duplicates()
    except TypeError:  # unhashable values (lists, dicts): check every row
        pairs = df[["qid", column]]
    values = pairs[column]
    missing = values.map(_missing).astype(bool)
    if missing.any():
        qids = pairs.loc[missing, "qid"]
        held = set(pairs.loc[~missing, "qid"])
        partial = [q for q in qids if q in held]
        where = _first(qids.astype(str))
        if partial:
            raise BadInputError(f"{who}: column {column!r} is missing (None/NaN) on some rows of qid(s) "
                                f"{_first(map(str, partial))} while other rows of the same qid hold it: an outer "
                                "merge of rankings lost it (fill it per qid with "
                                "pyterrier_tot.checks.fill_query_columns)")
        raise BadInputError(f"{who}: column {column!r} is missing (None/NaN) for qid(s) {where}")
    blank = values.map(lambda v: isinstance(v, str) and not v.strip()).astype(bool)
    if blank.any():
        raise BadInputError(f"{who}: empty {column!r} for qid(s) {_first(pairs.loc[blank, 'qid'].astype(str))}")
    wrong = ~values.map(lambda v: isinstance(v, str)).astype(bool)
    if wrong.any():
        rows = pairs.loc[wrong]
        raise BadInputTypeError(f"{who}: column {column!r} must hold text; qid(s) {_first(rows['qid'].astype(str))} "
                                f"have {[type(v).__name__ + ' ' + repr(v) for v in _first(rows[column], 3)]}")


def _missing(v) -> bool:
    return v is None or (not isinstance(v, str) and _isna(v))


def query_level_columns(df: pd.DataFrame) -> List[str]:
    """The columns of ``df`` that hold one value per query, not per document: the query and its earlier
    generations (PyTerrier's ``pt.model.query_columns``: ``query``, ``query_0``, ...) and the clue columns
    (``clue_*``), without ``qid``."""
    cols = [c for c in pt.model.query_columns(df, qid=False)]
    return cols + [c for c in df.columns if str(c).startswith("clue_") and c not in cols]


def fill_query_columns(df: pd.DataFrame, source: Optional[pd.DataFrame] = None,
                       columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """``df`` with each missing (None / NaN) value of a query-level column (default
    :func:`query_level_columns`) taken from another row of the same qid, else from ``source`` (a frame with
    ``qid`` and those columns, e.g. the input of the stage). Present values are never changed, and a qid whose
    rows all lack the value (and that ``source`` does not hold) keeps it missing. An outer merge of two rankings
    (PyTerrier's ``+``) leaves a book returned by one side only without the other side's columns; this puts
    the query back on those rows."""
    if len(df) == 0 or "qid" not in df.columns:
        return df
    cols = query_level_columns(df) if columns is None else [c for c in columns if c in df.columns]
    out = df
    for col in cols:
        if col == "qid":
            continue
        try:
            miss = out[col].isna().to_numpy(dtype=bool)
        except (TypeError, ValueError):  # array-valued cells
            continue
        if not miss.any():
            continue
        known = out.loc[~miss, ["qid", col]].drop_duplicates("qid")
        if source is not None and col in source.columns and "qid" in source.columns:
            extra = source.loc[source[col].notna(), ["qid", col]].drop_duplicates("qid")
            known = pd.concat([known, extra[~extra["qid"].isin(known["qid"])]], ignore_index=True)
        if len(known) == 0:
            continue
        lookup = pd.Series(known[col].to_numpy(dtype=object), index=known["qid"].to_numpy())
        if out is df:
            out = df.copy()
        rows = np.flatnonzero(miss)
        fill = pd.Series(out["qid"].to_numpy()[rows]).map(lookup)
        ok = fill.notna().to_numpy()
        if ok.any():
            where, values, at = rows[ok], fill[ok].to_numpy(dtype=object), out.columns.get_loc(col)
            try:
                out.iloc[where, at] = values
            except (TypeError, ValueError):  # a value the column's dtype cannot hold: keep it as it is
                out[col] = out[col].astype(object)
                out.iloc[where, at] = values
    return out


def _isna(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def check_unique_qids(df: pd.DataFrame, who: str) -> None:
    """A query frame holds each qid once: raise naming the qids given twice."""
    if len(df) and df["qid"].duplicated().any():
        dups = _first(df.loc[df["qid"].duplicated(), "qid"].astype(str))
        raise BadInputError(f"{who}: qid(s) {dups} appear more than once in the query frame; give each query "
                            "one row (its results are keyed by qid)")


def check_unique_pairs(df: pd.DataFrame, who: str) -> None:
    """A result frame holds each (qid, docno) once: raise naming the pairs given twice."""
    if len(df) == 0:
        return
    dup = df.duplicated(["qid", "docno"])
    if dup.any():
        pairs = _first(zip(df.loc[dup, "qid"].astype(str), df.loc[dup, "docno"].astype(str)))
        raise BadInputError(f"{who}: (qid, docno) pair(s) {pairs} appear more than once in the result frame")


def check_scores(df: pd.DataFrame, who: str, column: str = "score") -> None:
    """Raise naming the qids with a NaN or infinite ``column`` (for stages that read the incoming score)."""
    if len(df) == 0 or column not in df.columns:
        return
    try:
        values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    except (TypeError, ValueError):
        values = np.full(len(df), np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        rows = df.loc[bad]
        raise BadInputError(f"{who}: column {column!r} is NaN or infinite for qid(s) {_first(rows['qid'].astype(str))}"
                            f" (docno(s) {_first(rows['docno'].astype(str))}); an earlier stage gave no score")


def check_query_frame(df: pd.DataFrame, who: str, column: Optional[str] = "query") -> None:
    """The entry check of a stage reading a query frame: one row per qid, and (when it reads it) usable text."""
    check_unique_qids(df, who)
    if column is not None:
        check_query_text(df, who, column)


def check_result_frame(df: pd.DataFrame, who: str, column: Optional[str] = None, score: bool = False) -> None:
    """The entry check of a stage reading a result frame: each (qid, docno) once, the query text it reads
    (``column``) usable for each qid, and (``score=True``) a finite incoming score."""
    check_unique_pairs(df, who)
    if column is not None and len(df):
        check_query_text(df, who, column)
    if score:
        check_scores(df, who)


def check_int(value, name: str, who: str, minimum: Optional[int] = 1) -> int:
    """``value`` as an int (not a bool, not a string), at least ``minimum``, or a ``ValueError`` naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise BadInputTypeError(f"{who}: {name} must be an integer, not {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{who}: {name} must be >= {minimum}, not {value}")
    return int(value)


def check_number(value, name: str, who: str, low: Optional[float] = None, high: Optional[float] = None,
                 low_open: bool = False) -> float:
    """``value`` as a finite float in [low, high] ((low, high] with ``low_open``), or an error naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadInputTypeError(f"{who}: {name} must be a number, not {type(value).__name__} {value!r}")
    v = float(value)
    if not np.isfinite(v) or (low is not None and (v <= low if low_open else v < low)) or (high is not None
                                                                                           and v > high):
        where = f"{'(' if low_open else '['}{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ValueError(f"{who}: {name} must be a finite number in {where}, not {value!r}")
    return v


def check_index(index, who: str):
    """A book index (a :class:`~pyterrier_tot.index.BookIndex`, or anything with its ``docnos``, ``bm25`` and
    ``dense``), or a ``TypeError`` naming what was given."""
    if not all(hasattr(index, a) for a in ("docnos", "bm25", "dense")):
        raise BadInputTypeError(f"{who}: index must be a ptt.BookIndex (e.g. ptt.BookIndex(dataset)), not "
                                f"{type(index).__name__} {str(index)[:60]!r}")
    return index


class CheckedIndex:
    """A book index checked once where it entered (``tuned_pipeline``, ``decomposition_pipeline``), with what that
    entry learnt about its corpus, handed to the stages built over it so that none checks it again.

    A stage given one takes its ``index`` (:func:`index_of`: no second :func:`check_index`); ``has_dates`` is
    whether a book of the corpus has a year (:func:`~pyterrier_tot.decomposition.date_expert.corpus_has_dates`),
    ``None`` until asked. It is never stored in a stage: stages keep, print and key the index itself."""

    __slots__ = ("index", "has_dates")

    def __init__(self, index, has_dates: Optional[bool] = None):
        self.index = index
        self.has_dates = has_dates

    @classmethod
    def of(cls, index, who: str) -> "CheckedIndex":
        """``index`` checked (:func:`check_index`, naming ``who``), or as it is when an entry before checked it."""
        return index if isinstance(index, CheckedIndex) else cls(check_index(index, who))

    def __repr__(self):
        return f"CheckedIndex({self.index!r}, has_dates={self.has_dates!r})"


def index_of(index, who: str):
    """The book index a stage is built over: a :class:`CheckedIndex`'s (checked where it entered, not again), or
    ``index`` itself after :func:`check_index`."""
    return index.index if isinstance(index, CheckedIndex) else check_index(index, who)


def check_llm(llm, who: str):
    """An LLM client (``ptt.LLM``, ``LlamaServer.llm()``: anything with ``chat`` and ``chat_many``)."""
    if not (callable(getattr(llm, "chat_many", None)) and callable(getattr(llm, "chat", None))):
        raise BadInputTypeError(f"{who}: llm must be a ptt.LLM (e.g. ptt.LLM(model=..., base_url=...) or "
                                f"ptt.LlamaServer().llm()), not {type(llm).__name__} {str(llm)[:60]!r}")
    return llm


def check_unknown_docnos_arg(value: str) -> str:
    if value not in UNKNOWN_DOCNOS:
        raise ValueError(f"unknown_docnos must be one of {UNKNOWN_DOCNOS}, not {value!r}")
    return value


def unknown_docnos(df: pd.DataFrame, known, who: str, policy: str = "raise") -> np.ndarray:
    """The mask of rows whose docno is not in ``known``. ``policy="raise"`` raises
    :class:`UnknownDocnoError` naming them; ``"nan"`` warns (the caller scores those rows NaN)."""
    if len(df) == 0:
        return np.zeros(0, dtype=bool)
    docnos = df["docno"].astype(str)
    mask = ~docnos.isin(known).to_numpy()
    if mask.any():
        bad = _first(docnos[mask])
        if policy == "raise":
            raise UnknownDocnoError(f"{who}: docno(s) not in the corpus: {bad}")
        warnings.warn(f"{who}: docno(s) not in the corpus scored NaN: {bad} ({int(mask.sum())} row(s))",
                      UnknownDocnoWarning, stacklevel=3)
    return mask


def add_ranks(df: pd.DataFrame) -> pd.DataFrame:
    """``pt.model.add_ranks`` that also takes NaN scores (unknown docnos scored on request), ranking them last."""
    scores = df["score"].astype(float)
    if not scores.isna().any():
        return pt.model.add_ranks(df)
    df["score"] = scores.fillna(-np.inf)
    df = pt.model.add_ranks(df)
    df["score"] = scores  # aligned on the index, which add_ranks keeps
    return df


def report_missing_qids(inp: pd.DataFrame, out: pd.DataFrame, who: str, owner=None,
                        expected: Optional[Set[str]] = None) -> Set:
    """Warn (:class:`NoResultsWarning`) naming the qids of ``inp`` (or ``expected``) with no row in ``out``, and
    add their number to ``owner.empty_results``; returns them."""
    want = set(inp["qid"]) if expected is None else set(expected)
    missing = want - set(out["qid"]) if len(out) else want
    if missing:
        if owner is not None:
            owner.empty_results = getattr(owner, "empty_results", 0) + len(missing)
        warnings.warn(f"{who}: no results for {len(missing)} query(ies), e.g. {sorted(map(str, missing))[:_SHOW]}",
                      NoResultsWarning, stacklevel=3)
    return missing


__all__ = ["UNKNOWN_DOCNOS", "CheckedIndex", "index_of", "check_query_text", "query_level_columns",
           "fill_query_columns", "check_unique_qids", "check_unique_pairs", "check_scores", "check_query_frame",
           "check_result_frame", "check_unknown_docnos_arg", "unknown_docnos", "add_ranks", "report_missing_qids"]
