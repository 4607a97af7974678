"""Generative retrieval for books (GBS): identifiers, a prefix trie, constrained decoding, multi-task training
with pseudo-queries, chapter aggregation and an outline-oriented encoder module. See ``docs/generative.rst``."""
from pyterrier_tot.generative.aggregation import parallel_scores, serial_scores
from pyterrier_tot.generative.backbones import Backbone, smollm2, tiny_causal, tiny_t5, word_tokenizer
from pyterrier_tot.generative.decoding import constrained_search, score_targets
from pyterrier_tot.generative.identifiers import book_id, book_ids, outline_ids, semantic_ids
from pyterrier_tot.generative.pairs import (
    cheap_pseudo_queries,
    indexing_pairs,
    llm_pseudo_queries,
    outline_pairs,
    retrieval_pairs,
)
from pyterrier_tot.generative.retriever import GenerativeModel, GenerativeRetriever, hits_at
from pyterrier_tot.generative.training import train
from pyterrier_tot.generative.trie import IdTrie

__all__ = ["GenerativeRetriever", "GenerativeModel", "Backbone", "IdTrie", "book_id", "book_ids", "semantic_ids",
           "outline_ids", "indexing_pairs", "outline_pairs", "retrieval_pairs", "cheap_pseudo_queries",
           "llm_pseudo_queries", "train", "constrained_search", "score_targets", "parallel_scores", "serial_scores",
           "tiny_t5", "tiny_causal", "smollm2", "word_tokenizer", "hits_at"]
