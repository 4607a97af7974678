"""The dense sub-index of a :class:`~pyterrier_tot.index.BookIndex`: a pyterrier-dr FlexIndex of one model's
embeddings of some book fields.

Its settings are the model (a name, or a local folder with the fingerprint of its weights and configuration, so a
model retrained or reconfigured is encoded again), the fields, the characters kept and the precision; the
sub-folder name carries them (``dense-<model>-<hash>-title+text-all``, with ``-bf16`` for a bfloat16 index). The
corpus is encoded sorted by length, in one process or a pool of them (:mod:`pyterrier_tot.encoding`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional, Sequence, Tuple

import pyterrier as pt

from pyterrier_tot._artifact import own_meta
from pyterrier_tot._fingerprint import config_setting, fingerprint_setting
from pyterrier_tot.encoding import PooledDocEncoder, SortedDocEncoder, encoder_model, pool_devices
from pyterrier_tot.index_parts import PART_TYPE, slug
from pyterrier_tot.ray_encoding import RayWorkers, ray_encode

__all__ = ["flex_index", "model_key"]


def model_key(model, encoder=None) -> Optional[str]:
    """A model argument as the index records it (an artifact or a Path: its folder; an encoder alone: its model;
    an alias, or the folder a package ships a model in, as the model's hub name: one model, one index)."""
    from pyterrier_tot.models import model_identity

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
    :class:`~pyterrier_tot.ray_encoding.RayWorkers` on a Ray cluster) and re-opened afterwards."""
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
        docs = index._progress(index.docs_iter(fields, max_chars), f"dense {'+'.join(fields)}")
        if pool is None:
            (SortedDocEncoder(enc) >> flex.indexer(mode="overwrite")).index(docs)
            return
        with PooledDocEncoder(enc, pool) as pooled:
            (pooled >> flex.indexer(mode="overwrite")).index(docs)

    sub = dense_folder(model, fields, max_chars, precision)
    here, built = index._part(sub, settings, "index.flex", warn=False)
    where = here if built else (moved_part(index, model, fields, max_chars, precision, settings)
                                or index._ensure_part(sub, settings, "index.flex", build))
    # verbose=False: a bar per retrieval call (pyterrier-dr's "NumpyRetriever scoring") is noise in a pipeline
    return pyterrier_dr.FlexIndex(str(where), verbose=False)
