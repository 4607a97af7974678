"""Sphinx configuration for pyterrier_tot."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

project = "pyterrier_tot"
author = "pyterrier_tot developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_mock_imports = ["llama_cpp"]
autodoc_default_options = {"members": True, "undoc-members": False}
exclude_patterns = ["_build"]
html_theme = "alabaster"
