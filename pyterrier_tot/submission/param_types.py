"""Checking config values against the parameters of the stage they configure (names and annotated types)."""
from __future__ import annotations

import inspect
import os
import typing
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence as _Sequence
from pathlib import Path
from typing import Any, Optional, Union

from pyterrier_tot.errors import ConfigError


# ---------------------------------------------------------------------------------------------- type checks
def _accepts(ann, value) -> Optional[bool]:
    """Whether a TOML ``value`` fits annotation ``ann`` (None: the annotation says nothing checkable)."""
    if ann is inspect.Parameter.empty or ann is Any or isinstance(ann, (str, typing.TypeVar)):
        return None
    origin = typing.get_origin(ann)
    if origin is Union or str(origin) == "types.UnionType":
        verdicts = [_accepts(a, value) for a in typing.get_args(ann)]
        return True if any(verdicts) else (None if None in verdicts else False)
    if ann is type(None):
        return False
    if isinstance(value, dict) and "stage" in value:
        return True  # a nested stage: the built transformer is checked by the callee
    kind = origin or ann
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if kind in (Path, os.PathLike):
        return isinstance(value, str)
    if kind in (list, tuple, _Sequence, _Iterable):
        return isinstance(value, (list, str)) if kind in (_Sequence, _Iterable) else isinstance(value, list)
    if kind in (dict, _Mapping):
        return isinstance(value, dict)
    return isinstance(value, kind) if isinstance(kind, type) else None


def _type_name(value) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "table"}.get(
        type(value), type(value).__name__)


def _signature(obj) -> inspect.Signature:
    try:
        return inspect.signature(obj, eval_str=True)
    except Exception:  # an annotation that does not evaluate here: check names and default types only
        return inspect.signature(obj)


def _check_param(key: str, param: inspect.Parameter, value, source) -> None:
    verdict = _accepts(param.annotation, value)
    if verdict is None and param.default not in (inspect.Parameter.empty, None):
        verdict = _accepts(type(param.default), value)
    if verdict is False:
        want = param.annotation if param.annotation is not inspect.Parameter.empty else type(param.default)
        want = want.__name__ if isinstance(want, type) else str(want).replace("typing.", "")
        raise ConfigError(key, f"wrong type: {_type_name(value)} {value!r}, expected {want}", source)
