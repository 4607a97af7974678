"""Rerankers: re-order the top of a first-stage ranking (bi-encoder, LLM listwise, LLM pointwise)."""
from pyterrier_tot.rerank.dense_reranker import DenseReranker
from pyterrier_tot.rerank.listwise_reranker import ListwiseReranker
from pyterrier_tot.rerank.pointwise_reranker import PointwiseLLMReranker

__all__ = ["DenseReranker", "ListwiseReranker", "PointwiseLLMReranker"]
