"""How the library's transformers print, compare and take their settings (the conventions of pyterrier-dr and
``pta.transformer_repr``).

- :func:`code_repr`: a repr that reads as the call that makes the stage, ``FieldExpert(index, 'title',
  backend='bm25')``: the first arguments by position, then each setting that is not its default by name.
  :func:`method_repr`: the same for a stage a ``BookIndex`` method makes, ``BookIndex(...).bm25(k1=0.9)``;
  :class:`Shown`: an argument that cannot print as code (a frame, a model in memory), as ``<what it is>``.
- :class:`SettingsEquality`: two stages of one class over the same index with equal ``settings()`` compare equal
  and hash alike (a stage built twice is the same stage; :mod:`~pyterrier_tot._plumbing.cache_key` keys it the same).
- :func:`keyword_settings`: settings after the first one or two parameters are keyword-only; a caller that still
  passes them by position gets them mapped to their names, with a ``DeprecationWarning`` naming them.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Dict, Sequence


def code_repr(obj: Any, args: Sequence[Any] = (), settings: Dict[str, Any] = None,
              defaults: Dict[str, Any] = None) -> str:
    """``Class(arg, ..., name=value, ...)``: ``args`` by position (their reprs), then each of ``settings`` whose
    value differs from ``defaults`` (default: the class's ``__init__`` defaults) by name."""
    if defaults is None:
        defaults = _defaults(type(obj).__init__)
    return f"{type(obj).__name__}({_arguments(args, settings, defaults)})"


def method_repr(owner: Any, method: str, args: Sequence[Any] = (), settings: Dict[str, Any] = None) -> str:
    """``Owner(...).method(arg, ..., name=value, ...)``: the call on ``owner`` (its repr) that made a stage, for
    the stages a :class:`~pyterrier_tot.index.BookIndex` method hands out (``index.bm25(k1=0.9)`` prints as
    ``BookIndex('tiny', 5 books, path=...).bm25(fields=('title', 'text'), k1=0.9)``); ``settings`` that are the
    method's defaults are left out."""
    defaults = _defaults(getattr(type(owner), method))
    return f"{owner!r}.{method}({_arguments(args, settings, defaults)})"


class Shown:
    """An argument a repr cannot print as code (a frame, a model in memory), shown as ``<what it is>``:
    ``ClueLookup(<clues of 30 queries>, label='llm')``."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return f"<{self.text}>"


def _defaults(function: Callable) -> Dict[str, Any]:
    params = inspect.signature(function).parameters
    return {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}


def _arguments(args: Sequence[Any], settings: Dict[str, Any], defaults: Dict[str, Any]) -> str:
    parts = [repr(a) for a in args]
    for name, value in (settings or {}).items():
        if name in defaults and _same(value, defaults[name]):
            continue
        parts.append(f"{name}={value!r}")
    return ", ".join(parts)


def _same(a, b) -> bool:
    try:
        return bool(a == b) and type(a) is type(b) or (a is None and b is None)
    except (TypeError, ValueError):  # arrays and frames: never "the default"
        return False


class SettingsEquality:
    """Equality and hash from ``settings()`` (and the index read, by identity): for stages whose ``settings()``
    names everything that changes their result."""

    def _identity(self):
        from pyterrier_tot._plumbing.cache_key import cache_key

        return type(self), id(getattr(self, "index", None)), cache_key(self)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self):
        return hash(self._identity())


def keyword_settings(init: Callable) -> Callable:
    """Decorate an ``__init__`` whose settings are keyword-only (after ``*``): positional values beyond its
    positional parameters are mapped, in order, to the keyword-only ones (the order they had when they were
    positional), with a ``DeprecationWarning`` naming them."""
    params = list(inspect.signature(init).parameters.values())[1:]  # without self
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY]

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        if len(args) > len(positional):
            extra = args[len(positional):]
            if len(extra) > len(keyword):
                raise TypeError(f"{type(self).__name__}() takes at most {len(positional) + len(keyword)} "
                                f"arguments ({len(args)} given)")
            names = keyword[:len(extra)]
            twice = [n for n in names if n in kwargs]
            if twice:
                raise TypeError(f"{type(self).__name__}() got multiple values for {twice}")
            warnings.warn(f"{type(self).__name__}: pass {', '.join(names)} by keyword ({names[0]}=...); settings "
                          "by position are deprecated", DeprecationWarning, stacklevel=2)
            kwargs.update(zip(names, extra))
            args = args[:len(positional)]
        return init(self, *args, **kwargs)

    return wrapper
