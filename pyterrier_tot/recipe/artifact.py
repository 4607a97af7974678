"""A trained recipe as one artifact: save it once, hand it to a colleague or move it to a laptop, load it anywhere.

    dp = ptt.tuned_pipeline(ds)                      # trains (once) on this machine
    dp.save("my-recipe")                             # models, fitted weights, settings, fingerprints
    dp.save("my-recipe-with-index", index=True)      # ... and the book index (no encoding on the other side)

    recipe = pt.Artifact.load("my-recipe")           # in another process, another machine, an empty cache
    recipe(topics)                                   # ranks as dp did (the corpus is rebuilt from its data set)
    recipe.to_hf("me/tot-recipe")                    # or to_zenodo(), from_hf(...): PyTerrier's artifact sharing

The folder holds ``pt_meta.json`` (type ``tot_recipe``), ``recipe.json`` (the settings, the data set and the
corpus fingerprint it was fitted on, each model's weights fingerprint), ``models/`` (the fine-tuned bases and
helpers, as trained), ``weights/`` (the fuser's fitted weights) and, with ``index=True``, ``index/`` (the book
index with every sub-index the recipe reads). Loading checks every part and names the one missing or damaged.

The recipe ranks the corpus it was fitted on: without an index in the folder, that corpus comes from its data set
by name (the same books: its fingerprint is checked). Applying it to another catalogue is
:meth:`RecipeArtifact.transfer`: the models and weights fitted on one collection, over another's index, said so
in a warning (what ``benchmarks/recipe/transfer.py`` measures on BIRCO).
"""
from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.artifact import META_FILE, ToTArtifact, building, read_meta
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.errors import CorruptArtifactError, DatasetUnavailableError
from pyterrier_tot.models.fingerprint import model_fingerprint

RECIPE_FILE = "recipe.json"
#: Bump when the folder's layout or ``recipe.json`` changes in a way an older reader would misread.
RECIPE_VERSION = 1


class TunedPipeline(DecompositionPipeline):
    """The pipeline :func:`~pyterrier_tot.recipe.tuned.tuned_pipeline` returns: a
    :class:`~pyterrier_tot.decomposition.pipeline.DecompositionPipeline` that also knows what it was made of, so
    :meth:`save` can write it as one artifact. It ranks, prints and composes exactly as the plain pipeline."""

    recipe: dict
    #: The plan the call that built this pipeline printed, each step with what it took (``first_call.taken()``: a
    #: table of estimate against time taken); None when that call had nothing to build or printed no plan.
    first_call = None

    @classmethod
    def of(cls, dp: DecompositionPipeline, dataset, index, fine_tuned: Optional[Dict[str, str]],
           helpers: Optional[Dict[str, str]], extra_experts: Optional[dict], base, k: int, expert_k: int,
           depth: Optional[int], density: bool, normalise: str, n: int) -> "TunedPipeline":
        out = cls(dp.decomposer, dp.candidates, dp.experts, dp.fuser, tail=dp.tail, depth=dp.depth)
        extra = sorted(set(extra_experts or {}) - {"density"})
        out.recipe = {"dataset": getattr(dataset, "name", None), "corpus": getattr(index, "fingerprint", None),
                      "n_books": len(index), "index": index, "bases": dict(fine_tuned or {}),
                      "helpers": dict(helpers or {}), "base": [base] if isinstance(base, str) else list(base),
                      "k": k, "expert_k": expert_k, "depth": depth, "density": "density" in (extra_experts or {}),
                      "normalise": normalise, "tuning_queries": n, "extra_experts": extra,
                      "rule_clues": dp.decomposer is None or type(dp.decomposer).__name__ == "RuleClueExtractor"}
        return out

    def save(self, path: Union[str, Path], index: bool = False, overwrite: bool = False) -> "RecipeArtifact":
        """Write the whole trained recipe into the folder ``path`` (see the module docs): the fine-tuned models,
        the fitted weights, the settings and fingerprints; ``index=True`` copies the book index too (every
        sub-index it has: the other side need not encode anything). Returns the :class:`RecipeArtifact`."""
        r = self.recipe
        if r["extra_experts"]:
            raise ValueError(f"a recipe with extra experts {r['extra_experts']} cannot be saved: only the "
                             "recipe's own experts are rebuilt on loading")
        if not r["rule_clues"]:
            raise ValueError("a recipe with its own decomposer cannot be saved: the saved recipe reads rule clues")
        if self.fuser.path is None:
            raise ValueError("the fuser's weights were refitted in memory; save them first (dp.fuser.save(...))")
        path = Path(path).expanduser()
        models = {**r["bases"], **r["helpers"]}
        with building(path, overwrite=overwrite) as tmp:
            for folder in models.values():
                shutil.copytree(folder, tmp / "models" / Path(folder).name)
            shutil.copytree(self.fuser.path, tmp / "weights" / Path(self.fuser.path).name)
            if index:
                shutil.copytree(r["index"].path, tmp / "index", symlinks=True,
                                ignore=shutil.ignore_patterns(".*.lock", ".*.building.*", ".*.old.*"))
            spec = {k: v for k, v in r.items() if k not in ("index", "bases", "helpers")}
            spec.update(version=RECIPE_VERSION, bases={n: Path(f).name for n, f in r["bases"].items()},
                        helpers={n: Path(f).name for n, f in r["helpers"].items()},
                        fingerprints={n: model_fingerprint(f) for n, f in models.items()},
                        weights=Path(self.fuser.path).name, index_included=bool(index))
            (tmp / RECIPE_FILE).write_text(json.dumps(spec, indent=2))
            RecipeArtifact._write_meta(RecipeArtifact, tmp, dataset=r["dataset"], corpus=r["corpus"],
                                       bases=sorted(r["bases"]), index_included=bool(index))
        return RecipeArtifact(path)


class RecipeArtifact(ToTArtifact, pt.Transformer):
    """A saved recipe (see the module docs): ``pt.Artifact.load(folder)`` returns one. It is a transformer:
    ``recipe(topics)`` ranks with the pipeline built on first use over the corpus it was fitted on;
    :meth:`pipeline` gives that pipeline, :meth:`transfer` the same models and weights over another index."""

    ARTIFACT_TYPE = "tot_recipe"
    ARTIFACT_FORMAT = "pyterrier_tot"

    def __init__(self, path: Union[str, Path]):
        super().__init__(Path(path).expanduser())
        self.spec = self._check()
        self._pipeline: Optional[DecompositionPipeline] = None

    # ------------------------------------------------------------------ reading and checking the folder
    def _check(self) -> dict:
        path = Path(self.path)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such recipe folder")
        try:
            meta = read_meta(path)
        except FileNotFoundError:
            raise CorruptArtifactError(f"{path}: not a saved recipe (no {META_FILE}); save one with "
                                       "tuned_pipeline(...).save(folder)") from None
        if meta.get("type") != self.ARTIFACT_TYPE:
            raise CorruptArtifactError(f"{path}: a {meta.get('type')!r} artifact, not a saved recipe")
        try:
            spec = json.loads((path / RECIPE_FILE).read_text())
        except FileNotFoundError:
            raise CorruptArtifactError(f"{path}: the recipe's settings file {RECIPE_FILE} is missing") from None
        except ValueError as e:
            raise CorruptArtifactError(f"{path}: {RECIPE_FILE} is damaged ({e})") from None
        if int(spec.get("version", 0)) > RECIPE_VERSION:
            raise CorruptArtifactError(f"{path}: saved by a newer pyterrier_tot (recipe format "
                                       f"{spec.get('version')}); upgrade the library to load it")
        for name, folder in {**spec["bases"], **spec["helpers"]}.items():
            where = path / "models" / folder
            if not (where / META_FILE).is_file():
                raise CorruptArtifactError(f"{path}: the model of {name!r} (models/{folder}) is missing or "
                                           "incomplete")
            found = model_fingerprint(str(where))
            if spec["fingerprints"].get(name) and found != spec["fingerprints"][name]:
                raise CorruptArtifactError(f"{path}: the weights of {name!r} (models/{folder}) are not the ones "
                                           "saved (their fingerprint differs): the folder is damaged")
        try:
            WeightedFuser.load(str(path / "weights" / spec["weights"]))
        except (OSError, ValueError, KeyError) as e:
            raise CorruptArtifactError(f"{path}: the fitted weights (weights/{spec['weights']}) are missing or "
                                       f"damaged ({e})") from None
        if spec.get("index_included") and not (path / "index" / META_FILE).is_file():
            raise CorruptArtifactError(f"{path}: the book index (index/) it was saved with is missing")
        return spec

    def models(self) -> Dict[str, str]:
        """{expert name: model folder} of the bases, then the helpers, as saved."""
        saved = {**self.spec["bases"], **self.spec["helpers"]}
        return {n: str(Path(self.path) / "models" / f) for n, f in saved.items()}

    def index(self):
        """The book index the recipe was fitted on: the saved one, else rebuilt from its data set by name (its
        fingerprint checked against the saved one)."""
        from pyterrier_tot.datasets import get_dataset
        from pyterrier_tot.index import BookIndex

        if self.spec.get("index_included"):
            return BookIndex(str(Path(self.path) / "index"))
        name = self.spec.get("dataset")
        sampled = re.fullmatch(r"(.+)-sample(\d+)", str(name))  # a sample of a data set, by the name it has
        try:
            index = BookIndex(get_dataset(sampled[1], sample=int(sampled[2])) if sampled else get_dataset(name))
        except (KeyError, ValueError, DatasetUnavailableError) as e:
            raise DatasetUnavailableError(
                f"{self.path}: this recipe was fitted on {name!r} (corpus fingerprint {self.spec['corpus']}), which "
                f"cannot be loaded here ({e}); pass index= (a BookIndex of that corpus) to pipeline(), save the "
                "recipe with index=True, or apply it to another catalogue with transfer(index)") from None
        if index.fingerprint != self.spec["corpus"]:
            raise DatasetUnavailableError(
                f"{self.path}: {name!r} here holds other books (fingerprint {index.fingerprint}) than the recipe "
                f"was fitted on ({self.spec['corpus']}); use transfer(index) to apply it to them anyway")
        return index

    # ------------------------------------------------------------------ the pipeline
    def pipeline(self, index=None) -> DecompositionPipeline:
        """The saved recipe as a pipeline over ``index`` (default :meth:`index`), which must hold the corpus it
        was fitted on (its fingerprint); for another corpus use :meth:`transfer`."""
        if index is None and self._pipeline is not None:
            return self._pipeline
        given = index
        index = index if index is not None else self.index()
        if getattr(index, "fingerprint", None) != self.spec["corpus"]:
            raise ValueError(f"{self.path}: the index {index!r} holds other books than the recipe was fitted on "
                             f"(fingerprint {getattr(index, 'fingerprint', None)} against {self.spec['corpus']}); "
                             "transfer(index) applies it to another catalogue")
        dp = self._build(index, only=None)
        if given is None:
            self._pipeline = dp
        return dp

    def transfer(self, index) -> DecompositionPipeline:
        """The saved recipe over another catalogue's ``index``: the fine-tuned models and the weights fitted on
        the recipe's collection, unchanged (experts that collection had no use for, such as a date or author
        expert, are left out). Nothing is fitted on the new catalogue: say so when reporting its numbers. A request
        encoder trained against the recipe's frozen catalogue searches the new books' vectors of its book model
        (:meth:`~pyterrier_tot.index.BookIndex.allow_transfer`)."""
        if getattr(index, "fingerprint", None) == self.spec["corpus"]:
            return self.pipeline(index)
        warnings.warn(f"applying the recipe fitted on {self.spec['dataset']!r} to {index!r}: models and weights "
                      "unchanged, nothing fitted on these books", stacklevel=2)
        from pyterrier_tot.checks import CheckedIndex
        from pyterrier_tot.index.dense import frozen_books

        books = index.index if isinstance(index, CheckedIndex) else index
        for model in self.models().values():  # request encoders search these books' vectors of their book model
            if frozen_books(model) is not None:
                books.allow_transfer(model)
        return self._build(index, only=WeightedFuser.load(self._weights()).names)

    def _weights(self) -> str:
        return str(Path(self.path) / "weights" / self.spec["weights"])

    def _build(self, index, only: Optional[Sequence[str]]) -> DecompositionPipeline:
        from pyterrier_tot.checks import CheckedIndex
        from pyterrier_tot.recipe.assembly import build_pipeline, recipe_priors

        index = CheckedIndex.of(index, "TunedPipeline")  # checked once, passed on to every part
        s, models = self.spec, self.models()
        bases = {n: models[n] for n in s["bases"]}
        helpers = {n: models[n] for n in s["helpers"]} or None
        extra = recipe_priors(index, s["base"], bases) if s["density"] else None
        weights = self._weights()
        if only is not None:  # transfer: the experts fitted, with their weights (matched by name)
            fitted = WeightedFuser.load(weights)
            weights = dict(zip(fitted.names, map(float, fitted.weights)))
        dp = build_pipeline(index, bases or None, weights=weights, k=s["k"], expert_k=s["expert_k"],
                            extra_experts=extra or None, depth=s["depth"], helpers=helpers, normalise=s["normalise"],
                            only=only)
        return dp

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return self.pipeline()(inp)

    def __repr__(self):
        return (f"RecipeArtifact({str(self.path)!r}: {self.spec['dataset']!r}, bases {sorted(self.spec['bases'])}"
                f"{', index included' if self.spec.get('index_included') else ''})")
