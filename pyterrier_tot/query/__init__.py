"""Query stages: rewrite or re-weight the user's long, hedged description before retrieval."""
from pyterrier_tot.query.hedge_remover import HedgeRemover, hedge_statistics, read_lexicon
from pyterrier_tot.query.negation_penalty import NegationPenalty, read_heads
from pyterrier_tot.query.rewriters import ClueConcatenator, HyDE, LLMQueryRewriter
from pyterrier_tot.query.rm3 import (
                                    anserini_available,
                                    anserini_rm3,
                                    anserini_status,
                                    lucene_bm25,
                                    rm3_pipeline,
                                    terrier_available,
                                    terrier_status,
)

__all__ = ["HedgeRemover", "hedge_statistics", "read_lexicon", "NegationPenalty", "read_heads", "LLMQueryRewriter",
           "HyDE", "ClueConcatenator", "rm3_pipeline", "terrier_available", "terrier_status",
           "anserini_available", "anserini_status", "lucene_bm25", "anserini_rm3"]
