"""Cache keys from explicit settings, never from reprs.

Whatever is cached because of a stage (the fuser weights fitted over an extra expert's scores, a model trained on a
pipeline's ranking) is keyed by what changes that stage's result, which the stage states itself::

    class MyExpert(pt.Transformer):
        SETTINGS_VERSION = 1                  # bump when the same settings start to give other scores

        def settings(self) -> dict:           # plain values: text, numbers, None, lists, dicts
            return {"field": self.field, "k": self.k}

:func:`settings_of` adds the class and its version to that dictionary, and :func:`cache_key` is the digest of it as
sorted JSON: two stages with equal settings share a key however they print, and a setting changed gives another
key. The index, the data and the models' weights a stage reads are keyed by the caller beside it (the recipe's
weights key holds the corpus fingerprint and the models' weights fingerprints).

PyTerrier's operators (``>>``, ``+``, ``*``, ``%``, ``**``) are keyed by their parts. A transformer from elsewhere
that has no ``settings()`` is keyed by its class and its repr, the only description it gives; give it a
``settings()`` method to key it by what changes its result.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pyterrier_tot._compat import KEYED_AS

#: The layout of :func:`settings_of`'s dictionaries; bump it when that layout changes (every key changes with it).
KEY_FORMAT = 1


def _class_name(obj) -> str:
    """The class's full name; a class that moved keeps the name it was keyed by
    (:data:`~pyterrier_tot._compat.KEYED_AS`), so what was cached for it is found again."""
    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    return KEYED_AS.get(name, name)


def settings_of(obj) -> Any:
    """The explicit settings of ``obj`` as plain values: a stage's ``settings()`` with its class and
    ``SETTINGS_VERSION``; lists, dicts and scalars as they are; PyTerrier's operators by their parts."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): settings_of(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [settings_of(v) for v in obj]
    if hasattr(obj, "dtype") and hasattr(obj, "tolist"):  # numpy scalars and arrays
        return settings_of(obj.tolist())
    own = getattr(obj, "settings", None)
    if callable(own):
        return {"class": _class_name(obj), "version": getattr(obj, "SETTINGS_VERSION", 1), **settings_of(own())}
    if type(obj).__module__.startswith("pyterrier._ops"):
        parts = list(getattr(obj, "_transformers", ())) or [getattr(obj, side) for side in ("left", "right")
                                                            if hasattr(obj, side)]
        out = {"class": _class_name(obj), "parts": [settings_of(p) for p in parts]}
        out.update({a: settings_of(vars(obj)[a]) for a in ("k", "scalar") if a in vars(obj)})
        return out
    return {"class": _class_name(obj), "repr": repr(obj)}


def cache_key(obj, length: int = 16) -> str:
    """The digest (sha1, first ``length`` hex digits) of :func:`settings_of` ``obj`` as sorted JSON."""
    text = json.dumps({"format": KEY_FORMAT, "settings": settings_of(obj)}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:length]
