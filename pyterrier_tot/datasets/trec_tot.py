"""TREC ToT: any ir_datasets ``trec-tot/...`` id, or topics + qrels from a local folder (no corpus)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import urlparse

import pandas as pd

from pyterrier_tot._plumbing.util import is_offline, online, shared_data_dir
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.datasets.base import BookDataset, read_jsonl, read_trec_qrels
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.errors import DatasetUnavailableError

__all__ = ["TrecTot", "TrecTotLocal"]


def _irds_query_text(q) -> str:
    # Later years carry one ``query`` field; 2023 queries a title and a text.
    d = q._asdict()
    if "query" in d and d["query"]:
        return str(d["query"])
    parts = [d.get("title") or "", d.get("text") or ""]
    return "\n".join(p for p in parts if p).strip()


def _irds_book(doc) -> Dict[str, Any]:
    # 2023/2024 pages name their title ``page_title``; 2025 pages ``title`` (and carry a ``url``)
    d = doc._asdict()
    return {"docno": d["doc_id"], "title": d.get("page_title") or d.get("title") or "", "text": d.get("text", ""),
            "url": d.get("url", "")}


def _on_disk(path) -> bool:
    return isinstance(path, (str, os.PathLike)) and str(path) != os.devnull and os.path.exists(path)


def _downloads_needed(source, depth: int = 0) -> List[Any]:
    """The ir_datasets downloads that reading ``source`` (a handler, ``Cache``, ``ZipExtract``, ``Download``, ...)
    still needs: none when its file, or a file it is extracted from, is on disk. ir_datasets fixes these paths when
    it registers a data set, so they are read from its objects rather than rebuilt from ``IR_DATASETS_HOME``."""
    if depth > 8 or _on_disk(getattr(source, "_path", None)):
        return []
    if hasattr(source, "mirrors"):  # a Download: its cache file, or a local copy one of its mirrors names
        local = [getattr(m, "_path", None) for m in source.mirrors]
        return [] if _on_disk(getattr(source, "_cache_path", None)) or any(map(_on_disk, local)) else [source]
    found = []
    for name, value in (vars(source).items() if hasattr(source, "__dict__") else ()):
        if name.endswith("offsets"):  # 2025's page offsets serve look-ups by id, which the library never makes
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if hasattr(v, "mirrors") or callable(getattr(v, "path", None)) or callable(getattr(v, "stream", None)):
                found += _downloads_needed(v, depth + 1)
    return found


def _hosts(download) -> List[str]:
    return [urlparse(m.url).hostname for m in download.mirrors if getattr(m, "url", None)]


def _fetch_hint(downloads) -> str:
    """Where each missing file comes from and where ir_datasets looks for it."""
    steps = []
    for d in downloads:
        target = getattr(d, "_cache_path", None) or next(
            (m._path for m in d.mirrors if getattr(m, "_path", None) is not None), "ir_datasets' downloads folder")
        url = next((m.url for m in d.mirrors if getattr(m, "url", None)), None)
        steps.append(f"download {url} and save it as {target}" if url else f"put the file at {target}")
    return ("; ".join(steps) + " (ir_datasets' home is $IR_DATASETS_HOME, default ~/.ir_datasets; set it before "
            "Python starts), or run once online")


#: The parts of an ir_datasets id, as a message names them.
_PARTS = {"queries": "topics", "qrels": "qrels", "docs": "corpus"}


class TrecTot(BookDataset):
    """A TREC ToT collection through ir_datasets (``trec-tot/2023/train`` ... ``trec-tot/2025/dev3``,
    ``trec-tot/2025/test``).

    The corpus holds Wikipedia pages (title + text; 6.4M of them in 2025), so :class:`~pyterrier_tot.BookIndex`
    streams it (``streaming``) from :meth:`get_corpus_iter` into its folder rather than building a frame, and
    the splits of one year share that index (``corpus_id``, e.g. ``trec-tot/2025``). ir_datasets downloads the
    official files on first use; with ``IR_DATASETS_HOME`` pointing at a folder holding them in the official
    layout (for 2025: ``trec-tot/2025/trec-tot-2025-corpus.jsonl.gz``, ``...-offsets.jsonl.gz``,
    ``<split>-2025-queries.jsonl`` and ``<split>-2025-qrel.txt``), no download happens.

    Offline (:func:`~pyterrier_tot._plumbing.util.is_offline`), or when the download's host does not answer within a few
    seconds (:func:`~pyterrier_tot._plumbing.util.online`), a part whose files are not on disk raises
    :class:`~pyterrier_tot.errors.DatasetUnavailableError` naming the file to fetch and where to save it, before
    ir_datasets tries the network: at once when nothing of the id is on disk, else when the missing part (topics,
    qrels or corpus) is read.
    """

    streaming = True

    def __init__(self, irds_id: str):
        import ir_datasets

        if not irds_id.startswith("trec-tot"):
            raise ValueError(f"{irds_id!r} is not a TREC ToT ir_datasets id")
        if irds_id not in ir_datasets.registry:
            known = [k for k in ir_datasets.registry._registered if k.startswith("trec-tot")]
            raise KeyError(f"unknown ir_datasets id {irds_id!r}; known TREC ToT ids: {known}")
        self.irds_id = irds_id
        self.name = irds_id
        self._ds = ir_datasets.load(irds_id)
        self.splits = (irds_id.rsplit("/", 1)[-1],)
        self.corpus_id = "/".join(irds_id.split("/")[:2])
        parts = [p for p in _PARTS if getattr(self._ds, f"has_{p}")()]
        if parts and all(self._missing(p) for p in parts):  # nothing on disk: say so now, not at first use
            self._require(*parts)

    def _missing(self, part: str) -> List[Any]:
        if not getattr(self._ds, f"has_{part}")():
            return []
        return _downloads_needed(getattr(self._ds, f"{part}_handler")())

    def _require(self, *parts: str) -> None:
        """Raise :class:`DatasetUnavailableError` when a file of ``parts`` is neither on disk nor downloadable now
        (offline, or its host does not answer); otherwise ir_datasets reads or downloads it."""
        needed, seen = [], set()
        for d in (d for p in parts for d in self._missing(p)):
            key = getattr(d, "_cache_path", None) or id(d)
            if key not in seen:
                seen.add(key)
                needed.append(d)
        if not needed:
            return
        if is_offline():
            why = "offline: HF_HUB_OFFLINE or PYTERRIER_TOT_OFFLINE is set"
        else:  # the one network check, a few seconds per host at most; a host that answers is left to ir_datasets
            needed = [d for d in needed if not any(online(h) for h in _hosts(d))]
            if not needed:
                return
            why = f"{', '.join(sorted({h for d in needed for h in _hosts(d)}) or ['no host'])} cannot be reached"
        what = [_PARTS[p] for p in parts]
        what = ", ".join(what[:-1]) + " and " + what[-1] if len(what) > 1 else what[0]
        raise DatasetUnavailableError(f"{self.irds_id}: the {what} {'is' if parts == ('docs',) else 'are'} not on disk "
                                      f"and cannot be downloaded here ({why}); {_fetch_hint(needed)}")

    def docs_count(self) -> Optional[int]:
        """The number of pages ir_datasets declares (shown by progress bars; the index counts what it reads)."""
        try:
            return self._ds.docs_count() if self._ds.has_docs() else None
        except (AttributeError, NotImplementedError):
            return None

    def get_corpus_iter(self, verbose: bool = False, fields: Optional[List[str]] = None) -> Iterator[Dict[str, Any]]:
        """The pages one at a time, straight from ir_datasets (never all in memory): dicts with ``docno``,
        ``title``, ``text`` and ``url`` (or only ``fields``)."""
        if not self._ds.has_docs():
            raise NotImplementedError(f"{self.irds_id} has no documents")
        self._require("docs")
        it = (_irds_book(doc) for doc in self._ds.docs_iter())
        if fields is not None:
            it = ({k: d.get(k, "") for k in ["docno", *fields]} for d in it)
        if verbose:
            it = progress_bar(it, total=self.docs_count(), desc=f"{self.name} pages", unit="doc")
        return it

    def _check_split(self, split):
        return self.splits[0] if split is None else super()._check_split(split)

    def _load_books(self) -> List[Book]:
        if not self._ds.has_docs():
            raise NotImplementedError(f"{self.irds_id} has no documents")
        self._require("docs")
        return [Book(**_irds_book(doc)) for doc in self._ds.docs_iter()]

    def _load_topics(self, split: str) -> pd.DataFrame:
        self._require("queries")
        return pd.DataFrame([{"qid": q.query_id, "query": _irds_query_text(q)} for q in self._ds.queries_iter()],
                            columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        if not self._ds.has_qrels():
            raise NotImplementedError(f"{self.irds_id} has no qrels")
        self._require("qrels")
        return pd.DataFrame([{"qid": q.query_id, "docno": q.doc_id, "label": int(q.relevance)}
                             for q in self._ds.qrels_iter()], columns=["qid", "docno", "label"])


class TrecTotLocal(BookDataset):
    """TREC ToT topics and qrels from a local folder (``queries.jsonl`` with ``query_id`` and ``query`` or
    ``title``/``text``; ``qrel.txt``), such as the shared ``trec-tot/2023-train``. No corpus.

    ``path`` (the ``<folder>`` of ``trec-tot-local/<folder>``): an absolute folder, or a relative one, looked for
    first in the current directory, then in the shared data's ``trec-tot`` folder
    (``$PYTERRIER_TOT_DATA/trec-tot``, default ``../shared/data/trec-tot``); the first that holds a
    ``queries.jsonl`` is used. A folder found in neither raises :class:`DatasetUnavailableError` naming both."""

    def __init__(self, path: str):
        given = Path(path).expanduser()
        shared = shared_data_dir() / "trec-tot"
        tried = [given] if given.is_absolute() else [Path.cwd() / given, shared / given]
        p = next((c for c in tried if (c / "queries.jsonl").is_file()), None)
        if p is None:
            where = f"{tried[0]}" if len(tried) == 1 else (
                f"{tried[0]} (relative to the current directory) or in {tried[1]} (the shared data's trec-tot "
                "folder, $PYTERRIER_TOT_DATA/trec-tot)")
            there = sorted(c.name for c in shared.iterdir() if (c / "queries.jsonl").is_file()) \
                if shared.is_dir() and len(tried) > 1 else []
            raise DatasetUnavailableError(f"trec-tot-local/{path}: no queries.jsonl in {where}"
                                          + (f"; the shared folders are {', '.join(there)}" if there else ""))
        self.path = p
        self.name = f"trec-tot-local/{p.name}"
        self.splits = (p.name,)

    def _check_split(self, split):
        return self.splits[0] if split is None else super()._check_split(split)

    def _load_books(self) -> List[Book]:
        raise NotImplementedError(f"{self.name}: no corpus is available for TREC ToT here (Wikipedia pages); "
                                  "use the ir_datasets id, e.g. trec-tot/2023/train, whose corpus ir_datasets "
                                  "downloads online or reads from $IR_DATASETS_HOME")

    def _load_topics(self, split: str) -> pd.DataFrame:
        rows = []
        for d in read_jsonl(self.path / "queries.jsonl"):
            text = d.get("query") or "\n".join(x for x in (d.get("title"), d.get("text")) if x)
            rows.append({"qid": str(d.get("query_id", d.get("id"))), "query": text})
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        name = "qrel.txt" if (self.path / "qrel.txt").exists() else "qrels.txt"
        return read_trec_qrels(self.path / name)
