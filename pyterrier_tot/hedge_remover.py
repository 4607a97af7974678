"""Moved to :mod:`pyterrier_tot.query.hedge_remover`; this old path warns and reads every name from there."""
from pyterrier_tot import _compat

__getattr__, __dir__ = _compat.moved(__name__)
