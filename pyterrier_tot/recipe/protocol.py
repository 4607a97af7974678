"""The recipe's data protocol: which training queries train models, which tune choices, and that validation is
never read.

:func:`tuning_split` sets 300 training queries aside (``train.sample(300, random_state=0)``): fuser weights,
epochs, learning rates and other choices are fitted on them, and nothing trains on them. Models train on the
other training queries (:func:`training_rest`). :func:`train_data` is the one function every training and
tuning path reads its queries from, and no argument of it reaches the validation split.
"""
from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from pyterrier_tot._plumbing.util import require_columns

#: Size and seed of the tuning slice of the training queries.
TUNING_QUERIES, TUNING_SEED = 300, 0
#: The one split any training or tuning path of the recipe reads (validation is only ever evaluated).
TRAIN_SPLIT = "train"
#: sha1 of the sorted qids of the Reddit-TOMT tuning slice: the slice is fixed, a change to it shows up in tests.
REDDIT_TUNING_FINGERPRINT = "45c3a3398527621c48eb9e5ed9f67bd56dc03d88"
MODEL_FILES = ("model.safetensors", "pytorch_model.bin")
META_FILES = ("pyterrier_tot_training.json", "pt_meta.json")  # the training file has the full details first


def tuning_split(train_topics: pd.DataFrame, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> pd.DataFrame:
    """The tuning slice of the training queries: weights and choices are fitted on it, nothing trains on it."""
    return train_topics.sample(n=min(n, len(train_topics)), random_state=seed)


def qid_fingerprint(topics: pd.DataFrame) -> str:
    """sha1 of the sorted qids of ``topics`` (how the fixed tuning slice is recognised)."""
    return hashlib.sha1("\n".join(sorted(topics["qid"].astype(str))).encode()).hexdigest()


def text_fingerprint(topics: pd.DataFrame) -> str:
    """sha1 of ``topics``' sorted (qid, query) pairs: the queries' text, not only their ids (a loader that cleans a
    query differently makes weights fitted on it stale)."""
    pairs = sorted(zip(topics["qid"].astype(str), topics["query"].astype(str)))
    return hashlib.sha1("\n".join(f"{q}\t{t}" for q, t in pairs).encode()).hexdigest()


def training_rest(train_topics: pd.DataFrame, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> pd.DataFrame:
    """The training queries outside the tuning slice (what models are trained on)."""
    return train_topics[~train_topics["qid"].isin(tuning_split(train_topics, n, seed)["qid"])]


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


def complete_model(path: Union[str, Path]) -> bool:
    """True when ``path`` holds a saved model: its metadata and its weights (an interrupted save has neither)."""
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in META_FILES) and any((p / f).is_file() for f in MODEL_FILES)


def as_path(obj) -> str:
    """The folder of a model argument (a path, a string or a saved artifact such as a BiEncoderModel)."""
    from pyterrier_tot._plumbing.artifact import artifact_path

    return artifact_path(obj) or str(obj)


def training_info(path: Union[str, Path]) -> dict:
    """What a fine-tuned model folder says about its training (pair count, steps, seconds, hyper-parameters)."""
    for name in META_FILES:
        f = Path(path) / name
        if f.is_file():
            meta = json.loads(f.read_text(encoding="utf8"))
            return meta.get("training", meta) if isinstance(meta.get("training"), dict) else meta
    return {}


#: folders already warned about (:func:`check_trained_on`)
_UNCHECKED: set = set()


def check_trained_on(path: Union[str, Path], topics: pd.DataFrame, ours: bool = False) -> None:
    """Refuse a cached model folder whose training record names other training queries than ``topics`` (the
    folder of another tuning seed, training set or version of the dataset): it would be reused silently, and its
    training queries could overlap the tuning slice; or one trained on other texts of the same queries (a loader
    that now cleans them differently). A folder trained by an older version (a training record without
    ``train_qids`` or ``train_text``) passes with a warning, once per folder: it cannot be checked. ``ours``: the
    folder is one this library trains (a record without ``kind``, as older cross-encoders wrote, warns too)."""
    info = training_info(path)
    recorded, text = info.get("train_qids"), info.get("train_text")
    if (ours or info.get("kind")) and not (recorded and text) and str(path) not in _UNCHECKED:
        _UNCHECKED.add(str(path))
        what = "training queries" if not recorded else "training queries' text"
        warnings.warn(f"the cached model {path} was trained by an older version that did not record its {what}, "
                      "so it cannot be checked against the queries it stands for now; delete the folder to retrain "
                      "it if they may differ", stacklevel=3)
    if recorded and text and recorded == qid_fingerprint(topics) and text != text_fingerprint(topics):
        raise ValueError(f"the cached model {path} was trained on other texts of its {len(topics)} training queries "
                         "(the loader now cleans them differently); delete the folder to retrain it (or train into "
                         "another folder: path= where the function takes one)")
    if recorded and recorded != qid_fingerprint(topics):
        raise ValueError(f"the cached model {path} was trained on other queries than the {len(topics)} training "
                         "queries it stands for now (another tuning seed, training set or dataset version); "
                         "delete the folder to retrain it (or train into another folder: path= where the function "
                         "takes one)")


def same_queries(feats: Optional[pd.DataFrame], tuning: pd.DataFrame, who: str, recompute=None,
                 names: Sequence[str] = (), sample: int = 3) -> None:
    """Refuse precomputed tuning features (``feats``) that would be cached as the recipe's fit but are not its own:
    features of part of the slice, of other queries, of other texts of them, or (``recompute``: topics -> the
    recipe's features of them) of other experts or candidates, checked on ``sample`` of its queries (``names``:
    the feature columns compared)."""
    if feats is None:
        return
    if set(feats["qid"].astype(str)) != set(tuning["qid"].astype(str)):
        raise ValueError(f"{who}: feats must cover exactly the {len(tuning)} queries of the tuning slice, "
                         f"got {feats['qid'].nunique()} queries")
    col = "query_0" if "query_0" in feats else "query" if "query" in feats else None  # the text as first given
    if col is not None:  # features of differently cleaned queries would be cached under the new texts' key
        first = feats.drop_duplicates("qid")
        got = pd.Series(first[col].to_numpy(), index=first["qid"].astype(str))
        want = tuning.set_index(tuning["qid"].astype(str))["query"]
        stale = [q for q in want.index if got.get(q) != want[q]]
        if stale:
            raise ValueError(f"{who}: feats were computed for other texts of {len(stale)} tuning queries "
                             f"(e.g. {stale[:3]}); compute them again")
    if recompute is not None and len(tuning):
        qids = sorted(tuning["qid"].astype(str))[:sample]
        some = tuning[tuning["qid"].astype(str).isin(qids)]
        cols = ["qid", "docno", *names]
        given = feats[cols].astype({"qid": str, "docno": str})
        both = recompute(some)[cols].astype({"qid": str, "docno": str}).merge(
            given[given["qid"].isin(qids)], on=["qid", "docno"], how="outer", suffixes=("", "_given"))
        a, b = both[list(names)].to_numpy(dtype=float), both[[f"{c}_given" for c in names]].to_numpy(dtype=float)
        if np.isnan(a).any() or np.isnan(b).any() or not np.allclose(a, b, atol=1e-5, rtol=1e-4):
            raise ValueError(f"{who}: feats are not this recipe's features of the tuning slice (checked on "
                             f"{len(some)} queries: other candidates or other expert scores, or ties at the candidate "
                             "cut-off broken otherwise); compute them with this recipe's experts, or leave feats out")


def check_trained_as(folder: Union[str, Path], settings: dict) -> None:
    """Refuse a cached model whose training record names another starting model (``settings["base_model"]``: a
    folder named by a model's last path part is shared by ``/a/model`` and ``/b/model``) or other training settings
    (a ``path=`` folder trained another way); a setting the record lacks is not compared."""
    from pyterrier_tot._plumbing.util import differing
    from pyterrier_tot.models.loading import canonical_model

    found = training_info(folder)
    want = {k: v for k, v in settings.items() if k in found and k not in ("amp", "base_model")}
    if "batch_size" in want and found.get("n_pairs"):  # training cuts the batch to the pairs there are
        want["batch_size"] = max(2, min(want["batch_size"], int(found["n_pairs"])))
    base = settings.get("base_model")
    if base and found.get("base_model") and canonical_model(found["base_model"]) != canonical_model(base):
        want["base_model"] = base
    if any(found[k] != v for k, v in want.items()):
        raise ValueError(f"the cached base {folder} was trained from another model or with other settings "
                         f"({differing({k: found[k] for k in want}, want)}); delete it to train it again, or pass "
                         "another path=")


def training_record(topics: pd.DataFrame) -> dict:
    """What a model trained on ``topics`` records about them: their fingerprints (reuse is checked against them)
    and their qids (a fit on a tuning slice checks it never learned from one of them)."""
    return {"train_qids": qid_fingerprint(topics), "train_text": text_fingerprint(topics),
            "train_qid_list": sorted(topics["qid"].astype(str))}


def check_not_trained_on_slice(models: dict, dataset, n: int = TUNING_QUERIES, seed: int = TUNING_SEED) -> None:
    """Refuse to fit weights on the tuning slice of ``dataset`` (``n`` queries drawn with ``seed``) beside a model
    ({name: folder}) trained on some of its queries (a base trained with another tuning seed, or on the whole
    train split): the fit would reward the model for queries it has learned, and every number after it would be
    wrong without a sign. A model whose record has only fingerprints passes when it was trained on exactly the
    slice's complement and otherwise warns once (it cannot be checked); a folder without a training record (a
    model from elsewhere) is the caller's to vouch for."""
    models = {k: v for k, v in (models or {}).items() if v}
    if not models:
        return
    tuning, rest = train_data(dataset, "tuning", n, seed)[0], train_data(dataset, "rest", n, seed)[0]
    want = set(tuning["qid"].astype(str))
    for name, path in models.items():
        path = as_path(path)
        info = training_info(path) if complete_model(path) else {}
        listed = info.get("train_qid_list")
        if listed is not None:
            seen = want & {str(q) for q in listed}
            if seen:
                raise ValueError(f"{name}: the model {path} was trained on {len(seen)} of the {len(want)} tuning "
                                 f"queries (e.g. {sorted(seen)[:3]}); weights fitted there would favour it. Train it "
                                 "outside the slice (the tuning seed and size it was trained with must be the fit's)")
        elif info.get("train_qids") and info["train_qids"] != qid_fingerprint(rest) and str(path) not in _UNCHECKED:
            _UNCHECKED.add(str(path))
            warnings.warn(f"{name}: the model {path} was trained on other queries than the {len(rest)} outside the "
                          "tuning slice, and its record cannot say whether they include tuning queries; if they do, "
                          "the fitted weights favour it", stacklevel=3)


class TrainingSet:
    """Query sets (datasets with one split, such as ``trec-tot-local/2023-train``, or ``(topics, qrels)``
    pairs) as the ``train`` split the recipe reads, for training against a corpus given separately
    (``fine_tuned_base(train_set, index=...)``). With several sets, each qid is prefixed by its set's name."""

    def __init__(self, sources: Sequence, name: Optional[str] = None):
        sources = list(sources)
        if not sources:
            raise ValueError("TrainingSet needs at least one query set")
        topics, qrels, names = [], [], []
        for i, src in enumerate(sources):
            t, q = (src[0], src[1]) if isinstance(src, tuple) else (src.get_topics(), src.get_qrels())
            require_columns(t, ["qid", "query"], f"TrainingSet source {i} topics")
            require_columns(q, ["qid", "docno"], f"TrainingSet source {i} qrels")
            label = str(getattr(src, "name", f"set{i}")).rsplit("/", 1)[-1]
            names.append(label)
            t, q = t.astype({"qid": str}), q.astype({"qid": str, "docno": str})
            if len(sources) > 1:
                t, q = t.assign(qid=label + "/" + t["qid"]), q.assign(qid=label + "/" + q["qid"])
            topics.append(t)
            qrels.append(q)
        self.topics = pd.concat(topics, ignore_index=True)
        self.qrels = pd.concat(qrels, ignore_index=True)
        dup = self.topics["qid"][self.topics["qid"].duplicated()].tolist()
        if dup:
            raise ValueError(f"TrainingSet: duplicate qids {dup[:5]}")
        # a set named by position only ("set0") carries its qids' fingerprint: its cached models are its own
        generic = any(re.fullmatch(r"set\d+", n) for n in names)
        self.name = name or "+".join(names) + (f"-{qid_fingerprint(self.topics)[:8]}" if generic else "")
        self.splits = (TRAIN_SPLIT,)

    def _check(self, split) -> None:
        if split not in (None, TRAIN_SPLIT):
            raise KeyError(f"{self!r} has only the {TRAIN_SPLIT!r} split, not {split!r}")

    def get_topics(self, split: Optional[str] = TRAIN_SPLIT) -> pd.DataFrame:
        self._check(split)
        return self.topics.copy()

    def get_qrels(self, split: Optional[str] = TRAIN_SPLIT) -> pd.DataFrame:
        self._check(split)
        return self.qrels.copy()

    def __repr__(self):
        return f"TrainingSet({self.name!r}, {len(self.topics)} queries)"
