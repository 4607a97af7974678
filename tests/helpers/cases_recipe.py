"""Inspect / bad-input cases for the recipe's own transformers (the pipeline tuned_pipeline returns, a saved recipe
loaded back) and the per-field text loader."""
import pandas as pd

from pyterrier_tot.recipe import RecipeArtifact, training_free_pipeline, tuned_pipeline
from tests.helpers.matrix_inputs import Case, queries, results

_MADE = {}


class _Tiny:
    """Twelve training queries over the six tiny books."""

    name = "tiny-inspect"
    QUERIES = ["kittens napping all day", "a dragon and a red moon", "a murder at a manor by a lake",
               "children on a spaceship to jupiter", "a ghost in a lighthouse", "a summer with a wild horse"]

    def get_topics(self, split="train"):
        return pd.DataFrame({"qid": [f"t{i}" for i in range(12)], "query": [self.QUERIES[i % 6] + " " * (i // 6)
                                                                             for i in range(12)]})

    def get_qrels(self, split="train"):
        return pd.DataFrame({"qid": [f"t{i}" for i in range(12)], "docno": [f"b{i % 6 + 1}" for i in range(12)],
                             "label": 1})


def _tuned(env):
    """The recipe on the tiny books: MiniLM fine-tuned for two steps, weights fitted on four queries (cached)."""
    if "dp" not in _MADE:
        _MADE["dp"] = tuned_pipeline(_Tiny(), env.index, base="minilm", n=4, k=3, expert_k=2, verbose=False,
                                     train_settings={"max_steps": 2, "batch_size": 4, "max_seq_length": 32})
    return _MADE["dp"]


def _saved(env):
    if "saved" not in _MADE:
        _MADE["saved"] = _tuned(env).save(env.tmp / "saved-recipe", index=True).path
    return RecipeArtifact(_MADE["saved"])


CASES = [
    Case("TunedPipeline", "queries", _tuned, queries),
    Case("RecipeArtifact", "queries", _saved, queries),
    Case("training_free_pipeline", "queries", lambda e: training_free_pipeline(e.index, base="minilm"), queries),
    Case("BookIndex.text_loader", "fields", lambda e: e.index.text_loader(["title", "author", "year"]), results),
]

STAGES = {
    "TunedPipeline": (True, False, False),       # as DecompositionPipeline
    "RecipeArtifact": (True, False, False),      # the saved recipe's pipeline
    "training_free_pipeline": (True, False, False),  # a DecompositionPipeline
    "BookIndex.text_loader[fields]": (False, False, True),
}
