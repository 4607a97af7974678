"""Query decomposition: clues per field (LLM or rules), one expert per field, and their weighted fusion."""
from pyterrier_tot.decomposition.bases import TrainingSet
from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer
from pyterrier_tot.decomposition.clues import (
    CLUE_COLUMNS,
    CLUE_FIELDS,
    FIELD_FOR_CLUE,
    YEAR_COLUMN,
    clue_column,
    clues_na_as_none,
)
from pyterrier_tot.decomposition.date_expert import DateExpert, NoDatesWarning, corpus_has_dates
from pyterrier_tot.decomposition.date_resolver import latest_possible_year
from pyterrier_tot.decomposition.density_prior import DensityPrior, book_density
from pyterrier_tot.decomposition.expert_training import (
                                                         load_clue_cache,
                                                         train_base_retriever,
                                                         train_biencoder,
                                                         train_field_expert,
)
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import (
                                                         CandidateUnion,
                                                         ClueLookup,
                                                         DecompositionPipeline,
                                                         decomposition_pipeline,
)
from pyterrier_tot.decomposition.recipe import fine_tuned_base, tuned_pipeline, tuning_data, tuning_split
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, extract_clues
from pyterrier_tot.decomposition.weighted_fuser import FuserWeights, WeightedFuser

__all__ = ["CLUE_FIELDS", "CLUE_COLUMNS", "FIELD_FOR_CLUE", "YEAR_COLUMN", "clue_column", "latest_possible_year",
           "ClueDecomposer", "RuleClueExtractor", "extract_clues", "FieldExpert", "base_expert", "DateExpert",
           "WeightedFuser", "FuserWeights", "train_biencoder", "train_base_retriever", "train_field_expert",
           "load_clue_cache", "decomposition_pipeline", "DecompositionPipeline", "CandidateUnion", "ClueLookup",
           "tuning_split", "tuning_data", "fine_tuned_base", "tuned_pipeline", "TrainingSet", "clues_na_as_none",
           "NoDatesWarning", "corpus_has_dates", "DensityPrior", "book_density"]
