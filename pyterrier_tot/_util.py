"""Small shared helpers: paths to shared data, column checks, offline-friendly errors."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

#: Environment variable naming the folder that holds the shared evaluation data.
DATA_ENV = "PYTERRIER_TOT_DATA"


def shared_data_dir() -> Path:
    """Folder of the shared evaluation data.

    ``$PYTERRIER_TOT_DATA`` when set, else ``../shared/data`` relative to the current directory or to the
    checkout this package lives in.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent
    for base in (Path.cwd(), here):
        cand = base.parent / "shared" / "data"
        if cand.is_dir():
            return cand
    return here.parent / "shared" / "data"


def cache_dir() -> Path:
    """Where indexes and caches built by the library live (``$PYTERRIER_TOT_CACHE`` or ``~/.cache/pyterrier_tot``)."""
    env = os.environ.get("PYTERRIER_TOT_CACHE")
    path = Path(env) if env else Path.home() / ".cache" / "pyterrier_tot"
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_columns(df: pd.DataFrame, columns: Iterable[str], who: str) -> None:
    """Raise a ``KeyError`` naming ``who`` and every missing column."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"{who} needs input column(s) {missing}; got columns {list(df.columns)}")


def check_queries(df: pd.DataFrame, who: str, column: str = "query") -> None:
    """Reject empty or missing query text with a message that names the offending qids."""
    require_columns(df, ["qid", column], who)
    bad = df[df[column].isna() | (df[column].astype(str).str.strip() == "")]
    if len(bad):
        raise ValueError(f"{who}: empty {column!r} for qid(s) {bad['qid'].astype(str).tolist()[:10]}")


def is_missing(value) -> bool:
    """True for None, NaN, pandas NA and blank strings (the library's N/A)."""
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip() == "" or value.strip().upper() in {"N/A", "NA", "NONE", "NULL"}
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")


def empty_scored(inp: pd.DataFrame) -> pd.DataFrame:
    """A copy of an empty input frame with ``score`` and ``rank`` columns (what a scorer returns for no rows,
    e.g. when pt.Experiment inspects a pipeline)."""
    out = inp.copy()
    out["score"] = pd.Series(dtype=float)
    out["rank"] = pd.Series(dtype=int)
    return out
