"""pyterrier_tot: tip-of-the-tongue known-item retrieval stages for PyTerrier."""
__version__ = "0.1.0"

from pyterrier_tot.clues import CLUE_FIELDS, CLUE_COLUMNS, YEAR_COLUMN, clue_column
from pyterrier_tot.normalise import Normalise, normalise_scores
from pyterrier_tot.books import Book, BOOK_FIELDS, parse_year
from pyterrier_tot.datasets import get_dataset, list_datasets
from pyterrier_tot.retrieval import BookIndex, tokenise_query
from pyterrier_tot.models import resolve_model, load_biencoder, ModelUnavailableError
from pyterrier_tot.evaluation import TOT_MEASURES, SHORT_MEASURES, tot_experiment, write_trec_run, read_trec_run
from pyterrier_tot.cover_ranker import CoverRanker, CoverIndex, ClipModel
from pyterrier_tot.clip_training import finetune_clip, CoverClipTrainer
from pyterrier_tot.hedge_remover import HedgeRemover, hedge_statistics
from pyterrier_tot.negation_penalty import NegationPenalty
from pyterrier_tot.dense_reranker import DenseReranker
from pyterrier_tot.rm3 import terrier_available, terrier_status, rm3_pipeline, TerrierUnavailableError
from pyterrier_tot.field_expert import FieldExpert, base_expert
from pyterrier_tot.date_expert import DateExpert
from pyterrier_tot.weighted_fuser import WeightedFuser
from pyterrier_tot.pipeline import decomposition_pipeline, DecompositionPipeline, CandidateUnion, ClueLookup
from pyterrier_tot.expert_training import train_base_retriever, train_field_expert, train_biencoder, load_clue_cache
from pyterrier_tot.rule_clue_extractor import RuleClueExtractor, extract_clues
from pyterrier_tot.date_resolver import latest_possible_year
from pyterrier_tot.llm import LLM, LLMUsage, LLMConfigurationError
from pyterrier_tot.llm_cache import LLMCache
from pyterrier_tot.llama_server import LlamaServer
from pyterrier_tot.prompt_templates import load_prompt, available_prompts
from pyterrier_tot.clue_decomposer import ClueDecomposer
from pyterrier_tot.query_rewriters import LLMQueryRewriter, HyDE, ClueConcatenator
