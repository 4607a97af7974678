"""``import pyterrier_tot`` is cheap: the subpackage that needs torch (generative retrieval) loads on first use, so a
CLI call, a notebook kernel or a worker process that never touches it does not pay torch's import."""
import subprocess
import sys

import pytest

_PROBE = """
import sys
import pyterrier_tot as ptt
print("torch" in sys.modules, "sentence_transformers" in sys.modules)
print(ptt.GenerativeModel.__module__, ptt.GenerativeRetriever.__name__)
print("torch" in sys.modules, "GenerativeModel" in dir(ptt))
from pyterrier_tot import *
print(GenerativeRetriever is ptt.GenerativeRetriever)
"""


def test_the_package_imports_without_torch_and_loads_generative_on_first_use():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False False", out      # nothing of torch before a generative name is read
    assert out[1] == "pyterrier_tot.generative.retriever GenerativeRetriever"
    assert out[2] == "True True" and out[3] == "True"


def test_an_unknown_name_is_an_attribute_error():
    import pyterrier_tot as ptt

    with pytest.raises(AttributeError, match="no attribute 'NoSuchStage'"):
        _ = ptt.NoSuchStage
