"""Second stages for the recipe, trained on near misses: a cross-encoder (one trainer; ``negatives=`` says how
its negatives are mined) and a bi-encoder re-ranker.

The cross-encoder starts from the recipe's fine-tuned base encoder (its weights; the one-number scoring head is
new) and learns from the recipe's *own* near misses, then re-scores the recipe's top ``k``::

    from pyterrier_tot import recipe
    from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker

    pipe = recipe.tuned_pipeline(ds, index, base="minilm")
    ce = recipe.recipe_cross_encoder(ds, index, base="minilm")   # trains once (~29 min on 2 CPU cores)
    two = pipe >> CrossEncoderReranker(ce, index, k=20, alpha=0.3)

``negatives="bm25+dense"`` trains one without the recipe: MiniLM's weights with a new head, negatives mined by
BM25 and zero-shot MiniLM (:func:`cross_encoder_groups`), settings :data:`CE_NEGATIVES` ... :data:`CE_STEPS`.

Training data: the training queries outside the tuning slice (what the base learned from too), each with its gold
book and ``n_negatives`` books drawn (seeded) from the recipe's top ``mine_depth``, gold excluded. A base that
has seen these queries ranks their gold books high, so these negatives are the books the recipe confuses with
the answer, which is what a re-ranker of its top ``k`` has to learn to tell apart. ``k`` and ``alpha`` are chosen
on the tuning slice (``benchmarks/second_stage/second_stage.py``, which also says whether the stage earns its cost).

The bi-encoder re-ranker learns from the same kind of near misses but keeps the base's way of scoring (no new
head): a second model trained from the base, weighed against the recipe's score over its top ``k``::

    two = recipe.tuned_pipeline(ds, index) >> recipe.reranker_stage(ds, index)

Neither is part of the default recipe: on Reddit-TOMT validation neither raised R@5 and MRR beyond noise
(``benchmarks/second_stage/results/second_stage*.md``, ``rerank_device.md``).
"""
from __future__ import annotations

import hashlib
import inspect
import warnings
from pathlib import Path
from typing import List, Optional

import pyterrier as pt

from pyterrier_tot._plumbing.artifact import train_once
from pyterrier_tot._plumbing.cache_key import cache_key
from pyterrier_tot._plumbing.util import cache_folder, dataset_tag
from pyterrier_tot.recipe.hard_negatives import HN_DEPTH
from pyterrier_tot.recipe.protocol import (
    TUNING_QUERIES,
    check_trained_on,
    complete_model,
    train_data,
    training_info,
    training_record,
)

#: How :func:`recipe_cross_encoder` mines its negatives: ``"recipe"``, the recipe's own near misses (the model starts
#: from the recipe's fine-tuned base; settings :data:`SETTINGS`), or ``"bm25+dense"``, those of BM25 and zero-shot
#: MiniLM (the model starts from MiniLM's weights; no recipe needed; settings ``CE_*``).
NEGATIVES = ("recipe", "bm25+dense")

#: How the recipe's cross-encoder is trained (``recipe_cross_encoder``'s defaults; ``max_steps`` None: whole
#: epochs). Chosen and timed on the MiniLM base (``benchmarks/second_stage/second_stage.py``); not tried from mpnet.
SETTINGS = dict(n_negatives=3, mine_depth=20, epochs=1, lr=5e-5, head_lr=1e-3, batch_queries=4, max_length=320,
                max_query_tokens=160, max_steps=None)


def recipe_cross_encoder_dir(base: str, **settings) -> Path:
    """The cache folder of the cross-encoder trained from ``base`` (a model folder) with ``settings`` on the
    recipe's own near misses (``negatives="recipe"``)."""
    s = {**SETTINGS, **settings}
    return cache_folder(f"ce-on-{Path(base).name}-recipe-top{s['mine_depth']}-neg{s['n_negatives']}"
                        f"-L{s['max_length']}q{s['max_query_tokens']}-b{s['batch_queries']}"
                        f"-lr{s['lr']:g}" + (f"-h{s['head_lr']:g}" if s["head_lr"] else "")
                        + f"-e{s['epochs']}"
                        + (f"-s{s['max_steps']}" if s["max_steps"] else ""))



def model_dir(base: str, **settings) -> Path:
    """Deprecated: :func:`recipe_cross_encoder_dir` (the same folder), its name before the two cross-encoder
    trainers became one."""
    warnings.warn("second_stage.model_dir(...) is recipe_cross_encoder_dir(...) now; call that", DeprecationWarning,
                  stacklevel=2)
    return recipe_cross_encoder_dir(base, **settings)

#: ``negatives="bm25+dense"``: negatives per query, sequence lengths, steps (the CPU budget; None = 1 epoch).
CE_NEGATIVES, CE_MAX_LENGTH, CE_QUERY_TOKENS, CE_STEPS = 3, 160, 96, 100


def cross_encoder_groups(dataset, index, n_negatives: int = CE_NEGATIVES, depth: int = HN_DEPTH, seed: int = 0,
                         n: int = TUNING_QUERIES) -> list:
    """(query, gold text, negative texts) groups on the training queries outside the tuning slice, negatives
    mined from BM25 and zero-shot MiniLM (gold excluded), in a seeded random order (``negatives="bm25+dense"``)."""
    from pyterrier_tot.recipe.expert_training import build_examples
    from pyterrier_tot.recipe.hard_negatives import mine_hard_negatives, sample_negatives

    rest, qrels = train_data(dataset, "rest", n)
    mined = mine_hard_negatives(rest, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=depth)
    examples = build_examples(rest, qrels, index.corpus, sample_negatives(mined, n_negatives, seed=seed), n_negatives)
    return [(ex[0], ex[1], list(ex[2:])) for ex in examples]


def cross_encoder_dir(dataset, n_negatives: int = CE_NEGATIVES, max_steps: Optional[int] = CE_STEPS,
                      max_length: int = CE_MAX_LENGTH, max_query_tokens: int = CE_QUERY_TOKENS,
                      n: int = TUNING_QUERIES, **train_kwargs):
    """The cache folder of the cross-encoder trained with ``negatives="bm25+dense"``: its name carries every
    setting."""
    batch = train_kwargs.get("batch_queries", 4)
    tail = f"-lr{train_kwargs['lr']:g}" if "lr" in train_kwargs else ""   # other settings follow the older name
    tail += "".join(f"-{k.replace('_', '')}{v:g}" if isinstance(v, float) else f"-{k.replace('_', '')}{v}"
                    for k, v in sorted(train_kwargs.items()) if k not in ("lr", "batch_queries") and v is not None)
    tail += "" if max_query_tokens == CE_QUERY_TOKENS else f"-Q{max_query_tokens}"  # the default keeps older names
    return cache_folder(f"ce-minilm-{dataset_tag(dataset)}-train-minus-fit{n}-neg{n_negatives}-L{max_length}"
                        f"-b{batch}-s{max_steps or 'epoch'}{tail}")


def _bm25_dense_cross_encoder(dataset, index=None, n_negatives: int = CE_NEGATIVES,
                              max_steps: Optional[int] = CE_STEPS, max_length: int = CE_MAX_LENGTH,
                              max_query_tokens: int = CE_QUERY_TOKENS, n: int = TUNING_QUERIES, train: bool = True,
                              verbose: bool = True, **train_kwargs) -> Optional[str]:
    """``recipe_cross_encoder(negatives="bm25+dense")``: MiniLM weights with a new head, trained on the training
    queries outside the tuning slice with negatives mined by BM25 and zero-shot MiniLM."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.rerank.cross_encoder import train_cross_encoder

    out = cross_encoder_dir(dataset, n_negatives, max_steps, max_length, max_query_tokens, n, **train_kwargs)
    rest = train_data(dataset, "rest", n)[0]

    def cached() -> Optional[str]:
        if not (out / "pt_meta.json").is_file():
            return None
        check_trained_on(out, rest, ours=True)  # one trained on other queries or texts is refused
        return str(out)

    def make() -> str:
        groups = cross_encoder_groups(dataset, index if index is not None else BookIndex(dataset), n_negatives, n=n)
        if verbose:
            print(f"training the cross-encoder on {len(groups)} groups ({max_steps or 'all'} steps) into {out}")
        train_cross_encoder(groups, out, n_negatives=n_negatives, max_steps=max_steps, max_length=max_length,
                            max_query_tokens=max_query_tokens,
                            extra_metadata={"mined_from": ["bm25", "dense zero-shot"], **training_record(rest)},
                            **train_kwargs)
        return str(out)

    return train_once(out, cached, make) if train else cached()


def fine_tuned_cross_encoder(dataset, index=None, *args, **kwargs) -> Optional[str]:
    """Deprecated: ``recipe_cross_encoder(dataset, index, negatives="bm25+dense", ...)``, which takes the same
    settings (``n_negatives``, ``max_steps``, ``max_length``, ``max_query_tokens``, ``n``, ``train``, ``verbose``,
    and training settings such as ``lr``) by name."""
    warnings.warn("fine_tuned_cross_encoder(...) is recipe_cross_encoder(..., negatives='bm25+dense') now; call that",
                  DeprecationWarning, stacklevel=2)
    bound = inspect.signature(_bm25_dense_cross_encoder).bind(dataset, index, *args, **kwargs)
    return _bm25_dense_cross_encoder(*bound.args, **bound.kwargs)


#: The bi-encoder re-ranker (``recipe_reranker``): a second model trained from the base on the recipe's near misses
#: (``n_negatives`` drawn from the first ``mine_depth`` non-gold books of the recipe's ranking, the rule-clue form
#: of each query as one more anchor), re-scoring the recipe's top ``k`` by ``alpha * cos + (1 - alpha) *
#: minmax(recipe)``. Variant, ``k`` and ``alpha`` chosen on the tuning slice by ``benchmarks/device/rerank_device.py``
#: (trained on a GPU); not part of the default recipe: on validation it moved R@5 and MRR by less than noise.
RERANKER = dict(n_negatives=2, mine_depth=30, epochs=2, lr=2e-5, clue_forms=True, seed=0, k=100, alpha=0.6)
#: the settings that make the re-ranker's model (its folder's name); ``k`` and ``alpha`` only place it in the stage
RERANKER_TRAINING = {k: v for k, v in RERANKER.items() if k not in ("k", "alpha")}


def reranker_dir(base: str, **settings) -> Path:
    """The cache folder of the bi-encoder re-ranker trained from ``base`` (a model folder) with ``settings``."""
    s = {**RERANKER_TRAINING, **settings}
    return cache_folder(f"rr-on-{Path(base).name}-recipe-top{s['mine_depth']}-neg{s['n_negatives']}"
                        f"-lr{s['lr']:g}-e{s['epochs']}" + ("-forms" if s["clue_forms"] else "")
                        + (f"-seed{s['seed']}" if s["seed"] else ""))


def reranker_examples(queries, qrels, corpus, run, n_negatives: int = RERANKER["n_negatives"],
                      depth: int = RERANKER["mine_depth"], seed: int = RERANKER["seed"], forms=None) -> list:
    """(query, gold, negatives...) examples: each query's negatives drawn (seeded) from the first ``depth``
    non-gold books of ``run`` (its ranking of ``queries``, by score); ``forms``: extra anchors (``qid, query``,
    e.g. clue forms) that share their query's gold book and negatives."""
    from pyterrier_tot.recipe.expert_training import build_examples
    from pyterrier_tot.recipe.hard_negatives import sample_negatives

    negs = sample_negatives(_near_misses(run, qrels, depth), n_negatives, seed=seed)
    examples = build_examples(queries, qrels, corpus, negs, n_negatives)
    if len(examples) < len(queries):  # no gold book, or fewer negatives in the run than asked for
        warnings.warn(f"reranker_examples: {len(queries) - len(examples)} of {len(queries)} queries make no "
                      f"example (no gold book, or fewer than {n_negatives} non-gold books in the run's top {depth}); "
                      "is the run the ranking of these queries?", stacklevel=2)
    if forms is not None:
        examples += build_examples(forms, qrels, corpus, negs, n_negatives)
    return examples


def _near_misses(run, qrels, depth: int):
    """Each query's first ``depth`` non-gold books in ``run`` (by score, ties in the run's order), ranked from 0:
    what the re-ranker's negatives are drawn from."""
    gold = set(zip(qrels["qid"].astype(str), qrels["docno"].astype(str)))
    top = run.astype({"qid": str, "docno": str}).sort_values(["qid", "score"], ascending=[True, False],
                                                             kind="stable")
    mined = top[[(q, d) not in gold for q, d in zip(top["qid"], top["docno"])]].copy()
    mined = mined[mined.groupby("qid").cumcount() < depth]
    mined["rank"] = mined.groupby("qid").cumcount()
    return mined


def run_digest(run, qrels, qids, depth: int = RERANKER["mine_depth"]) -> str:
    """sha1 of the near misses ``run`` offers the queries ``qids`` (each one's first ``depth`` non-gold books, in
    order: what :func:`reranker_examples` draws from): two runs with one digest give the re-ranker the same
    negatives (the same ranking cut deeper, over more queries or with its rows in another order has its digest)."""
    mined = _near_misses(run, qrels, depth)
    mined = mined[mined["qid"].isin(set(map(str, qids)))]
    rows = zip(mined["qid"], mined["rank"], mined["docno"])
    return hashlib.sha1("\n".join(f"{q}\t{r}\t{d}" for q, r, d in rows).encode()).hexdigest()


def _mined_elsewhere(what: str, out, found: str, wanted: str, source: str) -> ValueError:
    """The refusal of a cached ``what`` whose negatives came from ``found``, asked for ``wanted``'s."""
    return ValueError(f"the cached {what} {out} learnt from negatives ranked by {found[:200]}, not by {wanted[:200]}; "
                      f"delete the folder to train it from this {source}'s")


def recipe_groups(dataset, index, pipeline: pt.Transformer, n_negatives: int = SETTINGS["n_negatives"],
                  depth: int = SETTINGS["mine_depth"], seed: int = 0, n: int = TUNING_QUERIES,
                  run=None) -> List[tuple]:
    """(query, gold text, negative texts) groups on the training queries outside the tuning slice, the negatives
    drawn from ``pipeline``'s top ``depth`` (gold excluded). ``run``: that ranking, when already computed."""
    from pyterrier_tot.recipe.expert_training import build_examples
    from pyterrier_tot.recipe.hard_negatives import mine_hard_negatives, sample_negatives

    rest, qrels = train_data(dataset, "rest", n)
    miner = pt.Transformer.from_df(pt.model.add_ranks(run.copy())) if run is not None else pipeline
    mined = mine_hard_negatives(rest, qrels, {"recipe": miner}, depth=depth)
    examples = build_examples(rest, qrels, index.corpus, sample_negatives(mined, n_negatives, seed=seed),
                              n_negatives)
    return [(ex[0], ex[1], list(ex[2:])) for ex in examples]


#: The one base a second-stage model starts from when none is named: mpnet, the base its studies measured (the
#: default recipe, :data:`~pyterrier_tot.recipe.bases.DEFAULT_BASE`, has two; a second stage starts from one encoder).
SECOND_STAGE_BASE = "mpnet"


def _base_folder(who: str, dataset, index, base, defaults: dict, settings: dict, train: bool, verbose: bool,
                 n: int, train_settings: Optional[dict]):
    """(settings, index, the fine-tuned base folder or None) for a model trained from the recipe's one ``base``;
    unknown settings and several bases are refused, naming ``who``."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.recipe.bases import as_bases, fine_tuned_bases

    unknown = set(settings) - set(defaults)
    if unknown:
        raise ValueError(f"{who}: unknown settings {sorted(unknown)}; expected some of {sorted(defaults)}")
    base = SECOND_STAGE_BASE if base is None else base
    if len(as_bases(base)) != 1:
        raise ValueError(f"{who}: base must name one model (the encoder it starts from), not {base!r}")
    index = index if index is not None else BookIndex(dataset)
    folder = fine_tuned_bases(dataset, index, base, train=train, verbose=verbose, n=n, **(train_settings or {}))
    return {**defaults, **settings}, index, (next(iter(folder.values())) if len(folder) == 1 else None)


def recipe_cross_encoder(dataset, index=None, base: Optional[str] = None, train: bool = True, verbose: bool = True,
                         pipeline: Optional[pt.Transformer] = None, run=None, n: int = TUNING_QUERIES,
                         train_settings: Optional[dict] = None, negatives: str = "recipe",
                         **settings) -> Optional[str]:
    """The folder of the recipe's cross-encoder over ``dataset`` (trained when missing; ``train=False``: ``None`` when
    not cached). ``negatives`` (:data:`NEGATIVES`): ``"recipe"`` (default), the recipe's own near misses, from its
    fine-tuned ``base``; ``"bm25+dense"``, those of BM25 and zero-shot MiniLM, from MiniLM's weights (settings
    ``n_negatives``, ``max_steps``, ``max_length``, ``max_query_tokens`` and training settings such as ``lr``, all
    in the folder's name; ``base``, ``pipeline``, ``run`` and ``train_settings`` do not apply). With
    ``negatives="recipe"``: ``base``: the recipe's base model name (default :data:`SECOND_STAGE_BASE`;
    ``train_settings``: overrides for its training, as in
    ``tuned_pipeline``); ``pipeline``: the recipe to mine with (default ``tuned_pipeline(dataset, index,
    base=base)``); ``run``: its ranking of the training queries, when already computed; ``settings``: overrides
    of :data:`SETTINGS`. ``n``: the tuning slice's size."""
    from pyterrier_tot.recipe.tuned import tuned_pipeline
    from pyterrier_tot.rerank.cross_encoder import train_cross_encoder

    if negatives not in NEGATIVES:
        raise ValueError(f"recipe_cross_encoder: negatives must be one of {NEGATIVES}, not {negatives!r}")
    if negatives == "bm25+dense":
        recipe_only = [k for k, v in (("base", base), ("pipeline", pipeline), ("run", run),
                                      ("train_settings", train_settings)) if v is not None]
        if recipe_only:
            raise ValueError(f"recipe_cross_encoder(negatives='bm25+dense') starts from MiniLM and mines with BM25 "
                             f"and zero-shot MiniLM; {recipe_only} apply to negatives='recipe' only")
        return _bm25_dense_cross_encoder(dataset, index, n=n, train=train, verbose=verbose, **settings)

    base = SECOND_STAGE_BASE if base is None else base
    s, index, base_path = _base_folder("recipe_cross_encoder", dataset, index, base, SETTINGS, settings, train,
                                       verbose, n, train_settings)
    if base_path is None:
        return None
    out = recipe_cross_encoder_dir(base_path, **s)
    rest = train_data(dataset, "rest", n)[0]
    def default_miner():  # mined as designed: the base's recipe alone
        return tuned_pipeline(dataset, index, base=base, verbose=verbose, n=n, train_settings=train_settings,
                              helpers=())

    def cached() -> Optional[str]:
        if not complete_model(out):
            return None
        check_trained_on(out, rest, ours=True)  # one trained on other queries or texts is refused
        info = training_info(out)  # what ranked its negatives (older folders did not record it)
        found = info.get("mined_by")
        if found is not None and not (pipeline is None and info.get("mined_by_default")):
            miner = pipeline if pipeline is not None else default_miner()
            if "mined_by_key" in info:  # keyed by the miner's settings (_cache_key), not by how it prints
                if info["mined_by_key"] != cache_key(miner):
                    raise _mined_elsewhere("cross-encoder", out, found, repr(miner), "pipeline")
            elif found != repr(miner):  # a model trained before keys recorded only the miner's repr
                raise _mined_elsewhere("cross-encoder", out, f"{found} (recorded before miners were keyed by their "
                                       "settings)", repr(miner), "pipeline")
        return str(out)

    def make() -> str:
        miner = default_miner() if pipeline is None else pipeline
        groups = recipe_groups(dataset, index, miner, s["n_negatives"], s["mine_depth"], n=n, run=run)
        if verbose:
            print(f"training the recipe's cross-encoder ({dataset_tag(dataset)}) on {len(groups)} groups into {out}")
        train_cross_encoder(groups, out, base_model=base_path, n_negatives=s["n_negatives"], epochs=s["epochs"],
                            lr=s["lr"], head_lr=s["head_lr"], batch_queries=s["batch_queries"],
                            max_length=s["max_length"], max_query_tokens=s["max_query_tokens"],
                            max_steps=s["max_steps"], show_progress_bar=verbose,
                            extra_metadata={"mined_from": f"recipe top {s['mine_depth']}", "init": str(base_path),
                                            "mined_by": repr(miner), "mined_by_key": cache_key(miner),
                                            "mined_by_default": pipeline is None,
                                            **training_record(rest)})
        return str(out)

    return train_once(out, cached, make) if train else cached()


def recipe_reranker(dataset, index=None, base: Optional[str] = None, train: bool = True, verbose: bool = True,
                    run=None, n: int = TUNING_QUERIES, device: Optional[str] = None,
                    train_settings: Optional[dict] = None, **settings) -> Optional[str]:
    """The folder of the recipe's bi-encoder re-ranker over ``dataset`` (trained when missing: about 2.5 h on two
    CPU cores for mpnet, a minute on a GPU; ``train=False``: ``None`` when not cached). It starts from the
    recipe's fine-tuned ``base`` (default :data:`SECOND_STAGE_BASE`) and learns from the
    default recipe's ranking of the training queries outside the tuning slice (``run``: that ranking, when already
    computed);
    ``train_settings``: overrides for the base's training, as in ``tuned_pipeline``; ``settings``: overrides of
    :data:`RERANKER_TRAINING` (``k`` and ``alpha`` belong to :func:`reranker_stage`). The model records the
    near misses it learnt from (:func:`run_digest`); a cached one learnt from another ranking's is refused (one
    learnt from the default's, asked for without ``run``, is not checked; one learnt from a ``run``, asked for
    without one, is checked against the default recipe's ranking, computed for it)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, clue_form_queries
    from pyterrier_tot.recipe.expert_training import train_biencoder
    from pyterrier_tot.recipe.tuned import tuned_pipeline

    base = SECOND_STAGE_BASE if base is None else base
    s, index, base_path = _base_folder("recipe_reranker", dataset, index, base, RERANKER_TRAINING, settings, train,
                                       verbose, n, train_settings)
    if base_path is None:
        return None
    out = reranker_dir(base_path, **s)
    rest, qrels = train_data(dataset, "rest", n)

    def default_run():  # (what ranks, its ranking of the training rest) as designed: the default recipe
        pipe = tuned_pipeline(dataset, index, base=base, verbose=verbose, n=n, train_settings=train_settings,
                              train=train)  # train=False: a lookup never trains or fits what it checks with
        return repr(pipe), (pipe % (2 * s["mine_depth"]))(rest)

    given = {"mined_by": "a ranking passed as run=", "run": run}

    def ranking():  # (what ranked, its ranking of the training rest): the run passed, else the default recipe's
        if given["run"] is None:
            given["mined_by"], given["run"] = default_run()
        return given["mined_by"], given["run"]

    def cached() -> Optional[str]:
        if not complete_model(out):
            return None
        check_trained_on(out, rest, ours=True)  # one trained on other queries or texts is refused
        info = training_info(out)  # the near misses it learnt from (older folders did not record them)
        found = info.get("mined_run")
        if found is not None and not (run is None and info.get("mined_by_default")):
            mined_by, ranked = ranking()
            wanted = run_digest(ranked, qrels, rest["qid"], s["mine_depth"])
            if found != wanted:
                raise _mined_elsewhere("re-ranker", out, f"{info.get('mined_by', '?')[:160]} (near misses "
                                       f"{found[:12]})", f"{mined_by[:160]} (near misses {wanted[:12]})", "ranking")
        return str(out)

    def make() -> str:
        mined_by, ranked = ranking()
        forms = clue_form_queries(RuleClueExtractor()(rest)) if s["clue_forms"] else None
        examples = reranker_examples(rest, qrels, index.corpus, ranked, s["n_negatives"], s["mine_depth"], s["seed"],
                                     forms)
        if verbose:
            print(f"training the recipe's re-ranker ({dataset_tag(dataset)}) on {len(examples)} examples into {out}")
        train_biencoder(examples, out, base_model=base_path, epochs=s["epochs"], lr=s["lr"], seed=s["seed"],
                        kind="reranker", device=device, show_progress_bar=verbose,
                        extra_metadata={"mined_from": [f"recipe top {s['mine_depth']}"],
                                        "negatives": s["n_negatives"], "clue_forms": s["clue_forms"],
                                        "field": "title+text", "init": str(base_path), "mined_by": mined_by,
                                        "mined_by_default": run is None,
                                        "mined_run": run_digest(ranked, qrels, rest["qid"], s["mine_depth"]),
                                        **training_record(rest)})
        return str(out)

    return train_once(out, cached, make) if train else cached()


def reranker_stage(dataset, index=None, base: Optional[str] = None, train: bool = True, k: Optional[int] = None,
                   alpha: Optional[float] = None, **kwargs) -> Optional[pt.Transformer]:
    """``recipe >> reranker_stage(ds, index)``: the re-ranker of :func:`recipe_reranker` over the recipe's top
    ``k`` (default :data:`RERANKER`'s), its cosine weighted ``alpha`` against the recipe's min-max'd score; books
    encoded whole (the model's own length cut), as the recipe's dense index encodes them. ``kwargs``: passed to
    :func:`recipe_reranker`. ``None`` when the model is not cached and ``train=False``."""
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.rerank.dense_reranker import DenseReranker

    index = index if index is not None else BookIndex(dataset)
    folder = recipe_reranker(dataset, index, base=base, train=train, **kwargs)
    if folder is None:
        return None
    return DenseReranker(index, model=folder, k=RERANKER["k"] if k is None else k, max_chars=None,
                         alpha=RERANKER["alpha"] if alpha is None else alpha)
