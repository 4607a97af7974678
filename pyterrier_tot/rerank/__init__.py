"""Rerankers: re-order the top of a first-stage ranking (bi-encoder, LLM listwise)."""
from pyterrier_tot.rerank.dense_reranker import DenseReranker
from pyterrier_tot.rerank.listwise_reranker import ListwiseReranker

__all__ = ["DenseReranker", "ListwiseReranker"]
