"""Hybrid dense re-ranking: BM25 finds the candidates, a bi-encoder re-orders the top ``k``.

The top ``k`` results of each query (by incoming score) are re-scored by the cosine between the query text (as
it stands in ``query``, i.e. after any rewriting such as hedge removal) and the first ``max_chars`` characters
of each book; results below ``k`` keep their incoming order underneath the re-ranked block::

    index = ptt.BookIndex(ds)
    hybrid = index.bm25() >> ptt.DenseReranker(index)                      # stored vectors (FlexIndex)
    hybrid = index.bm25() >> ptt.DenseReranker(index, alpha=0.5)           # interpolated with BM25
    hybrid = index.bm25() >> ptt.DenseReranker(index, stored=False)        # encode text on the fly
    hybrid = retriever_with_text >> ptt.DenseReranker(model="mpnet")        # any frame with a text column

Scoring goes through the package's dense plumbing: with ``stored=True`` the book vectors are computed once
into a FlexIndex by :meth:`BookIndex.dense_scorer` (dot product of stored vectors; equal to the cosine for
models that L2-normalise their output, as the sentence-transformers ``all-*`` models do, and a warning
otherwise); with ``stored=False`` (or no index) the query and document encoders of
:func:`pyterrier_tot.models.load_biencoder` encode the text on the fly and the cosine is computed exactly.

With ``alpha`` set, the block score is ``alpha * cosine + (1 - alpha) * minmax(incoming score)`` (min-max over
the query's top-``k``, :func:`pyterrier_tot.normalise.normalise_scores`).
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.reprs import SettingsEquality, code_repr, keyword_settings
from pyterrier_tot.checks import check_index, check_int, check_number
from pyterrier_tot.normalise import normalise_scores
from pyterrier_tot.rerank._topk import rerank_top_k


def _normalises(encoder) -> Optional[bool]:
    """Whether a pyterrier-dr SBertBiEncoder's model ends in an L2 Normalize module (None when unknown)."""
    model = getattr(encoder, "model", None)
    if model is None:
        return None
    try:
        from sentence_transformers.models import Normalize
    except ImportError:  # pragma: no cover
        return None
    try:
        return any(isinstance(m, Normalize) for m in model.children())
    except Exception:  # pragma: no cover
        return None


class DenseReranker(SettingsEquality, pt.Transformer):
    """Re-ranks the top ``k`` of a result frame by bi-encoder cosine (optionally interpolated with the score).

    :param index: a :class:`~pyterrier_tot.index.BookIndex` supplying book text or stored vectors; without
        one the input frame needs a ``text`` column.
    :param model: any sentence-transformers model name, alias or local directory (default all-MiniLM-L6-v2).
    :param k: how many top results per query are re-scored (default 100).
    :param max_chars: characters of each book encoded (default 1000; ``None`` = all).
    :param fields: book fields joined into the encoded text (with an index).
    :param alpha: ``None`` = pure dense order in the block; else the weight of the cosine in
        ``alpha * cos + (1 - alpha) * minmax(score)``.
    :param stored: with an index, score with stored FlexIndex vectors (``True``) or encode text on the fly.
    :param batch_size: encoding batch size.
    """

    @keyword_settings
    def __init__(self, index=None, model: Optional[str] = None, *, k: int = 100, max_chars: Optional[int] = 1000,
                 fields: Union[str, Sequence[str]] = ("title", "text"), alpha: Optional[float] = None,
                 stored: bool = True, batch_size: int = 32):
        who = "DenseReranker"
        k, batch_size = check_int(k, "k", who), check_int(batch_size, "batch_size", who)
        if alpha is not None and not 0.0 <= check_number(alpha, "alpha", who) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1] or None, not {alpha}")
        if max_chars is not None:
            check_int(max_chars, "max_chars", who)
        if index is not None:
            check_index(index, who)
        self.index = index
        self.model = model
        self.k = int(k)
        self.max_chars = None if max_chars is None else int(max_chars)
        self.fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self.alpha = None if alpha is None else float(alpha)
        self.stored = bool(stored) and index is not None
        self.batch_size = batch_size
        self._encoder = None
        self._scorer = None
        self._loader = None

    # ------------------------------------------------------------------ plumbing
    @property
    def encoder(self):
        if self._encoder is None:
            from pyterrier_tot.models.loading import load_biencoder

            self._encoder = load_biencoder(self.model, batch_size=self.batch_size)
        return self._encoder

    def _dense_scores(self, block: pd.DataFrame) -> np.ndarray:
        """Cosine (or stored dot product) for each row of ``block`` (qid, query, docno[, text])."""
        if self.stored:
            if self._scorer is None:
                self._scorer = self.index.dense_scorer(self.model, self.fields, self.max_chars, encoder=self.encoder)
                if _normalises(self.encoder) is False:
                    warnings.warn(f"{self!r}: model {self.model!r} does not normalise its embeddings; stored-vector "
                                  "scores are dot products, not cosines (use stored=False for exact cosines)",
                                  stacklevel=2)
            scored = self._scorer(block[["qid", "query", "docno"]])
            key = pd.MultiIndex.from_frame(scored[["qid", "docno"]].astype(str))
            lookup = pd.Series(scored["score"].to_numpy(dtype=float), index=key)
            want = pd.MultiIndex.from_frame(block[["qid", "docno"]].astype(str))
            return lookup.reindex(want).to_numpy()
        frame = block[["qid", "query", "docno"]].copy()
        if self.index is not None:
            if self._loader is None:
                self._loader = self.index.text_loader(self.fields, self.max_chars)
            frame = self._loader(frame)
        else:
            text = block["text"].fillna("").astype(str)
            frame["text"] = text.str.slice(0, self.max_chars) if self.max_chars else text
        enc = self.encoder
        queries = frame.drop_duplicates("qid")[["qid", "query"]]
        qvecs = enc.query_encoder()(queries)
        qmap = dict(zip(qvecs["qid"], qvecs["query_vec"]))
        docs = enc.doc_encoder()(frame[["qid", "docno", "text"]])
        dvec = np.stack(docs["doc_vec"].to_numpy())
        qvec = np.stack([qmap[q] for q in frame["qid"]])
        num = (dvec * qvec).sum(axis=1)
        den = np.linalg.norm(dvec, axis=1) * np.linalg.norm(qvec, axis=1)
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)

    # ------------------------------------------------------------------ transformer
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        # without an index the book text can only come from the frame
        needs = ["query", "score"] if self.index is not None else ["query", "score", "text"]
        hint = (f"needs a result frame with {needs}" if self.index is not None else
                "needs a result frame with 'query', 'score' and a 'text' column, or a BookIndex "
                "(DenseReranker(index=...))")
        return rerank_top_k(self, inp, self.k, self.index, needs, hint, self._rescore)

    def _rescore(self, block: pd.DataFrame) -> np.ndarray:
        dense = self._dense_scores(block)
        if np.isnan(dense).any():
            raise RuntimeError(f"{self!r}: the dense scorer returned no score for some documents")
        if self.alpha is None:
            return dense
        sparse = normalise_scores(block, "minmax").to_numpy()
        return self.alpha * dense + (1.0 - self.alpha) * sparse

    def settings(self) -> dict:
        """What changes its scores (:mod:`pyterrier_tot._plumbing.cache_key`); the index and the model's weights
        beside."""
        return {"model": None if self.model is None else str(self.model), "k": self.k, "max_chars": self.max_chars,
                "fields": list(self.fields), "alpha": self.alpha, "stored": self.stored}

    def __repr__(self):
        args = ([self.index] if self.index is not None else []) + ([self.model] if self.model is not None else [])
        named = {"k": self.k, "max_chars": self.max_chars, "fields": self.fields, "alpha": self.alpha,
                 "stored": self.stored or self.index is None, "batch_size": self.batch_size}
        if self.index is not None and self.model is None:  # a model after no index reads as the index: by name
            args, named = [self.index], {"model": None, **named}
        if self.index is None and self.model is not None:
            args, named = [], {"model": self.model, **named}
        return code_repr(self, args, named)
