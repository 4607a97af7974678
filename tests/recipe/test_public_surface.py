"""``pyterrier_tot.recipe`` is the recipe's one public surface: every name a user, a test or a benchmark needs is
listed in its ``__all__``; ``recipe/tuned.py`` keeps only what it defines, and a name read through it the old way
still works, with a DeprecationWarning naming the new place."""
import pytest

import pyterrier_tot as ptt
from pyterrier_tot import recipe
from pyterrier_tot.recipe import tuned

#: The public names ``recipe/tuned.py`` re-exported before the package became the recipe's surface.
OLD_TUNED_NAMES = [
    "BASE_K", "BASE_SETTINGS", "CE_MAX_LENGTH", "CE_NEGATIVES", "CE_QUERY_TOKENS", "CE_STEPS", "DEFAULT_BASE", "DEPTH",
    "EXPERT_K", "FEATURES_VERSION", "FIT_BAGS", "FIT_METRIC", "FLOOR_METRIC", "HELPERS", "HN_DEPTH", "HN_NEGATIVES",
    "LAMBDAMART_GRID", "MULTI_BASE_DEPTH", "REDDIT_TUNING_FINGERPRINT", "TRAIN_SPLIT", "TUNING_QUERIES", "TUNING_SEED",
    "TrainingSet", "as_bases", "as_path", "base_dir", "base_expert_name", "base_grid", "base_names", "base_settings",
    "build_pipeline", "candidate_base", "check_not_trained_on_slice", "choose_base", "choose_epoch", "complete_model",
    "cross_encoder_groups", "default_helpers", "encoding_precision", "fine_tuned_base", "fine_tuned_bases",
    "fine_tuned_cross_encoder", "fine_tuned_hard", "fine_tuned_models", "fitted_learned_fuser", "fitted_weights",
    "hard_negative_examples", "load_fuser", "qid_fingerprint", "recipe_experts", "recipe_plan", "recipe_priors",
    "same_queries", "text_fingerprint", "train_data", "training_info", "training_rest", "tuning_data", "tuning_split",
    "tuned_pipeline", "warn_untrained"]
#: The pipeline's parts tuned.py re-exported too: they are the package's names, not the recipe's.
OLD_PARTS = ["DateExpert", "DecompositionPipeline", "FieldExpert", "WeightedFuser", "ModelUnavailableError"]


def test_every_public_name_of_the_recipe_is_in_its_all():
    assert not [n for n in recipe.__all__ if n.startswith("_")]
    assert len(set(recipe.__all__)) == len(recipe.__all__)
    missing = [n for n in recipe.__all__ if not hasattr(recipe, n)]
    assert not missing, missing
    assert not set(OLD_TUNED_NAMES) - set(recipe.__all__)
    assert not set(OLD_PARTS) - set(ptt.__all__)


def test_names_read_through_tuned_the_old_way_warn_and_are_the_same_objects():
    assert tuned.tuned_pipeline is recipe.tuned_pipeline  # what tuned.py defines: no warning
    with pytest.warns(DeprecationWarning, match="moved to pyterrier_tot.recipe.weights_path"):
        assert tuned._weights_path is recipe.weights_path
    with pytest.warns(DeprecationWarning, match="moved to pyterrier_tot.recipe.recipe_plan"):
        assert tuned.recipe_plan is recipe.recipe_plan
    with pytest.warns(DeprecationWarning, match="moved to pyterrier_tot.FieldExpert"):
        assert tuned.FieldExpert is ptt.FieldExpert
    with pytest.raises(AttributeError):
        tuned.no_such_name  # noqa: B018


def test_the_density_prior_lives_beside_the_other_experts():
    from pyterrier_tot.decomposition import density_prior

    assert recipe.DensityPrior is density_prior.DensityPrior is ptt.DensityPrior
    assert recipe.DensityPrior.__module__ == "pyterrier_tot.decomposition.density_prior"
    with pytest.warns(DeprecationWarning, match="moved to pyterrier_tot.decomposition.density_prior"):
        from pyterrier_tot.recipe.density_prior import DensityPrior, recipe_priors
    assert DensityPrior is recipe.DensityPrior and recipe_priors is recipe.recipe_priors


def test_the_cross_encoders_old_names_warn_and_give_the_same_folders(tmp_path, monkeypatch):
    from pyterrier_tot.recipe import second_stage

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    with pytest.warns(DeprecationWarning, match="recipe_cross_encoder_dir"):
        assert second_stage.model_dir("/models/base-x") == recipe.recipe_cross_encoder_dir("/models/base-x")
    with pytest.warns(DeprecationWarning, match="moved to pyterrier_tot.recipe.second_stage"):
        from pyterrier_tot.recipe.mined_cross_encoder import cross_encoder_dir
    assert cross_encoder_dir is recipe.cross_encoder_dir
