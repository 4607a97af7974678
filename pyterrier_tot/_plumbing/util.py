"""Small shared helpers: paths to shared data, column checks, offline-friendly errors."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, Optional, Union

import pandas as pd
from pyterrier.validate import InputValidationError

from pyterrier_tot.errors import BadInputError, LockTimeoutError

try:
    import fcntl
except ImportError:  # Windows: no flock, so builds there are only atomic, not serialised
    fcntl = None

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
    here = Path(__file__).resolve().parents[2]   # the checkout: pyterrier_tot/_plumbing/util.py
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


def flat_name(part) -> str:
    """``part`` (a dataset name, a model name, settings) as text that stays one folder name: a path separator
    becomes ``-`` (``trec-tot-local/my-books`` → ``trec-tot-local-my-books``)."""
    text = str(part).replace("/", "-").replace("\\", "-")
    if text.strip(".") == "":
        raise ValueError(f"{part!r} cannot name a cache folder")
    return text


def dataset_tag(dataset) -> str:
    """The short name of ``dataset`` (or of a dataset name) in cache folder names, one flat folder: "reddit" for
    Reddit-TOMT (as older runs named it), else the name with each ``/`` as ``-``."""
    name = str(getattr(dataset, "name", dataset))
    return "reddit" if name == "reddit-tomt-books" else flat_name(name)


def cache_folder(*parts, under: str = "models") -> Path:
    """The one function that names a folder of the library's cache: ``cache_dir() / under / name``, ``name`` the
    ``parts`` (a kind, the :func:`dataset_tag`, the settings that make the artifact) joined by ``-``, each made flat
    by :func:`flat_name`, so a dataset or model name with a ``/`` never makes nested folders. ``under``:
    ``models`` (trained models and fits) or ``indexes``."""
    if not parts:
        raise ValueError("cache_folder needs at least one part")
    return cache_dir() / under / "-".join(flat_name(p) for p in parts)


def require_columns(df: pd.DataFrame, columns: Iterable[str], who: str) -> None:
    """Raise a ``KeyError`` naming ``who`` and every missing column."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"{who} needs input column(s) {missing}; got columns {list(df.columns)}")


def check_queries(df: pd.DataFrame, who: str, column: str = "query") -> None:
    """Reject empty or missing query text with a message that names the offending qids."""
    require_columns(df, ["qid", column], who)
    from pyterrier_tot.checks import check_query_text  # the one definition of a bad query (policy imports _util)

    check_query_text(df, who, column)


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


#: Environment variable setting how long (seconds) a build waits for another process building the same folder.
LOCK_TIMEOUT_ENV = "PYTERRIER_TOT_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 3600.0  # building the dense index of a large corpus on CPU can take most of an hour
_held = threading.local()  # lock files this thread holds, so a nested lock of the same file does not deadlock


def lock_timeout(timeout: Optional[float] = None) -> float:
    """``timeout`` when given, else ``$PYTERRIER_TOT_LOCK_TIMEOUT``, else one hour."""
    if timeout is not None:
        return float(timeout)
    env = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    try:
        return float(env) if env else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        raise BadInputError(f"${LOCK_TIMEOUT_ENV} must be a number of seconds, not {env!r}") from None


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def file_lock(path: Union[str, Path], timeout: Optional[float] = None, what: Optional[str] = None) -> Iterator[None]:
    """Hold an exclusive OS lock (``fcntl.flock``) on the file ``path`` for the block, waiting at most ``timeout``
    seconds (see :func:`lock_timeout`) for another holder, then raising :class:`LockTimeoutError` naming ``what``.

    The OS drops the lock when its holder exits or is killed, so a crashed process never blocks the next one. The
    file is left in place: deleting a lock file while another process waits on it would let two processes in.
    Re-entrant within one thread."""
    path = Path(path).absolute()
    held: Dict[Path, int] = _held.__dict__.setdefault("paths", {})
    if fcntl is None or path in held:
        held[path] = held.get(path, 0) + 1
        try:
            yield
        finally:
            held[path] -= 1
            if not held[path]:
                del held[path]
        return
    timeout = lock_timeout(timeout)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline, pause, told = time.monotonic() + timeout, 0.02, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(
                        f"{what or path} is still being built by another process ({_holder(fd)}) after waiting "
                        f"{timeout:g}s; wait for it to finish or raise the timeout (lock_timeout=, "
                        f"${LOCK_TIMEOUT_ENV}). Lock file: {path}") from None
                if not told:
                    logging.getLogger("pyterrier_tot").warning(
                        "waiting for another process (%s) building %s", _holder(fd), what or path)
                    told = True
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
        # who holds it, for the messages of processes waiting on it
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        held[path] = 1
        try:
            yield
        finally:
            del held[path]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def differing(found, want: dict) -> str:
    """What differs between a stored record (``found``: a dict, or anything unreadable) and ``want``, for a rebuild
    warning: the keys whose values differ, a key present on one side only counting as different."""
    if not isinstance(found, dict) or not found:
        return "no readable record of what it holds"
    gone = object()
    keys = sorted(k for k in {**want, **found} if found.get(k, gone) != want.get(k, gone))
    return f"differing: {', '.join(keys)}" if keys else "its settings differ"
