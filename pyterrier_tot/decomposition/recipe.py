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


#: The one split any training or tuning path of the recipe reads (validation is only ever evaluated).
TRAIN_SPLIT = "train"
#: sha1 of the sorted qids of the Reddit-TOMT tuning slice: the slice is fixed, a change to it shows up in tests.
REDDIT_TUNING_FINGERPRINT = "45c3a3398527621c48eb9e5ed9f67bd56dc03d88"


def tuning_split(train_topics: pd.DataFrame, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> pd.DataFrame:
    """The tuning slice of the training queries: weights and choices are fitted on it, nothing trains on it."""
    return train_topics.sample(n=min(n, len(train_topics)), random_state=seed)


def qid_fingerprint(topics: pd.DataFrame) -> str:
    """sha1 of the sorted qids of ``topics`` (how the fixed tuning slice is recognised)."""
    return hashlib.sha1("\n".join(sorted(topics["qid"].astype(str))).encode()).hexdigest()


def train_data(dataset, part: str = "rest", n: int = TUNING_QUERIES,
               seed: int = TUNING_SEED) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(topics, qrels) of the training split for ``part``: ``"rest"`` (what models train on), ``"tuning"`` (the
    fixed slice where weights, epochs and other choices are fitted) or ``"all"``. Every training and tuning path
    of the recipe reads its data here; there is no argument that reaches the validation split."""
    if part not in ("rest", "tuning", "all"):
        raise ValueError(f"train_data: part must be 'rest', 'tuning' or 'all', not {part!r}")
    topics, qrels = dataset.get_topics(TRAIN_SPLIT), dataset.get_qrels(TRAIN_SPLIT)
    if part == "rest":
        topics = training_rest(topics, n, seed)
    elif part == "tuning":
        topics = tuning_split(topics, n, seed)
    qrels = qrels[qrels["qid"].astype(str).isin(topics["qid"].astype(str))]
    return topics, qrels


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
    rest, qrels = train_data(dataset, "rest", n, seed)
    if verbose:
        print(f"fine-tuning the base retriever on {len(rest)} training queries into {out} (about 5 min on 2 cores)")
    result = train_base_retriever(rest, qrels, BookIndex(dataset).corpus, output_dir=out)
    return _as_path(result)


#: Hard-negative fine-tuning (on top of :func:`fine_tuned_base`): negatives per example, mining depth.
HN_NEGATIVES, HN_DEPTH = 2, 30


def _hn_dir(ds_name: str, n: int, n_neg: int, epoch: int, clue_forms: bool, max_steps: Optional[int]) -> Path:
    tag = "reddit" if ds_name == "reddit-tomt-books" else ds_name
    clues = "-clues" if clue_forms else ""
    steps = f"-s{max_steps}" if max_steps else ""
    return cache_dir() / "models" / f"hn-minilm-{tag}-train-minus-fit{n}-neg{n_neg}{clues}{steps}-e{epoch}"


def hard_negative_examples(dataset, index, n_negatives: int = HN_NEGATIVES, depth: int = HN_DEPTH, seed: int = 0,
                           clue_forms: bool = True, n: int = TUNING_QUERIES) -> list:
    """Training examples (query, gold, negatives...) on the training queries outside the tuning slice, the
    negatives mined from BM25 and zero-shot MiniLM (gold excluded); with ``clue_forms`` the short clue form of
    each query (rule clues: title, author, date, cover, genre) is one more anchor for the same books."""
    from pyterrier_tot.decomposition.expert_training import build_examples, clue_form_queries
    from pyterrier_tot.decomposition.hard_negatives import mine_hard_negatives, sample_negatives
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor

    rest, qrels = train_data(dataset, "rest", n)
    mined = mine_hard_negatives(rest, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=depth)
    negs = sample_negatives(mined, n_negatives, seed=seed)
    examples = build_examples(rest, qrels, index.corpus, negs, n_negatives)
    if clue_forms:
        forms = clue_form_queries(RuleClueExtractor()(rest))
        examples += build_examples(forms, qrels, index.corpus, negs, n_negatives)
    return examples


def fine_tuned_hard(dataset, index=None, epochs: int = 1, n_negatives: int = HN_NEGATIVES, depth: int = HN_DEPTH,
                    clue_forms: bool = True, n: int = TUNING_QUERIES, train: bool = True,
                    verbose: bool = True, **train_kwargs) -> Dict[int, str]:
    """MiniLM fine-tuned with mined hard negatives: epoch 0 is :func:`fine_tuned_base` (in-batch negatives),
    each further epoch continues from the one before on fresh negatives (seeded by the epoch). Returns
    ``{epoch: model folder}`` for the epochs that exist (each cached as an artifact; ``train=False`` trains
    nothing). Pick the epoch with :func:`choose_epoch` on the tuning slice."""
    from pyterrier_tot.decomposition.expert_training import train_biencoder
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    models: Dict[int, str] = {}
    base = fine_tuned_base(dataset, n, train=train, verbose=verbose)
    if base is None:
        return models
    models[0] = base
    for epoch in range(1, epochs + 1):
        out = _hn_dir(dataset.name, n, n_negatives, epoch, clue_forms, train_kwargs.get("max_steps"))
        if not complete_model(out):
            if not train:
                break
            examples = hard_negative_examples(dataset, index, n_negatives, depth, seed=epoch,
                                              clue_forms=clue_forms, n=n)
            if verbose:
                print(f"hard-negative epoch {epoch}: {len(examples)} examples from {models[epoch - 1]} into {out}")
            train_biencoder(examples, out, base_model=models[epoch - 1], kind="base-hn", seed=epoch,
                            extra_metadata={"epoch": epoch, "start": Path(models[epoch - 1]).name,
                                            "mined_from": ["bm25", "dense zero-shot"], "depth": depth,
                                            "clue_forms": clue_forms}, **train_kwargs)
        models[epoch] = str(out)
    return models


def choose_epoch(dataset, index, models: Dict[int, str], metric: str = FIT_METRIC,
                 n: int = TUNING_QUERIES) -> Tuple[int, pd.DataFrame]:
    """The epoch whose dense retriever scores best on the tuning slice (``metric``), with the table of all."""
    from pyterrier_tot.evaluation import tot_experiment

    tuning, qrels = train_data(dataset, "tuning", n)
    epochs = sorted(models)
    table = tot_experiment([index.dense(models[e]) for e in epochs], tuning, qrels,
                           names=[f"epoch {e}" for e in epochs], round=None)
    table["epoch"] = epochs
    best = int(table.sort_values([metric, "epoch"], ascending=[False, True]).iloc[0]["epoch"])
    return best, table


#: Cross-encoder of the recipe: negatives per query, sequence lengths, steps (the CPU budget; None = 1 epoch).
CE_NEGATIVES, CE_MAX_LENGTH, CE_QUERY_TOKENS, CE_STEPS = 3, 160, 96, 100


def cross_encoder_groups(dataset, index, n_negatives: int = CE_NEGATIVES, depth: int = HN_DEPTH, seed: int = 0,
                         n: int = TUNING_QUERIES) -> list:
    """(query, gold text, negative texts) groups on the training queries outside the tuning slice, negatives
    mined from BM25 and zero-shot MiniLM (gold excluded), in a seeded random order."""
    from pyterrier_tot.decomposition.expert_training import build_examples
    from pyterrier_tot.decomposition.hard_negatives import mine_hard_negatives, sample_negatives

    rest, qrels = train_data(dataset, "rest", n)
    mined = mine_hard_negatives(rest, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=depth)
    examples = build_examples(rest, qrels, index.corpus, sample_negatives(mined, n_negatives, seed=seed), n_negatives)
    return [(ex[0], ex[1], list(ex[2:])) for ex in examples]


def fine_tuned_cross_encoder(dataset, index=None, n_negatives: int = CE_NEGATIVES, max_steps: Optional[int] = CE_STEPS,
                             max_length: int = CE_MAX_LENGTH, max_query_tokens: int = CE_QUERY_TOKENS,
                             n: int = TUNING_QUERIES, train: bool = True, verbose: bool = True,
                             **train_kwargs) -> Optional[str]:
    """The recipe's cross-encoder (MiniLM weights, new head) trained on the training queries outside the tuning
    slice with mined negatives; cached as an artifact (``train=False``: ``None`` when not cached). The default
    ``max_steps`` is the CPU budget: with ``batch_queries`` 4 that is 400 of the 1,553 queries."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.rerank.cross_encoder import train_cross_encoder

    tag = "reddit" if dataset.name == "reddit-tomt-books" else dataset.name
    batch = train_kwargs.get("batch_queries", 4)
    lr = f"-lr{train_kwargs['lr']:g}" if "lr" in train_kwargs else ""
    out = cache_dir() / "models" / (f"ce-minilm-{tag}-train-minus-fit{n}-neg{n_negatives}-L{max_length}"
                                    f"-b{batch}-s{max_steps or 'epoch'}{lr}")
    if (out / "pt_meta.json").is_file():
        return str(out)
    if not train:
        return None
    index = index if index is not None else BookIndex(dataset)
    groups = cross_encoder_groups(dataset, index, n_negatives, n=n)
    if verbose:
        print(f"training the cross-encoder on {len(groups)} groups ({max_steps or 'all'} steps) into {out}")
    train_cross_encoder(groups, out, n_negatives=n_negatives, max_steps=max_steps, max_length=max_length,
                        max_query_tokens=max_query_tokens, extra_metadata={"mined_from": ["bm25", "dense zero-shot"]},
                        **train_kwargs)
    return str(out)


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


def build_pipeline(index, fine_tuned: Optional[str] = None, decomposer: Optional[pt.Transformer] = None,
                   weights=None, k: int = BASE_K, expert_k: int = EXPERT_K,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None) -> DecompositionPipeline:
    """decomposer (default the rule extractor) >> candidates >> the recipe's experts >> fuser (``weights``: a
    dict, a list or a saved fuser; default all 1). ``extra_experts``: more name → scorer-mode experts (e.g. a
    generative retriever's scores) that the fuser weighs beside the recipe's own; they do not add candidates."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor

    experts, base_name, cands = recipe_experts(index, fine_tuned)
    experts = _with_extra(experts, extra_experts)
    weights = str(weights) if isinstance(weights, Path) else weights
    return decomposition_pipeline(index, decomposer if decomposer is not None else RuleClueExtractor(),
                                  experts=experts, base=experts[base_name].retriever(k), k=k, expert_k=expert_k,
                                  candidate_experts=cands, weights=weights)


def _weights_path(ds_name: str, index, fine_tuned: Optional[str], n: int, seed: int, k: int, expert_k: int,
                  extra_experts: Optional[Dict[str, pt.Transformer]] = None) -> Path:
    # the corpus fingerprint is part of the key: weights fitted on one corpus are not reused for another
    parts = [ds_name, getattr(index, "fingerprint", None), Path(fine_tuned).name if fine_tuned else None,
             n, seed, k, expert_k, FIT_METRIC]
    if extra_experts:  # absent for the plain recipe, so weights cached before the option are found again
        parts.append({name: repr(e) for name, e in extra_experts.items()})
    key = json.dumps(parts)
    return cache_dir() / "models" / f"fuser-{ds_name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def _same_queries(feats: Optional[pd.DataFrame], tuning: pd.DataFrame, who: str) -> None:
    # a fit on part of the slice (or on other queries) must never be cached as the recipe's
    if feats is not None and set(feats["qid"].astype(str)) != set(tuning["qid"].astype(str)):
        raise ValueError(f"{who}: feats must cover exactly the {len(tuning)} queries of the tuning slice, "
                         f"got {feats['qid'].nunique()} queries")


def fitted_weights(dataset, index, fine_tuned: Optional[str] = None, n: int = TUNING_QUERIES,
                   seed: int = TUNING_SEED, k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = False, feats: Optional[pd.DataFrame] = None,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None) -> Path:
    """The saved fuser of the recipe: weights fitted (coordinate ascent, Recall@5) on the tuning slice with rule
    clues, reused from the cache unless ``refit``. Returns the path for ``decomposition_pipeline(weights=...)``.
    ``feats``: the tuning slice's candidates with one min-max, neutral-0 column per expert (as
    :meth:`WeightedFuser.features` or :meth:`LearnedFuser.features` make them), so the experts need not run
    again. ``extra_experts``: as in :func:`build_pipeline`, fitted with the rest."""
    path = _weights_path(dataset.name, index, fine_tuned, n, seed, k, expert_k, extra_experts)
    if path.exists() and not refit:
        return path
    dp = build_pipeline(index, fine_tuned, k=k, expert_k=expert_k, extra_experts=extra_experts)
    tuning, qrels = train_data(dataset, "tuning", n, seed)
    _same_queries(feats, tuning, "fitted_weights")
    if feats is not None:
        names = dp.fuser.names
        frame = feats.drop(columns=names).assign(features=list(feats[names].to_numpy(dtype=float)))
        # the columns are already normalised: fit on them as they are, then keep the recipe's normalisation
        on_matrix = WeightedFuser(None, weights=dp.fuser.weights, names=names, normalise="none")
        on_matrix.fit(frame[frame["qid"].isin(tuning["qid"])], qrels, metric=FIT_METRIC, verbose=verbose)
        dp.fuser.weights = on_matrix.weights
        dp.fuser.fit_metric, dp.fuser.fit_score = on_matrix.fit_metric, on_matrix.fit_score
        return dp.fuser.save(path)
    dp.fuser.fit(tuning, qrels, metric=FIT_METRIC, candidates=dp.decomposer >> dp.candidates,
                 verbose=verbose)
    return dp.fuser.save(path)


def tuned_pipeline(dataset, index=None, fine_tuned: Union[bool, str, None] = True,
                   decomposer: Optional[pt.Transformer] = None, train: bool = True,
                   k: int = BASE_K, expert_k: int = EXPERT_K, refit: bool = False,
                   verbose: bool = True,
                   extra_experts: Optional[Dict[str, pt.Transformer]] = None) -> DecompositionPipeline:
    """The recipe's decomposition pipeline over ``dataset`` (a ToT dataset with train topics and qrels), ready to
    run: fine-tuned base (``True``: get or train it; a path: that model; ``False``/``None``: zero-shot MiniLM),
    rule clues (or ``decomposer``), weights fitted on the tuning slice. Offline; cached after the first call.
    ``extra_experts``: name → scorer-mode expert fused beside the recipe's (weights fitted on the slice too)."""
    from pyterrier_tot.index import BookIndex

    index = index if index is not None else BookIndex(dataset)
    if fine_tuned is True:
        fine_tuned = fine_tuned_base(dataset, train=train, verbose=verbose)
    fine_tuned = _as_path(fine_tuned) if fine_tuned else None
    weights = fitted_weights(dataset, index, fine_tuned, k=k, expert_k=expert_k, refit=refit, verbose=False,
                             extra_experts=extra_experts)
    return build_pipeline(index, fine_tuned, decomposer, weights=weights, k=k, expert_k=expert_k,
                          extra_experts=extra_experts)


#: LambdaMART settings tried by 5-fold cross-validation on the tuning slice (300 queries over-fit easily).
LAMBDAMART_GRID = [{}, {"n_estimators": 100, "num_leaves": 7, "min_child_samples": 50},
                   {"n_estimators": 200, "num_leaves": 7, "min_child_samples": 100, "reg_lambda": 5.0},
                   {"n_estimators": 50, "learning_rate": 0.05, "num_leaves": 4, "min_child_samples": 200},
                   {"n_estimators": 100, "num_leaves": 4, "min_child_samples": 100, "colsample_bytree": 0.5}]


def fitted_learned_fuser(dataset, index, fine_tuned: Optional[str] = None, n: int = TUNING_QUERIES,
                         k: int = BASE_K, expert_k: int = EXPERT_K, negation: bool = True, refit: bool = False,
                         feats: Optional[pd.DataFrame] = None, grid: Optional[List[dict]] = None):
    """The recipe's LambdaMART fuser over the recipe's experts (+ negation hit), trained on the tuning slice with
    rule clues and cached as an artifact. ``feats``: the tuning slice's precomputed features (a benchmark that
    has them saves the expert runs); ``grid``: lightgbm settings to choose from by 5-fold cross-validation on the
    slice (default :data:`LAMBDAMART_GRID`). Returns the fitted :class:`LearnedFuser`."""
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser
    from pyterrier_tot.query.negation_penalty import NegationPenalty

    grid = list(LAMBDAMART_GRID if grid is None else grid)
    experts, _, _ = recipe_experts(index, fine_tuned)
    neg = NegationPenalty(index) if negation else None
    key = json.dumps([dataset.name, getattr(index, "fingerprint", None), Path(fine_tuned).name if fine_tuned else None,
                      n, k, expert_k, negation, grid, "lambdamart-v2"])
    path = cache_dir() / "models" / f"learned-fuser-{dataset.name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if (path / "pt_meta.json").is_file() and not refit:
        return LearnedFuser.load(path, list(experts.values()), neg)
    fuser = LearnedFuser(list(experts.values()), names=list(experts), negation=neg)
    tuning, qrels = train_data(dataset, "tuning", n)
    _same_queries(feats, tuning, "fitted_learned_fuser")
    if feats is None:
        dp = build_pipeline(index, fine_tuned, k=k, expert_k=expert_k)
        feats = fuser.features((dp.decomposer >> dp.candidates)(tuning))
    best, table = fuser.cross_validate(feats, qrels, grid) if len(grid) > 1 else (grid[0] if grid else {}, None)
    fuser.params.update(best)
    fuser.fit(None, qrels, feats=feats)
    if table is not None:
        fuser.fit_info["cross_validation"] = table.to_dict("records")
    fuser.save(path)
    return fuser


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
