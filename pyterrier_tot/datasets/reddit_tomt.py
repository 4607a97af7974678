"""Reddit-TOMT (Books) (Bhargav et al., 2022; MIT licence), read from its original folder format."""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import List, Optional

import pandas as pd

from pyterrier_tot._plumbing.util import cache_dir, online, shared_data_dir
from pyterrier_tot.datasets.base import BookDataset, read_jsonl, read_trec_qrels
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.errors import DatasetUnavailableError

__all__ = ["RedditTomtBooks", "clean_reddit_title", "drop_self_answers"]

_TAG_RE = re.compile(r"\[\s*(?:tomt|book|books|novel)\s*\]", re.I)
# "[SOLVED]", "\\[Solved!\\]", "(Solved, can't change the flair)": the tag alone goes
_SOLVED_TAG = re.compile(r"\\?[\[(]\s*\**\s*solved\b[^\])\n]*\\?[\])]", re.I)
# "Solved! It was ...", "Edit: solved thanks", "SOLVED. AFTER TWENTY YEARS", "Solved Icefall": a "solved" that
# opens a line or a sentence, or follows "edit:" / "post is", and ends there or is followed by punctuation, a
# capital, "thank", "it was" or "the book"; the rest of the line goes. "A murder IS SOLVED BY A DOG", "solved crimes
# with her gran" and "Edit: the crime gets solved" stay.
_SOLVED_NOTE = re.compile(r"(?:^[\W_]*|(?<=[.!?])\s+|(?i:\bedit\b)\s*:?\s*|(?i:\bpost is)\s+)(?i:solved)"
                          r"(?=[\W_]*$|[!.,:;)*\\]|\s+(?:[A-Z]|(?i:thank|it was|the book)))")
# "Edit: ... /u/someone guessed it: Twin Sisters": an edit that credits a Reddit user goes whole
_EDIT_CREDIT = re.compile(r"^[\W_]*edit\b.*?/u/", re.I)


def drop_self_answers(text: str) -> str:
    """Remove what a poster added after the book was found ("Solved! The book [City of Masks](...)", "Edit:
    solved", "[SOLVED]", "Edit: /u/... guessed it"): such an edit can name the answer, which a query must not (four
    Reddit-TOMT queries do, one in validation)."""
    text = _SOLVED_TAG.sub(" ", text or "")
    lines = []
    for line in text.split("\n"):
        if _EDIT_CREDIT.search(line):
            line = ""
        found = _SOLVED_NOTE.search(line)
        lines.append(line[:found.start()].rstrip() if found else line)
    return "\n".join(lines).strip()


def clean_reddit_title(title: str) -> str:
    """Drop the subreddit's bookkeeping tags ([TOMT], [BOOK]) from a post title; keep others ([90s])."""
    return re.sub(r"\s+", " ", _TAG_RE.sub(" ", title or "")).strip()


class RedditTomtBooks(BookDataset):
    """Reddit-TOMT (Books) (Bhargav et al., 2022; MIT licence), in its original folder format.

    The corpus is the gold books plus the negative and hard-negative books (2,679 in the released data).
    A query is the post title (bookkeeping tags removed) and description; the reply thread in
    ``meta.replies``, which usually names the answer, is never read, and what a poster edited in after the book
    was found ("Solved! The book [...]", "[SOLVED]") is removed (:func:`drop_self_answers`;
    ``keep_self_answers=True`` keeps the released text).

    Data location, in order: ``path``; ``$PYTERRIER_TOT_REDDIT_TOMT``; ``<shared data>/reddit-tomt-books``;
    a copy downloaded once (when online) from :attr:`DOWNLOAD_URL`, the ``Books.zip`` of the data set's
    public repository, unpacked under the pyterrier_tot cache folder.
    """

    name = "reddit-tomt-books"
    DOWNLOAD_URL = "https://github.com/samarthbhargav/tomt-data/raw/main/data_release/Books.zip"
    DOC_FILES = ("documents.jsonl", "negative_documents.jsonl", "hard_negative_documents.jsonl")

    def __init__(self, path: Optional[str] = None, corpus: str = "all", clean_titles: bool = True,
                 download: bool = True, keep_self_answers: bool = False):
        if corpus not in ("all", "gold"):
            raise ValueError(f"corpus must be 'all' (gold + negatives) or 'gold', not {corpus!r}")
        self.corpus = corpus
        self.clean_titles = clean_titles
        self.keep_self_answers = keep_self_answers
        if keep_self_answers:  # other query texts: its own name, so caches keyed by the name do not mix the two
            self.name = f"{type(self).name}-with-self-answers"
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
            for d in read_jsonl(p):
                meta = d.get("meta") or {}
                books.append(Book(docno=d["id"], title=d.get("title", ""), text=d.get("text", ""),
                                  url=meta.get("url", "")))
        return books

    def _load_topics(self, split: str) -> pd.DataFrame:
        rows = []
        for d in read_jsonl(self.path / split / "queries.jsonl"):
            title = d.get("title") or ""
            if self.clean_titles:
                title = clean_reddit_title(title)
            desc = (d.get("description") or d.get("raw_description") or "").strip()
            if not self.keep_self_answers:
                title, desc = drop_self_answers(title), drop_self_answers(desc)
            query = (title + "\n" + desc).strip()
            rows.append({"qid": str(d["id"]), "query": query})  # meta (and its replies) would leak the answer
        return pd.DataFrame(rows, columns=["qid", "query"])

    def _load_qrels(self, split: str) -> pd.DataFrame:
        return read_trec_qrels(self.path / split / "qrels.txt")

    def info_url(self):
        return "https://github.com/samarthbhargav/tomt-data"
