"""The ``env`` of the inspect and bad-input matrices: one tiny index, one stub LLM, one tiny CLIP cover index, built
once for each test module that asks for it."""
import pytest

import pyterrier_tot as ptt
from tests.helpers.matrix_inputs import Env, responder
from tests.helpers.openai_stub import OpenAIStub


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    with OpenAIStub(responder) as stub:
        llm = ptt.LLM(model="stub", base_url=stub.base_url, api_key="sk-test", cache=tmp / "llm.sqlite3",
                      verbose=False, concurrency=2)
        yield Env(tmp, llm)
