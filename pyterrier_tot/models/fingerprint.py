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
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Union

#: The files that hold a model's weights (sentence-transformers, transformers, torch, GGUF, ONNX).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx")
#: Weights of other frameworks (TensorFlow, Flax, checkpoints): hashed only in a folder without any of the above,
#: so that the fingerprints of folders that have both stay what they were.
OTHER_WEIGHT_SUFFIXES = (".h5", ".msgpack", ".ckpt")
#: The files of a model folder (and of each module folder ``modules.json`` lists) that are not weights but shape
#: what it computes: the architecture, tokenizer, pooling, sequence length, normalisation, prompts.
CONFIG_NAMES = ("modules.json", "config.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                "vocab.txt", "vocab.json", "merges.txt")
#: Fields of those files that name the library versions or the path a model was saved with, not what it computes
#: (they change when an unchanged model is saved again).
VOLATILE_FIELDS = ("__version__", "transformers_version", "_name_or_path")
_MEMO = "file_hashes.json"
_SEEN: Dict[str, str] = {}  # this process's hashes, by the same key (no re-reading of the memo file)


def file_sha256(path: Union[str, Path]) -> str:
    """The sha256 (hex) of a file's content, remembered per (path, size, mtime) in ``cache_dir()``."""
    from pyterrier_tot._plumbing.util import cache_dir

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
    return _digest(p, weight_files(p), file_sha256)


def _digest(p: Path, files: List[Path], hash_file) -> Optional[str]:
    """16 hex digits of the sha256 over ``files`` of ``p`` (their paths under it and ``hash_file``'s hashes)."""
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(p).as_posix() if f != p else f.name}:{hash_file(f)}\n".encode())
    return h.hexdigest()[:16]


def config_files(path: Path) -> List[Path]:
    """The configuration files of a model folder: :data:`CONFIG_NAMES` and ``*.model`` (a SentencePiece
    tokenizer) in the folder and in the module folders its ``modules.json`` lists, sorted."""
    p = Path(path)
    if not p.is_dir():
        return []
    folders = [p]
    try:
        folders += [p / m["path"] for m in json.loads((p / "modules.json").read_text(encoding="utf8"))
                    if isinstance(m, dict) and m.get("path") and not str(m["path"]).startswith(".")]
    except (OSError, ValueError, TypeError):
        pass
    return sorted({f for d in folders if d.is_dir() for f in d.iterdir()
                   if f.is_file() and (f.name in CONFIG_NAMES or f.suffix == ".model")})


def _config_hash(f: Path) -> str:
    """A JSON file's content less :data:`VOLATILE_FIELDS` (canonical), any other file's bytes."""
    if f.suffix == ".json" and f.stat().st_size < (1 << 20):  # tokenizer.json (megabytes) is hashed as it is
        try:
            data = json.loads(f.read_text(encoding="utf8"))
        except (OSError, ValueError):
            return file_sha256(f)
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in VOLATILE_FIELDS}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return file_sha256(f)


def model_config_digest(model) -> Optional[str]:
    """16 hex digits of the sha256 over a local model folder's configuration files (:func:`config_files`: e.g.
    ``sentence_bert_config.json``'s ``max_seq_length``, the tokenizer, the pooling), which
    :func:`model_fingerprint` leaves out; ``None`` for a hub name, a single file or a folder without any."""
    if model is None:
        return None
    p = Path(str(getattr(model, "path", model))).expanduser()
    return _digest(p, config_files(p), _config_hash)


def _configs_newer(models, record: Path) -> bool:
    """Whether any configuration file of ``models`` (folders) changed after ``record`` was written."""
    try:
        written = Path(record).stat().st_mtime
    except OSError:
        return True
    return any(f.stat().st_mtime > written for m in models for f in config_files(Path(str(m)).expanduser()))


def recorded_before_configs(found: Optional[dict], want: dict, record: Path) -> bool:
    """Whether ``found``, a cache record written before model configurations were recorded, still stands for
    ``want``: the same settings less ``model_config``, for a model none of whose configuration files changed
    after the record was written."""
    if not isinstance(found, dict) or "model_config" in found or "model_config" not in want:
        return False
    if found != {k: v for k, v in want.items() if k != "model_config"}:
        return False
    return not _configs_newer([want.get("model")], record)


def stands_for(found: Optional[dict], want: dict, record: Path) -> bool:
    """Whether a cache's recorded settings ``found`` stand for ``want``: equal, or written before model
    configurations (:func:`recorded_before_configs`) or fingerprints (:func:`recorded_before_fingerprints`) were
    recorded and otherwise the same."""
    if found == want or recorded_before_configs(found, want, record):
        return True
    plain = {k: v for k, v in want.items() if k != "model_config"}
    return recorded_before_fingerprints(found, plain, record) and not _configs_newer([want.get("model")], record)


CONFIGS_FILE = "model_configs.json"


def configs(models: Dict[str, str]) -> Dict[str, str]:
    """{name: :func:`model_config_digest`} of ``models`` ({name: folder}; hub names, which have none, left out)."""
    return {name: d for name, d in ((n, model_config_digest(m)) for n, m in models.items()) if d}


def configs_agree(folder: Path, models: Dict[str, str], made: str = "weights.json") -> bool:
    """Whether a cached result in ``folder`` (fitted weights) was made with ``models`` ({name: folder}) configured
    as they are now (recorded in :data:`CONFIGS_FILE` there by :func:`record_configs`). A folder without the
    record (made before it was kept) stands if no configuration file changed after its ``made`` file was
    written; the current configurations are then recorded. An unreadable record disagrees."""
    record = Path(folder) / CONFIGS_FILE
    if record.exists():
        try:
            return json.loads(record.read_text(encoding="utf8")) == configs(models)
        except (OSError, ValueError):
            return False
    if _configs_newer(models.values(), Path(folder) if Path(folder).is_file() else Path(folder) / made):
        return False
    record_configs(folder, configs(models))
    return True


def record_configs(folder: Path, found: Dict[str, str]) -> Path:
    """Writes ``found`` (:func:`configs`, taken before the result was made) into ``folder`` atomically; returns
    ``folder``."""
    try:
        tmp = Path(folder) / f".{CONFIGS_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(found, sort_keys=True), encoding="utf8")
        os.replace(tmp, Path(folder) / CONFIGS_FILE)
    except OSError:
        pass  # a read-only cache: nothing recorded (the next call compares file times again)
    return Path(folder)


def reuse_fit(path: Path, models: Dict[str, str], made: str = "weights.json") -> bool:
    """Whether the fitted result at ``path`` can be reused for ``models`` (:func:`configs_agree`); a warning when
    one of them was configured otherwise."""
    if configs_agree(path, models, made):
        return True
    warnings.warn(f"{Path(path).name} was fitted with a model configured otherwise (max_seq_length, tokenizer, "
                  "...); fitting it again", stacklevel=3)
    return False


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
