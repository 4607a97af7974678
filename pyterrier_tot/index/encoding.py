"""Encoding documents for a dense index: at the speed of a plain ``SentenceTransformer.encode`` loop in one
process (:class:`SortedDocEncoder`), or with several processes or GPUs (:class:`PooledDocEncoder`,
sentence-transformers' multi-process pool).

Why a document encoder of our own: a PyTerrier indexing pipeline hands the encoder 100 documents at a time, and
sentence-transformers sorts texts by length only within one ``encode`` call, so batches of 32 drawn from 100
mixed-length blurbs carry much more padding than batches drawn from the whole corpus sorted by length (that
padding was most of the 1.28x that library indexing cost over a plain loop). :class:`SortedDocEncoder` takes
thousands of documents per call instead, which sorts them (nearly) globally.

``BookIndex.flex_index`` / ``dense`` / ``dense_scorer`` take ``workers=`` or ``devices=`` and use
:class:`PooledDocEncoder` in place of the bi-encoder's own ``doc_encoder()`` while building; the index written
is the same (same folder, same ``pt_meta.json``), so the retrievers built on it do not change.

    index.dense("minilm", workers=2)                       # two CPU processes
    index.flex_index("minilm", devices=["cuda:0", "cuda:1"])  # one process per GPU
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

__all__ = ["PooledDocEncoder", "SortedDocEncoder", "encoder_for", "pool_devices", "DOC_CHUNK", "ENCODE_BATCH"]

#: Documents per ``encode`` call while indexing: enough for length sorting to leave almost no padding, small
#: enough that a streamed corpus of millions of pages never holds more than a few MB of text and vectors.
DOC_CHUNK = 4096
#: Texts per forward pass, chosen by measurement (benchmarks/speed_scale/results/encoding_speed.md): with texts
#: sorted by length, batches of 8-16 were the fastest on CPU, fp32 and bf16 alike (the activations of a small
#: batch stay in cache; 64 and 128 were 1.5-3x slower), and 16 keeps the per-call overhead of 8 away.
ENCODE_BATCH = 16
#: Texts per ``encode`` call when a progress bar follows the encoding (sorted by length first, so slices pad as
#: little as one call over the chunk; a slice of MiniLM takes seconds on a CPU core).
PROGRESS_SLICE = 256


def pool_devices(workers: int = 1, devices: Optional[Sequence[str]] = None,
                 base_device: str = "cpu") -> Optional[List[str]]:
    """The devices of the encoding pool, or None for the single-process path.

    ``devices`` (e.g. ``["cpu", "cpu"]`` or ``["cuda:0", "cuda:1"]``) wins; else ``workers`` processes on the
    encoder's device type (``workers`` GPUs ``cuda:0..`` when the encoder is on CUDA, CPU processes otherwise).
    """
    if devices is not None:
        devices = [str(d) for d in devices]
        if not devices:
            raise ValueError("devices= must name at least one device, e.g. ['cpu', 'cpu'] or ['cuda:0', 'cuda:1']")
        return devices
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be a positive integer, not {workers!r}")
    if workers == 1:
        return None
    if str(base_device).startswith("cuda"):
        return [f"cuda:{i}" for i in range(workers)]
    return ["cpu"] * workers


def encoder_model(model: Optional[str], encoder=None) -> Optional[str]:
    """The model a dense index of ``encoder``'s vectors is filed under: ``model``, or with ``encoder`` alone the model
    it was loaded from (``load_biencoder`` records it; ``None`` for the default model). An encoder whose model is
    unknown, or is not ``model``, raises ValueError: its vectors would be filed under another model's name, and
    a later call with that model would read them back."""
    named = getattr(encoder, "model_name", None) if encoder is not None else None
    if encoder is None or (named is None and model is not None):
        return model
    from pyterrier_tot.models.loading import canonical_model

    if named is None:
        raise ValueError(f"encoder={encoder!r} does not say which model it runs: pass model= (its name or folder), "
                         "which names the index folder of its vectors")
    if model is None:
        return None if canonical_model(named) == canonical_model(None) else str(named)
    if canonical_model(model) != canonical_model(named):  # unless a hub name and the folder it resolves to
        where = _resolved(model)
        if where is None or where != _resolved(named):
            raise ValueError(f"model={model!r} but the encoder passed runs {named!r}: its vectors would be filed "
                             f"under {model!r}; pass the matching model, or leave model out")
    return model


def _resolved(name) -> Optional[str]:
    """Where ``name`` loads from (a hub name and the local folder it resolves to are one model), or None."""
    from pyterrier_tot.models.loading import resolve_model

    try:
        return str(Path(resolve_model(name)).expanduser().resolve())
    except Exception:  # noqa: BLE001 - not loadable here: compared by name only
        return None


def encoder_for(model: Optional[str], encoder=None, precision: Optional[str] = None):
    """(the bi-encoder, its precision) for indexing or searching with ``model``: ``encoder`` when given (its
    weights tell its precision, which must agree with ``precision``), else the cached bi-encoder of ``model``
    in ``precision`` (default fp32)."""
    from pyterrier_tot.models.loading import check_precision, load_biencoder, model_precision

    if encoder is None:
        precision = check_precision(precision or "fp32")
        return load_biencoder(model, precision=precision), precision
    found = model_precision(encoder)
    if precision is not None and check_precision(precision) != found:
        raise ValueError(f"precision={precision!r} but the encoder passed runs in {found}; pass a matching "
                         f"encoder (load_biencoder(..., precision={precision!r})) or leave precision out")
    return encoder, found


def _vectors(vecs) -> np.ndarray:
    # a bf16 model hands back bfloat16 tensors or float arrays: the index stores float32 either way
    if hasattr(vecs, "float"):
        vecs = vecs.float().cpu().numpy()
    return np.asarray(vecs, dtype=np.float32)


class _DocVectorStage(pt.Transformer):
    """``transform`` / ``transform_iter`` of a document encoder, over its ``encode(texts)``."""

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.document_frame(extra_columns=[self.text_field])
            v.columns(includes=[self.text_field])
        if len(inp) == 0:
            return inp.assign(doc_vec=pd.Series([], dtype=object))
        return inp.assign(doc_vec=list(self.encode(inp[self.text_field].tolist())))

    def transform_iter(self, inp) -> Iterator[dict]:
        # records in, records out: no DataFrame round trip for every chunk of an indexing run
        docs = list(inp)
        if not docs:
            return iter([])
        vecs = self.encode([d[self.text_field] for d in docs])
        return iter([{**d, "doc_vec": vec} for d, vec in zip(docs, vecs)])


class SortedDocEncoder(_DocVectorStage):
    """Adds ``doc_vec`` to a document frame like ``bi_encoder.doc_encoder()``, but encodes ``chunk_size``
    documents per model call, so that sentence-transformers' length sorting spans the whole chunk.

    ``bi_encoder``: a pyterrier-dr ``SBertBiEncoder`` (e.g. :func:`~pyterrier_tot.models.load_biencoder`, in
    fp32 or bf16). ``encode_batch_size``: texts per forward pass (default :data:`ENCODE_BATCH`). In an
    indexing pipeline (``encoder >> flex.indexer()``) PyTerrier reads ``batch_size`` (here ``chunk_size``) to
    decide how many documents to hand over at once.
    """

    def __init__(self, bi_encoder, chunk_size: int = DOC_CHUNK, encode_batch_size: Optional[int] = None,
                 text_field: Optional[str] = None, progress=None):
        if not hasattr(getattr(bi_encoder, "model", None), "encode"):
            raise TypeError(f"SortedDocEncoder needs a sentence-transformers bi-encoder (pyterrier-dr "
                            f"SBertBiEncoder), not {bi_encoder!r}; use bi_encoder.doc_encoder() instead")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, not {chunk_size!r}")
        self.bi_encoder = bi_encoder
        self.batch_size = int(chunk_size)
        self.encode_batch_size = int(encode_batch_size or ENCODE_BATCH)
        self.text_field = text_field or getattr(bi_encoder, "text_field", "text")
        self.progress = progress  # called with the number of texts encoded, slice by slice (a bar's update)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (float32, one row per text, in the order given). With ``progress``, the
        texts are sorted by length once and encoded :data:`PROGRESS_SLICE` at a time, ``progress(n)`` told after
        each slice: a bar over a chunk of thousands of books moves while they are encoded."""
        texts = list(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        if self.progress is None:
            return self._encode(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts = []
        for start in range(0, len(order), PROGRESS_SLICE):
            chosen = order[start:start + PROGRESS_SLICE]
            parts.append(self._encode([texts[i] for i in chosen]))
            self.progress(len(chosen))
        vecs = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        vecs[order] = np.concatenate(parts)
        return vecs

    def _encode(self, texts: List[str]) -> np.ndarray:
        # encode_document: with the model's document prompt, if it has one (nomic's "search_document: ")
        vecs = self.bi_encoder.model.encode_document(texts, batch_size=self.encode_batch_size, show_progress_bar=False,
                                                     normalize_embeddings=False, convert_to_numpy=True)
        return _vectors(vecs)


    def __repr__(self):
        return (f"SortedDocEncoder({self.bi_encoder!r}, chunk_size={self.batch_size}, "
                f"encode_batch_size={self.encode_batch_size})")


class PooledDocEncoder(_DocVectorStage):
    """Adds ``doc_vec`` to a document frame like ``bi_encoder.doc_encoder()``, encoding with one process per
    entry of ``devices`` (a sentence-transformers multi-process pool).

    ``bi_encoder``: a pyterrier-dr ``SBertBiEncoder`` (its ``.model`` is the ``SentenceTransformer``). The pool
    starts on first use (or on entering ``with encoder:``) and stops on leaving the ``with`` block or on
    :meth:`close`; starting one costs a model load per process, so one pool serves a whole indexing run.
    Vectors equal the single-process ones up to float rounding (the same model, the same batches of
    ``bi_encoder.batch_size`` texts). The processes are spawned, so a script using it needs the
    ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, bi_encoder, devices: Sequence[str], batch_size: Optional[int] = None,
                 text_field: Optional[str] = None):
        if not devices:
            raise ValueError("PooledDocEncoder: devices= must name at least one device")
        if not hasattr(getattr(bi_encoder, "model", None), "start_multi_process_pool"):
            raise TypeError(f"PooledDocEncoder needs a sentence-transformers bi-encoder (pyterrier-dr "
                            f"SBertBiEncoder), not {bi_encoder!r}; encode with workers=1 instead")
        self.bi_encoder = bi_encoder
        self.devices = [str(d) for d in devices]
        self.chunk_size = int(getattr(bi_encoder, "batch_size", 32) or 32)
        # pt's indexing pipelines feed batches of the largest batch_size in them: large enough to keep every
        # process busy with several chunks each
        self.batch_size = batch_size or self.chunk_size * 8 * len(self.devices)
        self.text_field = text_field or getattr(bi_encoder, "text_field", "text")
        self._pool = None
        self._home = None

    @property
    def model(self):
        return self.bi_encoder.model

    def start(self) -> None:
        """Start the pool (a no-op when it runs)."""
        if self._pool is None:
            # the pool moves the model to the CPU to share it with the processes; put it back afterwards
            self._home = self.model.device
            self._pool = self.model.start_multi_process_pool(target_devices=self.devices)

    def close(self) -> None:
        """Stop the pool's processes (a no-op when none runs)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                self.model.stop_multi_process_pool(pool)
            finally:
                self.model.to(self._home)

    def __enter__(self) -> "PooledDocEncoder":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (float32, one row per text)."""
        texts = list(texts)
        if not texts:
            return np.empty((0, 0), dtype=np.float32)
        self.start()
        vecs = self.model.encode_document(texts, batch_size=self.chunk_size, pool=self._pool,
                                          chunk_size=self.chunk_size, show_progress_bar=False,
                                          normalize_embeddings=False)
        return _vectors(vecs)


    def __repr__(self):
        return f"PooledDocEncoder({self.bi_encoder!r}, devices={self.devices!r})"
