"""Every test in this folder is a repository rule (layout, sizes, citations, lint, imports), not a behaviour of
the package: each gets the ``house`` marker, so ``pytest -m "not house"`` runs the behaviour tests alone."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.house)
