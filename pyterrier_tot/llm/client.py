"""The LLM backend every LLM stage of the library uses: chat completions against any OpenAI-compatible server.

Example::

    from pyterrier_tot.llm.client import LLM
    llm = LLM(model="gpt-4o-mini")                       # OPENAI_API_KEY / OPENAI_BASE_URL from the environment
    llm = LLM(model="local", base_url="http://127.0.0.1:8080/v1")  # llama.cpp, vLLM, Ollama, ...
    answers = llm.chat_many([messages, ...])             # bounded concurrency, retries, cache; None = failed
    llm.usage                                            # calls, cache hits, retries, failures, tokens, seconds

Settings: ``temperature`` (default 0), ``seed``, ``max_tokens``, a per-request ``timeout`` in seconds, up to
``max_retries`` retries with exponential back-off and jitter on timeouts, connection errors, 429, 5xx and
malformed responses (``Retry-After`` is honoured, capped at ``max_backoff``), and ``concurrency`` requests in
flight. Answers go through a persistent :class:`~pyterrier_tot.llm.cache.LLMCache` (default
``$PYTERRIER_TOT_CACHE/llm_cache.sqlite3``; ``cache=False`` turns it off).

A request that still fails after its retries yields ``None`` with a warning and ``usage.failures`` + 1; the
calling stage turns that into N/A. Configuration errors that would fail every request (bad key, unknown model,
a local server process that has died -- ``health_check``, which :meth:`LlamaServer.llm` sets) raise
:class:`LLMConfigurationError` at once. The API key is held in memory only: it is not part of the cache
key, the cache rows, ``repr`` or any message.
"""
from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import pyterrier as pt

from pyterrier_tot._util import cache_dir
from pyterrier_tot.errors import LLMConfigurationError, LLMFailure
from pyterrier_tot.llm.cache import LLMCache, request_key

Messages = List[Dict[str, str]]

#: Environment variables read when the arguments are not given.
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "PYTERRIER_TOT_LLM_MODEL"




@dataclasses.dataclass
class LLMUsage:
    """Counters of one :class:`LLM` (``llm.usage``; ``llm.reset_usage()`` zeroes them).

    ``requests``: answers asked for; ``calls``: HTTP requests actually sent (retries included);
    ``cache_hits``: answers served from the cache; ``retries``; ``failures``: requests given up on;
    ``prompt_tokens`` / ``completion_tokens``: over every answer delivered, cached ones included (so per-query
    costs are comparable between a fresh and a cached run); ``seconds``: wall time inside ``chat``/``chat_many``.
    """
    requests: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> Dict[str, Union[int, float]]:
        return dataclasses.asdict(self)


def _status(exc: BaseException) -> Optional[int]:
    return getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)


def _retry_after(exc: BaseException) -> Optional[float]:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class LLM:
    """An OpenAI-compatible chat model with retries, bounded concurrency, a persistent cache and accounting."""

    def __init__(self, model: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 temperature: float = 0.0, seed: Optional[int] = 0, max_tokens: int = 256, timeout: float = 60.0,
                 max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 20.0, concurrency: int = 4,
                 cache: Union[bool, str, Path, LLMCache] = True, verbose: bool = True,
                 health_check: Optional[Callable[[], Optional[str]]] = None):
        self.model = model or os.environ.get(ENV_MODEL)
        if not self.model:
            raise LLMConfigurationError(f"LLM needs a model name: pass model=... or set ${ENV_MODEL}")
        self.base_url = base_url or os.environ.get(ENV_BASE_URL) or None
        key = api_key or os.environ.get(ENV_API_KEY)
        if not key:
            if self.base_url is None:
                raise LLMConfigurationError(
                    f"no API key: pass api_key=... or set ${ENV_API_KEY}, or give base_url=... of a local "
                    "OpenAI-compatible server (see pyterrier_tot.llm.llama_server.LlamaServer)")
            key = "no-key"  # local servers ignore it, the client insists on one
        self.temperature, self.seed, self.max_tokens = float(temperature), seed, int(max_tokens)
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.concurrency = max(1, int(concurrency))
        self.verbose = verbose
        # called after a connection error: a message means the backend is gone for good (no retries)
        self.health_check = health_check
        if cache is True:
            self.cache: Optional[LLMCache] = LLMCache(cache_dir() / "llm_cache.sqlite3")
        elif cache is False or cache is None:
            self.cache = None
        elif isinstance(cache, LLMCache):
            self.cache = cache
        else:
            self.cache = LLMCache(cache)
        import openai
        self._openai = openai
        # retries are ours (counted, with jitter); the client's own are off
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self._lock = threading.Lock()
        self.usage = LLMUsage()

    # -- accounting -------------------------------------------------------------------------------------------
    def reset_usage(self) -> LLMUsage:
        """Zero the counters, returning the old ones."""
        with self._lock:
            old, self.usage = self.usage, LLMUsage()
        return old

    def _count(self, **inc) -> None:
        with self._lock:
            for k, v in inc.items():
                setattr(self.usage, k, getattr(self.usage, k) + v)

    # -- requests ---------------------------------------------------------------------------------------------
    def params(self, **overrides) -> Dict[str, Any]:
        """The sampling parameters of a request (part of the cache key)."""
        p = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.seed is not None:
            p["seed"] = self.seed
        p.update({k: v for k, v in overrides.items() if v is not None})
        return p

    def _call_once(self, messages: Messages, params: Dict[str, Any]):
        resp = self._client.chat.completions.create(model=self.model, messages=messages, **params)
        choices = getattr(resp, "choices", None)
        if not choices or choices[0].message is None or choices[0].message.content is None:
            raise ValueError("response has no message content")
        usage = getattr(resp, "usage", None)
        return (choices[0].message.content, int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0))

    def _retryable(self, exc: BaseException) -> bool:
        o = self._openai
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError, o.NotFoundError)):
            return False
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError,
                            o.APIResponseValidationError, ValueError, TimeoutError, ConnectionError)):
            return True
        status = _status(exc)
        return status is not None and (status >= 500 or status in (408, 409, 429))

    def chat(self, messages: Messages, prompt_version: Optional[str] = None, **overrides) -> str:
        """One answer (from the cache when known); raises :class:`LLMFailure` after the retries."""
        t0 = time.perf_counter()
        try:
            return self._chat(messages, prompt_version, overrides)
        finally:
            self._count(seconds=time.perf_counter() - t0)

    def _chat(self, messages: Messages, prompt_version: Optional[str], overrides: Dict[str, Any]) -> str:
        params = self.params(**overrides)
        self._count(requests=1)
        key = request_key(self.model, messages, params, prompt_version)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self._count(cache_hits=1, prompt_tokens=hit["prompt_tokens"],
                            completion_tokens=hit["completion_tokens"])
                return hit["answer"]
        last: Optional[BaseException] = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count(retries=1)
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                hinted = _retry_after(last) if last is not None else None
                time.sleep(min(self.max_backoff, max(delay, hinted or 0.0)))
            self._count(calls=1)
            try:
                answer, ptok, ctok = self._call_once(messages, params)
            except Exception as exc:  # noqa: BLE001 - classified below
                if not self._retryable(exc):
                    if isinstance(exc, (self._openai.AuthenticationError, self._openai.PermissionDeniedError,
                                        self._openai.NotFoundError)):
                        raise LLMConfigurationError(
                            f"{self!r}: the server refused the request ({type(exc).__name__}, status "
                            f"{_status(exc)}); check the model name, base_url and API key") from None
                    last = exc
                    break
                if isinstance(exc, self._openai.APIConnectionError) and self.health_check is not None:
                    dead = self.health_check()
                    if dead:
                        raise LLMConfigurationError(f"{self!r}: {dead}") from None
                last = exc
                continue
            self._count(prompt_tokens=ptok, completion_tokens=ctok)
            if self.cache is not None:
                self.cache.put(key, self.model, answer, ptok, ctok)
            return answer
        raise LLMFailure(f"{type(last).__name__}: {str(last)[:200]}")

    def chat_many(self, requests: Sequence[Messages], prompt_version: Union[None, str, Sequence[str]] = None,
                  desc: str = "LLM", **overrides) -> List[Optional[str]]:
        """Answers for many message lists, ``concurrency`` in flight, in input order. A request that fails
        after its retries gives ``None``, a warning and ``usage.failures`` + 1; it never raises for one.
        ``prompt_version`` is one string for all requests or one per request."""
        t0 = time.perf_counter()
        if prompt_version is None or isinstance(prompt_version, str):
            versions = [prompt_version] * len(requests)
        else:
            versions = list(prompt_version)
            if len(versions) != len(requests):
                raise ValueError(f"{len(versions)} prompt versions for {len(requests)} requests")
        out: List[Optional[str]] = [None] * len(requests)
        failed: List[str] = []

        def one(i: int) -> None:
            try:
                out[i] = self._chat(requests[i], versions[i], overrides)
            except LLMFailure as exc:
                self._count(failures=1)
                failed.append(str(exc))

        try:
            if self.concurrency == 1 or len(requests) <= 1:
                it = range(len(requests))
                if self.verbose and len(requests) > 1:
                    it = pt.tqdm(it, desc=desc, unit="call")
                for i in it:
                    one(i)
            else:
                with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                    futures = pool.map(one, range(len(requests)))
                    if self.verbose:
                        futures = pt.tqdm(futures, total=len(requests), desc=desc, unit="call")
                    for _ in futures:
                        pass
        finally:
            self._count(seconds=time.perf_counter() - t0)
        if failed:
            warnings.warn(f"{self!r}: {len(failed)} of {len(requests)} request(s) failed after {self.max_retries} "
                          f"retries and count as N/A; first error: {failed[0]}", stacklevel=2)
        return out

    def __repr__(self):
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"LLM({self.model!r}{where}, temperature={self.temperature}, max_tokens={self.max_tokens})"
