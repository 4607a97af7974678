"""Shared code of the test suite: tiny data, stub servers, the inspect / bad-input matrix's cases, scripts the
tests run as processes. Test modules import from here (``from tests.helpers.books import TINY_BOOKS``), never
from ``conftest`` or from one another; ``tests/house/test_test_layout.py`` keeps it so."""
