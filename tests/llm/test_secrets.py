"""Secrets and loading (issue #13 part 5): an API key reaches the server and nothing else -- not the cache file,
the run file, logs, warnings, error messages, tracebacks or reprs -- and no package code unpickles."""
import ast
import logging
import socket
import traceback
import uuid
import warnings
from pathlib import Path

import pyterrier as pt
import pytest

import pyterrier_tot
from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer
from pyterrier_tot.llm.client import LLM, LLMConfigurationError, LLMUnavailableError
from pyterrier_tot.query.rewriters import ClueConcatenator
from tests.helpers.llm_script import TOPICS, responder
from tests.helpers.openai_stub import OpenAIStub

SECRET = f"sk-SECRET-{uuid.uuid4().hex}"


def _request(messages):
    return messages[-1]["content"].removeprefix("Request: ")


def _error_texts(exc: BaseException):
    return [str(exc), repr(exc), "".join(traceback.format_exception(exc))]


def test_api_key_reaches_the_server_and_nothing_else(tmp_path, tiny_frame, caplog, capsys, monkeypatch):
    import pyterrier_tot as ptt
    caplog.set_level(logging.DEBUG)  # the openai and HTTP client loggers too
    topics = TOPICS.head(6).copy()
    poison = topics.loc[2, "query"]
    texts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # a failing request whose server error echoes the Authorization header
        with OpenAIStub(responder, always_fail=lambda m: _request(m) == poison, echo_key=True) as stub:
            llm = LLM(model="stub", base_url=stub.base_url, api_key=SECRET, cache=tmp_path / "llm.sqlite3",
                      max_retries=1, backoff=0.01)
            dec = ClueDecomposer(llm, "extractive", "joint")
            index = ptt.BookIndex(tiny_frame, path=tmp_path / "index")
            pipe = dec >> ClueConcatenator() >> index.bm25()
            results = pipe(topics)
            pt.io.write_results(results, tmp_path / "run.trec", format="trec", run_name="secret-test")
            texts += [repr(llm), str(llm), repr(dec), repr(pipe), str(llm.usage), str(vars(llm)), str(dec.stats),
                      repr(llm.cache)]
            # the circuit breaker's error, on a fresh LLM that shares the cache file
            breaker = LLM(model="stub", base_url=stub.base_url, api_key=SECRET, cache=tmp_path / "llm.sqlite3",
                          max_retries=0, max_consecutive_failures=1, verbose=False)
            with pytest.raises(LLMUnavailableError) as err:
                ClueDecomposer(breaker, "extractive", "joint")(topics.iloc[[2, 3]])
            texts += _error_texts(err.value)
        assert stub.api_keys == {f"Bearer {SECRET}"}  # it did reach the server
        # a refused key, an unreachable server, a key from the environment
        with OpenAIStub(responder, status=401) as refusing:
            with pytest.raises(LLMConfigurationError) as err:
                LLM(model="stub", base_url=refusing.base_url, api_key=SECRET, cache=False).chat([{"role": "user",
                                                                                                  "content": "x"}])
            texts += _error_texts(err.value)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(LLMConfigurationError) as err:
            LLM(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=SECRET, cache=False).chat(
                [{"role": "user", "content": "x"}])
        texts += _error_texts(err.value)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        texts.append(repr(LLM(model="env", cache=False)))
        # credentials written into the URL itself are masked too
        texts.append(repr(LLM(model="m", base_url=f"http://user:{SECRET}@127.0.0.1:1/v1?key={SECRET}", cache=False)))
    out = capsys.readouterr()
    texts += [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records] + [out.out, out.err]
    assert any("Bearer ***" in t for t in texts), "the echoing server error should show up, scrubbed"
    assert any("failed" in str(w.message) for w in caught)
    for text in texts:
        assert SECRET not in text, text
    written = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert {"llm.sqlite3", "run.trec"} <= {f.name for f in written}
    for f in written:  # the cache with its WAL file, the run file, the index
        assert SECRET.encode() not in f.read_bytes(), f


# -- loading never unpickles ----------------------------------------------------------------------------------
_PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def _unsafe_loads(path: Path):
    """Places in one source file that could unpickle: imports of pickling modules, ``pickle.load(s)``,
    ``read_pickle``, ``torch.load`` without ``weights_only=True``, ``np.load(..., allow_pickle=True)``."""
    tree = ast.parse(path.read_text(encoding="utf8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _PICKLERS:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _PICKLERS:
            yield node.lineno, f"from {node.module} import ..."
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
            name = node.func.attr
            true_kw = {k.arg for k in node.keywords if isinstance(k.value, ast.Constant) and k.value.value is True}
            if name == "read_pickle" or (owner in _PICKLERS and name in ("load", "loads", "Unpickler")):
                yield node.lineno, f"{owner}.{name}(...)"
            elif owner == "torch" and name == "load" and "weights_only" not in true_kw:
                yield node.lineno, "torch.load(...) without weights_only=True"
            elif owner in ("np", "numpy") and name == "load" and "allow_pickle" in true_kw:
                yield node.lineno, "np.load(..., allow_pickle=True)"


def test_no_package_code_unpickles():
    root = Path(pyterrier_tot.__file__).parent
    hits = [f"{path.relative_to(root.parent)}:{line}: {what}"
            for path in sorted(root.rglob("*.py")) for line, what in _unsafe_loads(path)]
    assert not hits, "loading must never unpickle (safetensors, torch.load(weights_only=True), JSON):\n" + \
        "\n".join(hits)


def test_the_unpickling_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nimport joblib\nimport numpy as np\nimport torch\nimport pandas as pd\n"
                   "pickle.load(f)\ntorch.load(p)\ntorch.load(p, weights_only=False)\nnp.load(p, allow_pickle=True)\n"
                   "pd.read_pickle(p)\ntorch.load(p, weights_only=True)\nnp.load(p)\n")
    found = [line for line, _ in _unsafe_loads(bad)]
    assert found == [1, 2, 6, 7, 8, 9, 10]
