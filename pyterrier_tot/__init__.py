"""pyterrier_tot: tip-of-the-tongue known-item retrieval stages for PyTerrier.

The core lives in ``index`` (the book index) and ``models`` (encoders), the families in subpackages (``datasets``,
``query``, ``llm``, ``decomposition``, ``recipe``, ``covers``, ``rerank``, ``generative``, ``clarinet``,
``submission``); every public name is re-exported here, so ``import pyterrier_tot as ptt; ptt.HedgeRemover()`` works.
"""
__version__ = "0.2.0"

from pyterrier_tot import _compat

_compat.register_old_paths()  # module paths of earlier versions (pyterrier_tot.retrieval, pyterrier_tot.bars, ...)

from pyterrier_tot.errors import (ToTError, ModelUnavailableError, DatasetUnavailableError, LLMConfigurationError,
                                  LLMFailure, TerrierUnavailableError, CoverImageError, BadInputError,
                                  UnknownDocnoError, BadInputTypeError, LockTimeoutError, NoResultsWarning,
                                  UnknownDocnoWarning, LLMUnavailableError,
                                  StreamedCorpusError, CorruptArtifactError, FrozenCatalogueError)
from pyterrier_tot.normalise import Normalise, normalise_scores, linear_fusion, LinearFusion
from pyterrier_tot.console import set_progress, progress, progress_enabled
from pyterrier_tot._plumbing.util import cache_dir
from pyterrier_tot.datasets import get_dataset, list_datasets, own_catalogue, OwnCatalogue, example_catalogue
from pyterrier_tot.datasets.books import Book, BOOK_FIELDS, parse_year
from pyterrier_tot.index import (BookIndex, tokenise_query, RayWorkers, SafeRetriever, DenseRetriever, DenseScorer,
                                 BM25Scorer, TextLoader)
from pyterrier_tot.models import resolve_model, load_biencoder, BiEncoderModel
from pyterrier_tot.evaluation import (TOT_MEASURES, SHORT_MEASURES, CURVE_MEASURES, tot_experiment, recall_curves,
                                      plot_recall_at_k, write_trec_run, read_trec_run, parse_measures)
from pyterrier_tot.query import (HedgeRemover, hedge_statistics, NegationPenalty, LLMQueryRewriter, HyDE,
                                 ClueConcatenator, rm3_pipeline, terrier_available, terrier_status)
from pyterrier_tot.llm import LLM, LLMUsage, LLMCache, LlamaServer, load_prompt, available_prompts
from pyterrier_tot.decomposition import (CLUE_FIELDS, CLUE_COLUMNS, YEAR_COLUMN, clue_column, latest_possible_year,
                                         ClueDecomposer, RuleClueExtractor, extract_clues, FieldExpert, base_expert,
                                         DateExpert, WeightedFuser, FuserWeights, decomposition_pipeline,
                                         DecompositionPipeline, CandidateUnion, ClueLookup, clues_na_as_none,
                                         NoDatesWarning, corpus_has_dates)
from pyterrier_tot.recipe import (train_biencoder, train_base_retriever, train_field_expert, load_clue_cache,
                                  tuning_split, fine_tuned_base, tuned_pipeline, TrainingSet, tuning_data,
                                  DensityPrior, book_density, TunedPipeline, RecipeArtifact, RecipePlan,
                                  recipe_plan, training_free_pipeline, train_request_encoder)
from pyterrier_tot.covers import CoverRanker, CoverIndex, ClipModel, ClipCheckpoint, finetune_clip, CoverClipTrainer
from pyterrier_tot.rerank import DenseReranker, ListwiseReranker, PointwiseLLMReranker
from pyterrier_tot.submission.title_namer import TitleNamer
from pyterrier_tot.recipe.hard_negatives import mine_hard_negatives, sample_negatives
from pyterrier_tot.decomposition.learned_fuser import LearnedFuser, LearnedFuserModel
from pyterrier_tot.rerank.cross_encoder import CrossEncoderModel, CrossEncoderReranker, train_cross_encoder
from pyterrier_tot.query.rm3 import anserini_available, anserini_status, lucene_bm25, anserini_rm3
from pyterrier_tot.clarinet import (RetrievalDistribution, Clarifier, UserSimulator, LanguagePosterior,
                                    ExplicitPosterior, ClarificationGame, RandomSelection, UtilitySelection,
                                    turn_table, plot_turns, OracleUser, HumanUser, interactive_search,
                                    LLMLikelihood, paired_table)
from pyterrier_tot.clarinet.generator import QuestionGenerator, train_generator, collect_questions
from pyterrier_tot.submission import (validate_run, check_run, RunFileError, RunReport, RunFailure, load_config,
                                      ConfigError, example_config)

__all__ = [
    # errors
    "ToTError", "ModelUnavailableError", "DatasetUnavailableError", "LLMConfigurationError", "LLMFailure",
    "TerrierUnavailableError", "CoverImageError", "BadInputError", "UnknownDocnoError",
    "BadInputTypeError", "LockTimeoutError", "NoResultsWarning", "UnknownDocnoWarning", "LLMUnavailableError",
    "StreamedCorpusError", "CorruptArtifactError", "FrozenCatalogueError",
    # data and indexes
    "get_dataset", "list_datasets", "own_catalogue", "OwnCatalogue", "example_catalogue",
    "Book", "BOOK_FIELDS", "parse_year", "BookIndex", "tokenise_query", "RayWorkers",
    "resolve_model", "load_biencoder", "BiEncoderModel", "SafeRetriever", "DenseRetriever", "DenseScorer",
    "BM25Scorer", "TextLoader", "cache_dir", "Normalise", "normalise_scores", "linear_fusion", "LinearFusion",
    # progress output
    "set_progress", "progress", "progress_enabled",
    # evaluation
    "TOT_MEASURES", "SHORT_MEASURES", "CURVE_MEASURES", "tot_experiment", "recall_curves", "plot_recall_at_k",
    "write_trec_run", "read_trec_run", "parse_measures",
    # query stages
    "HedgeRemover", "hedge_statistics", "NegationPenalty", "LLMQueryRewriter", "HyDE", "ClueConcatenator",
    "rm3_pipeline", "terrier_available", "terrier_status",
    # LLM layer
    "LLM", "LLMUsage", "LLMCache", "LlamaServer", "load_prompt", "available_prompts",
    # decomposition
    "CLUE_FIELDS", "CLUE_COLUMNS", "YEAR_COLUMN", "clue_column", "latest_possible_year", "ClueDecomposer",
    "RuleClueExtractor", "extract_clues", "FieldExpert", "base_expert", "DateExpert", "WeightedFuser", "FuserWeights",
    "train_biencoder", "train_base_retriever", "train_field_expert", "load_clue_cache", "decomposition_pipeline",
    "train_request_encoder",
    "DecompositionPipeline", "CandidateUnion", "ClueLookup", "tuning_split", "fine_tuned_base", "tuned_pipeline",
    "tuning_data", "clues_na_as_none", "NoDatesWarning", "corpus_has_dates", "DensityPrior", "book_density",
    "TrainingSet", "TunedPipeline", "RecipeArtifact", "RecipePlan", "recipe_plan", "training_free_pipeline",
    # covers, rerankers
    "CoverRanker", "CoverIndex", "ClipModel", "ClipCheckpoint", "finetune_clip", "CoverClipTrainer", "DenseReranker",
    "ListwiseReranker", "PointwiseLLMReranker", "TitleNamer",
    # stronger retrievers: hard negatives, cross-encoder, learned fusion, Anserini
    "mine_hard_negatives", "sample_negatives", "LearnedFuser", "LearnedFuserModel", "CrossEncoderModel",
    "CrossEncoderReranker", "train_cross_encoder", "anserini_available", "anserini_status", "lucene_bm25",
    "anserini_rm3",
    # generative retrieval
    "GenerativeRetriever", "GenerativeModel",
    # clarification (CLARINET)
    "RetrievalDistribution", "Clarifier", "UserSimulator", "LanguagePosterior", "ExplicitPosterior",
    "ClarificationGame", "RandomSelection", "UtilitySelection", "turn_table", "plot_turns", "QuestionGenerator",
    "train_generator", "collect_questions", "OracleUser", "HumanUser", "interactive_search", "LLMLikelihood",
    "paired_table",
    # submission
    "validate_run", "check_run", "RunFileError", "RunReport", "RunFailure", "load_config", "ConfigError",
    "example_config",
]

_compat.register_old_paths()  # and onto the subpackages imported above (pyterrier_tot.decomposition.recipe, ...)

#: names whose subpackage imports torch: loaded on first use, so ``import pyterrier_tot`` (and every CLI call,
#: notebook kernel or worker process) does not pay torch's import when it never touches them
_LAZY = {"GenerativeModel": "pyterrier_tot.generative", "GenerativeRetriever": "pyterrier_tot.generative"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pyterrier_tot' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
