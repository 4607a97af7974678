"""Persistent LLM response cache: one sqlite file, one row per distinct request, written as each answer arrives.

The key is a SHA-256 of the model's identity (which model answers, see :mod:`pyterrier_tot.llm.identity`), the
full message list, the sampling parameters and the prompt version, so changing any of them asks again, and
repeating an experiment (or resuming a killed run) asks nothing already answered. Only successful answers are
stored; failures are retried next time. API keys are never part of the key or the row. A second table remembers
the identity last found for each model name and address (used when that server cannot be asked).

Several processes may share one file (parallel runs of an experiment): the file is in WAL mode, each answer is
one auto-committed statement, and a writer that finds the database locked waits (sqlite's busy timeout, then
retries with back-off for up to ``busy_seconds``) instead of failing with "database is locked".
"""
from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

T = TypeVar("T")


def request_key(model: str, messages: List[Dict[str, str]], params: Dict[str, Any],
                prompt_version: Optional[str] = None) -> str:
    """The cache key of one chat request."""
    payload = json.dumps({"model": model, "messages": messages, "params": params, "prompt_version": prompt_version},
                         sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf8")).hexdigest()


class LLMCache:
    """A thread-safe sqlite key → answer store (``get`` / ``put``); ``len(cache)`` counts stored answers."""

    def __init__(self, path: Union[str, Path], busy_seconds: float = 120.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_seconds = float(busy_seconds)
        self._lock = threading.Lock()
        # autocommit: every put is one atomic statement, so no transaction is ever left open between calls
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10, isolation_level=None)
        self._locked(self._setup)

    def _setup(self) -> None:
        # switching to WAL needs an exclusive lock that sqlite does not wait for; the mode is stored in the file,
        # so only the first opener switches
        if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, "
                           "answer TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)")
        # the identity last resolved for a model name at an address, for when that server cannot be asked
        self._conn.execute("CREATE TABLE IF NOT EXISTS identities (address TEXT PRIMARY KEY, identity TEXT, seen REAL)")

    def _locked(self, fn: Callable[[], T]) -> T:
        """``fn()`` under the thread lock, retried while another process holds the database."""
        deadline, delay = time.monotonic() + self.busy_seconds, 0.01
        while True:
            try:
                with self._lock:
                    return fn()
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(2 * delay, 0.5)

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        row = self._locked(lambda: self._conn.execute(
            "SELECT answer, prompt_tokens, completion_tokens FROM answers WHERE key=?", (key,)).fetchone())
        if row is None:
            return None
        return {"answer": row[0], "prompt_tokens": row[1] or 0, "completion_tokens": row[2] or 0}

    def put(self, key: str, model: str, answer: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        row = (key, model, answer, int(prompt_tokens or 0), int(completion_tokens or 0), time.time())
        # committed as it arrives: a killed run keeps every answer it got
        self._locked(lambda: self._conn.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)", row))

    def remember_identity(self, address: str, identity: str) -> None:
        row = (address, identity, time.time())
        self._locked(lambda: self._conn.execute("INSERT OR REPLACE INTO identities VALUES (?, ?, ?)", row))

    def last_identity(self, address: str) -> Optional[str]:
        row = self._locked(lambda: self._conn.execute(
            "SELECT identity FROM identities WHERE address=?", (address,)).fetchone())
        return row[0] if row else None

    def __len__(self) -> int:
        return int(self._locked(lambda: self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0]))

    def clear(self) -> None:
        self._locked(lambda: self._conn.execute("DELETE FROM answers"))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __getstate__(self) -> Dict[str, Any]:
        # a copy sent to another process (.parallel, a Ray worker) opens the same file there: one cache per
        # machine, shared by the processes on it
        return {"path": str(self.path), "busy_seconds": self.busy_seconds}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], state["busy_seconds"])

    def __repr__(self):
        return f"LLMCache({str(self.path)!r})"
