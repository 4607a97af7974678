"""Hard negatives for training: books that a first-stage retriever ranks high for a query but that are not its
gold book, and rounds of fine-tuning a base on them (:func:`fine_tuned_hard`).

In-batch negatives (MultipleNegativesRankingLoss over random batches) are mostly easy: a random book rarely
shares the query's plot. The negatives that teach a ToT retriever are the near misses of BM25 (same names and
words) and of the zero-shot dense model (same topic), so :func:`mine_hard_negatives` pools the top of each
and drops every book that is relevant to the query::

    mined = mine_hard_negatives(topics, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=30)
    negs = sample_negatives(mined, n=1, seed=0)          # qid -> [docno, ...]

The result is a frame ``qid, docno, rank, source`` (``rank``: the best rank any miner gave the book, 0-based;
``source``: the miners that found it, joined with ``+``). Gold books (``label > 0`` in ``qrels``, or every
qrels row when there is no label) never appear, for any qid of ``qrels``.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.artifact import train_once
from pyterrier_tot._plumbing.util import cache_folder, dataset_tag, require_columns
from pyterrier_tot.errors import BadInputError
from pyterrier_tot.recipe.bases import (
    COMMON,
    LEGACY_MINILM,
    _corpus,
    _slug,
    base_dir,
    base_settings,
    fine_tuned_base,
)
from pyterrier_tot.recipe.protocol import (
    TUNING_QUERIES,
    check_trained_on,
    complete_model,
    train_data,
    training_record,
)

#: Rows mined per query and miner by default (the negatives are drawn from these).
DEFAULT_DEPTH = 30
#: The top ranks skipped by default: the very top of a miner is where unlabelled duplicates of the gold book sit.
DEFAULT_SKIP = 0


def gold_pairs(qrels: pd.DataFrame) -> pd.DataFrame:
    """``qid, docno`` (as str) of the relevant rows of ``qrels``."""
    require_columns(qrels, ["qid", "docno"], "hard-negative qrels")
    q = qrels[qrels["label"] > 0] if "label" in qrels.columns else qrels
    return q[["qid", "docno"]].astype(str).drop_duplicates()


def mine_hard_negatives(topics: pd.DataFrame, qrels: pd.DataFrame, miners: Mapping[str, pt.Transformer],
                        depth: int = DEFAULT_DEPTH, skip: int = DEFAULT_SKIP) -> pd.DataFrame:
    """Non-gold books in the top ``depth`` of each miner (name -> retriever), ranks ``skip`` and below.

    Returns ``qid, docno, rank, source`` sorted by qid then rank; a book found by several miners appears once
    with its best rank. Queries without a gold book in ``qrels`` are refused: their "negatives" could be the
    answer."""
    require_columns(topics, ["qid", "query"], "mine_hard_negatives topics")
    if not miners:
        raise ValueError("mine_hard_negatives: give at least one miner (name -> retriever)")
    gold = gold_pairs(qrels)
    qids = topics["qid"].astype(str)
    no_gold = sorted(set(qids) - set(gold["qid"]))
    if no_gold:
        raise BadInputError(f"mine_hard_negatives: qids {no_gold[:5]} have no relevant book in qrels; "
                            "their negatives could be unlabelled answers")
    runs = []
    for name, retr in miners.items():
        res = (retr % (depth + skip))(topics[["qid", "query"]].astype({"qid": str}))
        res = res.assign(qid=res["qid"].astype(str), docno=res["docno"].astype(str))
        res = pt.model.add_ranks(res)
        res = res[res["rank"] >= skip]
        runs.append(res[["qid", "docno", "rank"]].assign(source=name))
    cols = ["qid", "docno", "rank", "source"]
    if not runs or not sum(len(r) for r in runs):
        return pd.DataFrame(columns=cols)
    allr = pd.concat(runs, ignore_index=True)
    allr = allr.merge(gold.assign(_gold=True), on=["qid", "docno"], how="left")
    allr = allr[allr["_gold"].isna()].drop(columns="_gold")
    src = allr.groupby(["qid", "docno"])["source"].agg(lambda s: "+".join(sorted(set(s))))
    best = allr.groupby(["qid", "docno"])["rank"].min()
    out = pd.concat([best, src], axis=1).reset_index()
    return out.sort_values(["qid", "rank", "docno"], kind="stable").reset_index(drop=True)[cols]


def sample_negatives(mined: pd.DataFrame, n: int = 1, seed: int = 0,
                     top: Optional[int] = None) -> Dict[str, List[str]]:
    """``n`` negatives per qid drawn (seeded) from its mined books (``top``: only from its ``top`` best-ranked);
    a qid with fewer mined books gets what there is."""
    require_columns(mined, ["qid", "docno", "rank"], "sample_negatives")
    rng = random.Random(seed)
    out: Dict[str, List[str]] = {}
    for qid, grp in mined.sort_values(["qid", "rank"], kind="stable").groupby("qid", sort=True):
        docs = list(grp["docno"].astype(str))
        if top:
            docs = docs[:top]
        out[str(qid)] = rng.sample(docs, min(n, len(docs)))
    return out


# ---------------------------------------------------------------------------------- rounds of training on them
#: Hard-negative fine-tuning (on top of :func:`fine_tuned_base`): negatives per example, mining depth.
HN_NEGATIVES, HN_DEPTH = 2, 30


def hard_negatives_dir(dataset, model: str, n: int, n_neg: int, epoch: int, clue_forms: bool, miners: Sequence[str],
                       depth: int = HN_DEPTH, train_kwargs: Optional[dict] = None) -> Path:
    """Where :func:`fine_tuned_hard` keeps hard-negative round ``epoch`` of base ``model`` (``n``: the tuning slice,
    ``n_neg`` negatives a query, ``miners``, ``depth``, ``clue_forms``, ``train_kwargs`` as it takes them): its
    name carries every setting that changes the model."""
    kw = dict(train_kwargs or {})
    clues = "-clues" if clue_forms else ""
    steps = f"-s{kw.pop('max_steps')}" if kw.get("max_steps") else ""
    kw.pop("max_steps", None)
    extra = f"-d{depth}" if depth != HN_DEPTH else ""
    extra += "".join(f"-{_slug(k)}{v:g}" if isinstance(v, float) else f"-{_slug(k)}{v}" for k, v in sorted(kw.items()))
    mined = "" if tuple(miners) == ("bm25", "dense") else "-from-" + "+".join(miners)
    tail = f"-neg{n_neg}{clues}{steps}{extra}{mined}-e{epoch}"
    if str(model).lower() == "minilm" and base_settings(model) == {**COMMON, **LEGACY_MINILM}:
        # the name older runs used, kept only for the base they continued from (never for another base)
        return cache_folder(f"hn-minilm-{dataset_tag(dataset)}-train-minus-fit{n}{tail}")
    return cache_folder(f"hn-{base_dir(dataset, model, n).name}{tail}")


#: The miners of hard negatives: BM25, zero-shot MiniLM, and ``base``: the model the round continues from (its own
#: near misses, mined afresh each round).
MINERS = ("bm25", "dense", "base")


def _miners(index, miners: Sequence[str], base_model: Optional[str] = None) -> dict:
    bad = [m for m in miners if m not in MINERS]
    if bad or not miners:
        raise ValueError(f"miners must name some of {list(MINERS)}, not {list(miners)}")
    if "base" in miners and base_model is None:
        raise ValueError("the 'base' miner needs base_model= (the model whose near misses are mined)")
    make = {"bm25": index.bm25, "dense": index.dense, "base": lambda: index.dense(base_model)}
    return {m: make[m]() for m in miners}


def hard_negative_examples(dataset, index, n_negatives: int = HN_NEGATIVES, depth: int = HN_DEPTH, seed: int = 0,
                           clue_forms: bool = True, n: int = TUNING_QUERIES,
                           miners: Sequence[str] = ("bm25", "dense"), base_model: Optional[str] = None) -> list:
    """Training examples (query, gold, negatives...) on the training queries outside the tuning slice, the
    negatives mined from ``miners`` (:data:`MINERS`: BM25, zero-shot MiniLM, ``base``: the model folder
    ``base_model``; gold excluded); with ``clue_forms`` the short clue
    form of each query (rule clues: title, author, date, cover, genre) is one more anchor for the same books.
    Only the gold and mined books are read from ``index`` (a streamed corpus is never loaded)."""
    from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, clue_form_queries
    from pyterrier_tot.recipe.expert_training import build_examples

    rest, qrels = train_data(dataset, "rest", n)
    mined = mine_hard_negatives(rest, qrels, _miners(index, miners, base_model), depth=depth)
    negs = sample_negatives(mined, n_negatives, seed=seed)
    examples = build_examples(rest, qrels, index, negs, n_negatives)
    if clue_forms:
        forms = clue_form_queries(RuleClueExtractor()(rest))
        examples += build_examples(forms, qrels, index, negs, n_negatives)
    return examples


def fine_tuned_hard(dataset, index=None, epochs: int = 1, n_negatives: int = HN_NEGATIVES, depth: int = HN_DEPTH,
                    clue_forms: bool = True, n: int = TUNING_QUERIES, train: bool = True,
                    verbose: bool = True, model: str = "minilm", miners: Sequence[str] = ("bm25", "dense"),
                    **train_kwargs) -> Dict[int, str]:
    """Base ``model`` fine-tuned with mined hard negatives: epoch 0 is :func:`fine_tuned_base` (in-batch
    negatives), each further epoch continues from the one before on fresh negatives (seeded by the epoch; the
    ``base`` miner mines them with that model, so each round learns from its own near misses).
    Returns ``{epoch: model folder}`` for the epochs that exist (each cached as an artifact; ``train=False``
    trains nothing). Pick the epoch with :func:`choose_base` on the tuning slice."""
    from pyterrier_tot.recipe import expert_training

    index = _corpus(dataset, index)
    models: Dict[int, str] = {}
    base = fine_tuned_base(dataset, n, train=train, verbose=verbose, model=model, index=index)
    if base is None:
        return models
    models[0] = base
    amp = base_settings(model)["amp"]
    rest = train_data(dataset, "rest", n)[0]
    for epoch in range(1, epochs + 1):
        out = hard_negatives_dir(dataset, model, n, n_negatives, epoch, clue_forms, miners, depth, train_kwargs)

        def found(out=out) -> Optional[str]:
            if not complete_model(out):
                return None
            check_trained_on(out, rest)  # one trained on other queries or texts is refused, not reused
            return str(out)

        def make(out=out, epoch=epoch) -> str:
            examples = hard_negative_examples(dataset, index, n_negatives, depth, seed=epoch,
                                              clue_forms=clue_forms, n=n, miners=miners,
                                              base_model=models[epoch - 1])
            if verbose:
                print(f"hard-negative epoch {epoch}: {len(examples)} examples from {models[epoch - 1]} into {out}")
            expert_training.train_biencoder(
                examples, out, base_model=models[epoch - 1], kind="base-hn", seed=epoch,
                **({"amp": amp} if amp else {}),
                extra_metadata={"epoch": epoch, "start": Path(models[epoch - 1]).name,
                                "mined_from": list(miners), "depth": depth, "clue_forms": clue_forms,
                                **training_record(rest)},
                **train_kwargs)
            return str(out)

        got = train_once(out, found, make) if train else found()
        if got is None:
            break
        models[epoch] = got
    return models
