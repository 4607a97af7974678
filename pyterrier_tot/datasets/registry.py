"""Datasets by name: :func:`get_dataset`, :func:`list_datasets` and the ``pt.get_dataset('tot:...')`` provider."""
from __future__ import annotations

import functools
from typing import Callable, Dict, Iterable, List

import pyterrier as pt

from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.birco import BircoWtb
from pyterrier_tot.datasets.reddit_tomt import RedditTomtBooks
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


@functools.lru_cache(maxsize=16)
def _cached(name: str) -> BookDataset:
    return get_dataset(name, cache=False)


def get_dataset(name: str, cache: bool = True, **kwargs) -> BookDataset:
    """A dataset by name (see :mod:`pyterrier_tot.datasets`). Repeated calls without kwargs return the same
    object, so its corpus is read once per process."""
    if cache and not kwargs:
        return _cached(name)
    if name in _REGISTRY:
        return _REGISTRY[name](**kwargs)
    if name.startswith("trec-tot-local/"):
        return TrecTotLocal(name.split("/", 1)[1], **kwargs)
    if name.startswith("trec-tot"):
        return TrecTot(name, **kwargs)
    raise KeyError(f"unknown dataset {name!r}; available: {list_datasets()}")


class ToTDatasetProvider(pt.datasets.DatasetProvider):
    """Makes the datasets available as ``pt.get_dataset('tot:<name>')`` (the ``pyterrier.dataset_provider``
    entry point ``tot``)."""

    def get_dataset(self, name: str) -> pt.datasets.Dataset:
        return get_dataset(name)

    def list_dataset_names(self) -> Iterable[str]:
        return list(_REGISTRY)
