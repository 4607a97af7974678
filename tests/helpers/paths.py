"""Where the checkout and the shared data are."""
import os
from pathlib import Path

from pyterrier_tot._plumbing.util import shared_data_dir

#: the checkout's root folder
ROOT = Path(__file__).resolve().parents[2]
#: the shared data folder beside the checkout ($PYTERRIER_TOT_DATA)
SHARED = shared_data_dir()


def child_env(**extra) -> dict:
    """The environment for a Python child process that imports ``tests.helpers`` (the checkout first on its
    path), with ``extra`` variables set."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}
