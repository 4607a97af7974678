"""The book index: a corpus of books in a folder with BM25 and dense sub-indexes, and the transformers it hands out.

- :mod:`~pyterrier_tot.index.book_index`: :class:`BookIndex` (a ``pt.Artifact``) and its document side;
- :mod:`~pyterrier_tot.index.corpus`: the corpus in memory, its fingerprint and the text loader;
  :mod:`~pyterrier_tot.index.corpus_stream`: a large corpus streamed to disk;
- :mod:`~pyterrier_tot.index.parts`: the sub-index folders, built whole or not at all;
  :mod:`~pyterrier_tot.index.bm25` (PISA) and :mod:`~pyterrier_tot.index.dense` (FlexIndex) build them;
- :mod:`~pyterrier_tot.index.retrievers`: the retrievers and scorers;
- :mod:`~pyterrier_tot.index.encoding` and :mod:`~pyterrier_tot.index.ray_encoding`: encoding the books of a
  dense index (several processes or GPUs, a Ray cluster).
"""
from pyterrier_tot.index.book_index import BookIndex
from pyterrier_tot.index.corpus import TextLoader
from pyterrier_tot.index.corpus_stream import LazyTextLoader
from pyterrier_tot.index.ray_encoding import RayWorkers
from pyterrier_tot.index.retrievers import BM25Scorer, DenseRetriever, DenseScorer, SafeRetriever, tokenise_query

__all__ = ["BookIndex", "SafeRetriever", "DenseRetriever", "DenseScorer", "BM25Scorer", "TextLoader",
           "LazyTextLoader", "RayWorkers", "tokenise_query"]
