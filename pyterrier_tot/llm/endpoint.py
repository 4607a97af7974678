"""Facts about an OpenAI-compatible endpoint and its errors, for :mod:`pyterrier_tot.llm.client`: the HTTP
status and ``Retry-After`` of a failed request, whether no connection could be made at all, URLs with their
credentials masked, and the cache identity ``model@endpoint`` of a remote model."""
from __future__ import annotations

import errno
import os
import socket
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH}


def _status(exc: BaseException) -> Optional[int]:
    return getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)


def _retry_after(exc: BaseException) -> Optional[float]:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _unreachable(exc: BaseException) -> Optional[str]:
    """Why no connection could be made at all (refused, unknown host, no route), or None for other errors.
    The HTTP client wraps the socket error a few levels deep, so the whole cause chain is searched."""
    seen = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, socket.gaierror):
            return f"its host name does not resolve ({e.strerror or e})"
        if isinstance(e, OSError) and e.errno in _UNREACHABLE_ERRNOS:
            return ("the connection was refused (nothing listens there)" if e.errno == errno.ECONNREFUSED
                    else f"the host cannot be reached ({os.strerror(e.errno)})")
        e = e.__cause__ or e.__context__
    return None


def _safe_url(url: str) -> str:
    """``url`` with any user name, password or query string masked (they can hold credentials)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


#: The endpoint of ``base_url=None`` (the OpenAI client's default).
OPENAI_ENDPOINT = "https://api.openai.com/v1"


def default_identity(model: str, base_url: Optional[str]) -> str:
    """``model@endpoint``: the cache identity of a model behind an OpenAI-compatible URL (credentials and query
    strings masked, trailing slash dropped, scheme and host lower-cased)."""
    parts = urlsplit(base_url or OPENAI_ENDPOINT)
    url = urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))
    return f"{model}@{_safe_url(url)}"
