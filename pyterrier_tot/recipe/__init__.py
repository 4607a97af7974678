"""The trained recipe: the protocol that fits the decomposition pipeline's parts to a collection's training queries.

``decomposition/`` holds the pipeline's parts (clues, experts, fusers); this subpackage trains and assembles them:

- :mod:`~pyterrier_tot.recipe.protocol`: the tuning slice (held-out training queries every weight is fitted on)
  and the training records that keep it out of every model;
- :mod:`~pyterrier_tot.recipe.expert_training`: the bi-encoder training loop (bases, field experts);
- :mod:`~pyterrier_tot.recipe.bases`: the fine-tuned base retrievers and their helpers;
  :mod:`~pyterrier_tot.recipe.soup` (averaged seeds), :mod:`~pyterrier_tot.recipe.hard_negatives` (mined
  negatives);
- :mod:`~pyterrier_tot.recipe.frozen_catalogue`: a request encoder trained against a book index encoded once
  (nothing re-encoded after training; the only training that scales to millions of pages);
- :mod:`~pyterrier_tot.recipe.density_prior`: the base's density prior, one more expert;
- :mod:`~pyterrier_tot.recipe.assembly`: the recipe's experts and pipeline; :mod:`~pyterrier_tot.recipe.weights`:
  the fuser's weights fitted on the tuning slice;
- :mod:`~pyterrier_tot.recipe.tuned`: :func:`tuned_pipeline`, the ready pipeline in one call, which prints its
  plan and cost first (:mod:`~pyterrier_tot.recipe.plan`); :mod:`~pyterrier_tot.recipe.artifact`: a trained
  recipe saved as one artifact and loaded anywhere;
- :mod:`~pyterrier_tot.recipe.second_stage`, :mod:`~pyterrier_tot.recipe.mined_cross_encoder`: re-rankers
  trained on the recipe's own near misses (offered, not in the default).

The parts never import the recipe; the recipe imports the parts.
"""
from pyterrier_tot.recipe.artifact import RecipeArtifact, TunedPipeline
from pyterrier_tot.recipe.assembly import (
                                          BASE_K,
                                          DEPTH,
                                          EXPERT_K,
                                          build_pipeline,
                                          recipe_experts,
                                          training_free_pipeline,
)
from pyterrier_tot.recipe.bases import (
                                          BASE_SETTINGS,
                                          HELPERS,
                                          TrainingSet,
                                          base_grid,
                                          choose_base,
                                          choose_epoch,
                                          default_helpers,
                                          fine_tuned_base,
                                          fine_tuned_bases,
)
from pyterrier_tot.recipe.density_prior import DensityPrior, book_density, recipe_priors
from pyterrier_tot.recipe.expert_training import (
                                          load_clue_cache,
                                          train_base_retriever,
                                          train_biencoder,
                                          train_field_expert,
)
from pyterrier_tot.recipe.frozen_catalogue import train_request_encoder
from pyterrier_tot.recipe.hard_negatives import fine_tuned_hard
from pyterrier_tot.recipe.mined_cross_encoder import fine_tuned_cross_encoder
from pyterrier_tot.recipe.plan import RecipePlan
from pyterrier_tot.recipe.protocol import train_data, tuning_split
from pyterrier_tot.recipe.tuned import DEFAULT_BASE, recipe_plan, tuned_pipeline
from pyterrier_tot.recipe.weights import (
                                          FIT_BAGS,
                                          FIT_METRIC,
                                          FLOOR_METRIC,
                                          fitted_learned_fuser,
                                          fitted_weights,
                                          tuning_data,
)

__all__ = ["tuned_pipeline", "recipe_plan", "training_free_pipeline",
           "RecipePlan", "TunedPipeline", "RecipeArtifact", "fitted_weights",
           "fitted_learned_fuser", "build_pipeline", "recipe_experts", "tuning_data", "tuning_split", "train_data",
           "fine_tuned_base", "fine_tuned_bases", "fine_tuned_hard", "base_grid", "choose_base", "choose_epoch",
           "default_helpers", "fine_tuned_cross_encoder", "TrainingSet", "DEFAULT_BASE", "BASE_SETTINGS", "HELPERS",
           "BASE_K", "EXPERT_K", "DEPTH", "FIT_METRIC", "FLOOR_METRIC", "FIT_BAGS", "DensityPrior", "book_density",
           "recipe_priors", "train_biencoder", "train_base_retriever", "train_field_expert", "load_clue_cache",
           "train_request_encoder"]
