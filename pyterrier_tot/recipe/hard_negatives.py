"""Hard negatives for training: books that a first-stage retriever ranks high for a query but that are not its
gold book.

In-batch negatives (MultipleNegativesRankingLoss over random batches) are mostly easy: a random book rarely
shares the query's plot. The negatives that teach a ToT retriever are the near misses of BM25 (same names and
words) and of the zero-shot dense model (same topic), so :func:`mine_hard_negatives` pools the top of each
and drops every book that is relevant to the query::

    from pyterrier_tot.recipe.hard_negatives import mine_hard_negatives, sample_negatives
    mined = mine_hard_negatives(topics, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=30)
    negs = sample_negatives(mined, n=1, seed=0)          # qid -> [docno, ...]

The result is a frame ``qid, docno, rank, source`` (``rank``: the best rank any miner gave the book, 0-based;
``source``: the miners that found it, joined with ``+``). Gold books (``label > 0`` in ``qrels``, or every
qrels row when there is no label) never appear, for any qid of ``qrels``.
"""
from __future__ import annotations

import random
from typing import Dict, List, Mapping, Optional

import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import require_columns
from pyterrier_tot.errors import BadInputError

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
