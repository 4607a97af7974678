"""The code base is ruff-clean (configuration in pyproject.toml)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff():
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    if shutil.which("ruff"):
        return [shutil.which("ruff")]
    pytest.fail("ruff is not installed: it is in the 'test' extra (pip install -e '.[test]')")


def test_ruff_clean():
    res = subprocess.run([*_ruff(), "check", "--no-cache", "pyterrier_tot", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
