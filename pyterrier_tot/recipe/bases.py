"""The recipe's base retrievers: bi-encoders fine-tuned on the training queries outside the tuning slice, one per
base model (MiniLM, mpnet, or any sentence-transformers model), each cached as a ``pt.Artifact`` folder.

    from pyterrier_tot.recipe import bases
    minilm = bases.fine_tuned_base(ds)                       # all-MiniLM-L6-v2: 2 epochs, lr 5e-5 (~19 min, 2 cores)
    mpnet = bases.fine_tuned_base(ds, model="mpnet")         # all-mpnet-base-v2, BASE_SETTINGS["mpnet"]
    runs = bases.base_grid(ds, "mpnet", lrs=(2e-5, 5e-5), epochs=3)   # one run per lr, a checkpoint per epoch
    best, table = bases.choose_base(ds, index, runs)         # Recall@5 of each on the tuning slice

The protocol is MiniLM's for every base: full query -> gold book (title + text) pairs from the training queries
outside the tuning slice, MultipleNegativesRankingLoss, batch 16, ``max_seq_length`` 256, 10% warm-up. The
learning rate and the epoch of each base are chosen on the tuning slice (:func:`base_grid` + :func:`choose_base`)
and recorded in :data:`BASE_SETTINGS`; a run of ``schedule`` epochs saves a model after each epoch, so the choice
of the epoch costs no retraining, and ``fine_tuned_base`` re-creates the chosen checkpoint by training only its
epochs of that schedule.

The corpus is read by docno: pass ``index=`` a :class:`~pyterrier_tot.index.BookIndex` whose corpus is streamed
(TREC ToT 2025, 6.4M pages) and only the gold books (and, for hard negatives, the mined ones) are read.
:class:`TrainingSet` puts query sets that come without a ``train`` split (the TREC ToT 2023 / 2024 training
queries) under the one split the recipe reads::

    train = bases.TrainingSet([ptt.get_dataset("trec-tot-local/2023-train"),
                               ptt.get_dataset("trec-tot-local/2024-train")])
    index = ptt.BookIndex(ptt.get_dataset("trec-tot/2025/train"))          # streamed, never loaded
    path = bases.fine_tuned_base(train, index=index, n=60)
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import pandas as pd

from pyterrier_tot._plumbing.artifact import train_once
from pyterrier_tot._plumbing.util import cache_folder, dataset_tag
from pyterrier_tot.recipe.protocol import (
    TUNING_QUERIES,
    TUNING_SEED,
    TrainingSet,
    check_trained_as,
    check_trained_on,
    complete_model,
    train_data,
)

#: Training settings of each base model, chosen on the tuning slice (``benchmarks/recipe/results/bases.md``):
#: ``lr``; ``epoch``: the checkpoint used; ``schedule``: the epochs its learning-rate schedule spans; ``amp``:
#: bfloat16 autocast in training; ``precision``: how the recipe encodes books and queries with it;
#: ``encode_length``: the tokens it encodes with, where they differ from the ``max_seq_length`` it trains at (the
#: recipe then uses a copy of the trained model that says so, :func:`at_length`). A model not named here trains
#: with the MiniLM settings.
BASE_SETTINGS: Dict[str, dict] = {
    # base_grid_minilm.md: lr 5e-5, 2 epochs was chosen on the tuning slice over lr 2e-5, 1 epoch (LEGACY_MINILM)
    "minilm": {"lr": 5e-5, "epoch": 2, "schedule": 2, "amp": False, "precision": "fp32"},
    # base_grid_mpnet_gpu.md: lr 3e-5, epoch 2 of a 3-epoch schedule, chosen on the tuning slice over lrs 2e-5 /
    # 3e-5 / 5e-5 x epochs 1-3 and over lr 2e-5, 1 epoch (the setting before; tuning R@5 .677 against .640)
    "mpnet": {"lr": 3e-5, "epoch": 2, "schedule": 3, "amp": "auto", "precision": "fp32"},
    # nomic-embed-text-v1.5 (fetch_models.py nomic): mpnet's protocol (trained at 256 tokens); its study
    # (benchmarks/encoders/nomic_base.py) chose encoding at 512 on the tuning slice (.719 against .714 at 256)
    "nomic": {"lr": 3e-5, "epoch": 2, "schedule": 3, "amp": "auto", "precision": "fp32", "encode_length": 512},
}
#: The bases :func:`~pyterrier_tot.recipe.tuned.tuned_pipeline` fine-tunes when none is named: the recipe we
#: recommend, mpnet and nomic-embed-text-v1.5 side by side (their scores summed for the candidates), with the
#: MiniLM helper and mpnet's density prior (:data:`ENSEMBLES`). Adopted by its study's rule, written before the run
#: (``benchmarks/encoders/results/nomic_base.md``): tuning objective .737 against .722 for mpnet's recipe (margin
#: .0067). As the library builds it (``recipe_default.md``), on Reddit-TOMT validation: R@5 .742 / MRR .637 against
#: mpnet's recipe's .712 / .616 (MRR p = .019) and MiniLM's .614 / .522 (``recipe_depth_minilm.md``). It costs
#: more: two models to fetch and fine-tune (mpnet 14.7 s a step, nomic 16.3 s, bf16 where native, two cores; 194
#: steps each), the MiniLM helper, both encodings (nomic at 512 tokens, 5.7 books/s in fp32), and about twice the
#: seconds a query (0.77 against 0.37). ``base="mpnet"`` is the recipe before; ``make demo`` passes
#: ``base="minilm"`` (minutes) and says so.
DEFAULT_BASE: Tuple[str, ...] = ("mpnet", "nomic")
#: MiniLM's earlier settings (one epoch at lr 2e-5): a model trained with them keeps its old folder name.
LEGACY_MINILM = {"lr": 2e-5, "epoch": 1, "schedule": 1, "amp": False, "precision": "fp32"}
#: ``amp="auto"``: bfloat16 autocast only where the hardware runs bf16 natively (:func:`~pyterrier_tot.models.
#: native_bf16`); on a CPU without AMX / AVX512-BF16 it is emulated, and encoding there was about 4x slower than
#: fp32 (``benchmarks/recipe/results/bases.md``).
#: Settings shared by every base (the MiniLM protocol); any of them can be overridden per call.
#: ``soup``: how many runs (seeds ``seed``, ``seed + 1``, ...) are averaged into the base (1: one run; see
#: :mod:`~pyterrier_tot.recipe.soup`).
#: ``encode_length`` None: the model encodes at the length it trains at.
COMMON = {"batch_size": 16, "max_seq_length": 256, "warmup_ratio": 0.1, "seed": 42, "soup": 1, "freeze_layers": 0,
          "encode_length": None}


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(str(model)).name).strip("-").lower() or "model"


def base_settings(model: str = "minilm", **overrides) -> dict:
    """The full training settings of base ``model`` (:data:`BASE_SETTINGS` + :data:`COMMON`), with ``overrides``
    (``lr``, ``epoch``, ``schedule``, ``amp``, ``batch_size``, ``max_seq_length``, ``max_steps``, ``soup``, ...)."""
    cfg = {**COMMON, **BASE_SETTINGS.get(str(model).lower(), BASE_SETTINGS["minilm"]), **overrides}
    if cfg["amp"] == "auto":
        from pyterrier_tot.models.loading import native_bf16

        cfg["amp"] = native_bf16()
    if int(cfg["soup"]) < 1:
        raise ValueError(f"base settings need soup >= 1 (the runs averaged), got soup={cfg['soup']}")
    if cfg["encode_length"] is not None and int(cfg["encode_length"]) < 1:
        raise ValueError(f"base settings need encode_length >= 1 tokens (or None), got {cfg['encode_length']}")
    if not 1 <= cfg["epoch"] <= cfg["schedule"]:
        raise ValueError(f"base settings need 1 <= epoch <= schedule, got epoch={cfg['epoch']}, "
                         f"schedule={cfg['schedule']}")
    return cfg


def base_dir(dataset, model: str = "minilm", n: int = TUNING_QUERIES, tuning_seed: int = TUNING_SEED,
             **settings) -> Path:
    """The cache folder of base ``model`` fine-tuned on ``dataset`` with ``settings`` (see :func:`base_settings`),
    outside the tuning slice of ``n`` queries drawn with ``tuning_seed`` (named only when not the default)."""
    cfg = base_settings(model, **settings)
    tag = dataset_tag(dataset) + (f"-ts{tuning_seed}" if tuning_seed != TUNING_SEED else "")
    if str(model).lower() == "minilm" and cfg == {**COMMON, **LEGACY_MINILM}:
        # the name older runs gave MiniLM's first settings, so a model trained by them is found again (and never
        # mistaken for a model trained with other settings)
        return cache_folder(f"base-minilm-{tag}-train-minus-fit{n}-e1")
    extra = "".join(f"-{k}{cfg[k]}" for k in ("batch_size", "max_seq_length", "seed", "warmup_ratio")
                    if cfg[k] != COMMON[k])
    extra += f"-frozen{cfg['freeze_layers']}" if cfg["freeze_layers"] else ""
    steps = f"-s{cfg['max_steps']}" if cfg.get("max_steps") else ""
    steps += f"-soup{cfg['soup']}" if cfg["soup"] > 1 else ""
    amp = "-bf16" if cfg["amp"] else ""
    length = f"-encode{int(cfg['encode_length'])}" if encodes_otherwise(cfg) else ""
    return cache_folder(f"base-{_slug(model)}-{tag}-train-minus-fit{n}-lr{cfg['lr']:g}{extra}{steps}"
                        f"{amp}-e{cfg['epoch']}of{cfg['schedule']}{length}")


def encodes_otherwise(cfg: dict) -> bool:
    """Whether settings ``cfg`` (:func:`base_settings`) encode at another length than they train at."""
    return cfg.get("encode_length") is not None and int(cfg["encode_length"]) != int(cfg["max_seq_length"])


def at_length(folder: Union[str, Path], out: Union[str, Path], n: int) -> str:
    """Trained model ``folder`` as a model that encodes at ``n`` tokens, in folder ``out``: the same weights
    (hard-linked where the file system allows, else copied) under a configuration that says ``n`` (the tokenizer's
    ``model_max_length``, and ``sentence_bert_config.json``'s ``max_seq_length`` where it has one). Another folder
    and configuration digest: its own dense index and fuser fit. Made under a temporary name, checked to load at
    ``n`` tokens, then renamed, so a half-made copy is never found."""
    import json
    import os
    import shutil

    from sentence_transformers import SentenceTransformer

    out = Path(out)
    if out.is_dir():
        return str(out)

    def link_or_copy(src, dst):
        if os.path.getsize(src) > 1 << 20:  # the weights: shared, never written here
            try:
                os.link(src, dst)
                return dst
            except OSError:
                pass
        return shutil.copy2(src, dst)

    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp, copy_function=link_or_copy)
    for name, key in (("tokenizer_config.json", "model_max_length"), ("sentence_bert_config.json", "max_seq_length")):
        config = json.loads((tmp / name).read_text()) if (tmp / name).is_file() else {}
        if name == "tokenizer_config.json" or key in config:
            (tmp / name).unlink(missing_ok=True)  # a new file: a link would write into the original too
            (tmp / name).write_text(json.dumps({**config, key: int(n)}, indent=2))
    got = int(SentenceTransformer(str(tmp), device="cpu").max_seq_length)
    if got != int(n):
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"{folder} copied to encode at {n} tokens loads at {got}")
    tmp.rename(out)
    return str(out)


def _same_weights(copy: Path, trained: str) -> Optional[str]:
    """``copy`` when it is a complete model with the weights of ``trained`` (a copy of an earlier training of that
    folder is not), else None."""
    from pyterrier_tot.models.fingerprint import model_fingerprint

    return str(copy) if complete_model(copy) and model_fingerprint(copy) == model_fingerprint(trained) else None


def _copy_again(trained: str, out: Path, n: int) -> str:
    import shutil

    shutil.rmtree(out, ignore_errors=True)  # absent, half-made, or made from an earlier training
    return at_length(trained, out, n)


def hub_name(model: str) -> str:
    """The model a base named ``model`` starts from: its hub name for a short name (``"mpnet"``), else ``model``."""
    from pyterrier_tot.models.loading import ALIASES

    return ALIASES.get(str(model).lower(), str(model))


def _train_kwargs(model: str, cfg: dict) -> dict:
    keys = ("batch_size", "max_seq_length", "warmup_ratio", "seed", "max_steps", "lr", "amp", "freeze_layers")
    return {"base_model": hub_name(model), "epochs": cfg["epoch"], "schedule_epochs": cfg["schedule"],
            **{k: cfg[k] for k in keys if k in cfg}}


def _corpus(dataset, index):
    if index is not None:
        return index
    from pyterrier_tot.index import BookIndex

    if isinstance(dataset, TrainingSet):
        raise ValueError(f"{dataset!r} has no corpus of its own: pass index= (a BookIndex of the corpus its "
                         "qrels point into)")
    return BookIndex(dataset)


def fine_tuned_base(dataset, n: int = TUNING_QUERIES, tuning_seed: int = TUNING_SEED,
                    path: Union[str, Path, None] = None, train: bool = True, verbose: bool = True, *,
                    model: str = "minilm", index=None, **settings) -> Optional[str]:
    """The fine-tuned base retriever ``model`` of the recipe (a model folder, usable as ``model=``): reused when
    cached, otherwise trained on the training queries outside the tuning slice (``train=False``: ``None``
    instead). ``index``: the BookIndex whose books the qrels name (default ``BookIndex(dataset)``); a streamed
    one is read by docno. ``settings`` override :data:`BASE_SETTINGS` (see :func:`base_settings`); among them
    ``seed`` is the training seed (another seed, another folder), while ``n`` and ``tuning_seed`` draw the tuning
    slice that training leaves out (the weights fitted beside the base must be fitted on that same slice).

    Cost on two CPU cores (1,553 Reddit-TOMT pairs, 97 steps per epoch): MiniLM about 6 to 9 minutes an epoch
    (its default two epochs took 1,111 s), mpnet 28 to 64 minutes an epoch in fp32 on two CPUs measured (14 to
    32 with ``amp`` where bf16 is native, by CPU; its default is two epochs). On a GPU it trains there: 23 s on an
    H200. ``soup=N``: N runs (seeds ``seed`` to ``seed + N - 1``, each cached as a base of its own) averaged into
    one model (:mod:`~pyterrier_tot.recipe.soup`), N times the training and one model's cost to use; six
    mpnet runs took 173 s on an H100 (``benchmarks/recipe_rejected/results/soup.md``)."""
    from pyterrier_tot.recipe import expert_training

    cfg = base_settings(model, **settings)
    out = Path(path) if path else base_dir(dataset, model, n, tuning_seed, **settings)
    rest, qrels = train_data(dataset, "rest", n, tuning_seed)
    if encodes_otherwise(cfg):  # the model trained at its length, then a copy that encodes at encode_length
        trained = fine_tuned_base(dataset, n, tuning_seed, train=train, verbose=verbose, model=model, index=index,
                                  **{**settings, "encode_length": None})
        if trained is None:
            return None
        return str(train_once(out, lambda: _same_weights(out, trained),
                              lambda: _copy_again(trained, out, cfg["encode_length"])))

    def found() -> Optional[str]:
        if not complete_model(out):
            return None
        check_trained_on(out, rest)
        if cfg["soup"] == 1:
            check_trained_as(out, _train_kwargs(model, cfg))
        return str(out)

    if cfg["soup"] > 1 and found() is None:  # each run is a base of its own (cached, reused), then their mean
        from pyterrier_tot.recipe.soup import average_models

        runs = [fine_tuned_base(dataset, n, tuning_seed, train=train, verbose=verbose, model=model, index=index,
                                **{**settings, "soup": 1, "seed": cfg["seed"] + i}) for i in range(cfg["soup"])]
        return None if None in runs else str(train_once(out, found, lambda: average_models(runs, out)))
    if not train:
        return found()

    def make() -> str:
        if verbose:
            print(f"fine-tuning the {model} base retriever on {len(rest)} training queries into {out}")
        result = expert_training.train_base_retriever(rest, qrels, _corpus(dataset, index), output_dir=out,
                                                      **_train_kwargs(model, cfg))
        return str(getattr(result, "path", result))

    # one process trains; another asking for the same base waits for it, then reuses the folder
    return train_once(out, found, make)


def base_grid(dataset, model: str = "mpnet", lrs: Sequence[float] = (2e-5,), epochs: int = 3,
              n: int = TUNING_QUERIES, tuning_seed: int = TUNING_SEED, index=None, train: bool = True,
              verbose: bool = True, **settings) -> Dict[Tuple[float, int], str]:
    """Fine-tuned ``model`` for each learning rate of ``lrs`` with an ``epochs``-epoch schedule, saved after every
    epoch: ``{(lr, epoch): folder}`` for the checkpoints that exist (``train=False`` trains nothing). Choose
    among them with :func:`choose_base`; one run per learning rate is the whole cost."""
    from pyterrier_tot.recipe import expert_training

    if base_settings(model, **settings)["soup"] > 1:
        raise ValueError("base_grid trains one run per setting; soup= is fine_tuned_base's (it averages runs)")
    found: Dict[Tuple[float, int], str] = {}
    for lr in lrs:
        # the checkpoints as trained (at the training length): encode_length is the recipe's, not the grid's
        dirs = {e: base_dir(dataset, model, n, tuning_seed, **{**settings, "lr": lr, "epoch": e, "schedule": epochs,
                                                              "encode_length": None})
                for e in range(1, epochs + 1)}
        rest, qrels = train_data(dataset, "rest", n, tuning_seed)

        def all_there(dirs=dirs, rest=rest) -> Optional[bool]:
            for p in dirs.values():
                if complete_model(p):
                    check_trained_on(p, rest)
            return True if all(complete_model(p) for p in dirs.values()) else None

        def make(lr=lr, dirs=dirs, rest=rest, qrels=qrels) -> bool:
            cfg = base_settings(model, **{**settings, "lr": lr, "epoch": epochs, "schedule": epochs})
            if verbose:
                print(f"fine-tuning {model} (lr {lr:g}, {epochs} epochs, a checkpoint per epoch) on {len(rest)} "
                      "training queries")
            expert_training.train_base_retriever(rest, qrels, _corpus(dataset, index), output_dir=dirs[epochs],
                                                 epoch_dirs={e: p for e, p in dirs.items() if e < epochs},
                                                 **_train_kwargs(model, cfg))
            return True

        if train:  # the run writes every epoch's folder: all of them are locked while it trains
            train_once(dirs[epochs], all_there, make, also=list(dirs.values()))
        else:
            all_there()
        found.update({(lr, e): str(p) for e, p in dirs.items() if complete_model(p)})
    return found


def choose_base(dataset, index, models: dict, metric: str = "R@5", n: int = TUNING_QUERIES,
                precision: Optional[str] = None) -> Tuple[object, pd.DataFrame]:
    """The key of ``models`` (e.g. ``(lr, epoch)`` from :func:`base_grid`, or an epoch) whose dense retriever
    scores best on the tuning slice (``metric``; ties go to the earlier key), with the table of all."""
    from pyterrier_tot.evaluation import tot_experiment

    tuning, qrels = train_data(dataset, "tuning", n)
    keys = sorted(models)
    table = tot_experiment([index.dense(models[k], precision=precision) for k in keys], tuning, qrels,
                           names=[str(k) for k in keys], round=None)
    table["key"] = keys
    table["order"] = range(len(keys))
    best = table.sort_values([metric, "order"], ascending=[False, True]).iloc[0]["key"]
    return best, table.drop(columns="order")


def choose_epoch(dataset, index, models: Dict[int, str], metric: str = "R@5",
                 n: int = TUNING_QUERIES) -> Tuple[int, pd.DataFrame]:
    """The epoch (a key of ``models``, e.g. from :func:`fine_tuned_hard`) whose dense retriever scores best on the
    tuning slice, with the table of all (:func:`choose_base` with an ``epoch`` column)."""
    best, table = choose_base(dataset, index, models, metric, n)
    return int(best), table.rename(columns={"key": "epoch"})


def base_expert_name(model) -> str:
    """The recipe's name for the expert of fine-tuned base ``model``: ``dense_ft`` for MiniLM (the name fitted
    weights have always used), ``dense_ft_<model>`` for the others."""
    return "dense_ft" if str(model).lower() in ("minilm", "all-minilm-l6-v2") else f"dense_ft_{_slug(model)}"


def encoding_precision(expert_name: str) -> str:
    """The encoding precision (:data:`BASE_SETTINGS`) of the base behind expert ``expert_name`` (fp32 for a name
    that no base model has)."""
    for model, cfg in BASE_SETTINGS.items():
        if base_expert_name(model) == expert_name:
            return cfg.get("precision", "fp32")
    return "fp32"


#: Fine-tuned models the fuser weighs beside a base, scoring its candidates (adding none; the floor stays the base
#: alone). Chosen inside the tuning slice (``benchmarks/recipe/results/helper_bases.md``): the fine-tuned MiniLM beside
#: mpnet raised the held-out gain over mpnet alone; mpnet title / plot experts did not.
HELPERS: Dict[str, Tuple[str, ...]] = {"mpnet": ("minilm",), "nomic": ("minilm",)}
#: Sets of several bases measured as a recipe with more than their sum: the helpers the fuser weighs beside them
#: and the base whose density prior it weighs (:data:`~pyterrier_tot.recipe.assembly.RECIPE_PRIORS` gives its k).
#: mpnet + nomic is :data:`DEFAULT_BASE`, measured so (``benchmarks/encoders/results/nomic_base.md``). Any other set
#: of bases (e.g. ``["minilm", "mpnet"]``, ``bases.md``) is their sum alone, as it was measured.
ENSEMBLES: Dict[FrozenSet[str], dict] = {frozenset({"mpnet", "nomic"}): {"helpers": ("minilm",), "prior": "mpnet"}}


def ensemble(base: Union[str, Sequence[str]]) -> dict:
    """What :data:`ENSEMBLES` adds to the bases ``base`` (several; in any order), or ``{}``."""
    found = as_bases(base)
    return ENSEMBLES.get(frozenset(b.lower() for b in found), {}) if len(found) > 1 else {}


def default_helpers(base: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """The :data:`HELPERS` of one base, or of several bases listed in :data:`ENSEMBLES` (none for other sets of
    bases, whose sum is the ensemble measured); never a model that is a base already."""
    found = as_bases(base)
    helpers = HELPERS.get(found[0].lower(), ()) if len(found) == 1 else ensemble(found).get("helpers", ())
    return tuple(h for h in helpers if h not in found)


def fine_tuned_bases(dataset, index=None, base: Union[str, Sequence[str]] = DEFAULT_BASE, train: bool = True,
                     verbose: bool = True, role: str = "base", **settings) -> Dict[str, str]:
    """{expert name: model folder} of the recipe's fine-tuned ``base`` model(s) (see :func:`base_expert_name`),
    trained when missing (``train=False``: the missing ones are left out, with a warning naming them: a pipeline
    without them is not the recipe). ``settings`` go to every
    :func:`~pyterrier_tot.recipe.bases.fine_tuned_base` call."""
    found, missing = {}, []
    for model in as_bases(base):
        path = fine_tuned_base(dataset, train=train, verbose=verbose, model=model, index=index, **settings)
        if path is None:
            missing.append(model)
        else:
            found[base_expert_name(model)] = path
    warn_untrained(role, missing, found)
    return found


def warn_untrained(role: str, missing: Sequence[str], found: Dict[str, str]) -> None:
    """The warning of a recipe built without some of its fine-tuned models (``train=False``)."""
    if missing:
        rest = "the pipeline is built without them" if role != "base" else f"the pipeline is built on " \
            f"{sorted(found)} alone" if found else "the pipeline falls back to the zero-shot MiniLM base"
        warnings.warn(f"fine-tuned {role}(s) {list(missing)} are not trained and train=False: {rest}; its numbers "
                      "are not the recipe's (train=True trains them once)", stacklevel=4)


def as_bases(base: Union[str, Sequence[str]]) -> List[str]:
    """``base`` (one model or a list) as a list of distinct model names, refusing an empty one."""
    found = [base] if isinstance(base, (str, Path)) else list(base)
    if not found:
        raise ValueError("base: name at least one base model, e.g. 'minilm', 'mpnet' or ['minilm', 'mpnet']")
    if len({base_expert_name(b) for b in found}) < len(found):
        raise ValueError(f"base: the same model twice in {found}")
    return [str(b) for b in found]
