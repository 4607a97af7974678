"""Moved to :mod:`pyterrier_tot.decomposition.date_resolver`; this old path warns and reads every name from there."""
from pyterrier_tot import _compat

__getattr__, __dir__ = _compat.moved(__name__)
