"""TREC ToT: any ir_datasets ``trec-tot/...`` id, or topics + qrels from a local folder (no corpus)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pandas as pd

from pyterrier_tot._util import shared_data_dir
from pyterrier_tot.bars import bar as progress_bar
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


class TrecTot(BookDataset):
    """A TREC ToT collection through ir_datasets (``trec-tot/2023/train`` ... ``trec-tot/2025/dev3``,
    ``trec-tot/2025/test``).

    The corpus holds Wikipedia pages (title + text; 6.4M of them in 2025), so :class:`~pyterrier_tot.BookIndex`
    streams it (``streaming``) from :meth:`get_corpus_iter` into its folder rather than building a frame, and
    the splits of one year share that index (``corpus_id``, e.g. ``trec-tot/2025``). ir_datasets downloads the
    official files on first use; with ``IR_DATASETS_HOME`` pointing at a folder holding them in the official
    layout (for 2025: ``trec-tot/2025/trec-tot-2025-corpus.jsonl.gz``, ``...-offsets.jsonl.gz``,
    ``<split>-2025-queries.jsonl`` and ``<split>-2025-qrel.txt``), no download happens.
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
        return [Book(**_irds_book(doc)) for doc in self._ds.docs_iter()]

    def _load_topics(self, split: str) -> pd.DataFrame:
        return pd.DataFrame([{"qid": q.query_id, "query": _irds_query_text(q)} for q in self._ds.queries_iter()],
                            columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        if not self._ds.has_qrels():
            raise NotImplementedError(f"{self.irds_id} has no qrels")
        return pd.DataFrame([{"qid": q.query_id, "docno": q.doc_id, "label": int(q.relevance)}
                             for q in self._ds.qrels_iter()], columns=["qid", "docno", "label"])


class TrecTotLocal(BookDataset):
    """TREC ToT topics and qrels from a local folder (``queries.jsonl`` with ``query_id`` and ``query`` or
    ``title``/``text``; ``qrel.txt``), such as the shared ``trec-tot/2023-train``. No corpus."""

    def __init__(self, path: str):
        p = Path(path)
        if not p.is_dir():
            cand = shared_data_dir() / "trec-tot" / path
            if cand.is_dir():
                p = cand
        if not (p / "queries.jsonl").exists():
            raise DatasetUnavailableError(f"no queries.jsonl under {p}")
        self.path = p
        self.name = f"trec-tot-local/{p.name}"
        self.splits = (p.name,)

    def _check_split(self, split):
        return self.splits[0] if split is None else super()._check_split(split)

    def _load_books(self) -> List[Book]:
        raise NotImplementedError(f"{self.name}: no corpus is available for TREC ToT here (Wikipedia pages); "
                                  "use the ir_datasets id, e.g. trec-tot/2023/train, online")

    def _load_topics(self, split: str) -> pd.DataFrame:
        rows = []
        for d in read_jsonl(self.path / "queries.jsonl"):
            text = d.get("query") or "\n".join(x for x in (d.get("title"), d.get("text")) if x)
            rows.append({"qid": str(d.get("query_id", d.get("id"))), "query": text})
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        name = "qrel.txt" if (self.path / "qrel.txt").exists() else "qrels.txt"
        return read_trec_qrels(self.path / name)
