"""The decomposition pipeline as the benchmark and the demo build it: a ready, offline pipeline in one call.

    from pyterrier_tot.decomposition.recipe import tuned_pipeline
    dp = tuned_pipeline(ptt.get_dataset("reddit-tomt-books"))   # trains / fits on first use, cached afterwards
    dp(ds.get_topics("validation"))

The procedure (the numbers in ``benchmarks/results/decomposition_pipeline.md`` come from it):

1. :func:`tuning_split`: 300 training queries (``train.sample(300, random_state=0)``) are set aside. Fuser
   weights and other choices are fitted on them; nothing is trained on them.
2. :func:`fine_tuned_base`: MiniLM is fine-tuned as the base retriever on the *other* training queries (full
   query → gold title + text, the ``expert_training`` defaults: 1 epoch, batch 16, lr 2e-5). The model is cached
   under ``cache_dir()/models`` and reused; a folder without a complete model counts as absent.
3. :func:`recipe_experts`: fine-tuned dense, zero-shot dense and BM25 on the full query, dense + BM25 title
   experts and a dense plot expert on the rule clues, and the date expert.
4. :func:`fitted_weights`: coordinate ascent on Recall@5 over the tuning slice, weights cached through
   :meth:`WeightedFuser.save` / :meth:`WeightedFuser.load`.

Validation is only ever evaluated. Nothing here needs a network or an LLM: clues come from the rule extractor.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import cache_dir
from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline, decomposition_pipeline
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

#: Size and seed of the tuning slice of the training queries.
TUNING_QUERIES, TUNING_SEED = 300, 0
#: Depth of the base retriever and of each expert / BM25 retrieval joining the candidates.
BASE_K, EXPERT_K = 100, 50
FIT_METRIC = "R@5"
_MODEL_FILES = ("model.safetensors", "pytorch_model.bin")
_META_FILES = ("pyterrier_tot_training.json", "pt_meta.json")  # the training file has the full details first


def tuning_split(train_topics: pd.DataFrame, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> pd.DataFrame:
    """The tuning slice of the training queries: weights and choices are fitted on it, nothing trains on it."""
    return train_topics.sample(n=min(n, len(train_topics)), random_state=seed)


def training_rest(train_topics: pd.DataFrame, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> pd.DataFrame:
    """The training queries outside the tuning slice (what models are trained on)."""
    return train_topics[~train_topics["qid"].isin(tuning_split(train_topics, n, seed)["qid"])]


def _model_dir(ds_name: str, n: int) -> Path:
    # the name the benchmark has always used, so a model trained by an older run is found again
    tag = "reddit" if ds_name == "reddit-tomt-books" else ds_name
    return cache_dir() / "models" / f"base-minilm-{tag}-train-minus-fit{n}-e1"


def complete_model(path: Union[str, Path]) -> bool:
    """True when ``path`` holds a saved model: its metadata and its weights (an interrupted save has neither)."""
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in _META_FILES) and any((p / f).is_file() for f in _MODEL_FILES)


def _as_path(obj) -> str:
    from pyterrier_tot._artifact import artifact_path

    return artifact_path(obj) or str(obj)


def fine_tuned_base(dataset, n: int = TUNING_QUERIES, seed: int = TUNING_SEED, path: Union[str, Path, None] = None,
                    train: bool = True, verbose: bool = True) -> Optional[str]:
    """The fine-tuned base retriever of the recipe (a model folder, usable as ``model=``): reused when cached,
    otherwise trained on the training queries outside the tuning slice (``train=False``: ``None`` instead).

    Training takes about 5 minutes of MiniLM on two idle CPU cores (1,553 pairs, 97 steps)."""
    from pyterrier_tot.decomposition.expert_training import train_base_retriever
    from pyterrier_tot.index import BookIndex

    out = Path(path) if path else _model_dir(dataset.name, n)
    if complete_model(out):
        return str(out)
    if not train:
        return None
    topics, qrels = dataset.get_topics("train"), dataset.get_qrels("train")
    rest = training_rest(topics, n, seed)
    if verbose:
        print(f"fine-tuning the base retriever on {len(rest)} training queries into {out} (about 5 min on 2 cores)")
    result = train_base_retriever(rest, qrels, BookIndex(dataset).corpus, output_dir=out)
    return _as_path(result)


def recipe_experts(index, fine_tuned: Optional[str] = None) -> Tuple[Dict[str, pt.Transformer], str, List[str]]:
    """The recipe's experts over ``index`` (same names on every corpus, so fitted weights transfer), the name of
    the base expert and the names of the experts whose retrievals join the candidates."""
    experts: Dict[str, pt.Transformer] = {}
    if fine_tuned:
        experts["dense_ft"] = base_expert(index, "dense", model=fine_tuned)
    experts["dense"] = base_expert(index, "dense")
    experts["bm25"] = base_expert(index, "bm25")
    experts["title"] = FieldExpert(index, "title", "dense")
    experts["title_bm25"] = FieldExpert(index, "title", "bm25")
    experts["plot"] = FieldExpert(index, "plot", "dense")
    experts["date"] = DateExpert(index)
    base_name = "dense_ft" if fine_tuned else "dense"
    candidate_experts = ["bm25", "title", "title_bm25"] + (["dense"] if fine_tuned else [])
    return experts, base_name, candidate_experts


def build_pipeline(index, fine_tuned: Optional[str] = None, decomposer: Optional[pt.Transformer] = None,
                   weights=None, k: int = BASE_K, expert_k: int = EXPERT_K) -> DecompositionPipeline:
    """decomposer (default the rule extractor) >> candidates >> the recipe's experts >> fuser (``weights``: a
    dict, a list or a saved fuser; default all 1)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor

    experts, base_name, cands = recipe_experts(index, fine_tuned)
    weights = str(weights) if isinstance(weights, Path) else weights
    return decomposition_pipeline(index, decomposer if decomposer is not None else RuleClueExtractor(),
                                  experts=experts, base=experts[base_name].retriever(k), k=k, expert_k=expert_k,
                                  candidate_experts=cands, weights=weights)


def _weights_path(ds_name: str, index, fine_tuned: Optional[str], n: int, seed: int, k: int, expert_k: int) -> Path:
    # the corpus fingerprint is part of the key: weights fitted on one corpus are not reused for another
    key = json.dumps([ds_name, getattr(index, "fingerprint", None), Path(fine_tuned).name if fine_tuned else None,
                      n, seed, k, expert_k, FIT_METRIC])
    return cache_dir() / "models" / f"fuser-{ds_name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def fitted_weights(dataset, index, fine_tuned: Optional[str] = None, n: int = TUNING_QUERIES,
                   seed: int = TUNING_SEED, k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = False) -> Path:
    """The saved fuser of the recipe: weights fitted (coordinate ascent, Recall@5) on the tuning slice with rule
    clues, reused from the cache unless ``refit``. Returns the path for ``decomposition_pipeline(weights=...)``."""
    path = _weights_path(dataset.name, index, fine_tuned, n, seed, k, expert_k)
    if path.exists() and not refit:
        return path
    dp = build_pipeline(index, fine_tuned, k=k, expert_k=expert_k)
    topics, qrels = dataset.get_topics("train"), dataset.get_qrels("train")
    dp.fuser.fit(tuning_split(topics, n, seed), qrels, metric=FIT_METRIC, candidates=dp.decomposer >> dp.candidates,
                 verbose=verbose)
    return dp.fuser.save(path)


def tuned_pipeline(dataset, index=None, fine_tuned: Union[bool, str, None] = True,
                   decomposer: Optional[pt.Transformer] = None, train: bool = True,
                   k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = True) -> DecompositionPipeline:
    """The recipe's decomposition pipeline over ``dataset`` (a ToT dataset with train topics and qrels), ready to
    run: fine-tuned base (``True``: get or train it; a path: that model; ``False``/``None``: zero-shot MiniLM),
    rule clues (or ``decomposer``), weights fitted on the tuning slice. Offline; cached after the first call."""
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    if fine_tuned is True:
        fine_tuned = fine_tuned_base(dataset, train=train, verbose=verbose)
    fine_tuned = _as_path(fine_tuned) if fine_tuned else None
    weights = fitted_weights(dataset, index, fine_tuned, k=k, expert_k=expert_k, refit=refit, verbose=False)
    return build_pipeline(index, fine_tuned, decomposer, weights=weights, k=k, expert_k=expert_k)


def load_fuser(path: Union[str, Path]) -> WeightedFuser:
    """The fitted weights alone (names, weights, fit score) of a saved fuser, e.g. for a results table."""
    return WeightedFuser.load(path)


def training_info(path: Union[str, Path]) -> dict:
    """What a fine-tuned model folder says about its training (pair count, steps, seconds, hyper-parameters)."""
    for name in _META_FILES:
        f = Path(path) / name
        if f.is_file():
            meta = json.loads(f.read_text(encoding="utf8"))
            return meta.get("training", meta) if isinstance(meta.get("training"), dict) else meta
    return {}
