"""A scripted OpenAI-compatible chat server on loopback for the LLM tests, with injectable faults.

    with OpenAIStub(responder, fault_rate=0.3, seed=1) as stub:
        LLM(model="stub", base_url=stub.base_url, api_key="sk-test")

``responder(messages) -> str`` gives the answer text. Faults (drawn per request from a seeded generator):
``timeout`` (the answer comes after ``slow_seconds``), ``429`` (with Retry-After: 0), ``500``, and ``malformed``
(a 200 whose body is not JSON); on request also ``truncated`` (the body is cut short and the connection closed)
and ``length`` (``finish_reason="length"`` with only the first three characters of the answer).
``always_fail(messages) -> bool`` marks requests that get a 500 every time (``echo_key`` puts the request's
Authorization header in that error, as careless servers do).
``delay`` slows every answer (for kill tests). Counters: ``requests``, ``answered``, ``faults``, ``max_in_flight``;
``payloads`` keeps every request body. A request with ``logprobs`` gets ``logprobs(messages) -> {token: logprob}``
as the first token's alternatives (default: the answer's first word, certain; ``logprobs=False``: none sent).
``GET /v1/models`` lists one model ``stub`` with the extra fields ``models_fields`` (default: vLLM's ``root``,
so the LLM's identity comes from there and no canary request is sent); ``served_model`` is the model name the
chat responses report (default: the name asked for); ``model_lists`` counts the GETs. ``port=`` binds a given
port (a server restarted on the same address). The port a stub picks itself lies below the kernel's ephemeral
range, so no client socket of another process (Ray, the docs runner) takes it between two stubs on one address;
binding a given port retries for a few seconds while it is still held.
"""
from __future__ import annotations

import errno
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional

FAULTS = ("timeout", "429", "500", "malformed")


def stub_llm(stub: "OpenAIStub", cache, **kwargs):
    """An ``LLM`` on the stub with quick retries (the settings the stage tests share)."""
    from pyterrier_tot import LLM

    params = dict(verbose=False, max_retries=1, backoff=0.01, concurrency=2, **kwargs)
    return LLM(model="stub", base_url=stub.base_url, api_key="sk-test", cache=cache, **params)
ALL_FAULTS = FAULTS + ("truncated", "length")


_OWN_PORTS = (20000, 32000)  # below Linux's ephemeral range (32768-60999): only explicit binds land here


def _bind(handler, port: int, patience: float = 5.0) -> ThreadingHTTPServer:
    """A server on ``port``, or on a free port of ``_OWN_PORTS`` when it is 0."""
    rng = random.Random()
    deadline = time.monotonic() + patience
    while True:
        try:
            return ThreadingHTTPServer(("127.0.0.1", port or rng.randrange(*_OWN_PORTS)), handler)
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            if port:
                time.sleep(0.05)


class OpenAIStub:
    def __init__(self, responder: Callable[[List[Dict[str, str]]], str], fault_rate: float = 0.0, seed: int = 0,
                 faults=FAULTS, slow_seconds: float = 2.0, delay: float = 0.0,
                 always_fail: Optional[Callable[[List[Dict[str, str]]], bool]] = None, status: Optional[int] = None,
                 echo_key: bool = False, logprobs: Optional[Callable[[List[Dict[str, str]]], Dict[str, float]]] = None,
                 models_fields: Optional[dict] = None, served_model: Optional[str] = None, port: int = 0):
        self.responder, self.fault_rate, self.faults = responder, fault_rate, tuple(faults)
        self.slow_seconds, self.delay, self.always_fail, self.status = slow_seconds, delay, always_fail, status
        self.echo_key, self.logprobs = echo_key, logprobs
        self.models_fields = {"owned_by": "vllm", "root": "stub-weights"} if models_fields is None else models_fields
        self.served_model = served_model
        self.payloads: List[dict] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.requests = self.answered = self.model_lists = 0
        self.faults_served: Dict[str, int] = {f: 0 for f in ALL_FAULTS}
        self.in_flight = self.max_in_flight = 0
        self.api_keys = set()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code: int, body: bytes, headers: Dict[str, str] = None, cut: bool = False):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if cut:  # promise the whole body, send half, hang up
                    body = body[: len(body) // 2]
                    self.close_connection = True
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                with stub._lock:
                    stub.model_lists += 1
                entry = {"id": "stub", "object": "model", "created": int(time.time()), **stub.models_fields}
                self._send(200, json.dumps({"object": "list", "data": [entry]}).encode())

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.payloads.append(payload)
                    stub.requests += 1
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    stub.api_keys.add(self.headers.get("Authorization", ""))
                    fault = stub._rng.choice(stub.faults) if stub._rng.random() < stub.fault_rate else None
                try:
                    self._answer(payload, fault)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _answer(self, payload, fault):
                if stub.status is not None:
                    return self._send(stub.status, json.dumps({"error": {"message": "refused"}}).encode())
                messages = payload.get("messages", [])
                if stub.always_fail is not None and stub.always_fail(messages):
                    why = "always failing"
                    if stub.echo_key:
                        why += f" for {self.headers.get('Authorization')}"
                    return self._send(500, json.dumps({"error": {"message": why}}).encode())
                if fault is not None:
                    with stub._lock:
                        stub.faults_served[fault] += 1
                    if fault == "timeout":
                        time.sleep(stub.slow_seconds)
                    elif fault == "429":
                        return self._send(429, json.dumps({"error": {"message": "slow down"}}).encode(),
                                          {"Retry-After": "0"})
                    elif fault == "500":
                        return self._send(500, json.dumps({"error": {"message": "boom"}}).encode())
                    elif fault == "malformed":
                        return self._send(200, b'{"id": "x", "choices": [{"message": {"content": "unterminated')
                if stub.delay:
                    time.sleep(stub.delay)
                content = stub.responder(messages)
                finish = "stop"
                if fault == "length":
                    content, finish = content[:3], "length"
                prompt_tokens = sum(len(m.get("content", "").split()) for m in messages)
                body = {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                        "model": stub.served_model or payload.get("model", "stub"),
                        "choices": [{"index": 0, "finish_reason": finish,
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split()),
                                  "total_tokens": prompt_tokens + len(content.split())}}
                if payload.get("logprobs") and stub.logprobs is not False:
                    top = (stub.logprobs or (lambda m: {(content.split() or ["?"])[0]: 0.0}))(messages)
                    first = max(top, key=top.get)
                    body["choices"][0]["logprobs"] = {"content": [{
                        "token": first, "logprob": top[first], "bytes": None,
                        "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]}]}
                if fault == "truncated":
                    return self._send(200, json.dumps(body).encode(), cut=True)
                with stub._lock:
                    stub.answered += 1
                self._send(200, json.dumps(body).encode())

        self.server = _bind(Handler, port)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        # shutdown() waits for the serving loop's next poll: 0.5 s by default, at the end of every stub's use
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
