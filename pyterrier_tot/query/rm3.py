"""RM3 pseudo-relevance feedback baseline, through PyTerrier's Terrier integration.

RM3 needs Java and the Terrier jars (``terrier-assemblies`` with dependencies and ``terrier-python-helper``),
which PyTerrier downloads from Maven into ``~/.pyterrier`` (``$PYTERRIER_HOME``) on first use. On a machine
without internet and without those jars RM3 is unavailable: :func:`terrier_available` says so within seconds
(it never starts Java in this process and never waits on the network), and :func:`rm3_pipeline` raises
:class:`TerrierUnavailableError` with the reason::

    from pyterrier_tot.query.rm3 import terrier_available, rm3_pipeline
    if terrier_available():
        rm3 = rm3_pipeline(ds)           # Terrier BM25 >> RM3(fb_docs=10, fb_terms=20) >> Terrier BM25

Terrier indexes its own copy of the corpus (title + text) next to the other indexes; the BM25 of this
pipeline is Terrier's, not PISA's, so compare RM3 with the ``bm25`` stage it returns as well.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Tuple

import pyterrier as pt

_PROBE = """
import pyterrier as pt
pt.java.mavenresolver.offline()
pt.java.init()
from jnius import autoclass
autoclass("org.terrier.querying.ManagerFactory")
print("TERRIER_OK")
"""


from pyterrier_tot.errors import TerrierUnavailableError  # noqa: E402  (re-exported)


def _pyterrier_home() -> Path:
    try:
        return Path(pt.io.pyterrier_home())
    except Exception:  # pragma: no cover
        return Path(os.environ.get("PYTERRIER_HOME", Path.home() / ".pyterrier"))


def _java() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


@functools.lru_cache(maxsize=4)
def terrier_status(timeout: float = 60.0) -> Tuple[bool, str]:
    """``(available, reason)``. Checks, cheapest first: a ``java`` binary, the Terrier jars in PyTerrier's home
    folder, then starts Terrier in a subprocess (offline Maven mode) killed after ``timeout`` seconds."""
    if _java() is None:
        return False, "no java executable (set JAVA_HOME or put java on PATH)"
    home = _pyterrier_home()
    jars = glob.glob(str(home / "terrier-assemblies-*jar-with-dependencies.jar"))
    helpers = glob.glob(str(home / "terrier-python-helper-*.jar"))
    if not jars or not helpers:
        return False, (f"the Terrier jars are not in {home} (terrier-assemblies jar-with-dependencies and "
                       "terrier-python-helper); PyTerrier downloads them from Maven on first use, which needs "
                       "internet")
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return False, f"starting Terrier took more than {timeout:.0f} s"
    if proc.returncode != 0 or "TERRIER_OK" not in proc.stdout:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return False, f"Terrier failed to start: {tail[0][:300]}"
    return True, "Terrier starts"


def terrier_available(timeout: float = 60.0) -> bool:
    """True when Terrier (and hence RM3) can run here; fast and never hangs (see :func:`terrier_status`)."""
    return terrier_status(timeout)[0]


def rm3_pipeline(books, fb_docs: int = 10, fb_terms: int = 20, fb_lambda: float = 0.6, num_results: int = 1000,
                 path: Optional[str] = None, return_bm25: bool = False):
    """Terrier ``BM25 >> RM3 >> BM25`` over ``books`` (a dataset or book frame) with the paper's settings
    (``fb_docs=10``, ``fb_terms=20``, PyTerrier's default interpolation). Raises
    :class:`TerrierUnavailableError` when Terrier cannot start here. With ``return_bm25`` returns
    ``(bm25, rm3)`` so the same-engine baseline comes with it."""
    ok, reason = terrier_status()
    if not ok:
        raise TerrierUnavailableError(f"RM3 needs Terrier: {reason}")
    from pyterrier_tot.index import BookIndex, tokenise_query

    index = BookIndex(books)
    folder = Path(path) if path else index.path / "terrier-title+text"
    if not (folder / "data.properties").exists():
        folder.mkdir(parents=True, exist_ok=True)
        indexer = pt.IterDictIndexer(str(folder.resolve()), meta={"docno": 64}, overwrite=True)
        indexer.index(index.docs_iter(("title", "text")))
    tindex = pt.IndexFactory.of(str(folder.resolve()))
    tokenise = pt.apply.query(lambda row: tokenise_query(row["query"]))
    bm25 = tokenise >> pt.terrier.Retriever(tindex, wmodel="BM25", num_results=num_results)
    rm3 = bm25 >> pt.terrier.rewrite.RM3(tindex, fb_docs=fb_docs, fb_terms=fb_terms, fb_lambda=fb_lambda) \
        >> pt.terrier.Retriever(tindex, wmodel="BM25", num_results=num_results)
    return (bm25, rm3) if return_bm25 else rm3
