"""Generative retrieval for books (GBS): identifiers, a prefix trie, constrained decoding, multi-task training
with pseudo-queries, chapter aggregation, an outline-oriented encoder module, a sentence-encoder backbone and
zero-shot title-constrained LM decoding (GENRE-style). See ``docs/generative.rst``."""
from pyterrier_tot.generative.aggregation import parallel_scores, serial_scores
from pyterrier_tot.generative.backbones import Backbone, gguf_lm, smollm2, tiny_causal, tiny_t5, word_tokenizer
from pyterrier_tot.generative.decoding import constrained_search, score_targets
from pyterrier_tot.generative.genre import PromptedBackbone, name_titles, prompted, title_ids
from pyterrier_tot.generative.identifiers import book_id, book_ids, index_semantic_ids, outline_ids, semantic_ids
from pyterrier_tot.generative.pairs import (
    cheap_pseudo_queries,
    indexing_pairs,
    llm_pseudo_queries,
    outline_pairs,
    retrieval_pairs,
)
from pyterrier_tot.generative.pseudo_queries import (
    clue_form_pairs,
    keyphrase_queries,
    read_pseudo_queries,
    template_queries,
    write_pseudo_queries,
)
from pyterrier_tot.generative.retriever import GenerativeModel, GenerativeRetriever, hits_at
from pyterrier_tot.generative.sentence_backbone import SentenceBackbone, sentence_backbone
from pyterrier_tot.generative.training import train
from pyterrier_tot.generative.trie import IdTrie

__all__ = ["GenerativeRetriever", "GenerativeModel", "Backbone", "SentenceBackbone", "PromptedBackbone", "IdTrie",
           "book_id", "book_ids", "semantic_ids", "index_semantic_ids", "outline_ids", "title_ids",
           "indexing_pairs", "outline_pairs", "retrieval_pairs", "cheap_pseudo_queries", "keyphrase_queries",
           "template_queries", "clue_form_pairs", "llm_pseudo_queries", "write_pseudo_queries",
           "read_pseudo_queries", "train", "constrained_search", "score_targets", "name_titles", "parallel_scores",
           "serial_scores", "tiny_t5", "tiny_causal", "smollm2", "gguf_lm", "sentence_backbone", "prompted",
           "word_tokenizer", "hits_at"]
