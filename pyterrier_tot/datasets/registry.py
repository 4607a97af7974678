"""Datasets by name: :func:`get_dataset`, :func:`list_datasets` and the ``pt.get_dataset('tot:...')`` provider."""
from __future__ import annotations

import functools
from typing import Callable, Dict, Iterable, List, Optional

import pyterrier as pt

from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.birco import BircoWtb
from pyterrier_tot.datasets.reddit_tomt import RedditTomtBooks
from pyterrier_tot.datasets.sample import SampledDataset, env_sample
from pyterrier_tot.datasets.trec_tot import TrecTot, TrecTotLocal
from pyterrier_tot.datasets.whatsthatbook import WhatsThatBook

__all__ = ["get_dataset", "list_datasets", "ToTDatasetProvider"]

_REGISTRY: Dict[str, Callable[..., BookDataset]] = {
    "reddit-tomt-books": RedditTomtBooks,
    "whatsthatbook": WhatsThatBook,
    "birco-wtb": BircoWtb,
}


def list_datasets() -> List[str]:
    """The names :func:`get_dataset` accepts (the two TREC ToT families as patterns)."""
    return sorted(_REGISTRY) + ["trec-tot-local/<folder>", "trec-tot/<year>/<split> (ir_datasets)"]


def _where() -> tuple:
    """What a dataset's files are found through (the shared data folder, ir_datasets' home): a cached dataset is
    the one of the folders in force, never one bound to a folder the environment has since moved away from."""
    import os

    from pyterrier_tot._plumbing.util import shared_data_dir

    return str(shared_data_dir()), os.environ.get("IR_DATASETS_HOME", "")


def _cached(name: str) -> BookDataset:
    return _cached_in(name, _where())


@functools.lru_cache(maxsize=16)
def _cached_in(name: str, where: tuple) -> BookDataset:
    return _load(name)


def _cached_sample(name: str, n: int) -> SampledDataset:
    return _cached_sample_in(name, n, _where())


@functools.lru_cache(maxsize=16)
def _cached_sample_in(name: str, n: int, where: tuple) -> SampledDataset:
    return SampledDataset(_cached_in(name, where), n)


def forget_datasets() -> None:
    """Drop the datasets kept by name, so that the next :func:`get_dataset` loads them again (a test that
    re-registers a data set's files, a process whose data moved within the same folders)."""
    _cached_in.cache_clear()
    _cached_sample_in.cache_clear()


def _load(name: str, **kwargs) -> BookDataset:
    if name in _REGISTRY:
        return _REGISTRY[name](**kwargs)
    if name.startswith("trec-tot-local/"):
        return TrecTotLocal(name.split("/", 1)[1], **kwargs)
    if name.startswith("trec-tot"):
        return TrecTot(name, **kwargs)
    raise KeyError(f"unknown dataset {name!r}; available: {list_datasets()}")


def get_dataset(name: str, cache: bool = True, sample: Optional[int] = None, **kwargs) -> BookDataset:
    """A dataset by name (see :mod:`pyterrier_tot.datasets`). Repeated calls without kwargs return the same
    object, so its corpus is read once per process.

    ``sample=n``: a small slice (``n`` queries a split, ``n + 300`` of train, their gold books and ``2n``
    others) under its own name, ``<name>-sample<n>``; see :mod:`pyterrier_tot.datasets.sample`. Without it,
    ``$PYTERRIER_TOT_SAMPLE`` (set by the docs runner of the test suite) samples every in-memory data set."""
    explicit = sample is not None
    n = sample if explicit else env_sample()
    shared = cache and not kwargs
    full = _cached(name) if shared else _load(name, **kwargs)
    # the environment leaves the streamed corpora (TREC ToT) whole; sample= asks for it and is told no
    if n is None or (not explicit and (getattr(full, "streaming", False) or not isinstance(full, BookDataset))):
        return full
    return _cached_sample(name, n) if shared else SampledDataset(full, n)


class ToTDatasetProvider(pt.datasets.DatasetProvider):
    """Makes the datasets available as ``pt.get_dataset('tot:<name>')`` (the ``pyterrier.dataset_provider``
    entry point ``tot``)."""

    def get_dataset(self, name: str) -> pt.datasets.Dataset:
        return get_dataset(name)

    def list_dataset_names(self) -> Iterable[str]:
        return list(_REGISTRY)
