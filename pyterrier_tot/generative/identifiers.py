"""Identifiers a generative retriever learns to emit: book-ids, semantic numeric ids, chapter- and section-ids.

Rules for a **book-id** (:func:`book_id`): the title, then the author, then the publisher, each with its
whitespace collapsed, the empty ones left out, joined by ``" # "``. A ``#`` inside a field becomes ``-`` so the
separator stays unambiguous. A book without a title uses its docno. Two books that would get the same id (same
title, no author to tell them apart) are told apart by :func:`book_ids`, which appends ``" # 2"``, ``" # 3"`` ...
in docno order, so the mapping from id to docno is one-to-one and does not depend on row order.

**Semantic numeric ids** (:func:`semantic_ids`) are the alternative the field uses since DSI: hierarchical
k-means over dense embeddings, each level a cluster number, e.g. ``"3-0-7"``; the last level numbers the books
inside a leaf cluster.

**Chapter-ids** extend the book-id with the chapter title and a number from hierarchical k-means over the
chapters of that book (so nearby numbers mean similar chapters); **section-ids** extend the chapter-id the same
way over the sections of that chapter (:func:`outline_ids`). Chapter texts are embedded with TF-IDF unless an
``embed`` function is given.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import pandas as pd

SEP = " # "
_SPACE = re.compile(r"\s+")


def _clean(value) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return _SPACE.sub(" ", str(value)).replace("#", "-").strip()


def book_id(title, author=None, publisher=None, docno: Optional[str] = None) -> str:
    """The book-id of one book (see the module docs for the rules)."""
    parts = [p for p in (_clean(title), _clean(author), _clean(publisher)) if p]
    if not parts or not _clean(title):
        parts = [_clean(docno) or "untitled"] + parts
    return SEP.join(parts)


def book_ids(books: pd.DataFrame, fields: Sequence[str] = ("title", "author", "publisher")) -> Dict[str, str]:
    """docno → unique book-id for a corpus frame (columns ``docno`` and those of ``fields`` present)."""
    title, author, publisher = (f if f in books.columns else None for f in (list(fields) + [None] * 3)[:3])
    raw = {}
    for row in books.sort_values("docno").itertuples(index=False):
        d = row._asdict()
        raw[str(d["docno"])] = book_id(d.get(title) if title else None, d.get(author) if author else None,
                                       d.get(publisher) if publisher else None, docno=str(d["docno"]))
    seen: Dict[str, int] = {}
    out = {}
    for docno, ident in raw.items():
        n = seen.get(ident.lower(), 0) + 1
        seen[ident.lower()] = n
        out[docno] = ident if n == 1 else f"{ident}{SEP}{n}"
    return out


def _kmeans_codes(x: np.ndarray, k: int, leaf: int, seed: int, prefix: tuple = ()) -> List[tuple]:
    """Recursive k-means codes for the rows of ``x``: a cluster with at most ``leaf`` rows numbers them."""
    n = len(x)
    if n <= leaf:
        return [prefix + (i,) for i in range(n)]
    from sklearn.cluster import KMeans

    labels = KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(x)
    if len(set(labels)) == 1:  # identical vectors: split by order so the recursion ends
        labels = np.arange(n) % k
    codes: List[Optional[tuple]] = [None] * n
    for c in range(k):
        rows = np.flatnonzero(labels == c)
        for r, code in zip(rows, _kmeans_codes(x[rows], k, leaf, seed, prefix + (c,))):
            codes[r] = code
    return codes  # type: ignore[return-value]


def semantic_ids(embeddings: np.ndarray, docnos: Sequence[str], k: int = 10, leaf: int = 10,
                 seed: int = 0) -> Dict[str, str]:
    """docno → hierarchical k-means id such as ``"3-0-7"`` (``k`` clusters per level, at most ``leaf`` items
    numbered inside a leaf cluster)."""
    x = np.asarray(embeddings, dtype=np.float32)
    if len(x) != len(docnos):
        raise ValueError(f"{len(x)} embeddings for {len(docnos)} docnos")
    codes = _kmeans_codes(x, k, max(leaf, 1), seed)
    return {str(d): "-".join(map(str, c)) for d, c in zip(docnos, codes)}


def index_semantic_ids(index, model=None, fields=("title", "text"), k: int = 10, leaf: int = 10,
                       seed: int = 0) -> Dict[str, str]:
    """:func:`semantic_ids` over the document vectors a :class:`~pyterrier_tot.index.BookIndex` stores for its
    dense retriever with ``model`` (e.g. the recipe's fine-tuned MiniLM): the ids of books close in that space
    share their leading codes. The vectors are read, not encoded again (the dense index is built if absent)."""
    flex = index.flex_index(model, fields)
    docnos, vecs, _meta = flex.payload()
    return semantic_ids(np.asarray(vecs), [str(d) for d in docnos], k, leaf, seed)


def tfidf_embed(texts: Sequence[str]) -> np.ndarray:
    """A cheap default embedding of chapter texts (TF-IDF, L2-normalised); any ``texts → array`` works."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [t if t and t.strip() else "empty" for t in texts]
    try:
        return TfidfVectorizer(min_df=1).fit_transform(texts).toarray().astype(np.float32)
    except ValueError:  # only stop words / no tokens
        return np.eye(len(texts), dtype=np.float32)


def _structured_numbers(texts: Sequence[str], embed: Callable, k: int, leaf: int, seed: int) -> List[str]:
    if len(texts) == 0:
        return []
    codes = _kmeans_codes(np.asarray(embed(list(texts)), dtype=np.float32), k, leaf, seed)
    return ["".join(str(c) for c in code) for code in codes]


def outline_ids(book_identifier: str, outline: Sequence[dict], embed: Optional[Callable] = None, k: int = 3,
                leaf: int = 3, seed: int = 0) -> pd.DataFrame:
    """Chapter- and section-ids of one book with an outline.

    :param outline: chapters as dicts ``{"title", "text", "sections": [{"title", "text"}, ...]}`` (sections
        optional; a chapter's text defaults to the text of its sections)
    :returns: a frame with ``level`` (``chapter`` / ``section``), ``chapter`` (index), ``section`` (index or -1),
        ``id`` and ``text``
    """
    embed = embed or tfidf_embed
    chapters = list(outline)
    texts = [c.get("text") or " ".join(s.get("text", "") for s in c.get("sections", [])) for c in chapters]
    numbers = _structured_numbers(texts, embed, k, leaf, seed)
    rows = []
    for ci, (chapter, text, num) in enumerate(zip(chapters, texts, numbers)):
        cid = SEP.join([book_identifier, _clean(chapter.get("title")) or f"chapter {ci + 1}", num])
        rows.append({"level": "chapter", "chapter": ci, "section": -1, "id": cid, "text": text})
        sections = list(chapter.get("sections", []))
        for si, (sec, snum) in enumerate(zip(sections, _structured_numbers([s.get("text", "") for s in sections],
                                                                           embed, k, leaf, seed))):
            sid = SEP.join([cid, _clean(sec.get("title")) or f"section {si + 1}", snum])
            rows.append({"level": "section", "chapter": ci, "section": si, "id": sid, "text": sec.get("text", "")})
    return pd.DataFrame(rows, columns=["level", "chapter", "section", "id", "text"])
