"""Ranking books by how well their cover image matches the query's cover clue (CLIP cosine similarity).

:class:`CoverRanker` is a retriever on a query frame (``qid`` + ``clue_cover``: top ``num_results`` books of
the whole :class:`~pyterrier_tot.covers.cover_index.CoverIndex`) and a scorer on a result frame (``qid``,
``docno``, ``clue_cover``: the same rows re-scored), declared with ``pta.validate.any`` so ``pt.inspect``
reports both modes. ``ranker % k`` compiles into the ranker (``fuse_rank_cutoff``).

- A book without a usable cover: ``missing_cover='blank'`` (default) scores it against the blank image it was
  indexed as; ``'neutral'`` gives it ``neutral_score`` (0.0: no contribution to a weighted sum) and leaves it
  out of retriever results.
- An N/A clue (None, NaN, blank, "N/A") contributes nothing: a retriever returns no rows for that query, a
  scorer gives all its rows ``neutral_score`` (0.0).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.util import is_missing
from pyterrier_tot.checks import check_query_frame, check_result_frame
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.covers.clip_model import COVER_COLUMN, LONG_CLUE_MODES, ClipModel
from pyterrier_tot.covers.cover_index import CoverIndex
from pyterrier_tot.covers.images import blank_cover
from pyterrier_tot.normalise import METHODS as _NORM_METHODS
from pyterrier_tot.normalise import normalise_scores

MISSING_COVER_MODES = ("blank", "neutral")


class CoverRanker(pt.Transformer):
    """Scores books by CLIP similarity (cosine, in [-1, 1]) between ``clue_cover`` and the cover image.

    - Retriever (input has no ``docno``): a query frame with ``qid`` and ``clue_cover``; returns the top
      ``num_results`` books of the whole index per query (``qid, docno, score, rank`` + the query columns).
      Queries with an N/A clue get no rows. With ``missing_cover='neutral'`` books without a cover are not
      retrieved.
    - Scorer (input has ``docno``): a result frame with ``qid, docno, clue_cover``; returns the same rows
      re-scored. Rows whose clue is N/A get ``neutral_score``; with ``missing_cover='neutral'`` so do books
      without a cover and docnos that are not in the index (with ``'blank'`` those score against the blank image).
    - ``normalise='minmax'`` (or any :func:`~pyterrier_tot.normalise.normalise_scores` method) rescales the
      CLIP scores within each query, before neutral rows are filled in (they stay at ``neutral_score``), so the
      output can go straight into a weighted fuser.
    - ``score_cutoff``: in scorer mode keep only the top ``score_cutoff`` rows per query. ``ranker % k`` sets
      it (and lowers ``num_results`` to ``k``), so a cut-off ranker behaves the same in both modes.

    ``model`` may be a :class:`ClipModel`, a checkpoint directory, ``(arch, pretrained)`` or ``"arch/tag"``;
    by default the model recorded in the index (pretrained tag or checkpoint path) is loaded. A model whose
    weights differ from the index's raises unless ``check_model=False``.
    """

    def __init__(self, index: Union[CoverIndex, str, Path], model=None, *, num_results: int = 100,
                 missing_cover: str = "blank", neutral_score: float = 0.0, long_clues: str = "chunk",
                 normalise: Optional[str] = None, batch_size: int = 64, check_model: bool = True,
                 score_cutoff: Optional[int] = None, verbose: bool = False):
        if missing_cover not in MISSING_COVER_MODES:
            raise ValueError(f"missing_cover must be one of {MISSING_COVER_MODES}, got {missing_cover!r}")
        if long_clues not in LONG_CLUE_MODES:
            raise ValueError(f"long_clues must be one of {LONG_CLUE_MODES}, got {long_clues!r}")
        if normalise is not None and normalise not in _NORM_METHODS:
            raise ValueError(f"normalise must be None or one of {_NORM_METHODS}, got {normalise!r}")
        if num_results < 1:
            raise ValueError(f"num_results must be >= 1, got {num_results}")
        if score_cutoff is not None and score_cutoff < 1:
            raise ValueError(f"score_cutoff must be None or >= 1, got {score_cutoff}")
        self.index = index if isinstance(index, CoverIndex) else CoverIndex(index)
        self.index._require_built()
        info = self.index.model_info()
        if model is None:
            src = info["source"]
            if src.get("kind") == "pretrained":
                model = (src["arch"], src["pretrained"])
            elif src.get("kind") == "checkpoint":
                model = src["path"]
            else:
                raise ValueError(f"{self.index!r} was built with an in-memory model ({src}); pass model=")
        self.model = ClipModel.resolve(model)
        if self.model.embed_dim != info["embed_dim"]:
            raise ValueError(f"model embed_dim {self.model.embed_dim} != index embed_dim {info['embed_dim']}")
        if check_model and self.model.fingerprint() != info["fingerprint"]:
            raise ValueError(f"{self.model!r} is not the model {self.index!r} was built with "
                             f"(fingerprint {self.model.fingerprint()} != {info['fingerprint']}); rebuild the "
                             f"index or pass check_model=False")
        self.num_results = int(num_results)
        self.missing_cover = missing_cover
        self.neutral_score = float(neutral_score)
        self.long_clues = long_clues
        self.normalise = normalise
        self.batch_size = int(batch_size)
        self.score_cutoff = None if score_cutoff is None else int(score_cutoff)
        self.verbose = verbose

    def __repr__(self):
        args = [repr(self.index), repr(self.model)]
        if self.num_results != 100:
            args.append(f"num_results={self.num_results}")
        if self.missing_cover != "blank":
            args.append(f"missing_cover={self.missing_cover!r}")
        if self.neutral_score != 0.0:
            args.append(f"neutral_score={self.neutral_score}")
        if self.long_clues != "chunk":
            args.append(f"long_clues={self.long_clues!r}")
        if self.normalise:
            args.append(f"normalise={self.normalise!r}")
        if self.score_cutoff is not None:
            args.append(f"score_cutoff={self.score_cutoff}")
        return f"CoverRanker({', '.join(args)})"

    # -- helpers
    def _encode_clues(self, clues: pd.Series) -> Tuple[np.ndarray, Dict[str, int]]:
        uniq = sorted({str(c) for c in clues if not is_missing(c)})
        vecs = self.model.encode_texts(uniq, batch_size=self.batch_size, long_clues=self.long_clues,
                                       verbose=self.verbose)
        return vecs, {c: i for i, c in enumerate(uniq)}

    def _normalise(self, df: pd.DataFrame, real: np.ndarray) -> pd.DataFrame:
        if self.normalise and self.normalise != "none" and real.any():
            sub = df.loc[real, ["qid", "score"]]
            df.loc[real, "score"] = normalise_scores(sub, self.normalise).to_numpy()
        return df

    def fuse_rank_cutoff(self, k: int) -> Optional["CoverRanker"]:
        """``self % k`` as one ranker: retrieve at most ``k`` books, and cut re-scored frames at ``k`` too."""
        if k < 1:
            return None
        if k >= self.num_results and self.score_cutoff is not None and k >= self.score_cutoff:
            return self
        out = copy.copy(self)  # shares the index and the loaded model: nothing is re-read or re-checked
        out.num_results = min(self.num_results, int(k))
        out.score_cutoff = int(k) if self.score_cutoff is None else min(self.score_cutoff, int(k))
        return out

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(inp, pd.DataFrame):
            raise TypeError(f"CoverRanker expects a DataFrame, got {type(inp).__name__}")
        with pta.validate.any(inp) as v:
            v.query_frame(extra_columns=[COVER_COLUMN], mode="retrieve")
            v.result_frame(extra_columns=[COVER_COLUMN], mode="score")
        if v.mode == "retrieve":
            check_query_frame(inp, repr(self), None)
            return self._retrieve(inp)
        check_result_frame(inp, repr(self))
        return self._score(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        emb = self.index.embeddings
        docnos = np.asarray(self.index.docnos, dtype=object)
        allowed = self.index.has_cover if self.missing_cover == "neutral" else None
        vecs, pos = self._encode_clues(inp[COVER_COLUMN])
        query_cols = [c for c in inp.columns if c not in ("docno", "score", "rank")]
        frames = []
        rows = inp.reset_index(drop=True)
        it = rows.iterrows()
        if self.verbose:
            it = progress_bar(it, total=len(rows), desc="CoverRanker", unit="q")
        for _, q in it:
            clue = q[COVER_COLUMN]
            if is_missing(clue):
                continue
            scores = _dot_chunked(emb, vecs[pos[str(clue)]])
            cand = np.flatnonzero(allowed) if allowed is not None else np.arange(len(scores))
            if len(cand) == 0:
                continue
            k = min(self.num_results, len(cand))
            sub = scores[cand]
            top = np.argpartition(-sub, k - 1)[:k] if k < len(cand) else np.arange(len(cand))
            top = top[np.lexsort((cand[top], -sub[top]))]  # score desc, index order on ties
            idx = cand[top]
            res = pd.DataFrame({"docno": docnos[idx], "score": scores[idx].astype(np.float64)})
            for c in query_cols:
                res[c] = [q[c]] * len(res)
            frames.append(res)
        if not frames:
            out = pd.DataFrame({c: pd.Series(dtype=inp[c].dtype) for c in query_cols})
            out["docno"] = pd.Series(dtype=object)
            out["score"] = pd.Series(dtype=np.float64)
        else:
            out = pd.concat(frames, ignore_index=True)
        out = out[query_cols + ["docno", "score"]]
        out = self._normalise(out, np.ones(len(out), dtype=bool))
        return pt.model.add_ranks(out)

    def _score(self, inp: pd.DataFrame) -> pd.DataFrame:
        out = inp.copy().reset_index(drop=True)
        lookup = self.index.docno_lookup()
        emb = self.index.embeddings
        vecs, pos = self._encode_clues(out[COVER_COLUMN])
        clue_idx = np.array([-1 if is_missing(c) else pos[str(c)] for c in out[COVER_COLUMN]], dtype=np.int64)
        doc_idx = np.array([lookup.get(str(d), -1) for d in out["docno"]], dtype=np.int64)
        has_clue = clue_idx >= 0
        if self.missing_cover == "neutral":
            covered = doc_idx >= 0
            covered[covered] = self.index.has_cover[doc_idx[covered]]
        else:
            covered = np.ones(len(out), dtype=bool)
        real = has_clue & covered
        scores = np.full(len(out), self.neutral_score, dtype=np.float64)
        if real.any():
            blank = None
            if (doc_idx[real] < 0).any():
                blank = self._blank_embedding()
            di = doc_idx[real]
            order = np.argsort(di, kind="stable")  # sorted row access is kinder to a memory-mapped file
            docvecs = np.empty((len(di), emb.shape[1]), dtype=np.float32)
            known = di[order] >= 0
            docvecs[order[known]] = emb[di[order][known]]
            if blank is not None:
                docvecs[order[~known]] = blank
            scores[real] = np.einsum("ij,ij->i", docvecs, vecs[clue_idx[real]]).astype(np.float64)
        out["score"] = scores
        out = self._normalise(out, real)
        out = pt.model.add_ranks(out)
        if self.score_cutoff is not None:
            out = out[out["rank"] < self.score_cutoff].reset_index(drop=True)
        return out

    def _blank_embedding(self) -> np.ndarray:
        if not hasattr(self, "_blank"):
            size = int(np.max(self.model.preprocess_cfg.get("size", 224)))
            self._blank = self.model.encode_images([blank_cover(size)])[0]
        return self._blank


def _dot_chunked(emb: np.ndarray, vec: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """``emb @ vec`` in row chunks, so a memory-mapped index is streamed rather than loaded at once."""
    out = np.empty(emb.shape[0], dtype=np.float32)
    for s in range(0, emb.shape[0], chunk):
        out[s:s + chunk] = np.asarray(emb[s:s + chunk]) @ vec
    return out


def _index_ranker(self: CoverIndex, model=None, **kwargs) -> CoverRanker:
    """A :class:`~pyterrier_tot.covers.cover_ranker.CoverRanker` over this index (``model`` defaults to
    the one recorded at build time)."""
    return CoverRanker(self, model, **kwargs)


# ``index.ranker()`` is a method of the index, but it is defined here, above the index, so that cover_index never
# imports its ranker (pyterrier-dr's FlexIndex gets its retrievers the same way). Importing any covers module runs
# pyterrier_tot/covers/__init__.py, which imports this one, so the method is always there.
_index_ranker.__name__ = "ranker"
_index_ranker.__qualname__ = "CoverIndex.ranker"
CoverIndex.ranker = _index_ranker
