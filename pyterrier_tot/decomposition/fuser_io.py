"""The saved form of a :class:`~pyterrier_tot.decomposition.weighted_fuser.WeightedFuser`'s weights: reading the
``weights.json`` of a ``fuser_weights`` folder (or the single JSON file of earlier versions), refusing anything
else by name."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pyterrier as pt

from pyterrier_tot._plumbing.artifact import damaged, read_meta

WEIGHTS_FILE = "weights.json"
#: The artifact type of a saved fuser folder (``FuserWeights``).
WEIGHTS_TYPE = "fuser_weights"


def _holds_weights(path: Path) -> bool:
    try:
        _read_weights(path)
    except (OSError, ValueError, KeyError):
        return False
    return True


def _read_weights(path) -> Dict[str, Any]:
    path = Path(str(path.path) if isinstance(path, pt.Artifact) else os.fspath(path)).expanduser()
    if path.is_dir():
        kind = read_meta(path).get("type")
        if kind != WEIGHTS_TYPE:
            raise ValueError(f"{path} holds a {kind!r} artifact, not fuser weights")
        path = path / WEIGHTS_FILE
    try:
        d = json.loads(path.read_text(encoding="utf8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise damaged(path.parent if path.name == WEIGHTS_FILE else path, path.name, e, "WeightedFuser.fit + save") \
            from None
    if not isinstance(d, dict) or "weights" not in d or "names" not in d:
        raise ValueError(f"{path} is not a saved WeightedFuser (no 'names' and 'weights')")
    return d
