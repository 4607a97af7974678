"""Issue 30.1 with two real llama.cpp servers (llama_cpp.server, SmolLM2-135M): one after the other on one port
and one alias, the second serving a copy of the GGUF file with one byte of its ``general.name`` changed. A plain
``LLM(model="local", base_url=...)``, as for a server you start yourself, must not serve the first file's answers
for the second."""
import shutil
import struct

import pytest

from pyterrier_tot.llm.client import LLM
from pyterrier_tot.llm.identity import gguf_identity
from pyterrier_tot.llm.llama_server import LlamaServer, default_gguf, free_port

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")

MSGS = [[{"role": "user", "content": f"Name a book about {animal} in five words."}]
        for animal in ("a fox", "an owl", "an otter")]


def renamed_copy(src, dst):
    """A copy of ``src`` whose ``general.name`` value differs in its first byte (the weights are untouched)."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        head = f.read(1 << 20)
        at = head.find(b"general.name")
        assert at > 0, "no general.name key in the GGUF header"
        value_type, length = struct.unpack_from("<IQ", head, at + len(b"general.name"))
        assert value_type == 8 and length > 0  # a GGUF string
        start = at + len(b"general.name") + 12
        f.seek(start)
        f.write(bytes([head[start] ^ 0x20]))  # flip the case of the first letter
    return dst


def run(path, port, cache):
    with LlamaServer(path, port=port, n_threads=1, n_ctx=1024):
        llm = LLM(model="local", base_url=f"http://127.0.0.1:{port}/v1", cache=cache, max_tokens=24,
                  concurrency=1, timeout=300, verbose=False)
        answers = llm.chat_many(MSGS)
        return llm, answers


def test_another_gguf_on_the_same_port_and_alias_gets_no_cached_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    first_file = default_gguf()
    second_file = renamed_copy(first_file, tmp_path / "renamed.gguf")
    assert gguf_identity(first_file) != gguf_identity(second_file)
    port, cache = free_port(), tmp_path / "llm.sqlite3"

    first, answers = run(first_file, port, cache)
    assert first.usage.calls == 3 and all(answers)
    second, _ = run(second_file, port, cache)
    assert second.usage.cache_hits == 0 and second.usage.calls == 3
    assert first.identity == gguf_identity(first_file) and "local server process" in first.identity_source
    assert second.identity == gguf_identity(second_file)

    again, replayed = run(first_file, port, cache)  # the first file again: all from the cache
    assert (again.usage.cache_hits, again.usage.calls) == (3, 0) and replayed == answers
    # LlamaServer.llm() uses the same identity, so both ways of running a server share one cache
    assert LlamaServer(first_file).identity == first.identity
