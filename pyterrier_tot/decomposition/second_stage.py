"""A second stage for the recipe: a cross-encoder that starts from the recipe's fine-tuned base encoder (its
weights; the one-number scoring head is new) and learns from the recipe's *own* near misses, then re-scores the
recipe's top ``k``::

    from pyterrier_tot.decomposition import recipe, second_stage
    from pyterrier_tot.rerank.cross_encoder import CrossEncoderReranker

    pipe = recipe.tuned_pipeline(ds, index, base="minilm")
    ce = second_stage.recipe_cross_encoder(ds, index, base="minilm")   # trains once (~35 min on 2 CPU cores)
    two = pipe >> CrossEncoderReranker(ce, index, k=20, alpha=0.3)

Training data: the training queries outside the tuning slice (what the base learned from too), each with its gold
book and ``n_negatives`` books drawn (seeded) from the recipe's top ``mine_depth``, gold excluded. A base that
has seen these queries ranks their gold books high, so these negatives are the books the recipe confuses with
the answer, which is what a re-ranker of its top ``k`` has to learn to tell apart. ``k`` and ``alpha`` are chosen
on the tuning slice (``benchmarks/second_stage.py``, which also says whether the stage earns its cost).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pyterrier as pt

from pyterrier_tot._util import cache_dir
from pyterrier_tot.decomposition.protocol import TUNING_QUERIES, complete_model, dataset_tag, train_data

#: How the recipe's cross-encoder is trained (``recipe_cross_encoder``'s defaults; ``max_steps`` None: whole
#: epochs). Chosen and timed on the MiniLM base (``benchmarks/second_stage.py``); not tried from mpnet.
SETTINGS = dict(n_negatives=3, mine_depth=20, epochs=1, lr=5e-5, head_lr=1e-3, batch_queries=4, max_length=320,
                max_query_tokens=160, max_steps=None)


def model_dir(base: str, **settings) -> Path:
    """The cache folder of the cross-encoder trained from ``base`` (a model folder) with ``settings``."""
    s = {**SETTINGS, **settings}
    return cache_dir() / "models" / (f"ce-on-{Path(base).name}-recipe-top{s['mine_depth']}-neg{s['n_negatives']}"
                                     f"-L{s['max_length']}q{s['max_query_tokens']}-b{s['batch_queries']}"
                                     f"-lr{s['lr']:g}" + (f"-h{s['head_lr']:g}" if s["head_lr"] else "")
                                     + f"-e{s['epochs']}"
                                     + (f"-s{s['max_steps']}" if s["max_steps"] else ""))


def recipe_groups(dataset, index, pipeline: pt.Transformer, n_negatives: int = SETTINGS["n_negatives"],
                  depth: int = SETTINGS["mine_depth"], seed: int = 0, n: int = TUNING_QUERIES,
                  run=None) -> List[tuple]:
    """(query, gold text, negative texts) groups on the training queries outside the tuning slice, the negatives
    drawn from ``pipeline``'s top ``depth`` (gold excluded). ``run``: that ranking, when already computed."""
    from pyterrier_tot.decomposition.expert_training import build_examples
    from pyterrier_tot.decomposition.hard_negatives import mine_hard_negatives, sample_negatives

    rest, qrels = train_data(dataset, "rest", n)
    miner = pt.Transformer.from_df(pt.model.add_ranks(run.copy())) if run is not None else pipeline
    mined = mine_hard_negatives(rest, qrels, {"recipe": miner}, depth=depth)
    examples = build_examples(rest, qrels, index.corpus, sample_negatives(mined, n_negatives, seed=seed),
                              n_negatives)
    return [(ex[0], ex[1], list(ex[2:])) for ex in examples]


def recipe_cross_encoder(dataset, index=None, base: Optional[str] = None, train: bool = True, verbose: bool = True,
                         pipeline: Optional[pt.Transformer] = None, run=None, n: int = TUNING_QUERIES,
                         train_settings: Optional[dict] = None, **settings) -> Optional[str]:
    """The folder of the recipe's cross-encoder over ``dataset`` (trained when missing; ``train=False``: ``None`` when
    not cached). ``base``: the recipe's base model name (default ``recipe.DEFAULT_BASE``; ``train_settings``:
    overrides for its training, as in ``tuned_pipeline``); ``pipeline``: the recipe to mine with (default
    ``tuned_pipeline(dataset, index, base=base)``); ``run``: its ranking of the training queries, when already
    computed; ``n``: the tuning slice's size; ``settings``: overrides of :data:`SETTINGS`."""
    from pyterrier_tot.decomposition import recipe
    from pyterrier_tot.index import BookIndex
    from pyterrier_tot.rerank.cross_encoder import train_cross_encoder

    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"recipe_cross_encoder: unknown settings {sorted(unknown)}; expected some of "
                         f"{sorted(SETTINGS)}")
    base = recipe.DEFAULT_BASE if base is None else base
    if len(recipe.as_bases(base)) != 1:
        raise ValueError(f"recipe_cross_encoder: base must name one model (the encoder it starts from), not {base!r}")
    s = {**SETTINGS, **settings}
    index = index if index is not None else BookIndex(dataset)
    folder = recipe.fine_tuned_bases(dataset, index, base, train=train, verbose=verbose, n=n,
                                     **(train_settings or {}))
    if len(folder) != 1:
        return None
    base_path = next(iter(folder.values()))
    out = model_dir(base_path, **s)
    if complete_model(out):
        return str(out)
    if not train:
        return None
    if pipeline is None:
        pipeline = recipe.tuned_pipeline(dataset, index, base=base, verbose=verbose, n=n,  # mined as designed:
                                         train_settings=train_settings, helpers=())  # the base's recipe alone
    groups = recipe_groups(dataset, index, pipeline, s["n_negatives"], s["mine_depth"], n=n, run=run)
    if verbose:
        print(f"training the recipe's cross-encoder ({dataset_tag(dataset)}) on {len(groups)} groups into {out}")
    train_cross_encoder(groups, out, base_model=base_path, n_negatives=s["n_negatives"], epochs=s["epochs"],
                        lr=s["lr"], head_lr=s["head_lr"], batch_queries=s["batch_queries"], max_length=s["max_length"],
                        max_query_tokens=s["max_query_tokens"], max_steps=s["max_steps"], show_progress_bar=verbose,
                        extra_metadata={"mined_from": f"recipe top {s['mine_depth']}", "init": str(base_path)})
    return str(out)
