"""Persistent LLM response cache: one sqlite file, one row per distinct request, written as each answer arrives.

The key is a SHA-256 of the model name, the full message list, the sampling parameters and the prompt version,
so changing any of them asks again, and repeating an experiment (or resuming a killed run) asks nothing already
answered. Only successful answers are stored; failures are retried next time. API keys are never part of the
key or the row.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union


def request_key(model: str, messages: List[Dict[str, str]], params: Dict[str, Any],
                prompt_version: Optional[str] = None) -> str:
    """The cache key of one chat request."""
    payload = json.dumps({"model": model, "messages": messages, "params": params, "prompt_version": prompt_version},
                         sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf8")).hexdigest()


class LLMCache:
    """A thread-safe sqlite key → answer store (``get`` / ``put``); ``len(cache)`` counts stored answers."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, "
                               "answer TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER, "
                               "created REAL)")
            self._conn.commit()

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            row = self._conn.execute("SELECT answer, prompt_tokens, completion_tokens FROM answers WHERE key=?",
                                     (key,)).fetchone()
        if row is None:
            return None
        return {"answer": row[0], "prompt_tokens": row[1] or 0, "completion_tokens": row[2] or 0}

    def put(self, key: str, model: str, answer: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)",
                               (key, model, answer, int(prompt_tokens or 0), int(completion_tokens or 0), time.time()))
            self._conn.commit()  # written as it arrives: a killed run keeps every answer it got

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def clear(self) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM answers")
            self._conn.commit()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self):
        return f"LLMCache({str(self.path)!r})"
