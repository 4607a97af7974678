"""Content fingerprints of model files, for cache keys that must change when a model changes.

A model folder is named by its path, and training into the same folder again (or copying another model there)
keeps the path: an index of book vectors or fitted fuser weights keyed by the path alone would then be reused for
a model it was not built with. :func:`model_fingerprint` hashes the weights instead. Hashing a file of hundreds of
megabytes takes a second or two, so each file's hash is remembered per (path, size, mtime) in the cache folder.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Optional, Union

#: The files that hold a model's weights (sentence-transformers, transformers, torch, GGUF, ONNX).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx")
#: Weights of other frameworks (TensorFlow, Flax, checkpoints): hashed only in a folder without any of the above,
#: so that the fingerprints of folders that have both stay what they were.
OTHER_WEIGHT_SUFFIXES = (".h5", ".msgpack", ".ckpt")
#: The files of a model folder that are not weights but shape what it computes: its tokenizer, pooling, sequence
#: length, normalisation (sentence-transformers and transformers keep them as .json / .txt / .model files).
CONFIG_SUFFIXES = (".json", ".txt", ".model")
#: Files that never change what a model computes: the library's own records (rewritten when a model is installed
#: or recorded again), model cards, desktop litter.
NOT_CONFIG = ("pyterrier_tot_training.json", "pt_meta.json", "README.md", "desktop.ini")
_MEMO = "file_hashes.json"
_SEEN: Dict[str, str] = {}  # this process's hashes, by the same key (no re-reading of the memo file)


def file_sha256(path: Union[str, Path]) -> str:
    """The sha256 (hex) of a file's content, remembered per (path, size, mtime) in ``cache_dir()``."""
    from pyterrier_tot._util import cache_dir

    p = Path(path).resolve()
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    if key in _SEEN:
        return _SEEN[key]
    memo_file = cache_dir() / _MEMO
    try:
        memo = json.loads(memo_file.read_text(encoding="utf8"))
    except (OSError, ValueError):
        memo = {}
    memo = memo if isinstance(memo, dict) else {}
    if memo.get(key):
        _SEEN[key] = memo[key]
        return memo[key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    memo[key] = _SEEN[key] = h.hexdigest()
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo), encoding="utf8")
        os.replace(tmp, memo_file)
    except OSError:
        pass  # a read-only cache folder only costs hashing again
    return memo[key]


def weight_files(path: Path) -> List[Path]:
    """The weight files of a model folder (or the file itself), sorted: those of :data:`WEIGHT_SUFFIXES`, or
    where there are none those of :data:`OTHER_WEIGHT_SUFFIXES`."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    files = sorted(f for f in p.rglob("*") if f.is_file())
    return [f for f in files if f.suffix in WEIGHT_SUFFIXES] or [f for f in files if f.suffix in OTHER_WEIGHT_SUFFIXES]


def recorded_before_fingerprints(found: Optional[dict], want: dict, record: Path) -> bool:
    """Whether ``found``, a cache record written before fingerprints were kept, still stands for ``want``: the
    same settings less the ``model_fingerprint``, for a model none of whose weight files is newer than the record
    (not retrained since). Spares re-encoding a large corpus after an upgrade."""
    if not isinstance(found, dict) or "model_fingerprint" in found or "model_fingerprint" not in want:
        return False
    if found != {k: v for k, v in want.items() if k != "model_fingerprint"} or not Path(record).is_file():
        return False
    files = weight_files(Path(str(want.get("model"))).expanduser())
    return bool(files) and max(f.stat().st_mtime for f in files) < Path(record).stat().st_mtime


def model_fingerprint(model) -> Optional[str]:
    """16 hex digits of the sha256 over a local model folder's weight files (their names and contents), or of a
    model file; ``None`` for anything that is not a local path (a hub name stands for itself)."""
    if model is None:
        return None
    p = Path(str(getattr(model, "path", model))).expanduser()
    if not p.exists():
        return None
    files = weight_files(p)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(p) if f != p else f.name}:{file_sha256(f)}\n".encode())
    return h.hexdigest()[:16]


def config_files(path: Path) -> List[Path]:
    """The configuration files of a model folder (:data:`CONFIG_SUFFIXES`, less :data:`NOT_CONFIG`), sorted."""
    p = Path(path)
    if not p.is_dir():
        return []
    return sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in CONFIG_SUFFIXES and f.name not in NOT_CONFIG)


def model_config_digest(model) -> Optional[str]:
    """16 hex digits of the sha256 over a local model folder's configuration files (names and contents: e.g.
    ``sentence_bert_config.json``'s ``max_seq_length``, the tokenizer, the pooling), which
    :func:`model_fingerprint` leaves out; ``None`` for a hub name, a single file or a folder without any."""
    if model is None:
        return None
    p = Path(str(getattr(model, "path", model))).expanduser()
    files = config_files(p)
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(p).as_posix()}:{file_sha256(f)}\n".encode())
    return h.hexdigest()[:16]


def recorded_before_configs(found: Optional[dict], want: dict) -> bool:
    """Whether ``found``, a cache record written before model configurations were recorded, still stands for
    ``want``: the same settings less ``model_config``. (Their keys stay what they were; a configuration edited
    after such a record was written cannot be told, one edited after this version wrote it is.)"""
    if not isinstance(found, dict) or "model_config" in found or "model_config" not in want:
        return False
    return found == {k: v for k, v in want.items() if k != "model_config"}


def stands_for(found: Optional[dict], want: dict, record: Path) -> bool:
    """Whether a cache's recorded settings ``found`` stand for ``want``: equal, or written before model
    configurations (:func:`recorded_before_configs`) or fingerprints (:func:`recorded_before_fingerprints`) were
    recorded and otherwise the same."""
    if found == want or recorded_before_configs(found, want):
        return True
    return recorded_before_fingerprints(found, {k: v for k, v in want.items() if k != "model_config"}, record)


def configs_agree(folder: Path, models: Dict[str, str], file: str = "model_configs.json") -> bool:
    """Whether a cached result in ``folder`` (fitted weights) was made with ``models`` ({name: folder}) configured
    as they are now (:func:`model_config_digest`, recorded in ``file`` there). A folder without the record (made
    before it was kept) is taken as it stands, and the current configurations are recorded for next time."""
    try:
        return json.loads((Path(folder) / file).read_text(encoding="utf8")) == _configs(models)
    except (OSError, ValueError):
        record_configs(folder, models, file)
        return True


def _configs(models: Dict[str, str]) -> Dict[str, str]:
    return {name: d for name, d in ((n, model_config_digest(m)) for n, m in models.items()) if d}


def record_configs(folder: Path, models: Dict[str, str], file: str = "model_configs.json") -> Path:
    """Records ``models``' configurations in ``folder`` (see :func:`configs_agree`); returns ``folder``."""
    try:
        (Path(folder) / file).write_text(json.dumps(_configs(models), sort_keys=True), encoding="utf8")
    except OSError:
        pass  # a read-only cache: nothing recorded, nothing to compare next time
    return Path(folder)


def fingerprint_setting(model) -> dict:
    """``{"model_fingerprint": ...}`` for a local model (see :func:`model_fingerprint`), else ``{}``: the entry a
    cache key adds, absent for a hub name so that keys made before fingerprints were kept stay valid for it."""
    found = model_fingerprint(model)
    return {"model_fingerprint": found} if found else {}


def config_setting(model) -> dict:
    """``{"model_config": ...}`` for a local model folder with configuration files (:func:`model_config_digest`),
    else ``{}``: a cache records it beside the settings it is keyed by and is rebuilt when it differs."""
    found = model_config_digest(model)
    return {"model_config": found} if found else {}
