"""The density prior: a query-independent score that pushes down books sitting in a crowded part of a dense
model's space.

    from pyterrier_tot.decomposition.density_prior import DensityPrior, book_density
    candidates >> DensityPrior(index, model=folder)          # score = -(mean cosine to the k nearest books)
    book_density(index, model=folder, k=5)                   # the densities, a Series indexed by docno

Why: in a bi-encoder's space some books lie close to very many others (hubs). Such a book is near almost every
query about its neighbourhood and turns up high for requests it does not answer, while an isolated book has to
match a request closely to get there. Subtracting a share of each book's mean similarity to its ``k`` nearest
books (the local scaling of CSLS, with books as the reference set) levels that out. It reads the books' stored
vectors alone: no query, no label, nothing trained; the recipe's fuser weighs it like any other expert, fitted on
the tuning slice (:func:`pyterrier_tot.recipe.recipe_priors` says for which bases). It is computed from books, not
from past queries, on purpose: the fine-tuned bases were trained on the training queries, so a density among those
queries would mostly say "this book answered a training request" (on Reddit-TOMT about one answer in five repeats
one, so that is no sign of a wrong book).

Cost: one pass of the book vectors against themselves (``n x n`` cosines, in blocks), once per index, model,
fields and ``k``, cached in the index folder beside the vectors. A corpus of more than ``reference`` books is
compared with a fixed random sample of ``reference`` of them (seeded), so a Wikipedia-sized corpus costs ``n x
reference`` cosines rather than ``n x n``; below it the densities are exact.

Scorer mode only: the input is a result frame (``qid``, ``docno``); a query frame raises an error saying so. A
docno the index does not hold raises ``UnknownDocnoError`` (or scores NaN with ``unknown_docnos="nan"``).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import SettingsEquality, code_repr, keyword_settings
from pyterrier_tot._plumbing.util import ColumnsValueError, empty_scored, explain_columns
from pyterrier_tot.checks import (
    CheckedIndex,
    add_ranks,
    check_int,
    check_result_frame,
    check_unknown_docnos_arg,
    index_of,
    unknown_docnos,
)
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.index.corpus import fields_tuple

#: Neighbours a book's density is the mean similarity to (chosen on the tuning slice: ``benchmarks/recipe/density.py``).
DENSITY_K = 5
#: Above this many books, densities are taken against a fixed random sample of this many.
REFERENCE_BOOKS = 50_000
#: Rows of book vectors compared at once (memory: block x reference x 4 bytes).
BLOCK = 1024


def densities(vectors: np.ndarray, k: int = DENSITY_K, reference: Optional[np.ndarray] = None,
              block: int = BLOCK) -> np.ndarray:
    """Each row's mean inner product with its ``k`` nearest rows of ``reference`` (default ``vectors`` itself),
    never counting the row itself (a reference row equal to it at the same position when ``reference`` is
    ``vectors``, or a reference index array naming it)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    ref_rows = np.arange(len(vectors)) if reference is None else np.asarray(reference)
    ref = vectors[ref_rows]
    k = min(int(k), len(ref_rows) - 1)
    if k < 1:
        raise ValueError(f"densities: need at least 2 books to compare, got {len(ref_rows)}")
    position = pd.Series(np.arange(len(ref_rows)), index=ref_rows)
    out = np.empty(len(vectors), dtype=np.float32)
    starts = range(0, len(vectors), block)
    for start in progress_bar(starts, desc="book densities", unit="block", min_items=50):  # a bar on big corpora
        rows = np.arange(start, min(start + block, len(vectors)))
        sims = vectors[rows] @ ref.T
        own = position.reindex(rows).to_numpy()
        has = ~np.isnan(own)
        sims[np.flatnonzero(has), own[has].astype(int)] = -np.inf  # a book is not its own neighbour
        out[rows] = np.partition(sims, -k, axis=1)[:, -k:].mean(axis=1)
    return out


def book_density(index, model=None, k: int = DENSITY_K, fields: Sequence[str] = ("title", "text"),
                 precision: Optional[str] = None, reference: int = REFERENCE_BOOKS, seed: int = 0) -> pd.Series:
    """The density of every book of ``index`` in ``model``'s space (its mean cosine to its ``k`` nearest other
    books), a Series indexed by docno; computed from the stored vectors of ``index.flex_index(model, fields,
    precision=precision)`` and cached beside them. See the module docs."""
    from pyterrier_tot._plumbing import artifact as art

    index = index_of(index, "book_density")
    k, reference = check_int(k, "k", "book_density"), check_int(reference, "reference", "book_density")
    flex = index.flex_index(model, fields, precision=precision)
    vec_folder = Path(flex.index_path).parent
    sampled = len(index) > reference  # below it the densities are exact: reference and seed change nothing
    settings = {"backend": "density", "vectors": vec_folder.name, "k": k,
                "reference": reference if sampled else None, "seed": seed if sampled else None,
                "vector_settings": art.own_meta(vec_folder, "book_index_part")}

    def build(target: Path) -> None:
        lookup, vecs, _ = flex.payload()
        vecs = np.asarray(vecs, dtype=np.float32)
        ref = None
        if sampled and len(vecs) > reference:
            ref = np.sort(np.random.default_rng(seed).choice(len(vecs), size=reference, replace=False))
        dens = densities(vecs, k, ref)
        docnos = np.array([lookup.fwd[i] for i in range(len(vecs))], dtype=object)
        target.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"docno": docnos, "density": dens}).to_csv(target / "density.csv.gz", index=False)

    # a sample has a folder of its own, so exact and sampled densities (or two samples) never replace each other
    sub = f"{vec_folder.name}-density-k{k}" + (f"-ref{reference}-seed{seed}" if sampled else "")
    where = index._ensure_part(sub, settings, "density", build)
    frame = pd.read_csv(Path(where) / "density.csv.gz", dtype={"docno": str})
    return pd.Series(frame["density"].to_numpy(dtype=float), index=frame["docno"].to_numpy(), name="density")


class DensityPrior(SettingsEquality, pt.Transformer):
    """Scores each candidate book by minus its density in ``model``'s space (see the module docs).

    :param index: a :class:`~pyterrier_tot.index.BookIndex`
    :param model: the dense model (a folder, a hub name or a trained model; default all-MiniLM-L6-v2)
    :param k: how many nearest books the density averages over
    :param fields: the book fields the vectors encode (the base retriever's, title + text)
    :param precision: the vectors' encoding precision, as in ``BookIndex.dense``
    :param unknown_docnos: a docno not in the index: ``"raise"`` (default) or ``"nan"`` (NaN, with a warning)
    :param reference: above this many books, densities are measured against a random sample of this many
    :param seed: the seed of that sample
    """

    @keyword_settings
    def __init__(self, index, model=None, *, k: int = DENSITY_K, fields: Sequence[str] = ("title", "text"),
                 precision: Optional[str] = None, unknown_docnos: str = "raise", reference: int = REFERENCE_BOOKS,
                 seed: int = 0):
        self.index = index_of(index, "DensityPrior")
        self.model = model
        self.k = check_int(k, "k", "DensityPrior")
        self.fields = fields_tuple(fields)
        self.precision = precision
        self.unknown_docnos = check_unknown_docnos_arg(unknown_docnos)
        self.reference = check_int(reference, "reference", "DensityPrior")
        self.seed = check_int(seed, "seed", "DensityPrior", minimum=0)
        self._density: Optional[pd.Series] = None

    def density(self) -> pd.Series:
        """The books' densities (computed or read from the index folder on first use)."""
        if self._density is None:
            self._density = book_density(CheckedIndex(self.index), self.model, self.k, self.fields, self.precision,
                                         self.reference, self.seed)
        return self._density

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        hint = "scores candidate books (a result frame with qid and docno); put a retriever before it"
        with explain_columns(repr(self), hint, ColumnsValueError):
            pta.validate.result_frame(inp)
        if len(inp) == 0:
            return empty_scored(inp)
        check_result_frame(inp, repr(self))
        unknown = unknown_docnos(inp, self.index.docnos, repr(self), self.unknown_docnos)
        out = inp.drop(columns=["score", "rank"], errors="ignore").copy()
        out["score"] = -self.density().reindex(out["docno"].astype(str)).to_numpy(dtype=float)
        out.loc[unknown, "score"] = np.nan
        return add_ranks(out)

    def index_parts(self) -> List[tuple]:
        """What it reads from its index (the books' vectors), in the form of
        :meth:`~pyterrier_tot.decomposition.field_expert.FieldExpert.index_parts`."""
        model = None if self.model is None else str(self.model)
        return [("dense", model, self.fields, None, self.precision or "fp32")]

    def settings(self) -> dict:
        """What changes its scores (the cache key of fits over them, :mod:`pyterrier_tot._plumbing.cache_key`); the
        index and the model's weights are keyed beside it. The reference sample counts only where one is drawn."""
        sampled = len(self.index) > self.reference
        return {"model": None if self.model is None else str(self.model), "k": self.k, "fields": list(self.fields),
                "precision": self.precision or "fp32",
                "sample": {"reference": self.reference, "seed": self.seed} if sampled else None}

    def __repr__(self):
        return code_repr(self, [self.index] + ([self.model] if self.model is not None else []), {
            "k": self.k, "fields": self.fields, "precision": self.precision, "unknown_docnos": self.unknown_docnos,
            "reference": self.reference, "seed": self.seed})

    def _legacy_repr(self):
        """The repr that keyed fitted weights before settings did (``recipe.weights._legacy_repr``)."""
        name = Path(str(self.model)).name if self.model is not None else "all-MiniLM-L6-v2"
        prec = "" if self.precision in (None, "fp32") else f", precision={self.precision!r}"
        # named only where a sample is drawn (a corpus above ``reference``) and it is not the default one: the repr
        # is part of the recipe's weights key, and weights fitted with the default sample stay valid
        other = (self.reference, self.seed) != (REFERENCE_BOOKS, 0) and len(self.index) > self.reference
        ref = f", reference={self.reference}, seed={self.seed}" if other else ""
        return f"DensityPrior({name}, k={self.k}, fields={'+'.join(self.fields)}{prec}{ref})"

