"""The zero-shot-initialised cross-encoder of the recipe: MiniLM's weights with a new scoring head, trained on the
training queries outside the tuning slice with negatives mined by BM25 and zero-shot MiniLM (not by the recipe;
:mod:`~pyterrier_tot.recipe.second_stage` trains one from the recipe's own base and near misses). Importable
from :mod:`~pyterrier_tot.recipe.tuned` as well."""
from __future__ import annotations

from typing import Optional

from pyterrier_tot._artifact import train_once
from pyterrier_tot._util import cache_folder, dataset_tag
from pyterrier_tot.recipe.hard_negatives import HN_DEPTH
from pyterrier_tot.recipe.protocol import (
    TUNING_QUERIES,
    check_trained_on,
    train_data,
    training_record,
)

#: Cross-encoder of the recipe: negatives per query, sequence lengths, steps (the CPU budget; None = 1 epoch).
CE_NEGATIVES, CE_MAX_LENGTH, CE_QUERY_TOKENS, CE_STEPS = 3, 160, 96, 100


def cross_encoder_groups(dataset, index, n_negatives: int = CE_NEGATIVES, depth: int = HN_DEPTH, seed: int = 0,
                         n: int = TUNING_QUERIES) -> list:
    """(query, gold text, negative texts) groups on the training queries outside the tuning slice, negatives
    mined from BM25 and zero-shot MiniLM (gold excluded), in a seeded random order."""
    from pyterrier_tot.recipe.expert_training import build_examples
    from pyterrier_tot.recipe.hard_negatives import mine_hard_negatives, sample_negatives

    rest, qrels = train_data(dataset, "rest", n)
    mined = mine_hard_negatives(rest, qrels, {"bm25": index.bm25(), "dense": index.dense()}, depth=depth)
    examples = build_examples(rest, qrels, index.corpus, sample_negatives(mined, n_negatives, seed=seed), n_negatives)
    return [(ex[0], ex[1], list(ex[2:])) for ex in examples]


def cross_encoder_dir(dataset, n_negatives: int = CE_NEGATIVES, max_steps: Optional[int] = CE_STEPS,
                      max_length: int = CE_MAX_LENGTH, max_query_tokens: int = CE_QUERY_TOKENS,
                      n: int = TUNING_QUERIES, **train_kwargs):
    """The cache folder of :func:`fine_tuned_cross_encoder`: its name carries every setting."""
    batch = train_kwargs.get("batch_queries", 4)
    tail = f"-lr{train_kwargs['lr']:g}" if "lr" in train_kwargs else ""   # other settings follow the older name
    tail += "".join(f"-{k.replace('_', '')}{v:g}" if isinstance(v, float) else f"-{k.replace('_', '')}{v}"
                    for k, v in sorted(train_kwargs.items()) if k not in ("lr", "batch_queries") and v is not None)
    tail += "" if max_query_tokens == CE_QUERY_TOKENS else f"-Q{max_query_tokens}"  # the default keeps older names
    return cache_folder(f"ce-minilm-{dataset_tag(dataset)}-train-minus-fit{n}-neg{n_negatives}-L{max_length}"
                        f"-b{batch}-s{max_steps or 'epoch'}{tail}")


def fine_tuned_cross_encoder(dataset, index=None, n_negatives: int = CE_NEGATIVES, max_steps: Optional[int] = CE_STEPS,
                             max_length: int = CE_MAX_LENGTH, max_query_tokens: int = CE_QUERY_TOKENS,
                             n: int = TUNING_QUERIES, train: bool = True, verbose: bool = True,
                             **train_kwargs) -> Optional[str]:
    """The recipe's cross-encoder (MiniLM weights, new head) trained on the training queries outside the tuning
    slice with mined negatives; cached as an artifact (``train=False``: ``None`` when not cached). The default
    ``max_steps`` is the CPU budget: with ``batch_queries`` 4 that is 400 of the 1,553 queries. Every setting in
    ``train_kwargs`` (``lr``, ``head_lr``, ``epochs``, ...) is part of the folder's name, so a model trained one way
    is never reused as another."""
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
