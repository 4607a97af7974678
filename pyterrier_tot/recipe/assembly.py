"""The recipe's pipeline put together: its experts over an index, the candidates they draw, the fuser, the tail.

:func:`build_pipeline` is the one place that knows what the recipe is made of (:func:`recipe_experts`): the
fine-tuned base(s) and helpers, zero-shot dense and BM25 on the full query, dense and BM25 title experts, a dense
plot expert, and, where the corpus has them, the date expert (years) and the author expert (authors). Fitting
the weights (:mod:`~pyterrier_tot.recipe.weights`) and the one-call recipe (:mod:`~pyterrier_tot.recipe.tuned`)
build on it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pyterrier as pt

from pyterrier_tot.checks import CheckedIndex
from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.density_prior import DENSITY_K, DensityPrior
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline, decomposition_pipeline
from pyterrier_tot.normalise import LinearFusion
from pyterrier_tot.recipe.bases import as_bases, base_expert_name, encoding_precision, ensemble
from pyterrier_tot.recipe.protocol import as_path

#: Depth of the base retriever and of each expert / BM25 retrieval joining the candidates.
BASE_K, EXPERT_K = 100, 50
#: Books per query of the recipe's ranking: the fused candidates, then the rest of the base's ranking.
DEPTH = 1000
#: With several fine-tuned bases, how deep each retrieves before their scores are summed for the candidates.
MULTI_BASE_DEPTH = 1000
#: The bases whose recipe weighs the density prior (:class:`~pyterrier_tot.decomposition.density_prior.DensityPrior`)
#: beside its experts, with its k. Admitted inside the tuning slice (30 random halves, fit on one and measure on the
#: other, against the default without it: ``benchmarks/recipe/results/density.md``); MiniLM was not tried. nomic's
#: recipe weighs it as mpnet's does (not admitted on its own: its study, ``benchmarks/encoders/nomic_base.py``,
#: swaps the encoder and keeps the rest of the default; the fuser fitted on the tuning slice weighs it).
RECIPE_PRIORS: Dict[str, int] = {"mpnet": DENSITY_K, "nomic": DENSITY_K}
#: What ``fine_tuned`` may be: True (train / reuse the bases), a model folder, {expert name: folder}, or None.
FineTuned = Union[bool, str, Path, Dict[str, str], None]


def fine_tuned_models(fine_tuned: FineTuned) -> Dict[str, str]:
    """``fine_tuned`` as {expert name: model folder}: a folder (or a saved model) is the ``dense_ft`` base, a
    dict is taken as it is, None / False is no fine-tuned base."""
    if fine_tuned is None or fine_tuned is False:
        return {}
    if fine_tuned is True:
        raise ValueError("fine_tuned=True is resolved by tuned_pipeline; here pass the model folder(s)")
    if isinstance(fine_tuned, dict):
        return {str(name): as_path(path) for name, path in fine_tuned.items()}
    return {"dense_ft": as_path(fine_tuned)}


def recipe_experts(index, fine_tuned: FineTuned = None,
                   helpers: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, pt.Transformer], str, List[str]]:
    """The recipe's experts over ``index`` (same names on every corpus, so fitted weights transfer), the name of
    the base expert and the names of the experts whose retrievals join the candidates. ``fine_tuned``: a model
    folder or {expert name: folder} (several fine-tuned bases; the first is the base expert). ``helpers``:
    {expert name: folder} of fine-tuned models that score the candidates beside the base (:data:`HELPERS`).
    ``index`` is checked here unless it comes checked (a :class:`~pyterrier_tot.checks.CheckedIndex`): every expert
    takes what the check learnt and checks nothing again."""
    index = CheckedIndex.of(index, "recipe_experts")
    fts, helpers = fine_tuned_models(fine_tuned), dict(helpers or {})
    clash = sorted(set(fts) & set(helpers))
    if clash:
        raise ValueError(f"helpers {clash} are also bases; a model is a base or a helper, not both")
    taken = sorted(set(helpers) & {"dense", "bm25", "title", "title_bm25", "plot", "date", "author"})
    if taken:
        raise ValueError(f"helpers {taken} have the names of the recipe's own experts; name them otherwise")
    experts: Dict[str, pt.Transformer] = {name: base_expert(index, "dense", model=path,
                                                            precision=encoding_precision(name))
                                          for name, path in {**fts, **helpers}.items()}
    experts.update(dense=base_expert(index, "dense"), bm25=base_expert(index, "bm25"),
                   title=FieldExpert(index, "title", "dense"), title_bm25=FieldExpert(index, "title", "bm25"),
                   plot=FieldExpert(index, "plot", "dense"))
    if _date_acts(index):
        experts["date"] = DateExpert(index)
    if _author_acts(index):
        experts["author"] = FieldExpert(index, "author", "bm25")
    names = list(fts)
    base_name = names[0] if names else "dense"
    candidate_experts = ["bm25", "title", "title_bm25"] + names[1:] + (["dense"] if names else [])
    return experts, base_name, candidate_experts


def _date_acts(index) -> bool:
    """Whether the date expert tells books apart on ``index`` (not on a corpus without years, e.g. Reddit-TOMT)."""
    return DateExpert.acts(index)


def _author_acts(index) -> bool:
    """Whether the books of ``index`` have authors (not Reddit-TOMT's): then the rule clues' author clue is
    matched against them by an ``author`` expert (BM25: names are words, not meanings), weighted like the others."""
    index = index.index if isinstance(index, CheckedIndex) else index
    return "author" in getattr(index, "bm25_fields", ("title", "text"))


def candidate_base(experts: Dict[str, pt.Transformer], names: Sequence[str], k: int = BASE_K) -> pt.Transformer:
    """The retriever whose top ``k`` seeds the candidates: the one base expert, or with several the sum of their
    raw (cosine) scores (a :class:`~pyterrier_tot.normalise.LinearFusion` that keeps each row's query columns),
    each retrieving :data:`MULTI_BASE_DEPTH` deep."""
    if len(names) == 1:
        return experts[names[0]].retriever(k)
    return LinearFusion(*(experts[name].retriever(MULTI_BASE_DEPTH) for name in names), normalise="none") % k


def _with_extra(experts: Dict[str, pt.Transformer],
                extra_experts: Optional[Dict[str, pt.Transformer]]) -> Dict[str, pt.Transformer]:
    for name, expert in (extra_experts or {}).items():
        if name in experts:
            raise ValueError(f"extra expert {name!r} has the name of a recipe expert; recipe experts are "
                             f"{list(experts)}")
        if not isinstance(expert, pt.Transformer):
            raise TypeError(f"extra expert {name!r} must be a pt.Transformer (scorer mode), "
                            f"not {type(expert).__name__}")
        experts[name] = expert
    return experts


def build_pipeline(index, fine_tuned: FineTuned = None, decomposer: Optional[pt.Transformer] = None,
                   weights=None, k: int = BASE_K, expert_k: int = EXPERT_K,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None,
                   depth: Optional[int] = DEPTH, helpers: Optional[Dict[str, str]] = None,
                   normalise: str = "minmax", only: Optional[Sequence[str]] = None) -> DecompositionPipeline:
    """decomposer (default the rule extractor) >> candidates >> the recipe's experts >> fuser (``weights``: a
    dict, a list or a saved fuser; default all 1), then the rest of the base's ranking below the fused
    candidates up to ``depth`` books per query (``None``: the fused candidates only). ``fine_tuned``: a model
    folder or {expert name: folder}. ``extra_experts``: more name → scorer-mode experts (e.g. a generative
    retriever's scores) that the fuser weighs beside the recipe's own; they do not add candidates. ``helpers``:
    {expert name: folder} of fine-tuned second-opinion models (see :func:`recipe_experts`). ``normalise``: how the
    fuser puts the experts on one scale (``minmax``, the default, or ``zscore``, ``rr``; saved weights keep their
    own). ``only``: keep these experts alone (the names of weights fitted on another corpus)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor

    index = CheckedIndex.of(index, "build_pipeline")  # once, here or where it entered; passed on to every part
    experts, base_name, cands = recipe_experts(index, fine_tuned, helpers)
    experts = _with_extra(experts, extra_experts)
    if only is not None:  # the experts some fitted weights know (a recipe applied to another corpus)
        experts = {n: e for n, e in experts.items() if n in set(only)}
        cands = [n for n in cands if n in experts]
    weights = str(weights) if isinstance(weights, Path) else weights
    names = list(fine_tuned_models(fine_tuned)) or [base_name]
    dp = decomposition_pipeline(index, decomposer if decomposer is not None else RuleClueExtractor(),
                                experts=experts, base=candidate_base(experts, names, k), k=k, expert_k=expert_k,
                                candidate_experts=cands, weights=weights, normalise=normalise)
    if depth is not None and depth > k:
        dp.tail, dp.depth = candidate_base(experts, names, depth), int(depth)
    return dp


def base_names(fine_tuned: FineTuned) -> List[str]:
    """The names of the recipe's base expert(s): the fine-tuned bases, or zero-shot ``dense`` without one."""
    return list(fine_tuned_models(fine_tuned)) or ["dense"]


def training_free_pipeline(index, base: str = "nomic", depth: Optional[int] = DEPTH) -> DecompositionPipeline:
    """The best pipeline measured for a catalogue without training data (``benchmarks/recipe/transfer.py``, chosen
    on another collection's tuning slice before BIRCO was scored): the recipe's pipeline with the zero-shot ``base``
    (an alias such as ``"nomic"``, ``"mpnet"`` or ``"minilm"``, or a model folder) in the fine-tuned base's place
    and every expert weighted 1: rule clues, candidates from the base, BM25 and the title experts, the experts'
    scores min-max normalised and summed, the base's ranking below them to ``depth``. Nothing is trained or fitted.
    The base is chosen by the same rule (the higher objective on Reddit-TOMT's tuning slice): nomic-embed-text-v1.5
    .530 against mpnet's .523 (``benchmarks/encoders/results/nomic_zero_shot.md``; offline it needs
    ``pyterrier-tot fetch nomic`` once); BIRCO measured mpnet's. With ``base="minilm"`` (what every install has)
    the recipe's zero-shot ``dense`` expert is the base itself and is left out, so MiniLM is not counted twice. The base
    expert is named after its model (``dense_mpnet``, ``dense_minilm``): nothing here is fine-tuned. A model that
    is not here raises :class:`~pyterrier_tot.errors.ModelUnavailableError` saying how to get it."""
    fine_tuned, only = training_free_experts(index, base)
    return build_pipeline(index, fine_tuned, depth=depth, only=only)


def training_free_experts(index, base: str = "nomic") -> Tuple[Dict[str, str], List[str]]:
    """What :func:`training_free_pipeline` is built from: ``{base expert name: model}`` and the names of the
    experts it keeps (nothing is built here). A model that is not here raises
    :class:`~pyterrier_tot.errors.ModelUnavailableError` at once, saying how to get it."""
    from pyterrier_tot.models.loading import DEFAULT_MODEL, model_identity, resolve_model
    from pyterrier_tot.recipe.bases import _slug

    resolve_model(base)
    model = model_identity(str(base))  # an alias or a packaged folder as its hub name: the index of index.dense()
    fine_tuned = {f"dense_{_slug(base)}": model}
    same = model == model_identity(DEFAULT_MODEL)
    return fine_tuned, [n for n in recipe_experts(index, fine_tuned)[0] if not (same and n == "dense")]


def recipe_priors(index, base: Union[str, Sequence[str]],
                  fine_tuned: Optional[Dict[str, str]]) -> Dict[str, DensityPrior]:
    """``{"density": DensityPrior}`` over the fine-tuned model of ``base`` when it is one model named in
    :data:`RECIPE_PRIORS` (or several bases of :data:`~pyterrier_tot.recipe.bases.ENSEMBLES`: over the base it
    names, e.g. mpnet in the default) and ``fine_tuned`` ({expert name: folder}) holds it; else ``{}`` (other sets
    of bases, a base the prior was not tried with, no fine-tuned model)."""
    found = as_bases(base)
    ks = {base_expert_name(model): k for model, k in RECIPE_PRIORS.items()}
    prior = found[0] if len(found) == 1 else ensemble(found).get("prior")
    name = base_expert_name(prior) if prior else None
    if name not in ks or name not in (fine_tuned or {}):
        return {}
    return {"density": DensityPrior(index, fine_tuned[name], k=ks[name], precision=encoding_precision(name))}
