"""The LLM backend every LLM stage of the library uses: chat completions against any OpenAI-compatible server.

Example::

    from pyterrier_tot.llm.client import LLM
    llm = LLM(model="gpt-4o-mini")                       # OPENAI_API_KEY / OPENAI_BASE_URL from the environment
    llm = LLM(model="local", base_url="http://127.0.0.1:8080/v1")  # llama.cpp, vLLM, Ollama, ...
    answers = llm.chat_many([messages, ...])             # bounded concurrency, retries, cache; None = failed
    llm.usage                                            # calls, cache hits, retries, failures, tokens, seconds

Settings: ``temperature`` (default 0), ``seed``, ``max_tokens``, a per-request ``timeout`` in seconds, up to
``max_retries`` retries with exponential back-off and jitter on timeouts, connection errors, 429, 5xx and malformed
responses (``Retry-After`` is honoured, capped at ``max_backoff``), and ``concurrency`` requests in flight. Answers
go through a persistent :class:`~pyterrier_tot.llm.cache.LLMCache` (default
``$PYTERRIER_TOT_CACHE/llm_cache.sqlite3``; ``cache=False`` turns it off).

A request that still fails after its retries yields ``None`` with a warning and ``usage.failures`` + 1; the calling
stage turns that into N/A. Errors that would fail every request raise :class:`LLMConfigurationError` within seconds
instead: a refused connection or a host name that does not resolve (after one retry ``CONNECT_RETRY_DELAY`` later),
a refused key or unknown model (401, 403, 404: no retry), a local server process that has died (``health_check``,
which :meth:`LlamaServer.llm` sets). An answer cut short by the token limit (``finish_reason="length"``) that the
caller's ``validate`` rejects is retried with twice the token budget (up to four times ``max_tokens``); so is such
an answer found in the cache.

Circuit breaker: in ``chat_many``, after ``max_consecutive_failures`` requests in a row have failed after their
retries, the batch stops and raises :class:`LLMUnavailableError` with the counts (asked, answered, failed, not sent)
instead of turning every remaining request into N/A; answers already received are in the cache (unless the identity
is unconfirmed, below), so a rerun resumes.
``max_consecutive_failures=None`` turns it off.

Cache identity: the cache key holds ``identity``, which says *which model answers*, not only what it is called.
Unless ``identity=...`` is given, the server is asked once per ``LLM``, at the first cached request
(:mod:`pyterrier_tot.llm.identity`): the GGUF file's content hash for a llama.cpp server on this machine, the
weights ``/v1/models`` reports (vLLM), or one canary request; a snapshot name on api.openai.com needs none.
:meth:`LlamaServer.llm` passes the GGUF file's hash itself. ``identity_source`` says how it was found. Answers are
never cached under an identity the server did not confirm (a fallback, when the server could not be asked: it is
asked again once requests get through).

The API key is held by the HTTP client only: it is not part of the cache key, the cache rows, ``repr`` or any
message (a server error that echoes it is scrubbed); user name and password in ``base_url`` are masked in ``repr``.
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from pyterrier_tot._plumbing.util import cache_dir
from pyterrier_tot.checks import check_int, check_number
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.errors import LLMConfigurationError, LLMFailure, LLMUnavailableError
from pyterrier_tot.llm.cache import LLMCache, request_key
from pyterrier_tot.llm.endpoint import (
    _retry_after,
    _safe_url,
    _status,
    _unreachable,
)
from pyterrier_tot.llm.identity import identity_of
from pyterrier_tot.llm.portable import llm_state, restore_llm
from pyterrier_tot.llm.usage import LLMUsage

Messages = List[Dict[str, str]]

#: Environment variables read when the arguments are not given.
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "PYTERRIER_TOT_LLM_MODEL"

#: Seconds before the one retry of a request whose connection was refused or whose host did not resolve.
CONNECT_RETRY_DELAY = 1.0
#: Seconds between two attempts to confirm a fallback identity (see ``LLM._settled``).
REASK_SECONDS = 30.0


def _first_token_logprobs(choice) -> Dict[str, float]:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:  # not retried: the server would answer the same again
        raise LLMFailure("the server sent no logprobs (it may not support them)")
    out = {str(t.token): float(t.logprob) for t in (getattr(content[0], "top_logprobs", None) or [])}
    return {**out, str(content[0].token): float(content[0].logprob)}


class _Truncated(ValueError):
    """An answer cut short by the token limit that the caller's ``validate`` rejected (retried)."""


class LLM:
    """An OpenAI-compatible chat model with retries, bounded concurrency, a persistent cache, a circuit breaker
    and accounting."""

    def __init__(self, model: Optional[str] = None, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 temperature: float = 0.0, seed: Optional[int] = 0, max_tokens: int = 256, timeout: float = 60.0,
                 max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 20.0, concurrency: int = 4,
                 cache: Union[bool, str, Path, LLMCache] = True, verbose: bool = True,
                 health_check: Optional[Callable[[], Optional[str]]] = None,
                 max_consecutive_failures: Optional[int] = 10, identity: Optional[str] = None):
        self.model = model or os.environ.get(ENV_MODEL)
        if not self.model:
            raise LLMConfigurationError(f"LLM needs a model name: pass model=... or set ${ENV_MODEL}")
        self.base_url = base_url or os.environ.get(ENV_BASE_URL) or None
        if identity is not None and (not isinstance(identity, str) or not identity.strip()):
            raise ValueError(f"LLM: identity must be a non-empty string, not {identity!r}")
        # what the cache key says answered: given, or asked of the server at the first cached request
        self._identity, self.identity_source = identity, ("given" if identity else None)
        self._identity_lock, self._reasked, self._unconfirmed_said = threading.Lock(), float("-inf"), False
        key = api_key or os.environ.get(ENV_API_KEY)
        if not key:
            if self.base_url is None:
                raise LLMConfigurationError(
                    f"no API key: pass api_key=... or set ${ENV_API_KEY}, or give base_url=... of a local "
                    "OpenAI-compatible server (see pyterrier_tot.llm.llama_server.LlamaServer)")
            key = "no-key"  # local servers ignore it, the client insists on one
        self.temperature = check_number(temperature, "temperature", "LLM", low=0.0)
        self.seed, self.max_tokens = seed, check_int(max_tokens, "max_tokens", "LLM")
        self.timeout = check_number(timeout, "timeout", "LLM", low=0.0, low_open=True)
        self.max_retries = check_int(max_retries, "max_retries", "LLM", minimum=0)
        self.backoff = check_number(backoff, "backoff", "LLM", low=0.0)
        self.max_backoff = check_number(max_backoff, "max_backoff", "LLM", low=0.0)
        self.concurrency = check_int(concurrency, "concurrency", "LLM")
        self.max_consecutive_failures = int(max_consecutive_failures) if max_consecutive_failures else None
        # health_check: called after a connection error; a message means the backend is gone for good (no retries)
        self.verbose, self.health_check = verbose, health_check
        self.cache: Optional[LLMCache] = (
            LLMCache(cache_dir() / "llm_cache.sqlite3") if cache is True else None if cache is False or cache is None
            else cache if isinstance(cache, LLMCache) else LLMCache(cache))
        import openai
        self._openai = openai
        # retries are ours (counted, with jitter); the client's own are off
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self._lock = threading.Lock()
        self.usage = LLMUsage()

    @property
    def identity(self) -> str:
        """Which model answers, as the cache key holds it (see the module notes); resolved once, lazily."""
        with self._identity_lock:
            if self._identity is None:
                found = identity_of(self._client, self.model, self.base_url, self.cache, self.timeout)
                self._identity, self.identity_source = found.identity, found.source
                if found.warning:
                    warnings.warn(self._scrub(f"{self!r}: {found.warning}"), stacklevel=3)
        return self._identity

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

    def _scrub(self, text: str) -> str:
        # a server's error text may echo the key it was sent
        key = getattr(self._client, "api_key", None)
        return text.replace(key, "***") if key and key != "no-key" else text

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
        content = choices[0].message.content
        if params.get("logprobs"):  # top_logprobs_many: the first token's alternatives, as JSON (cached like text)
            content = json.dumps(_first_token_logprobs(choices[0]))
        return (content, int(getattr(usage, "prompt_tokens", 0) or 0),
                int(getattr(usage, "completion_tokens", 0) or 0), getattr(choices[0], "finish_reason", None))

    def _retryable(self, exc: BaseException) -> bool:
        o = self._openai
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError, o.NotFoundError)):
            return False
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError,
                            o.APIResponseValidationError, ValueError, TimeoutError, ConnectionError)):
            return True
        status = _status(exc)
        return status is not None and (status >= 500 or status in (408, 409, 429))

    def _fatal(self, exc: BaseException) -> Optional[str]:
        """Why every request would fail like this one (so none is retried), or None."""
        o = self._openai
        if isinstance(exc, (o.AuthenticationError, o.PermissionDeniedError, o.NotFoundError)):
            return (f"the server refused the request ({type(exc).__name__}, status {_status(exc)}); check the "
                    "model name, base_url and API key")
        if isinstance(exc, o.APIConnectionError) and self.health_check is not None:
            return self.health_check()
        return None

    def _delay(self, attempt: int, last: BaseException) -> float:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
        return min(self.max_backoff, max(delay, _retry_after(last) or 0.0))

    def chat(self, messages: Messages, prompt_version: Optional[str] = None,
             validate: Optional[Callable[[str], bool]] = None, **overrides) -> str:
        """One answer (from the cache when known); raises :class:`LLMFailure` after the retries.
        ``validate(answer)`` says whether an answer is usable: one that is not, and that the token limit cut
        short, is asked again with a larger budget (other unusable answers are the caller's to count)."""
        t0 = time.perf_counter()
        try:
            return self._chat(messages, prompt_version, overrides, validate)
        finally:
            self._count(seconds=time.perf_counter() - t0)

    def _chat(self, messages: Messages, prompt_version: Optional[str], overrides: Dict[str, Any],
              validate: Optional[Callable[[str], bool]] = None) -> str:
        params = self.params(**overrides)
        self._count(requests=1)
        key = request_key(self.identity, messages, params, prompt_version) if self.cache is not None else ""
        sent = dict(params)
        if self.cache is not None:
            hit = self.cache.get(key)
            # a cached answer the token limit cut short and ``validate`` refuses (kept by a call without validate,
            # or by an older version) is asked again with a larger budget, as a fresh one would be
            cut = (hit is not None and validate is not None and "max_tokens" in sent
                   and int(hit["completion_tokens"] or 0) >= int(sent["max_tokens"]) and not validate(hit["answer"]))
            if hit is not None and not cut:
                self._count(cache_hits=1, prompt_tokens=hit["prompt_tokens"],
                            completion_tokens=hit["completion_tokens"])
                return hit["answer"]
            if cut:
                self._count(truncated=1)
                sent["max_tokens"] = 2 * int(sent["max_tokens"])
        attempt, connect_retried = 0, False
        while True:
            self._count(calls=1)
            try:
                answer, ptok, ctok, finish = self._call_once(messages, sent)
                if finish == "length" and validate is not None and not validate(answer):
                    self._count(truncated=1)
                    if "max_tokens" in sent:  # a deterministic model would cut the same answer at the same place
                        sent["max_tokens"] = min(2 * int(sent["max_tokens"]), 4 * int(params["max_tokens"]))
                    raise _Truncated(f"the answer hit the token limit and could not be used: {answer[:80]!r}")
            except Exception as exc:  # noqa: BLE001 - classified below
                fatal = self._fatal(exc)
                if fatal:
                    raise LLMConfigurationError(self._scrub(f"{self!r}: {fatal}")) from None
                unreachable = _unreachable(exc)
                if unreachable and (connect_retried or self.max_retries == 0):
                    raise LLMConfigurationError(
                        f"{self!r}: cannot reach the server: {unreachable}, also on a retry "
                        f"{CONNECT_RETRY_DELAY:g} s later; start the server or fix base_url") from None
                if not unreachable and (attempt >= self.max_retries or not self._retryable(exc)):
                    raise LLMFailure(self._scrub(f"{type(exc).__name__}: {str(exc)[:200]}")) from None
                attempt += 1
                connect_retried = connect_retried or bool(unreachable)
                self._count(retries=1)
                time.sleep(CONNECT_RETRY_DELAY if unreachable else self._delay(attempt, exc))
                continue
            self._count(prompt_tokens=ptok, completion_tokens=ctok)
            if self.cache is not None and self._settled():  # never stored under a model the server did not confirm
                self.cache.put(request_key(self.identity, messages, params, prompt_version), self.identity, answer,
                               ptok, ctok)
            return answer

    def _settled(self) -> bool:
        """Whether the server confirmed the identity. A fallback one (the server could not be asked when the LLM was
        made) is asked for again after a request got through, at most every ``REASK_SECONDS``; until confirmed, new
        answers are not cached (said once, in a warning)."""
        with self._identity_lock:
            if self.identity_source == "fallback" and time.monotonic() - self._reasked >= REASK_SECONDS:
                self._reasked = time.monotonic()
                found = identity_of(self._client, self.model, self.base_url, self.cache, self.timeout)
                self._identity, self.identity_source = found.identity, found.source
                if found.warning and found.source != "fallback":
                    warnings.warn(self._scrub(f"{self!r}: {found.warning}"), stacklevel=4)
            if self.identity_source == "fallback" and not self._unconfirmed_said:
                self._unconfirmed_said = True
                warnings.warn(f"{self!r}: the server has not confirmed which model answers; new answers are not "
                              "cached until it does", stacklevel=4)
        return self.identity_source != "fallback"

    def chat_many(self, requests: Sequence[Messages], prompt_version: Union[None, str, Sequence[str]] = None,
                  desc: str = "LLM", validate: Optional[Callable[[str], bool]] = None,
                  **overrides) -> List[Optional[str]]:
        """Answers for many message lists, ``concurrency`` in flight, in input order. A request that fails
        after its retries gives ``None``, a warning and ``usage.failures`` + 1; it never raises for one.
        After ``max_consecutive_failures`` failed requests in a row the batch stops with
        :class:`LLMUnavailableError`; an :class:`LLMConfigurationError` stops it at once.
        ``prompt_version`` is one string for all requests or one per request; ``validate`` as in :meth:`chat`."""
        t0 = time.perf_counter()
        if prompt_version is None or isinstance(prompt_version, str):
            versions = [prompt_version] * len(requests)
        else:
            versions = list(prompt_version)
            if len(versions) != len(requests):
                raise ValueError(f"{len(versions)} prompt versions for {len(requests)} requests")
        out: List[Optional[str]] = [None] * len(requests)
        failed: List[str] = []
        done: List[int] = []
        fatal: List[BaseException] = []
        stop = threading.Event()
        in_a_row = [0]
        lock = threading.Lock()

        def one(i: int) -> None:
            if stop.is_set():  # the breaker opened or the backend is misconfigured: send nothing more
                return
            try:
                answer = self._chat(requests[i], versions[i], overrides, validate)
            except LLMFailure as exc:
                self._count(failures=1)
                with lock:
                    failed.append(str(exc))
                    in_a_row[0] += 1
                    if self.max_consecutive_failures and in_a_row[0] >= self.max_consecutive_failures:
                        stop.set()
                return
            except LLMConfigurationError as exc:
                with lock:
                    fatal.append(exc)
                stop.set()
                return
            out[i] = answer
            with lock:
                done.append(i)
                in_a_row[0] = 0

        try:
            if self.concurrency == 1 or len(requests) <= 1:
                it = range(len(requests))
                if self.verbose and len(requests) > 1:
                    it = progress_bar(it, desc=desc, unit="call")
                for i in it:
                    one(i)
                    if stop.is_set():
                        break
            else:
                with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                    futures = pool.map(one, range(len(requests)))
                    if self.verbose:
                        futures = progress_bar(futures, total=len(requests), desc=desc, unit="call")
                    for _ in futures:
                        pass
        finally:
            self._count(seconds=time.perf_counter() - t0)
        if fatal:
            raise fatal[0]
        if stop.is_set():
            raise self._breaker_error(len(requests), sorted(done), failed)
        if failed:
            warnings.warn(f"{self!r}: {len(failed)} of {len(requests)} request(s) failed after {self.max_retries} "
                          f"retries and count as N/A; first error: {failed[0]}", stacklevel=2)
        return out

    def top_logprobs_many(self, requests: Sequence[Messages], top: int = 20,
                          prompt_version: Union[None, str, Sequence[str]] = None,
                          desc: str = "LLM log-probs") -> List[Optional[Dict[str, float]]]:
        """Per request, ``{token: logprob}`` of the ``top`` likeliest first tokens of the answer (servers that
        expose ``logprobs``: OpenAI, llama.cpp); cached like answers; ``None`` where it failed or sent none."""
        answers = self.chat_many(requests, prompt_version, desc, logprobs=True, top_logprobs=int(top), max_tokens=1)
        return [json.loads(a) if a is not None else None for a in answers]

    def _breaker_error(self, asked: int, done: List[int], failed: List[str]) -> LLMUnavailableError:
        not_sent = asked - len(done) - len(failed)
        where = ("the cache is off, so a rerun asks again" if self.cache is None else "none is cached (the server has "
                 "not confirmed which model answers), so a rerun asks again" if self.identity_source == "fallback"
                 else f"they are cached in {self.cache.path}, so a rerun resumes")
        return LLMUnavailableError(
            f"{self!r}: {self.max_consecutive_failures} requests in a row failed after their retries (last error: "
            f"{failed[-1]}), so the batch stopped instead of writing N/A for the rest: asked {asked}, answered "
            f"{len(done)}, failed {len(failed)}, not sent {not_sent}. Of the answers received, {where}; "
            "max_consecutive_failures=None turns this check off",
            asked=asked, answered=len(done), failed=len(failed), not_sent=not_sent, done=done)

    def __getstate__(self) -> Dict[str, Any]:  # a copy for another process: see pyterrier_tot.llm.portable
        return llm_state(self, ENV_API_KEY)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        restore_llm(self, state, ENV_API_KEY)

    def __repr__(self):
        where = f", base_url={_safe_url(self.base_url)!r}" if self.base_url else ""
        return f"LLM({self.model!r}{where}, temperature={self.temperature}, max_tokens={self.max_tokens})"
