"""Book (and TREC ToT) datasets, exposed the PyTerrier way.

Every dataset here is a ``pyterrier.datasets.Dataset`` with ``get_topics(split)`` (``qid``, ``query``),
``get_qrels(split)`` (``qid``, ``docno``, ``label``) and ``get_corpus_iter()`` (dicts with ``docno`` and the
book fields of :mod:`pyterrier_tot.datasets.books`). Get one by name::

    import pyterrier_tot as ptt
    ds = ptt.get_dataset("reddit-tomt-books")           # or pt.get_dataset("tot:reddit-tomt-books")
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")

Names: ``reddit-tomt-books``, ``whatsthatbook``, ``birco-wtb``, ``trec-tot-local/2023-train`` (the shared
folders: topics + qrels, no corpus), and any ir_datasets TREC ToT id such as ``trec-tot/2025/dev3``.
``get_dataset(name, sample=30)`` gives a small slice of a data set under its own name
(:mod:`~pyterrier_tot.datasets.sample`).

One module per collection (:mod:`~pyterrier_tot.datasets.reddit_tomt`,
:mod:`~pyterrier_tot.datasets.whatsthatbook`, :mod:`~pyterrier_tot.datasets.birco`,
:mod:`~pyterrier_tot.datasets.trec_tot`), the shared plumbing in :mod:`~pyterrier_tot.datasets.base`, the book
model in :mod:`~pyterrier_tot.datasets.books` and the names in :mod:`~pyterrier_tot.datasets.registry`.
"""
# The underscored names are the single-module version's private helpers, kept importable from here.
from pyterrier_tot.datasets.base import BookDataset, read_jsonl, read_trec_qrels
from pyterrier_tot.datasets.base import read_jsonl as _read_jsonl
from pyterrier_tot.datasets.birco import BircoWtb
from pyterrier_tot.datasets.books import Book, book_iter, books_to_frame, parse_year
from pyterrier_tot.datasets.own import OwnCatalogue, example_catalogue, own_catalogue
from pyterrier_tot.datasets.reddit_tomt import RedditTomtBooks, clean_reddit_title
from pyterrier_tot.datasets.registry import _REGISTRY, ToTDatasetProvider, get_dataset, list_datasets
from pyterrier_tot.datasets.sample import SampledDataset, sample_dataset
from pyterrier_tot.datasets.trec_tot import TrecTot, TrecTotLocal, _irds_query_text
from pyterrier_tot.datasets.whatsthatbook import _BOOK_KEYS, _QUERY_KEYS, WhatsThatBook, _first, book_from_record
from pyterrier_tot.errors import DatasetUnavailableError

__all__ = [
    "OwnCatalogue", "own_catalogue", "BookDataset", "RedditTomtBooks", "WhatsThatBook", "BircoWtb", "TrecTot",
    "TrecTotLocal", "example_catalogue",
    "get_dataset", "list_datasets", "ToTDatasetProvider", "DatasetUnavailableError", "SampledDataset",
    "sample_dataset",
]
