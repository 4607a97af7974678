"""Issue 30.1: the cache identity says which model answers, asked of the server once per LLM (stub servers here;
two real llama.cpp servers in test_llm_identity_llama.py)."""
import warnings

import pytest

from pyterrier_tot.llm.client import LLM
from pyterrier_tot.llm.identity import SNAPSHOT
from tests.helpers.openai_stub import OpenAIStub

MSGS = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]


def answer_a(messages):
    return "A says " + messages[-1]["content"]


def answer_b(messages):
    return "B says " + messages[-1]["content"]


def make(stub, tmp_path, **kw):
    return LLM(model="local", base_url=stub.base_url, api_key="sk-test", cache=tmp_path / "llm.sqlite3",
               verbose=False, concurrency=2, max_retries=0, **kw)


def test_identity_is_asked_once_lazily_and_only_with_a_cache(tmp_path):
    with OpenAIStub(answer_a) as stub:
        llm = make(stub, tmp_path)
        assert stub.model_lists == 0  # nothing asked at construction
        llm.chat_many(MSGS)
        llm.chat_many(MSGS)
        assert stub.model_lists == 1 and stub.requests == 4  # one GET, no canary: /v1/models named the weights
        assert '"root":"stub-weights"' in llm.identity and llm.identity_source == "/v1/models"
        LLM(model="local", base_url=stub.base_url, api_key="k", cache=False, verbose=False).chat(MSGS[0])
        assert stub.model_lists == 1


def test_other_weights_under_one_name_and_address_get_no_cached_answers(tmp_path):
    """The set-up of issue 30.1 with vLLM-like servers: same port, same alias, other weights."""
    with OpenAIStub(answer_a, models_fields={"owned_by": "vllm", "root": "/models/a"}) as stub:
        port = stub.port
        assert make(stub, tmp_path).chat_many(MSGS) == [answer_a(m) for m in MSGS]
    with OpenAIStub(answer_b, models_fields={"owned_by": "vllm", "root": "/models/b"}, port=port) as stub:
        llm = make(stub, tmp_path)
        assert llm.chat_many(MSGS) == [answer_b(m) for m in MSGS]
        assert (llm.usage.cache_hits, llm.usage.calls) == (0, 4)
    with OpenAIStub(answer_b, models_fields={"owned_by": "vllm", "root": "/models/a"}, port=port) as stub:
        llm = make(stub, tmp_path)  # the first weights again: their answers come from the cache
        assert llm.chat_many(MSGS) == [answer_a(m) for m in MSGS] and llm.usage.cache_hits == 4


def test_a_server_that_says_nothing_is_fingerprinted_by_a_canary(tmp_path):
    """llama_cpp.server reports only the alias (owned_by "me"): the answer to a temperature-0 canary joins the
    identity, so other weights (other answers) never get this model's cache."""
    like_llama_cpp = {"owned_by": "me", "permissions": []}
    with OpenAIStub(answer_a, models_fields=like_llama_cpp) as stub:
        port = stub.port
        first = make(stub, tmp_path)
        first.chat_many(MSGS)
        assert first.identity_source == "canary answer" and "|canary=" in first.identity
        assert stub.requests == 4 + 1  # the canary, once
    with OpenAIStub(answer_b, models_fields=like_llama_cpp, port=port) as stub:
        other = make(stub, tmp_path)
        assert other.chat_many(MSGS) == [answer_b(m) for m in MSGS] and other.usage.cache_hits == 0
    with OpenAIStub(answer_a, models_fields=like_llama_cpp, port=port) as stub:
        same = make(stub, tmp_path)
        assert same.chat_many(MSGS) == [answer_a(m) for m in MSGS] and same.usage.cache_hits == 4
        assert stub.requests == 1 and same.identity == first.identity


def test_two_fine_tunes_behind_llama_server_never_share_answers(tmp_path):
    """llama-server's /v1/models meta (parameters, size, vocabulary) is the same for two fine-tunes of one base at
    one quantisation: the canary's answer joins it, so the second model never gets the first one's answers."""
    meta = {"owned_by": "llamacpp", "meta": {"n_params": 135000000, "size": 100000000, "n_vocab": 49152}}
    with OpenAIStub(answer_a, models_fields=meta) as stub:
        port = stub.port
        first = make(stub, tmp_path)
        first.chat_many(MSGS)
        assert first.identity_source == "/v1/models and canary answer" and "n_params" in first.identity
    with OpenAIStub(answer_b, models_fields=meta, port=port) as stub:
        other = make(stub, tmp_path)
        assert other.chat_many(MSGS) == [answer_b(m) for m in MSGS] and other.usage.cache_hits == 0
        assert other.identity != first.identity


def test_an_alias_resolves_to_the_snapshot_the_server_reports(tmp_path):
    with OpenAIStub(answer_a, models_fields={}, served_model="local-2024-07-18") as stub:
        llm = make(stub, tmp_path)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            llm.chat(MSGS[0])
        assert llm.identity.endswith("|served=local-2024-07-18")


def test_a_server_that_cannot_tell_is_named_in_a_warning(tmp_path):
    with OpenAIStub(answer_a, models_fields={}) as stub:
        llm = make(stub, tmp_path)
        with pytest.warns(UserWarning, match="does not say which weights answer.*identity="):
            llm.chat(MSGS[0])
        assert llm.identity_source == "name and address only"
        pinned = make(stub, tmp_path, identity="my-model-rev-3")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pinned.chat(MSGS[0])
        assert pinned.identity_source == "given"


def test_openai_snapshot_names_need_no_request(tmp_path):
    llm = LLM(model="gpt-4o-mini-2024-07-18", api_key="sk-test", cache=tmp_path / "c.sqlite3", verbose=False)
    llm._client = None  # any request would fail
    assert llm.identity == "gpt-4o-mini-2024-07-18@https://api.openai.com/v1"
    assert llm.identity_source == "snapshot name"
    assert SNAPSHOT.search("gpt-4-0613") and not SNAPSHOT.search("gpt-4o-mini") and not SNAPSHOT.search("local")


def test_a_dead_server_replays_under_the_identity_last_seen_there(tmp_path):
    """Unreachable degrades as before: cached answers are served (with a warning), new ones fail loudly."""
    from pyterrier_tot.errors import LLMConfigurationError

    with OpenAIStub(answer_a) as stub:
        live = make(stub, tmp_path)
        live.chat_many(MSGS[:2])
    dead = make(stub, tmp_path)
    with pytest.warns(UserWarning, match="could not ask the server.*last resolved there"):
        assert dead.chat(MSGS[0]) == answer_a(MSGS[0])
    assert dead.identity == live.identity and dead.identity_source == "fallback"
    assert (dead.usage.cache_hits, dead.usage.calls) == (1, 0)
    with pytest.raises(LLMConfigurationError, match="cannot reach"):
        dead.chat(MSGS[3])


def test_answers_are_never_stored_under_an_identity_the_server_did_not_confirm(tmp_path, monkeypatch):
    """The probe failed (a server still loading its model) and the identity fell back to the one last seen there;
    another model answers now. Once a request gets through the identity is asked for again: the new model's
    answers go under its own identity, never into the old model's cache; if it still cannot be confirmed, they are
    not cached at all."""
    import pyterrier_tot.llm.client as client
    from pyterrier_tot.llm import identity as ident

    meta_a = {"owned_by": "vllm", "root": "/models/a"}
    with OpenAIStub(answer_a, models_fields=meta_a) as stub:
        port = stub.port
        first = make(stub, tmp_path)
        first.chat_many(MSGS[:2])
    real, calls = ident.resolve_identity, []

    def loading_then_up(*a, **kw):  # the first probe fails as a loading server's would
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("503 loading model")
        return real(*a, **kw)

    monkeypatch.setattr(ident, "resolve_identity", loading_then_up)
    with OpenAIStub(answer_b, models_fields={"owned_by": "vllm", "root": "/models/b"}, port=port) as stub:
        swapped = make(stub, tmp_path)
        with pytest.warns(UserWarning, match="could not ask the server"):
            assert swapped.chat(MSGS[3]) == answer_b(MSGS[3])
        assert swapped.identity_source == "/v1/models" and swapped.identity != first.identity
        again = make(stub, tmp_path)
        assert again.chat(MSGS[3]) == answer_b(MSGS[3]) and again.usage.cache_hits == 1  # under b's identity
    cache = client.LLMCache(tmp_path / "llm.sqlite3")
    from pyterrier_tot.llm.cache import request_key

    assert cache.get(request_key(first.identity, MSGS[3], first.params(), None)) is None  # a's cache untouched
    monkeypatch.setattr(ident, "resolve_identity", lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("503")))
    with OpenAIStub(answer_b, models_fields={"owned_by": "vllm", "root": "/models/b"}, port=port) as stub:
        unconfirmed = make(stub, tmp_path)
        with pytest.warns(UserWarning, match="new answers are not cached until it does"):
            assert unconfirmed.chat(MSGS[2]) == answer_b(MSGS[2])
        assert unconfirmed.identity_source == "fallback"
    assert cache.get(request_key(unconfirmed.identity, MSGS[2], first.params(), None)) is None
