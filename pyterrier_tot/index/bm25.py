"""The BM25 sub-index of a :class:`~pyterrier_tot.index.BookIndex`: a PISA index over some book fields, and the
score files PISA adds to it for each (k1, b).

The sub-folder is named after its fields and stemmer (``bm25-title+text-porter2``), so an index over other fields
is another folder and one built before is found again by its name. PISA writes its score files into the index on
first use; :func:`prepare_bm25` stages them and renames them in, so a crash or a second process never leaves a
truncated file that PISA would trust later.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Tuple

import numpy as np

from pyterrier_tot._plumbing import artifact as art
from pyterrier_tot.console import quiet_native_output
from pyterrier_tot.index.corpus_stream import progress_to_stderr

__all__ = ["bm25_folder", "pisa_index", "prepare_bm25"]


def bm25_folder(fields: Tuple[str, ...], stemmer: str) -> str:
    """The sub-folder name of the PISA index over ``fields``."""
    return f"bm25-{'+'.join(fields)}-{stemmer}"


def c_float(x: float) -> str:
    """``x`` as PISA's C++ (fmt, single precision) writes it into file names: shortest form, no trailing ``.0``."""
    text = str(np.float32(x))
    return text[:-2] if text.endswith(".0") else text


def pisa_index(index, fields: Tuple[str, ...], stemmer: str):
    """The PISA index of ``index``'s books over ``fields`` (built on first use, re-opened afterwards)."""
    from pyterrier_pisa import PisaIndex

    settings = {"backend": "pisa", "fields": list(fields), "stemmer": stemmer}

    def build(target: Path) -> None:
        docs = (d for d in index.docs_iter(fields) if d["text"].strip())
        if not index.streamed:
            docs = iter(list(docs))
        first = next(docs, None)
        if first is None:
            raise ValueError(f"BookIndex: every book has empty {fields}; nothing to index")
        with progress_to_stderr() as out:
            docs = index._progress(itertools.chain([first], docs), f"PISA {'+'.join(fields)}", out)
            with quiet_native_output():
                PisaIndex(str(target), text_field="text", stemmer=stemmer, threads=1).index(docs)

    where = index._ensure_part(bm25_folder(fields, stemmer), settings, "index.pisa", build)
    return PisaIndex(str(where), threads=1)


def prepare_bm25(index, pisa, fields: Tuple[str, ...], stemmer: str, k1: float, b: float) -> None:
    """Make PISA's score files of ``pisa`` (``index``'s sub-index over ``fields``) for (k1, b) safely: PISA writes
    them in place on first use, so a crash would leave a truncated file that it trusts later, and two processes
    would write one file together."""
    from pyterrier_pisa import PisaIndex

    where = Path(pisa.path).absolute()
    stem = f"bm25.k1-{c_float(k1)}.b-{c_float(b)}.q0.bmw.64"
    wanted = [where / stem, where / f"{stem}.{pisa.index_encoding.value}"]
    if all(f.is_file() for f in wanted):
        return
    owner = Path(index.path) / bm25_folder(fields, stemmer)
    with art.build_lock(owner, index.lock_timeout):
        if all(f.is_file() for f in wanted):
            return

        def make(stage: Path) -> None:
            with quiet_native_output():
                PisaIndex(str(stage), threads=1).bm25(k1=k1, b=b, num_results=1)

        art.add_files(where, make, owner)
