"""The dense sub-index of a :class:`~pyterrier_tot.index.BookIndex`: a pyterrier-dr FlexIndex of one model's
embeddings of some book fields.

Its settings are the model (a name, or a local folder with the fingerprint of its weights and configuration, so a
model retrained or reconfigured is encoded again), the fields, the characters kept and the precision; the
sub-folder name carries them (``dense-<model>-<hash>-title+text-all``, with ``-bf16`` for a bfloat16 index). The
corpus is encoded sorted by length, in one process or a pool of them (:mod:`pyterrier_tot.index.encoding`).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional, Sequence, Tuple

import pyterrier as pt

from pyterrier_tot._plumbing.artifact import own_meta
from pyterrier_tot.index.encoding import PooledDocEncoder, SortedDocEncoder, encoder_model, pool_devices
from pyterrier_tot.index.parts import PART_TYPE, slug
from pyterrier_tot.index.ray_encoding import RayWorkers, ray_encode
from pyterrier_tot.models.fingerprint import config_setting, fingerprint_setting

__all__ = ["flex_index", "model_key"]


def model_key(model, encoder=None) -> Optional[str]:
    """A model argument as the index records it (an artifact or a Path: its folder; an encoder alone: its model;
    an alias, or the folder a package ships a model in, as the model's hub name: one model, one index)."""
    from pyterrier_tot.models.loading import model_identity

    return model_identity(encoder_model(str(model.path) if isinstance(model, pt.Artifact) else model and str(model),
                                        encoder))


def dense_folder(model: str, fields: Tuple[str, ...], max_chars: Optional[int], precision: str) -> str:
    """The sub-folder name of the dense index of ``model`` over ``fields``."""
    key = hashlib.sha1(model.encode()).hexdigest()[:8]
    sub = f"dense-{slug(Path(model).name)}-{key}-{'+'.join(fields)}-{max_chars or 'all'}"
    return sub if precision == "fp32" else f"{sub}-{precision}"  # fp32 keeps the folder name of version 0.2


def precision_label(precision: str) -> str:
    """How a retriever's repr shows a precision other than the default."""
    return "" if precision == "fp32" else f", precision={precision!r}"


def part_settings(model: str, fields: Tuple[str, ...], max_chars: Optional[int], precision: str) -> dict:
    """What the dense sub-index of ``model`` over ``fields`` records (a local model's weights and configuration by
    their digests: a model retrained or reconfigured is encoded again)."""
    return {"backend": "flex", "model": model, "fields": list(fields), "max_chars": max_chars,
            "precision": precision, **fingerprint_setting(model), **config_setting(model)}


def moved_part(index, model: str, fields: Tuple[str, ...], max_chars: Optional[int], precision: str,
               settings: dict) -> Optional[Path]:
    """A dense part built for the same weights and configuration (their digests) of a model that lived at
    another path: a trained recipe moved with its models, or loaded from a saved artifact elsewhere. The vectors
    are the same, so they are read where they are. None for a hub model (no digest) or when there is none."""
    if "model_fingerprint" not in settings or not Path(index.path).is_dir():
        return None
    name = dense_folder(model, fields, max_chars, precision)
    prefix = f"dense-{slug(Path(model).name)}-"
    want = {**settings, "fingerprint": index.fingerprint, "n_docs": len(index)}
    want.pop("model")
    for folder in sorted(Path(index.path).glob(f"{prefix}*")):
        # the same name but for the 8 characters of the path's hash
        if folder.name == name or len(folder.name) != len(name) or folder.name[len(prefix) + 8:] != \
                name[len(prefix) + 8:]:
            continue
        found = own_meta(folder, PART_TYPE)
        if found is not None and {k: v for k, v in found.items() if k != "model"} == want:
            return folder / "index.flex"
    return None


def flex_index(index, model: str, fields: Tuple[str, ...], max_chars: Optional[int], enc, precision: str,
               workers: int = 1, devices: Optional[Sequence[str]] = None):
    """The FlexIndex of ``enc`` (the encoder of ``model``) embeddings of ``index``'s books over ``fields``, built on
    first use (with ``workers`` processes or one per device of ``devices``, or the actors of a
    :class:`~pyterrier_tot.index.ray_encoding.RayWorkers` on a Ray cluster) and re-opened afterwards."""
    import pyterrier_dr

    settings = part_settings(model, fields, max_chars, precision)
    on_ray = isinstance(workers, RayWorkers)
    if on_ray and devices is not None:
        raise ValueError(f"workers={workers!r} places its actors itself: pass RayWorkers(n, gpus=1) for GPUs, "
                         f"not devices={devices!r}")
    pool = None if on_ray else pool_devices(workers, devices, str(getattr(enc, "device", "cpu")))

    def build(target: Path) -> None:
        flex = pyterrier_dr.FlexIndex(str(target), verbose=False)
        if on_ray:
            vectors = ray_encode(index, enc, fields, max_chars, workers)
            flex.indexer(mode="overwrite").index(index._progress(vectors, f"dense {'+'.join(fields)} on Ray"))
            return
        if pool is None:  # the bar follows the books encoded, not the chunks of thousands handed to the encoder
            with index._progress(None, f"dense {'+'.join(fields)}") as shown:
                (SortedDocEncoder(enc, progress=shown.update) >> flex.indexer(mode="overwrite")).index(
                    index.docs_iter(fields, max_chars))
            return
        docs = index._progress(index.docs_iter(fields, max_chars), f"dense {'+'.join(fields)}")
        with PooledDocEncoder(enc, pool) as pooled:
            (pooled >> flex.indexer(mode="overwrite")).index(docs)

    sub = dense_folder(model, fields, max_chars, precision)
    here, built = index._part(sub, settings, "index.flex", warn=False)
    where = here if built else (moved_part(index, model, fields, max_chars, precision, settings)
                                or index._ensure_part(sub, settings, "index.flex", build))
    # verbose=False: a bar per retrieval call (pyterrier-dr's "NumpyRetriever scoring") is noise in a pipeline
    return pyterrier_dr.FlexIndex(str(where), verbose=False)


# ---------------------------------------------------------------- request encoders over a frozen catalogue
#: The entry of a request encoder's training record naming the book index it was trained against
#: (:func:`~pyterrier_tot.recipe.frozen_catalogue.train_request_encoder`).
FROZEN_BOOKS = "frozen_books"


def catalogue_record(index, model: str, fields: Tuple[str, ...], max_chars: Optional[int], precision: str) -> dict:
    """What identifies the dense part of ``model`` over ``fields`` of ``index``: its settings (with the digests of a
    local model's weights and configuration), the corpus fingerprint and size, and one digest over all of them."""
    digest = _catalogue_digest(part_settings(model, fields, max_chars, precision), index.fingerprint, len(index))
    return {"model": model, "fields": list(fields), "max_chars": max_chars, "precision": precision,
            "corpus": index.fingerprint, "n_docs": len(index), "digest": digest}


def _catalogue_digest(settings: dict, corpus: Optional[str], n_docs: Optional[int]) -> str:
    whole = {**settings, "corpus": corpus, "n_docs": n_docs}
    return hashlib.sha1(json.dumps(whole, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _book_settings(books: dict) -> Tuple[str, Tuple[str, ...], Optional[int], str]:
    return books["model"], tuple(books["fields"]), books.get("max_chars"), books.get("precision", "fp32")


def check_transfer(model) -> dict:
    """The frozen catalogue a request encoder was trained against, after checking that its book model is here what
    it was then (its weights and configuration by their digests, its fields and precision: the recorded digest is
    recomputed over the recorded corpus). Raised: :class:`~pyterrier_tot.errors.FrozenCatalogueError` when the book
    model changed, ValueError for a model that is not a request encoder."""
    from pyterrier_tot.errors import FrozenCatalogueError

    books = frozen_books(model)
    if books is None:
        raise ValueError(f"{model} is not a request encoder trained against a frozen catalogue (its training record "
                         f"has no {FROZEN_BOOKS!r}): it encodes its own books, on any corpus")
    book_model, fields, max_chars, precision = _book_settings(books)
    if _catalogue_digest(part_settings(book_model, fields, max_chars, precision), books.get("corpus"),
                         books.get("n_docs")) != books["digest"]:
        raise FrozenCatalogueError(
            f"request encoder {model} was trained against the vectors of {book_model}, whose weights or "
            "configuration here are not the ones it was trained against: its requests cannot be searched against "
            "vectors of this book model on any corpus")
    return books


def frozen_books(model) -> Optional[dict]:
    """The book index a request encoder was trained against (its training record's :data:`FROZEN_BOOKS`), or
    None for any other model (a hub name, a symmetric bi-encoder)."""
    from pyterrier_tot.models.loading import TRAINING_FILE

    if not model:
        return None
    record = Path(str(model)).expanduser() / TRAINING_FILE
    if not record.is_file():
        return None
    try:
        return json.loads(record.read_text()).get(FROZEN_BOOKS)
    except (OSError, ValueError):
        return None


def book_side(index, model: Optional[str], fields: Tuple[str, ...], max_chars: Optional[int],
              precision: Optional[str]) -> Optional[Tuple[str, Tuple[str, ...], Optional[int], str]]:
    """For a request encoder trained against a frozen catalogue: ``(book model, fields, max_chars, precision)`` of
    the book vectors its requests are searched against, after checking that ``index`` holds that very catalogue;
    None for a model that encodes its own books. Another corpus, another book model (or its weights changed), other
    fields or another precision raise :class:`~pyterrier_tot.errors.FrozenCatalogueError`: the request encoder's
    vectors mean nothing against them."""
    from pyterrier_tot.errors import FrozenCatalogueError

    books = frozen_books(model)
    if books is None:
        return None
    want = _book_settings(books)
    # the default fields, max_chars=None and precision=None stand for "the catalogue's own"
    if tuple(fields) not in (want[1], ("title", "text")) or max_chars not in (None, want[2]) \
            or precision not in (None, want[3]):
        raise FrozenCatalogueError(
            f"request encoder {model} was trained against the {'+'.join(want[1])} vectors of {want[0]} "
            f"(max_chars={want[2]}, precision={want[3]}); it cannot search fields={'+'.join(fields)}, "
            f"max_chars={max_chars}, precision={precision}: leave fields, max_chars and precision out")
    found = catalogue_record(index, want[0], want[1], want[2], want[3])
    if found["digest"] != books["digest"]:
        other = found["corpus"] != books.get("corpus") or found["n_docs"] != books.get("n_docs")
        if other and books["digest"] in getattr(index, TRANSFERRED, ()):  # allowed: the book model was checked
            return want
        what = "another corpus" if other else "book vectors of another model (or of its weights since changed)"
        raise FrozenCatalogueError(
            f"request encoder {model} was trained against the book index {books['digest']} ({want[0]}, "
            f"{'+'.join(want[1])}, {books.get('n_docs')} books, corpus {books.get('corpus')}); {index!r} offers "
            f"{found['digest']}: {what} ({found['n_docs']} books, corpus {found['corpus']}). Search it with the "
            "index it was trained against, or train a request encoder against this one "
            "(recipe.frozen_catalogue.train_request_encoder)"
            + ("; or, to search this corpus's vectors of the same book model (encoded here, nothing trained on "
               "these books), call allow_transfer(model) on this index first" if other else ""))
    return want


#: The attribute of a book index holding the frozen-catalogue digests of the request encoders it lets search it
#: although they were trained against another corpus (:meth:`~pyterrier_tot.index.BookIndex.allow_transfer`).
TRANSFERRED = "_transferred_requests"
