"""The sub-indexes in a :class:`~pyterrier_tot.index.BookIndex` folder: one sub-folder per backend + fields +
model, each written whole or not at all.

A sub-folder holds its index and a ``pt_meta.json`` (type ``book_index_part``) recording the settings and the
corpus fingerprint it was built for. It is built into a temporary folder under an OS lock and renamed into place
when complete, so a second process waits and reuses it and a killed build never looks finished; one built for
another corpus or other settings is rebuilt with a warning naming what differs. The BM25 (PISA) and dense
(FlexIndex) builders, RM3's Lucene index and the density prior all keep their sub-index this way.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Callable, Optional, Tuple

from pyterrier_tot._plumbing import artifact as art
from pyterrier_tot._plumbing.artifact import META_FILE, own_meta, write_meta
from pyterrier_tot._plumbing.util import differing
from pyterrier_tot.models.fingerprint import stands_for

__all__ = ["IndexParts", "PART_TYPE"]

PART_TYPE = "book_index_part"
_LEGACY_MANIFEST = "pyterrier_tot.json"  # sub-index manifest of version 0.1, still honoured


def slug(text: str) -> str:
    """``text`` as a folder name: safe characters only, at most the last 60."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[-60:]


def with_defaults(found: Optional[dict]) -> Optional[dict]:
    """A sub-index manifest with the settings older versions left implicit (dense indexes were all fp32)."""
    if isinstance(found, dict) and found.get("backend") == "flex" and "precision" not in found:
        return {**found, "precision": "fp32"}
    return found


class IndexParts:
    """The sub-index half of :class:`~pyterrier_tot.index.BookIndex`: finding, checking and building the
    sub-folders of ``path`` for the corpus of ``fingerprint`` (``len(self)`` books)."""

    path: Path
    fingerprint: Optional[str]
    lock_timeout: Optional[float]

    def _part(self, sub: str, settings: dict, filename: str, warn: bool = True) -> Tuple[Path, bool]:
        """(where the index of ``settings`` lives, already built?). A sub-folder built for another corpus or
        other settings is reported (it is replaced when the new one is complete)."""
        folder = Path(self.path) / sub
        want = {**settings, "fingerprint": self.fingerprint, "n_docs": len(self)}
        found = with_defaults(own_meta(folder, PART_TYPE))
        if stands_for(found, want, folder / META_FILE):
            return folder / filename, True
        legacy = folder / _LEGACY_MANIFEST
        if legacy.is_file():
            try:
                found = json.loads(legacy.read_text())
            except json.JSONDecodeError:
                found = None
            if with_defaults(found) == want:  # 0.1 kept the PISA index in the sub-folder itself
                return (folder if settings["backend"] == "pisa" else folder / filename), True
        if folder.exists() and warn:  # name what differs: a changed setting should not read like a wrong corpus
            why = differing(with_defaults(found), want)
            warnings.warn(f"index {folder} was built for another corpus or settings ({why}); rebuilding it",
                          stacklevel=4)
        return folder / filename, False

    def _ensure_part(self, sub: str, settings: dict, filename: str, build: Callable[[Path], None]) -> Path:
        """The sub-index of ``settings``, built by ``build(target)`` into a temporary folder (renamed into place
        when complete) unless this or another process already built it."""
        where, built = self._part(sub, settings, filename, warn=False)
        if built:
            return where
        folder = Path(self.path) / sub
        with art.build_lock(folder, self.lock_timeout):
            where, built = self._part(sub, settings, filename)
            if built:  # another process built it while this one waited
                return where
            with art.building(folder, overwrite=folder.exists()) as tmp:
                build(tmp / filename)
                write_meta(tmp, PART_TYPE, settings["backend"], **settings, fingerprint=self.fingerprint,
                           n_docs=len(self))
        return folder / filename
