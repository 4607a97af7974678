"""Book (and TREC ToT) datasets, exposed the PyTerrier way.

Every dataset here is a :class:`pyterrier.datasets.Dataset` with ``get_topics(split)`` (``qid``, ``query``),
``get_qrels(split)`` (``qid``, ``docno``, ``label``) and ``get_corpus_iter()`` (dicts with ``docno`` and the
book fields of :mod:`pyterrier_tot.datasets.books`). Get one by name::

    import pyterrier_tot as ptt
    ds = ptt.get_dataset("reddit-tomt-books")           # or pt.get_dataset("tot:reddit-tomt-books")
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")

Names: ``reddit-tomt-books``, ``whatsthatbook``, ``birco-wtb``, ``trec-tot-local/2023-train`` (the shared
folders: topics + qrels, no corpus), and any ir_datasets TREC ToT id such as ``trec-tot/2025/dev3``.
"""
from __future__ import annotations

import functools
import json
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import cache_dir, hub_reachable, online, shared_data_dir
from pyterrier_tot.errors import DatasetUnavailableError
from pyterrier_tot.datasets.books import Book, book_iter, books_to_frame, parse_year

__all__ = [
    "BookDataset", "RedditTomtBooks", "WhatsThatBook", "BircoWtb", "TrecTot", "TrecTotLocal",
    "get_dataset", "list_datasets", "ToTDatasetProvider", "DatasetUnavailableError",
]




def _read_jsonl(path: Path) -> Iterator[Dict[str, Any]]:
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from e


def read_trec_qrels(path: Path) -> pd.DataFrame:
    """TREC qrels (``qid iter docno label``) as a PyTerrier qrels frame with string ids and int labels."""
    df = pd.read_csv(path, sep=r"\s+", names=["qid", "iter", "docno", "label"], dtype=str, engine="python")
    df["label"] = df["label"].astype(int)
    return df[["qid", "docno", "label"]].reset_index(drop=True)


class BookDataset(pt.datasets.Dataset):
    """Base class: a corpus of :class:`~pyterrier_tot.datasets.books.Book` plus topics and qrels per split."""

    name = "books"
    splits: Sequence[str] = ()

    def _load_books(self) -> List[Book]:
        raise NotImplementedError

    def _load_topics(self, split: str) -> pd.DataFrame:
        raise NotImplementedError

    def _load_qrels(self, split: str) -> pd.DataFrame:
        raise NotImplementedError

    @functools.cached_property
    def _books(self) -> List[Book]:
        books = self._load_books()
        seen = set()
        out = []
        for b in books:
            if b.docno in seen:
                continue
            seen.add(b.docno)
            out.append(b)
        return out

    def _check_split(self, split: Optional[str]) -> str:
        if split is None:
            if len(self.splits) == 1:
                return self.splits[0]
            raise ValueError(f"{self.name}: name a split, one of {list(self.splits)}")
        if split not in self.splits:
            raise KeyError(f"{self.name}: unknown split {split!r}; available: {list(self.splits)}")
        return split

    def get_books(self) -> List[Book]:
        return list(self._books)

    def get_corpus_df(self) -> pd.DataFrame:
        """All books as a frame: ``docno`` + title, author, text, genres, year (Int64), cover, url."""
        return books_to_frame(self._books)

    def get_corpus_iter(self, verbose: bool = False, fields: Optional[List[str]] = None):
        it = book_iter(self._books, fields)
        if verbose:
            it = pt.tqdm(it, total=len(self._books), desc=f"{self.name} books")
        return pt.utils.GeneratorLen(it, len(self._books)) if hasattr(pt.utils, "GeneratorLen") else it

    def get_topics(self, variant: Optional[str] = None) -> pd.DataFrame:
        return self._load_topics(self._check_split(variant)).reset_index(drop=True)

    def get_qrels(self, variant: Optional[str] = None) -> pd.DataFrame:
        return self._load_qrels(self._check_split(variant)).reset_index(drop=True)

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


# --------------------------------------------------------------------------------------------- Reddit-TOMT
_TAG_RE = re.compile(r"\[\s*(?:tomt|book|books|novel)\s*\]", re.I)


def clean_reddit_title(title: str) -> str:
    """Drop the subreddit's bookkeeping tags ([TOMT], [BOOK]) from a post title; keep others ([90s])."""
    return re.sub(r"\s+", " ", _TAG_RE.sub(" ", title or "")).strip()


class RedditTomtBooks(BookDataset):
    """Reddit-TOMT (Books) (Bhargav et al., 2022; MIT licence), in its original folder format.

    The corpus is the gold books plus the negative and hard-negative books (2,679 in the released data).
    A query is the post title (bookkeeping tags removed) and description; the reply thread in
    ``meta.replies``, which usually names the answer, is never read.

    Data location, in order: ``path``; ``$PYTERRIER_TOT_REDDIT_TOMT``; ``<shared data>/reddit-tomt-books``;
    a copy downloaded once (when online) from :attr:`DOWNLOAD_URL`, the ``Books.zip`` of the data set's
    public repository, unpacked under the pyterrier_tot cache folder.
    """

    name = "reddit-tomt-books"
    DOWNLOAD_URL = "https://github.com/samarthbhargav/tomt-data/raw/main/data_release/Books.zip"
    DOC_FILES = ("documents.jsonl", "negative_documents.jsonl", "hard_negative_documents.jsonl")

    def __init__(self, path: Optional[str] = None, corpus: str = "all", clean_titles: bool = True,
                 download: bool = True):
        if corpus not in ("all", "gold"):
            raise ValueError(f"corpus must be 'all' (gold + negatives) or 'gold', not {corpus!r}")
        self.corpus = corpus
        self.clean_titles = clean_titles
        self.path = self._locate(path, download)
        self.splits = tuple(s for s in ("train", "validation", "test") if (self.path / s / "queries.jsonl").exists())
        if not self.splits:
            raise DatasetUnavailableError(f"{self.path} has no <split>/queries.jsonl files")

    def _locate(self, path: Optional[str], download: bool) -> Path:
        cands = [Path(path)] if path else []
        if not path and os.environ.get("PYTERRIER_TOT_REDDIT_TOMT"):
            cands.append(Path(os.environ["PYTERRIER_TOT_REDDIT_TOMT"]))
        if not path:
            cands += [shared_data_dir() / "reddit-tomt-books", cache_dir() / "reddit-tomt-books"]
        for cand in cands:
            found = self._find_root(cand)
            if found is not None:
                return found
        if path:
            raise DatasetUnavailableError(f"no Reddit-TOMT books data (documents.jsonl) under {path}")
        if not download or not online("github.com"):
            raise DatasetUnavailableError(
                "Reddit-TOMT books data not found (looked in "
                + ", ".join(str(c) for c in cands)
                + f") and cannot download it; fetch {self.DOWNLOAD_URL}, unzip it and pass path=... "
                "or set PYTERRIER_TOT_REDDIT_TOMT")
        return self._download(cache_dir() / "reddit-tomt-books")

    @classmethod
    def _find_root(cls, base: Path) -> Optional[Path]:
        if not base.is_dir():
            return None
        if (base / "documents.jsonl").exists():
            return base
        for hit in sorted(base.rglob("documents.jsonl")):
            return hit.parent
        return None

    def _download(self, target: Path) -> Path:  # pragma: no cover - needs the network
        import requests

        target.mkdir(parents=True, exist_ok=True)
        archive = target / "Books.zip"
        with requests.get(self.DOWNLOAD_URL, stream=True, timeout=30) as r:
            r.raise_for_status()
            with open(archive, "wb") as f:
                for chunk in r.iter_content(1 << 20):
                    f.write(chunk)
        with zipfile.ZipFile(archive) as z:
            z.extractall(target)
        root = self._find_root(target)
        if root is None:
            raise DatasetUnavailableError(f"downloaded {self.DOWNLOAD_URL} but found no documents.jsonl in it")
        return root

    def _load_books(self) -> List[Book]:
        files = self.DOC_FILES if self.corpus == "all" else self.DOC_FILES[:1]
        books = []
        for fname in files:
            p = self.path / fname
            if not p.exists():
                if fname == "documents.jsonl":
                    raise DatasetUnavailableError(f"missing {p}")
                continue
            for d in _read_jsonl(p):
                meta = d.get("meta") or {}
                books.append(Book(docno=d["id"], title=d.get("title", ""), text=d.get("text", ""),
                                  url=meta.get("url", "")))
        return books

    def _load_topics(self, split: str) -> pd.DataFrame:
        rows = []
        for d in _read_jsonl(self.path / split / "queries.jsonl"):
            title = d.get("title") or ""
            if self.clean_titles:
                title = clean_reddit_title(title)
            desc = (d.get("description") or d.get("raw_description") or "").strip()
            query = (title + "\n" + desc).strip()
            rows.append({"qid": str(d["id"]), "query": query})  # meta (and its replies) deliberately dropped
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        return read_trec_qrels(self.path / split / "qrels.txt")

    def info_url(self):
        return "https://github.com/samarthbhargav/tomt-data"


# --------------------------------------------------------------------------------------------- WhatsThatBook
def _first(d: Dict[str, Any], keys: Sequence[str], default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None and not (isinstance(d[k], float) and d[k] != d[k]):
            return d[k]
    return default


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
    """Build a :class:`Book` from a record with any of the common WhatsThatBook/Goodreads field names."""
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
        if target.is_dir() and any(target.rglob("*.jsonl")) or any(target.rglob("*.parquet")):
            return target
        if not download or not hub_reachable():
            raise DatasetUnavailableError(
                f"WhatsThatBook is not on disk and the Hugging Face hub cannot be reached; download the dataset "
                f"{self.HF_ID} and pass path=... (or set PYTERRIER_TOT_WHATSTHATBOOK)")
        from huggingface_hub import snapshot_download  # pragma: no cover - needs the network
        return Path(snapshot_download(self.HF_ID, repo_type="dataset", local_dir=str(target)))  # pragma: no cover

    @staticmethod
    def _records(path: Path) -> Iterator[Dict[str, Any]]:
        if path.suffix == ".parquet":
            yield from pd.read_parquet(path).to_dict("records")
        else:
            yield from _read_jsonl(path)

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
            return [self._resolve_cover(book_from_record(d)) for d in _read_jsonl(books_file)]
        books = []
        for split in self.splits:
            for d in self._split_records(split):
                gold = _first(d, _QUERY_KEYS["gold"])
                if gold is None:
                    continue
                rec = dict(d)
                rec["book_id"] = gold
                rec.pop("id", None)
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


# --------------------------------------------------------------------------------------------- BIRCO
class BircoWtb(BookDataset):
    """BIRCO's WhatsThatBook rerank task (CC BY-NC 4.0): 57 queries, each with its own candidate pool.

    ``get_results()`` gives the candidate pool as a result frame (to rerank), ``get_qrels()`` the labels, and
    the corpus holds the 2,404 candidate descriptions (``text`` only; BIRCO has no titles).
    """

    name = "birco-wtb"
    splits = ("dev",)

    def __init__(self, path: Optional[str] = None):
        p = Path(path) if path else shared_data_dir() / "birco-wtb" / "dev.json"
        if p.is_dir():
            p = p / "dev.json"
        if not p.exists():
            raise DatasetUnavailableError(f"BIRCO WhatsThatBook file not found at {p}; pass path=...")
        self.path = p

    @functools.cached_property
    def _raw(self) -> Dict[str, Any]:
        with open(self.path, encoding="utf8") as f:
            raw = json.load(f)
        for key in ("query", "corpus", "qrel"):
            if key not in raw:
                raise ValueError(f"{self.path}: missing top-level key {key!r}")
        return raw

    def _load_books(self) -> List[Book]:
        return [Book(docno=k, text=v) for k, v in self._raw["corpus"].items()]

    def _load_topics(self, split: str) -> pd.DataFrame:
        return pd.DataFrame([{"qid": str(k), "query": v} for k, v in self._raw["query"].items()],
                            columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        rows = [{"qid": q, "docno": d, "label": int(float(l))}
                for q, pool in self._raw["qrel"].items() for d, l in pool.items()]
        return pd.DataFrame(rows, columns=["qid", "docno", "label"])

    def get_results(self, variant: Optional[str] = None) -> pd.DataFrame:
        """The candidate pool of every query (``qid, query, docno, text``), in the file's order, score 0."""
        self._check_split(variant or "dev")
        topics = self.get_topics("dev").set_index("qid")["query"]
        corpus = self._raw["corpus"]
        rows = [{"qid": q, "query": topics[q], "docno": d, "text": corpus.get(d, "")}
                for q, pool in self._raw["qrel"].items() for d in pool]
        df = pd.DataFrame(rows)
        df["score"] = 0.0
        return pt.model.add_ranks(df)


# --------------------------------------------------------------------------------------------- TREC ToT
def _irds_query_text(q) -> str:
    d = q._asdict()
    if "query" in d and d["query"]:
        return str(d["query"])
    parts = [d.get("title") or "", d.get("text") or ""]
    return "\n".join(p for p in parts if p).strip()


class TrecTot(BookDataset):
    """A TREC ToT collection through ir_datasets (``trec-tot/2023/train`` ... ``trec-tot/2025/dev3``).

    The corpus holds Wikipedia pages (title + text). ir_datasets downloads the official files on first use;
    with ``IR_DATASETS_HOME`` pointing at a folder holding them in the official layout, no download happens.
    """

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

    def _check_split(self, split):
        return self.splits[0] if split is None else super()._check_split(split)

    def _load_books(self) -> List[Book]:
        if not self._ds.has_docs():
            raise NotImplementedError(f"{self.irds_id} has no documents")
        books = []
        for doc in self._ds.docs_iter():
            d = doc._asdict()
            books.append(Book(docno=d["doc_id"], title=d.get("page_title") or d.get("title") or "",
                              text=d.get("text", ""), url=d.get("url", "")))
        return books

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
        for d in _read_jsonl(self.path / "queries.jsonl"):
            text = d.get("query") or "\n".join(x for x in (d.get("title"), d.get("text")) if x)
            rows.append({"qid": str(d.get("query_id", d.get("id"))), "query": text})
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        name = "qrel.txt" if (self.path / "qrel.txt").exists() else "qrels.txt"
        return read_trec_qrels(self.path / name)


# --------------------------------------------------------------------------------------------- registry
_REGISTRY: Dict[str, Callable[..., BookDataset]] = {
    "reddit-tomt-books": RedditTomtBooks,
    "whatsthatbook": WhatsThatBook,
    "birco-wtb": BircoWtb,
}


def list_datasets() -> List[str]:
    return sorted(_REGISTRY) + ["trec-tot-local/<folder>", "trec-tot/<year>/<split> (ir_datasets)"]


@functools.lru_cache(maxsize=16)
def _cached(name: str) -> BookDataset:
    return get_dataset(name, cache=False)


def get_dataset(name: str, cache: bool = True, **kwargs) -> BookDataset:
    """A dataset by name (see the module docstring). Repeated calls without kwargs return the same object."""
    if cache and not kwargs:
        return _cached(name)
    if name in _REGISTRY:
        return _REGISTRY[name](**kwargs)
    if name.startswith("trec-tot-local/"):
        return TrecTotLocal(name.split("/", 1)[1], **kwargs)
    if name.startswith("trec-tot"):
        return TrecTot(name, **kwargs)
    raise KeyError(f"unknown dataset {name!r}; available: {list_datasets()}")


class ToTDatasetProvider(pt.datasets.DatasetProvider):
    """Makes the datasets available as ``pt.get_dataset('tot:<name>')``."""

    def get_dataset(self, name: str) -> pt.datasets.Dataset:
        return get_dataset(name)

    def list_dataset_names(self) -> Iterable[str]:
        return list(_REGISTRY)
