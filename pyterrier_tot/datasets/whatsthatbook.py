"""WhatsThatBook (Lin et al., 2023), from a local folder or the Hugging Face hub."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pandas as pd

from pyterrier_tot._plumbing.util import cache_dir, hub_reachable, is_offline, shared_data_dir
from pyterrier_tot.datasets.base import BookDataset, read_jsonl
from pyterrier_tot.datasets.books import Book, parse_year
from pyterrier_tot.errors import DatasetUnavailableError

__all__ = ["WhatsThatBook", "book_from_record"]


def _first(d: Dict[str, Any], keys: Sequence[str], default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None and not (isinstance(d[k], float) and d[k] != d[k]):
            return d[k]
    return default


# The released files and their re-uploads name the same field differently; the first key present wins.
_BOOK_KEYS = {
    "docno": ("book_id", "docno", "doc_id", "gold_book_id", "id"),
    "title": ("book_title", "title"),
    "author": ("author", "authors", "book_author"),
    "text": ("description", "book_description", "text", "plot", "blurb"),
    "genres": ("genres", "genre", "tags"),
    "year": ("year", "publication_year", "date", "publication_date", "parsed_dates", "first_published"),
    "cover": ("cover", "cover_path", "image_path", "image_url", "cover_url", "image"),
    "url": ("url", "book_url", "link"),
}
_QUERY_KEYS = {
    "qid": ("post_id", "query_id", "qid", "id"),
    "title": ("post_title", "question_title", "query_title"),
    "text": ("query", "question", "post", "post_text", "body", "query_text"),
    "gold": ("book_id", "gold_book_id", "docno", "answer_id"),
}


def book_from_record(d: Dict[str, Any], prefix_keys: Dict[str, Sequence[str]] = _BOOK_KEYS) -> Book:
    """Build a :class:`~pyterrier_tot.datasets.books.Book` from a record with any of the common
    WhatsThatBook/Goodreads field names."""
    year = _first(d, prefix_keys["year"])
    if isinstance(year, (list, tuple)):
        years = [parse_year(y) for y in year]
        years = [y for y in years if y is not None]
        year = min(years) if years else None
    return Book(
        docno=_first(d, prefix_keys["docno"]),
        title=_first(d, prefix_keys["title"], ""),
        author=_first(d, prefix_keys["author"], ""),
        text=_first(d, prefix_keys["text"], ""),
        genres=_first(d, prefix_keys["genres"], ""),
        year=year,
        cover=_first(d, prefix_keys["cover"], ""),
        url=_first(d, prefix_keys["url"], ""),
    )


class WhatsThatBook(BookDataset):
    """WhatsThatBook (Lin et al., 2023): 14,441 query-book pairs from the GoodReads "What's the Name of That
    Book?" group, with book metadata (title, author, description, genres, date, cover image).

    Sources: a local folder (``path``) or, when online, the Hugging Face dataset ``nlpkevinl/whatsthatbook``
    (fetched once with ``huggingface_hub.snapshot_download``). Local layout, JSONL or parquet:

    - ``books.jsonl`` (optional): one book per line: ``book_id`` (or ``id``), ``title``, ``author``,
      ``description``, ``genres`` (list or comma string), ``date`` (any text with a year; parsed to ``year``),
      ``image_url`` or ``cover`` (path or URL).
    - ``<split>.jsonl`` for split in train / validation / test: one query per line: ``post_id`` (or
      ``query_id``), ``query`` (or ``post_title`` + ``question``), and the gold ``book_id``. When there is no
      ``books.jsonl``, book fields on the query rows (``book_title``, ``author``, ``description``, ...) define
      the corpus, as in the paper (all gold books form the collection).

    A relative cover path is resolved against the folder.
    """

    name = "whatsthatbook"
    HF_ID = "nlpkevinl/whatsthatbook"
    SPLIT_ALIASES = {"train": ("train",), "validation": ("validation", "valid", "dev", "val"), "test": ("test",)}

    def __init__(self, path: Optional[str] = None, download: bool = True):
        if path is None:
            path = os.environ.get("PYTERRIER_TOT_WHATSTHATBOOK")
        if path is None:
            local = shared_data_dir() / "whatsthatbook"
            path = str(local) if local.is_dir() else None
        if path is None:
            path = str(self._download(download))
        self.path = Path(path)
        if not self.path.is_dir():
            raise DatasetUnavailableError(f"WhatsThatBook folder {self.path} does not exist")
        self._split_files = {}
        for split, aliases in self.SPLIT_ALIASES.items():
            for alias in aliases:
                hits = sorted(self.path.rglob(f"{alias}.jsonl")) + sorted(self.path.rglob(f"{alias}-*.parquet")) \
                    + sorted(self.path.rglob(f"{alias}.parquet"))
                if hits:
                    self._split_files[split] = hits
                    break
        self.splits = tuple(self._split_files)
        if not self.splits:
            raise DatasetUnavailableError(f"{self.path}: no train/validation/test .jsonl or .parquet files")

    def _download(self, download: bool) -> Path:
        target = cache_dir() / "whatsthatbook"
        if target.is_dir() and (any(target.rglob("*.jsonl")) or any(target.rglob("*.parquet"))):
            return target
        why = "download=False" if not download else "offline: HF_HUB_OFFLINE or PYTERRIER_TOT_OFFLINE is set" \
            if is_offline() else None if hub_reachable() else "huggingface.co cannot be reached"
        if why:
            raise DatasetUnavailableError(
                f"WhatsThatBook is not on disk and cannot be downloaded here ({why}); download the Hugging Face "
                f"dataset {self.HF_ID} ({self.info_url()}) into {shared_data_dir() / 'whatsthatbook'} or {target}, "
                "or pass path=... (or set PYTERRIER_TOT_WHATSTHATBOOK) to the folder holding it")
        from huggingface_hub import snapshot_download  # pragma: no cover - needs the network
        return Path(snapshot_download(self.HF_ID, repo_type="dataset", local_dir=str(target)))  # pragma: no cover

    @staticmethod
    def _records(path: Path) -> Iterator[Dict[str, Any]]:
        if path.suffix == ".parquet":
            yield from pd.read_parquet(path).to_dict("records")
        else:
            yield from read_jsonl(path)

    def _split_records(self, split: str) -> List[Dict[str, Any]]:
        out = []
        for p in self._split_files[split]:
            out.extend(self._records(p))
        return out

    def _resolve_cover(self, book: Book) -> Book:
        if book.cover and "://" not in book.cover and not os.path.isabs(book.cover):
            cand = self.path / book.cover
            if cand.exists():
                book.cover = str(cand)
        return book

    def _load_books(self) -> List[Book]:
        books_file = next(iter(sorted(self.path.rglob("books.jsonl"))), None)
        if books_file is not None:
            return [self._resolve_cover(book_from_record(d)) for d in read_jsonl(books_file)]
        books = []
        for split in self.splits:
            for d in self._split_records(split):
                gold = _first(d, _QUERY_KEYS["gold"])
                if gold is None:
                    continue
                rec = dict(d)
                rec["book_id"] = gold
                rec.pop("id", None)  # the query's own id, which book_from_record would take for the docno
                books.append(self._resolve_cover(book_from_record(rec)))
        return books

    def _load_topics(self, split: str) -> pd.DataFrame:
        rows = []
        for d in self._split_records(split):
            qid = _first(d, _QUERY_KEYS["qid"])
            title = _first(d, _QUERY_KEYS["title"], "")
            text = _first(d, _QUERY_KEYS["text"], "")
            query = "\n".join(t for t in (str(title).strip(), str(text).strip()) if t)
            if qid is None:
                raise ValueError(f"{self.name}/{split}: a query row has no id field ({sorted(d)})")
            rows.append({"qid": str(qid), "query": query})
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        rows = []
        for d in self._split_records(split):
            gold = _first(d, _QUERY_KEYS["gold"])
            if gold is not None:
                rows.append({"qid": str(_first(d, _QUERY_KEYS["qid"])), "docno": str(gold), "label": 1})
        return pd.DataFrame(rows, columns=["qid", "docno", "label"])

    def info_url(self):
        return f"https://huggingface.co/datasets/{self.HF_ID}"
