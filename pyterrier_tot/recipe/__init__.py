"""The trained recipe: the protocol that fits the decomposition pipeline's parts to a collection's training queries.

``decomposition/`` holds the pipeline's parts (clues, experts, fusers); this subpackage trains and assembles them:

- :mod:`~pyterrier_tot.recipe.protocol`: the tuning slice (held-out training queries every weight is fitted on)
  and the training records that keep it out of every model;
- :mod:`~pyterrier_tot.recipe.expert_training`: the bi-encoder training loop (bases, field experts);
- :mod:`~pyterrier_tot.recipe.bases`: the fine-tuned base retrievers and their helpers;
  :mod:`~pyterrier_tot.recipe.soup` (averaged seeds), :mod:`~pyterrier_tot.recipe.hard_negatives` (mined
  negatives);
- :mod:`~pyterrier_tot.recipe.density_prior`: the base's density prior, one more expert;
- :mod:`~pyterrier_tot.recipe.tuned`: :func:`tuned_pipeline`, the ready pipeline in one call;
- :mod:`~pyterrier_tot.recipe.second_stage`, :mod:`~pyterrier_tot.recipe.mined_cross_encoder`: re-rankers
  trained on the recipe's own near misses (offered, not in the default).

The parts never import the recipe; the recipe imports the parts.
"""
from pyterrier_tot.recipe.bases import TrainingSet, fine_tuned_base
from pyterrier_tot.recipe.density_prior import DensityPrior, book_density
from pyterrier_tot.recipe.expert_training import (
    load_clue_cache,
    train_base_retriever,
    train_biencoder,
    train_field_expert,
)
from pyterrier_tot.recipe.protocol import tuning_split
from pyterrier_tot.recipe.tuned import (
    DEFAULT_BASE,
    build_pipeline,
    fitted_learned_fuser,
    fitted_weights,
    tuned_pipeline,
    tuning_data,
)

__all__ = ["tuned_pipeline", "fitted_weights", "fitted_learned_fuser", "build_pipeline", "tuning_data",
           "tuning_split", "fine_tuned_base", "TrainingSet", "DEFAULT_BASE", "DensityPrior", "book_density",
           "train_biencoder", "train_base_retriever", "train_field_expert", "load_clue_cache"]
