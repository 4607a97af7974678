"""Moved to :mod:`pyterrier_tot.recipe.mined_cross_encoder`; this old path warns and reads every name from there."""
from pyterrier_tot import _compat

__getattr__, __dir__ = _compat.moved(__name__)
