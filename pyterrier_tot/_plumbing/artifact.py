"""One on-disk format for everything the library saves and loads back.

Every saved object (book index, fine-tuned bi-encoder, fuser weights, cover index, CLIP checkpoint) is a
folder holding its own files plus ``pt_meta.json``::

    {"type": "book_index", "format": "pyterrier_tot", "package_hint": "pyterrier-tot",
     "pyterrier_tot_version": "0.2.0", "created": "2026-11-23T18:00:00", ...type-specific keys...}

``type.format`` names a ``pyterrier.artifact`` entry point (setup.cfg), so ``pt.Artifact.load(path)`` opens
any of them without knowing the class. Folders are written into a temporary sibling and renamed into place
when complete, so a crash mid-build never leaves a folder that looks finished; :func:`build_lock` serialises
processes building the same folder and removes what a killed build left behind. Nothing is unpickled on load:
tables are JSON/JSONL/parquet, arrays ``.npy`` (``allow_pickle=False``), weights safetensors.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, TypeVar, Union

import pyterrier as pt

from pyterrier_tot._plumbing.util import file_lock
from pyterrier_tot.errors import CorruptArtifactError

T = TypeVar("T")

META_FILE = "pt_meta.json"
PACKAGE_HINT = "pyterrier-tot"
#: Keys that every ``pt_meta.json`` written by the library has; the rest are the artifact's own.
RESERVED = ("type", "format", "package_hint", "pyterrier_tot_version", "created")


def in_cache(path: Union[str, Path]) -> bool:
    """Whether ``path`` lies in the library's own cache folder (which the library may rebuild on its own)."""
    from pyterrier_tot._plumbing.util import cache_dir

    try:
        Path(path).resolve().relative_to(cache_dir().resolve())
        return True
    except ValueError:
        return False


def damaged(path: Union[str, Path], what: str, why: object, rebuild: str = "") -> CorruptArtifactError:
    """The error for a damaged artifact folder: names the folder and the file, and says what to do."""
    todo = (f"delete the folder (rm -r {str(path)!r}) and build it again" + (f" ({rebuild})" if rebuild else ""))
    if in_cache(path):
        todo += "; it is in the library's cache, so building it again from its source replaces it on its own"
    return CorruptArtifactError(f"{path}: {what} is damaged ({why}); the folder was half-written, edited or "
                                f"truncated. To fix it: {todo}")


def read_meta(path: Union[str, Path]) -> Dict[str, Any]:
    """The ``pt_meta.json`` of an artifact folder (raises ``FileNotFoundError`` naming the folder, or
    :class:`~pyterrier_tot.errors.CorruptArtifactError` when the file is not a JSON object)."""
    f = Path(path) / META_FILE
    if not f.is_file():
        raise FileNotFoundError(f"{path} is not a saved pyterrier_tot artifact (no {META_FILE})")
    try:
        meta = json.loads(f.read_text(encoding="utf8"))
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise damaged(path, META_FILE, e) from None
    if not isinstance(meta, dict):
        raise damaged(path, META_FILE, f"a JSON {type(meta).__name__}, not an object")
    return meta


def own_meta(folder: Union[str, Path], artifact_type: str) -> Optional[Dict[str, Any]]:
    """The artifact-specific keys of ``folder``'s ``pt_meta.json`` when it is a sound artifact of
    ``artifact_type``; None when it is absent, damaged or of another type (callers then build it anew)."""
    try:
        meta = read_meta(folder)
    except (FileNotFoundError, CorruptArtifactError):
        return None
    if meta.get("type") != artifact_type:
        return None
    return {k: v for k, v in meta.items() if k not in RESERVED}


def write_meta(folder: Union[str, Path], artifact_type: str, artifact_format: str, **meta: Any) -> Dict[str, Any]:
    """Write ``pt_meta.json`` into ``folder`` (the library's one metadata format) and return what was written."""
    from pyterrier_tot import __version__

    clash = [k for k in meta if k in RESERVED]
    if clash:
        raise ValueError(f"metadata keys {clash} are reserved")
    data = {"type": artifact_type, "format": artifact_format, "package_hint": PACKAGE_HINT,
            "pyterrier_tot_version": __version__,
            "created": datetime.datetime.now().isoformat(timespec="seconds"), **meta}
    Path(folder, META_FILE).write_text(json.dumps(data, indent=2, default=str), encoding="utf8")
    return data


@contextlib.contextmanager
def building(path: Union[str, Path], overwrite: bool = False) -> Iterator[Path]:
    """Build an artifact folder atomically: yields a temporary sibling folder to write into; on success it is
    renamed to ``path`` (replacing an old folder when ``overwrite``), on error it is removed and an old folder
    stays in place. The whole build holds :func:`build_lock` of ``path`` (re-entrant), so two processes never
    build the same folder at once and the files of a killed build are removed by the next one."""
    path = Path(path)
    with build_lock(path):
        # checked under the lock: another process may have finished the same folder while this one waited
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.building.", dir=str(path.parent)))
        old = None
        try:
            yield tmp
            if not (tmp / META_FILE).is_file():
                raise RuntimeError(f"internal error: {path} was built without {META_FILE}")
            if path.exists():
                old = path.parent / f".{path.name}.old.{os.getpid()}"
                os.replace(path, old)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and not path.exists():
                os.replace(old, path)  # the new folder could not be put in place: keep the old one
            raise
        if old is not None:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()


def lock_path(path: Union[str, Path]) -> Path:
    """The lock file of the artifact folder ``path``: a hidden sibling, so it survives the folder being replaced."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


def leftovers(path: Union[str, Path]) -> list:
    """Temporary siblings of ``path`` left by :func:`building` (a build in progress, or one that was killed)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    prefixes = (f".{path.name}.building.", f".{path.name}.old.")
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(prefixes))


@contextlib.contextmanager
def build_lock(path: Union[str, Path], timeout: Optional[float] = None) -> Iterator[None]:
    """The exclusive right to build the artifact folder ``path``, across processes (see
    :func:`~pyterrier_tot._plumbing.util.file_lock`; ``timeout`` in seconds). Callers check again whether ``path`` was
    built while they waited. On entry, temporary folders of ``path`` are removed: with the lock held no live
    process is writing them, so they were left by a build that was killed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lock_path(path), timeout, what=str(path)):
        for stale in leftovers(path):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        yield


@contextlib.contextmanager
def build_locks(paths: Iterable[Union[str, Path]], timeout: Optional[float] = None) -> Iterator[None]:
    """:func:`build_lock` of every folder of ``paths`` (one training run that writes several, e.g. a checkpoint per
    epoch), taken in a fixed order so that two processes asking for overlapping sets never wait on each other."""
    with contextlib.ExitStack() as stack:
        for path in sorted({Path(p).absolute() for p in paths}):
            stack.enter_context(build_lock(path, timeout))
        yield


def train_once(path: Union[str, Path], found: Callable[[], Optional[T]], make: Callable[[], T],
               timeout: Optional[float] = None, also: Iterable[Union[str, Path]] = ()) -> T:
    """A trained artifact built once across processes: ``found()`` (what is cached at ``path``, or None) is asked
    first; when nothing is found, :func:`build_lock` of ``path`` (and of the folders ``also`` that the same run
    writes) is held for the whole of ``make()``, so a second process asking for the same artifact waits (up to
    ``timeout``; see :func:`~pyterrier_tot._plumbing.util.lock_timeout`), then asks ``found()`` again and reuses
    what the first one made. A killed trainer's lock is dropped by the OS: the next call trains."""
    got = found()
    if got is not None:
        return got
    with build_locks([path, *also], timeout):
        got = found()  # another process may have finished it while this one waited
        return got if got is not None else make()


def add_files(folder: Union[str, Path], make: Callable[[Path], None], owner: Union[str, Path]) -> List[str]:
    """Add files to the finished folder ``folder`` for a library that writes them in place (PISA's score
    files): ``make(stage)`` runs on a temporary folder of links to ``folder``'s files, and the files it adds are
    renamed into ``folder`` one by one (each complete, in name order), so a crash never leaves a half-written one.
    The caller holds :func:`build_lock` of ``owner``, whose temporary-folder names the stage takes (so a killed
    run's stage is removed by the next lock). Returns the names added."""
    folder = Path(folder).absolute()
    owner = Path(owner).absolute()
    stage = Path(tempfile.mkdtemp(prefix=f".{owner.name}.building.", dir=str(owner.parent)))
    try:
        before = set(os.listdir(folder))
        for name in before:
            os.symlink(folder / name, stage / name)
        make(stage)
        added = sorted(set(os.listdir(stage)) - before)
        for name in added:
            os.replace(stage / name, folder / name)
        return added
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class ToTArtifact(pt.Artifact):
    """Base of the library's artifacts: ``ARTIFACT_TYPE`` / ``ARTIFACT_FORMAT`` name the entry point, and
    :meth:`meta` reads ``pt_meta.json``."""

    ARTIFACT_TYPE: str = ""
    ARTIFACT_FORMAT: str = "pyterrier_tot"

    def meta(self) -> Dict[str, Any]:
        return read_meta(self.path)

    def built(self) -> bool:
        return (Path(self.path) / META_FILE).is_file()

    def _await_build(self, timeout: Optional[float], hint: str) -> None:
        """Before opening: if a build of this folder was started but has not finished, wait for it (at most
        ``timeout`` seconds); one that was killed raises ``FileNotFoundError`` saying so, with ``hint``."""
        path = Path(self.path)
        if self.built() or not lock_path(path).is_file():
            return
        started = bool(leftovers(path))  # (a lock file alone may just outlive a folder that was deleted)
        with build_lock(path, timeout):
            pass
        if started and not self.built():
            raise FileNotFoundError(f"{path}: the build of this artifact was interrupted before it finished; {hint}")

    def _check_type(self) -> None:
        meta = self.meta()
        if meta.get("type") != self.ARTIFACT_TYPE:
            raise ValueError(f"{self.path} holds a {meta.get('type')!r} artifact, not a {self.ARTIFACT_TYPE!r}")

    def _write_meta(self, folder: Union[str, Path], **meta: Any) -> Dict[str, Any]:
        return write_meta(folder, self.ARTIFACT_TYPE, self.ARTIFACT_FORMAT, **meta)

    def __repr__(self):
        return f"{type(self).__name__}({str(self.path)!r})"


def artifact_path(obj: Any) -> Optional[str]:
    """The folder of an artifact object, or ``obj`` itself when it is a path (for ``model=`` style arguments)."""
    if isinstance(obj, pt.Artifact):
        return str(obj.path)
    if isinstance(obj, (str, os.PathLike)):
        return str(obj)
    return None
