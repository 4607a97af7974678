"""Small shared helpers: paths to shared data, column checks, offline-friendly errors."""
from __future__ import annotations

import contextlib
import functools
import os
import socket
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd
from pyterrier.validate import InputValidationError

from pyterrier_tot.errors import BadInputError

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


#: Environment variables that switch every network access of the library off. ``HF_HUB_OFFLINE`` is the one
#: the Hugging Face stack already honours; ``PYTERRIER_TOT_OFFLINE`` is kept as an alias.
OFFLINE_ENV = ("HF_HUB_OFFLINE", "PYTERRIER_TOT_OFFLINE")


def is_offline() -> bool:
    """The library's one offline switch: true when ``HF_HUB_OFFLINE`` (or ``PYTERRIER_TOT_OFFLINE``) is set to
    anything but ``0``/``false``. Offline, nothing is downloaded and no host is probed."""
    return any(os.environ.get(v, "0").strip().lower() not in ("", "0", "false", "no", "off") for v in OFFLINE_ENV)


@functools.lru_cache(maxsize=16)
def _reachable(host: str, timeout: float) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def online(host: str, timeout: float = 3.0) -> bool:
    """The library's one network check: not offline (see :func:`is_offline`) and ``host`` answers on port 443
    within ``timeout`` seconds (remembered per host for the process)."""
    return not is_offline() and _reachable(host, timeout)


def hub_reachable() -> bool:
    """Whether the Hugging Face hub can be used (models, data sets, CLIP weights)."""
    return online("huggingface.co")


def empty_scored(inp: pd.DataFrame) -> pd.DataFrame:
    """A copy of an empty input frame with ``score`` and ``rank`` columns (what a scorer returns for no rows,
    e.g. when pt.Experiment inspects a pipeline)."""
    out = inp.copy()
    out["score"] = pd.Series(dtype=float)
    out["rank"] = pd.Series(dtype=int)
    return out


class ColumnsValueError(InputValidationError, BadInputError):
    """Missing input columns, raised where the stage used to raise a ``ValueError``: still a
    ``pt.validate.InputValidationError`` (so ``pt.inspect`` reads its modes) and a ``KeyError``, and also a
    :class:`~pyterrier_tot.errors.BadInputError`, so older ``except ValueError`` clauses keep catching it."""


@contextlib.contextmanager
def explain_columns(who, hint: str, error: type = InputValidationError) -> Iterator[None]:
    """Re-raise a ``pt.validate.InputValidationError`` from the block with a message naming the stage ``who``
    and saying what to do (``hint``), keeping its modes: PyTerrier's own message lists columns, not the fix."""
    try:
        yield
    except InputValidationError as ive:
        raise error(f"{who}: {hint}", ive.modes) from None
