"""Which model answers at an OpenAI-compatible endpoint: the cache identity of an
:class:`~pyterrier_tot.llm.client.LLM`.

A model name alone ("local", "gpt-4o-mini") does not say which weights answer: a llama.cpp server restarted on the
same port and alias with another GGUF file, or a hosted alias that moved to a new snapshot, would otherwise be
served the old model's cached answers. :func:`resolve_identity` asks the server once, in this order:

1. an OpenAI snapshot name (``gpt-4o-mini-2024-07-18``, ``gpt-4-0613``) on api.openai.com is precise already:
   ``model@endpoint``, no request;
2. a llama.cpp server on this machine (``llama_cpp.server`` or ``llama-server`` listening on a loopback port, same
   user, Linux): the GGUF file its process has mapped or was started with, by content hash
   (:func:`gguf_identity`, the identity :meth:`LlamaServer.llm` uses);
3. what ``GET /v1/models`` says about the weights: vLLM's ``root`` / ``parent`` / ``max_model_len``;
   llama-server's ``meta`` (parameter count, file size, vocabulary), which two fine-tunes of one base at one
   quantisation share, goes on to the canary (4.) as well;
4. otherwise one canary chat request (temperature 0, seed 0, a few tokens): the model name the response reports
   (a hosted alias resolves to its snapshot) joins the identity, and for llama.cpp servers, whose greedy decoding
   is deterministic, a hash of the answer too (so other weights give another identity). A server that still says
   nothing about its weights gets a warning that names ``identity=``.

When the server cannot be asked (refused, unreachable, timed out), the identity last resolved for this name and
address in the cache file is used (so a cached experiment replays against a dead server, as before), else
``model@endpoint``; the requests themselves then fail as they would have.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union
from urllib.parse import urlsplit

from pyterrier_tot.llm.endpoint import OPENAI_ENDPOINT, _unreachable, default_identity

#: OpenAI names that pin a snapshot: a date or a four-digit release suffix.
SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")
#: ``/v1/models`` fields that describe the weights (vLLM, llama.cpp's llama-server); ``created`` is left out
#: because vLLM and llama-server report the time of the request there.
WEIGHT_FIELDS = ("root", "parent", "max_model_len", "meta")
#: ``owned_by`` of the llama.cpp servers: llama-cpp-python's ``llama_cpp.server`` and llama.cpp's ``llama-server``.
LLAMA_CPP_OWNERS = ("me", "llamacpp")
CANARY: List[Dict[str, str]] = [{"role": "user", "content": "Name three colours, separated by commas."}]
CANARY_PARAMS: Dict[str, Any] = {"temperature": 0.0, "seed": 0, "max_tokens": 12}
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
PROBE_TIMEOUT = 30.0


class Resolved(NamedTuple):
    identity: str
    source: str  # how it was found (shown in warnings and by LLM.identity_source)
    warning: Optional[str] = None


def _listening_pid(port: int) -> Optional[int]:
    """The process of this user that listens on ``port`` (Linux /proc), or None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # another user's process
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
            except OSError:
                continue
    return None


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _process_gguf(pid: int) -> Optional[Path]:
    """The one GGUF file process ``pid`` has mapped (llama.cpp mmaps its model), else the one its command line
    names (``--model`` / ``-m``); None when there is none, or several."""
    proc = Path(f"/proc/{pid}")
    try:
        mapped = {line.split(None, 5)[5].strip() for line in (proc / "maps").read_text().splitlines()
                  if len(line.split(None, 5)) == 6}
    except OSError:
        mapped = set()
    files = {Path(p) for p in mapped if p.startswith("/") and not p.endswith("(deleted)")
             and not p.endswith((".so", ".pyc")) and ".so." not in p and _is_gguf(Path(p))}
    if len(files) == 1:
        return files.pop()
    if files:
        return None
    try:
        args = (proc / "cmdline").read_bytes().decode("utf8", "replace").split("\0")
        cwd = Path(os.readlink(proc / "cwd"))
    except OSError:
        return None
    named = []
    for i, arg in enumerate(args):
        if arg in ("--model", "-m") and i + 1 < len(args):
            named.append(args[i + 1])
        elif arg.startswith("--model="):
            named.append(arg.split("=", 1)[1])
    paths = {(cwd / p).resolve() for p in named}
    paths = {p for p in paths if _is_gguf(p)}
    return paths.pop() if len(paths) == 1 else None


def local_model_file(base_url: Optional[str]) -> Optional[Path]:
    """The GGUF file of the llama.cpp server at a loopback ``base_url`` run by this user (Linux), or None."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    if (parts.hostname or "").lower() not in LOOPBACK:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    pid = _listening_pid(port)
    return _process_gguf(pid) if pid is not None and pid != os.getpid() else None


def _models_entry(client, model: str, timeout: float) -> Optional[Dict[str, Any]]:
    """The ``/v1/models`` entry of ``model`` (or the only one listed) as a dict; {} when the server lists none."""
    page = client.with_options(timeout=timeout, max_retries=0).models.list()
    entries = [m.model_dump() if hasattr(m, "model_dump") else dict(m) for m in getattr(page, "data", []) or []]
    for e in entries:
        if e.get("id") == model:
            return e
    return entries[0] if len(entries) == 1 else {}


def _canary(client, model: str, timeout: float) -> Tuple[str, str]:
    """(the model name the response reports, the answer) of the canary request."""
    resp = client.with_options(timeout=timeout, max_retries=0).chat.completions.create(
        model=model, messages=CANARY, **CANARY_PARAMS)
    choice = resp.choices[0] if getattr(resp, "choices", None) else None
    answer = getattr(getattr(choice, "message", None), "content", None) or ""
    return str(getattr(resp, "model", None) or model), answer


def _facts(entry: Dict[str, Any]) -> str:
    facts = {k: entry[k] for k in WEIGHT_FIELDS if entry.get(k) not in (None, "", {}, [])}
    return json.dumps(facts, sort_keys=True, separators=(",", ":"), default=str) if facts else ""


def resolve_identity(client, model: str, base_url: Optional[str], timeout: float = PROBE_TIMEOUT) -> Resolved:
    """The cache identity of ``model`` at ``base_url`` (see the module notes); raises what the server raised
    when it could not be asked (the caller falls back)."""

    base = default_identity(model, base_url)
    endpoint = base.split("@", 1)[1]
    if endpoint == OPENAI_ENDPOINT and SNAPSHOT.search(model):
        return Resolved(base, "snapshot name")
    path = local_model_file(base_url)
    if path is not None:
        return Resolved(gguf_identity(path), f"the GGUF file of the local server process ({path})")
    entry: Dict[str, Any] = {}
    if endpoint != OPENAI_ENDPOINT:  # api.openai.com lists the alias, not the snapshot it points to
        try:
            entry = _models_entry(client, model, timeout) or {}
        except Exception as exc:  # noqa: BLE001 - a server without /v1/models still answers chats
            if _unreachable(exc):
                raise
    facts = _facts(entry)
    llama_cpp = entry.get("owned_by") in LLAMA_CPP_OWNERS
    if facts and not llama_cpp:
        return Resolved(f"{base}|{facts}", "/v1/models")
    served, answer = _canary(client, model, timeout)
    identity = base if served == model else f"{base}|served={served}"
    if llama_cpp:
        # llama-server's meta (parameters, size, vocabulary) is the same for two fine-tunes of one base model at
        # one quantisation: the canary's answer tells them apart
        identity += (f"|{facts}" if facts else "") + "|canary=" + hashlib.sha256(answer.encode("utf8")).hexdigest()[:16]
        return Resolved(identity, "/v1/models and canary answer" if facts else "canary answer")
    if served != model:
        return Resolved(identity, "the model name the server reports")
    return Resolved(identity, "name and address only", (
        f"the server at {endpoint} does not say which weights answer as {model!r}; cached answers are keyed by "
        f"{identity!r}, so another model served there under the same name would get them: pass identity=... "
        "(e.g. a file hash or revision) to name the model"))


def identity_of(client, model: str, base_url: Optional[str], cache=None, timeout: float = PROBE_TIMEOUT) -> Resolved:
    """:func:`resolve_identity`, remembered in ``cache`` (an :class:`~pyterrier_tot.llm.cache.LLMCache`); when the
    server cannot be asked, the identity last remembered for this name and address (else ``model@endpoint``),
    with a warning."""
    address = default_identity(model, base_url)
    try:
        found = resolve_identity(client, model, base_url, timeout)
    except Exception as exc:  # noqa: BLE001 - the requests themselves report what is wrong with the server
        last = cache.last_identity(address) if cache is not None else None
        why = _unreachable(exc) or f"{type(exc).__name__}: {str(exc)[:160]}"
        where = "the identity last resolved there" if last else "its name and address"
        return Resolved(last or address, "fallback", (
            f"could not ask the server which model answers as {model!r} ({why}); cached answers are looked up "
            f"under {last or address!r} ({where}); pass identity=... to name the model yourself"))
    if cache is not None:
        cache.remember_identity(address, found.identity)
    return found


def gguf_identity(path: Union[str, Path]) -> str:
    """``gguf:<name>:sha256:<hex>``: the content hash of a model file, the cache identity of a local server.
    Hashing a 1 GB file takes seconds, so the hash is remembered per (path, size, mtime) in the cache folder."""
    from pyterrier_tot.models.fingerprint import file_sha256

    return f"gguf:{Path(path).resolve().name}:sha256:{file_sha256(path)}"
