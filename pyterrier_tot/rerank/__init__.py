"""Rerankers: re-order the top of a first-stage ranking."""
from pyterrier_tot.rerank.dense_reranker import DenseReranker

__all__ = ["DenseReranker"]
