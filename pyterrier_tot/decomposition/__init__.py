"""Query decomposition: clues per field (LLM or rules), one expert per field (and the density prior), and their
weighted fusion."""
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
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import (
    CandidateUnion,
    ClueLookup,
    DecompositionPipeline,
    decomposition_pipeline,
)
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, extract_clues
from pyterrier_tot.decomposition.weighted_fuser import FuserWeights, WeightedFuser

__all__ = ["CLUE_FIELDS", "CLUE_COLUMNS", "FIELD_FOR_CLUE", "YEAR_COLUMN", "clue_column", "latest_possible_year",
           "ClueDecomposer", "RuleClueExtractor", "extract_clues", "FieldExpert", "base_expert", "DateExpert",
           "DensityPrior", "book_density",
           "WeightedFuser", "FuserWeights",
           "decomposition_pipeline", "DecompositionPipeline", "CandidateUnion", "ClueLookup", "clues_na_as_none",
           "NoDatesWarning", "corpus_has_dates"]

#: names this package re-exported before the recipe's training moved to :mod:`pyterrier_tot.recipe`
_MOVED_NAMES = ("train_biencoder", "train_base_retriever", "train_field_expert", "load_clue_cache", "tuning_split",
                "tuning_data", "fine_tuned_base", "tuned_pipeline", "TrainingSet")


def __getattr__(name: str):
    # the old names keep working, with a DeprecationWarning naming the new place (read lazily: the parts never
    # import the recipe at import time, the recipe imports the parts)
    if name in _MOVED_NAMES:
        import warnings

        from pyterrier_tot import recipe

        warnings.warn(f"pyterrier_tot.decomposition.{name} moved to pyterrier_tot.recipe.{name}; import it from "
                      "there or from pyterrier_tot", DeprecationWarning, stacklevel=2)
        return getattr(recipe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
