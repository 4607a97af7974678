"""Encoding documents with several processes or GPUs: sentence-transformers' multi-process pool behind a
pyterrier-dr style document encoder.

``BookIndex.flex_index`` / ``dense`` / ``dense_scorer`` take ``workers=`` or ``devices=`` and use
:class:`PooledDocEncoder` in place of the bi-encoder's own ``doc_encoder()`` while building; the index written
is the same (same folder, same ``pt_meta.json``), so the retrievers built on it do not change.

    index.dense("minilm", workers=2)                       # two CPU processes
    index.flex_index("minilm", devices=["cuda:0", "cuda:1"])  # one process per GPU
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Optional, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

__all__ = ["PooledDocEncoder", "pool_devices"]


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


class PooledDocEncoder(pt.Transformer):
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
        vecs = self.model.encode(texts, batch_size=self.chunk_size, pool=self._pool, chunk_size=self.chunk_size,
                                 show_progress_bar=False, normalize_embeddings=False)
        return np.asarray(vecs, dtype=np.float32)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.document_frame(extra_columns=[self.text_field])
            v.columns(includes=[self.text_field])
        if len(inp) == 0:
            return inp.assign(doc_vec=pd.Series([], dtype=object))
        return inp.assign(doc_vec=list(self.encode(inp[self.text_field].tolist())))

    def transform_iter(self, inp) -> Iterator[dict]:
        docs = list(inp)
        if not docs:
            return iter([])
        vecs = self.encode([d[self.text_field] for d in docs])
        return iter([{**d, "doc_vec": vec} for d, vec in zip(docs, vecs)])

    def __repr__(self):
        return f"PooledDocEncoder({self.bi_encoder!r}, devices={self.devices!r})"
