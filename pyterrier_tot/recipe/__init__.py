"""The trained recipe: the protocol that fits the decomposition pipeline's parts to a collection's training queries.

This package is the recipe's one public surface: every name a user, a test or a benchmark needs is importable from
here (``from pyterrier_tot import recipe``; ``recipe.tuned_pipeline``, ``recipe.weights_path``, ...), listed in
``__all__``. The modules below hold them; import from them only what is not listed here.

``decomposition/`` holds the pipeline's parts (clues, experts, the density prior, fusers); this subpackage trains
and assembles them:

- :mod:`~pyterrier_tot.recipe.protocol`: the tuning slice (held-out training queries every weight is fitted on)
  and the training records that keep it out of every model;
- :mod:`~pyterrier_tot.recipe.expert_training`: the bi-encoder training loop (bases, field experts);
- :mod:`~pyterrier_tot.recipe.bases`: the fine-tuned base retrievers and their helpers;
  :mod:`~pyterrier_tot.recipe.soup` (averaged seeds), :mod:`~pyterrier_tot.recipe.hard_negatives` (mined
  negatives);
- :mod:`~pyterrier_tot.recipe.frozen_catalogue`: a request encoder trained against a book index encoded once
  (nothing re-encoded after training; the only training that scales to millions of pages);
- :mod:`~pyterrier_tot.recipe.assembly`: the recipe's experts (with the base's density prior,
  :func:`recipe_priors`) and pipeline; :mod:`~pyterrier_tot.recipe.weights`: the fuser's weights fitted on the
  tuning slice, and where they live (:func:`weights_path`);
- :mod:`~pyterrier_tot.recipe.tuned`: :func:`tuned_pipeline`, the ready pipeline in one call, which prints its
  plan and cost first (:mod:`~pyterrier_tot.recipe.plan`: :func:`recipe_plan`);
  :mod:`~pyterrier_tot.recipe.artifact`: a trained recipe saved as one artifact and loaded anywhere;
- :mod:`~pyterrier_tot.recipe.second_stage`: re-rankers trained on near misses (offered, not in the default): one
  cross-encoder trainer (:func:`recipe_cross_encoder`, its negatives mined by the recipe or by BM25 + dense) and
  a bi-encoder re-ranker (:func:`reranker_stage`).

The parts never import the recipe; the recipe imports the parts.
"""
from pyterrier_tot.decomposition.density_prior import DensityPrior, book_density
from pyterrier_tot.recipe.artifact import RecipeArtifact, TunedPipeline
from pyterrier_tot.recipe.assembly import (
    BASE_K,
    DEPTH,
    EXPERT_K,
    MULTI_BASE_DEPTH,
    RECIPE_PRIORS,
    base_names,
    build_pipeline,
    candidate_base,
    fine_tuned_models,
    recipe_experts,
    recipe_priors,
    training_free_pipeline,
)
from pyterrier_tot.recipe.bases import (
    BASE_SETTINGS,
    DEFAULT_BASE,
    ENSEMBLES,
    HELPERS,
    TrainingSet,
    as_bases,
    at_length,
    base_dir,
    base_expert_name,
    base_grid,
    base_settings,
    choose_base,
    choose_epoch,
    default_helpers,
    encoding_precision,
    fine_tuned_base,
    fine_tuned_bases,
    hub_name,
    warn_untrained,
)
from pyterrier_tot.recipe.expert_training import (
    build_examples,
    build_pairs,
    load_clue_cache,
    train_base_retriever,
    train_biencoder,
    train_field_expert,
    training_metadata,
)
from pyterrier_tot.recipe.frozen_catalogue import train_request_encoder
from pyterrier_tot.recipe.hard_negatives import (
    HN_DEPTH,
    HN_NEGATIVES,
    fine_tuned_hard,
    hard_negative_examples,
    hard_negatives_dir,
)
from pyterrier_tot.recipe.plan import RecipePlan, recipe_plan
from pyterrier_tot.recipe.protocol import (
    REDDIT_TUNING_FINGERPRINT,
    TRAIN_SPLIT,
    TUNING_QUERIES,
    TUNING_SEED,
    as_path,
    check_not_trained_on_slice,
    complete_model,
    qid_fingerprint,
    same_queries,
    text_fingerprint,
    train_data,
    training_info,
    training_rest,
    tuning_split,
)
from pyterrier_tot.recipe.second_stage import (
    CE_MAX_LENGTH,
    CE_NEGATIVES,
    CE_QUERY_TOKENS,
    CE_STEPS,
    RERANKER,
    RERANKER_TRAINING,
    cross_encoder_dir,
    cross_encoder_groups,
    fine_tuned_cross_encoder,
    recipe_cross_encoder,
    recipe_cross_encoder_dir,
    recipe_groups,
    recipe_reranker,
    reranker_dir,
    reranker_examples,
    reranker_stage,
    run_digest,
)
from pyterrier_tot.recipe.second_stage import SETTINGS as CROSS_ENCODER_SETTINGS
from pyterrier_tot.recipe.tuned import tuned_pipeline
from pyterrier_tot.recipe.weights import (
    FEATURES_VERSION,
    FIT_BAGS,
    FIT_METRIC,
    FLOOR_METRIC,
    LAMBDAMART_GRID,
    fitted_learned_fuser,
    fitted_weights,
    load_fuser,
    tuning_data,
    weights_path,
)

__all__ = [
    # the recipe in one call, its plan, the saved artifact
    "tuned_pipeline", "recipe_plan", "RecipePlan", "TunedPipeline", "RecipeArtifact", "training_free_pipeline",
    "DEFAULT_BASE",
    # the tuning protocol
    "tuning_split", "tuning_data", "train_data", "training_rest", "training_info", "complete_model", "as_path",
    "qid_fingerprint", "text_fingerprint", "same_queries", "check_not_trained_on_slice", "TUNING_QUERIES",
    "TUNING_SEED", "TRAIN_SPLIT", "REDDIT_TUNING_FINGERPRINT",
    # the bases and their helpers
    "fine_tuned_base", "fine_tuned_bases", "base_dir", "base_settings", "base_expert_name", "as_bases", "hub_name",
    "encoding_precision", "default_helpers", "warn_untrained", "base_grid", "choose_base", "choose_epoch",
    "TrainingSet", "BASE_SETTINGS", "HELPERS", "ENSEMBLES", "at_length", "fine_tuned_hard", "hard_negative_examples",
    "hard_negatives_dir",
    "HN_NEGATIVES", "HN_DEPTH",
    # training
    "train_biencoder", "train_base_retriever", "train_field_expert", "load_clue_cache", "train_request_encoder",
    "build_pairs", "build_examples", "training_metadata",
    # the pipeline's assembly, the density prior
    "build_pipeline", "recipe_experts", "candidate_base", "base_names", "fine_tuned_models", "recipe_priors",
    "RECIPE_PRIORS", "DensityPrior", "book_density", "BASE_K", "EXPERT_K", "DEPTH", "MULTI_BASE_DEPTH",
    # the fitted weights
    "fitted_weights", "weights_path", "fitted_learned_fuser", "load_fuser", "FIT_METRIC", "FLOOR_METRIC",
    "FIT_BAGS", "FEATURES_VERSION", "LAMBDAMART_GRID",
    # second stages
    "recipe_cross_encoder", "recipe_cross_encoder_dir", "cross_encoder_dir", "recipe_groups", "cross_encoder_groups",
    "CROSS_ENCODER_SETTINGS", "CE_NEGATIVES", "CE_MAX_LENGTH", "CE_QUERY_TOKENS", "CE_STEPS",
    "fine_tuned_cross_encoder", "recipe_reranker", "reranker_stage", "reranker_examples", "reranker_dir",
    "run_digest", "RERANKER", "RERANKER_TRAINING",
]
