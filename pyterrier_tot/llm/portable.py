"""Copies of an :class:`~pyterrier_tot.llm.client.LLM` for other processes (``.parallel`` with joblib or Ray): what
a pickled LLM carries and how the copy is made whole again.

A copy makes its own HTTP client and locks, and its cache (:class:`~pyterrier_tot.llm.cache.LLMCache`) reopens the
same file on the machine it runs on: processes on one machine share their answers, each machine of a cluster has
its own. The API key travels only when it was passed as ``api_key=``; a key from the environment is read from the
copy's environment, so it is never written into the pickle.
"""
from __future__ import annotations

import os
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict

from pyterrier_tot.errors import LLMConfigurationError

__all__ = ["llm_state", "restore_llm"]

_LOCAL = ("_client", "_openai", "_lock", "_identity_lock")  # made again by the copy


def llm_state(llm, env_key: str) -> Dict[str, Any]:
    """What a pickled ``llm`` carries (``env_key``: the environment variable its API key may come from)."""
    state = {k: v for k, v in llm.__dict__.items() if k not in _LOCAL}
    key = llm._client.api_key
    state["_api_key"] = None if key in (os.environ.get(env_key), "no-key") else key
    try:
        ForkingPickler.dumps(llm.health_check)  # only written here: nothing in the package reads a pickle
    except Exception:  # noqa: BLE001 - a local server's process handle stays with the process that started it
        state["health_check"] = None
    return state


def restore_llm(llm, state: Dict[str, Any], env_key: str) -> None:
    """Make ``llm`` (unpickled, empty) the copy that ``state`` describes."""
    import openai

    key = state.pop("_api_key", None) or os.environ.get(env_key)
    if not key and state.get("base_url") is None:
        raise LLMConfigurationError(f"LLM({state.get('model')!r}): no API key in this process; set ${env_key} where "
                                    "the copy runs (on every node of a cluster)")
    llm.__dict__.update(state)
    llm._identity_lock, llm._lock, llm._openai = threading.Lock(), threading.Lock(), openai
    llm._client = openai.OpenAI(api_key=key or "no-key", base_url=llm.base_url, timeout=llm.timeout, max_retries=0)
