"""Encoding a dense index on a Ray cluster (``workers=RayWorkers(n)`` of ``BookIndex.dense`` / ``flex_index`` /
``dense_scorer``), with Ray Data: the corpus is read as a stream of blocks of
:data:`~pyterrier_tot.index.encoding.DOC_CHUNK` books, each block read from the index folder and encoded by one of
``workers`` actors that each hold one copy of the model (``map_batches`` with an actor class), and the vectors come
back to the calling process in corpus order, where pyterrier-dr's FlexIndex indexer writes them. The index
written is the single-process one (same folder, same
``pt_meta.json``, vectors equal up to float rounding): ``workers`` is not recorded.

    ray.init(address="auto")                                        # or nothing: a local cluster is started
    index.dense("minilm", workers=ptt.RayWorkers(8))                # 8 actors, one CPU each
    index.flex_index("mpnet", workers=ptt.RayWorkers(4, gpus=1))    # 4 actors, one GPU each

Every node reads the corpus from the index folder (``index.path``: on a local cluster the local disk, on several
machines a path every node mounts) and gets the model's weights from Ray's object store (the calling process
ships them once), so the nodes need the package and Ray, not the model. Ray Data restarts an actor whose process
dies (a crash, a lost node) and gives its block to a live one; an error raised while encoding fails the build at
once. A build that fails leaves no index behind (the part is written into a temporary folder and renamed when
complete, as every build).
"""
from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from pyterrier_tot.checks import check_int, check_number
from pyterrier_tot.index.encoding import DOC_CHUNK, SortedDocEncoder

__all__ = ["RayDocEncoder", "RayWorkers", "ray_encode", "require_ray"]

_INSTALL = "pip install 'pyterrier-tot[ray]'"


def require_ray():
    """The ``ray`` module with Ray Data, or ImportError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - the streaming part lives in the [data] extra
    except ImportError as e:
        raise ImportError(f"encoding on Ray needs Ray with Ray Data: {_INSTALL} ({e})") from e
    return ray


class RayWorkers:
    """``workers=`` of ``BookIndex.dense`` / ``flex_index`` / ``dense_scorer`` that encodes on a Ray cluster:
    ``n`` actors, each with one copy of the model, ``cpus`` CPUs (and as many torch threads) and ``gpus`` GPUs
    (``gpus=1``: one GPU each, which Ray picks). ``block``: books per Ray Data block (one ``encode`` call, as
    the single-process build's chunks). The cluster is the one this process is connected to (``ray.init()`` is
    called when it is not: ``$RAY_ADDRESS``, or a local cluster). Checking the arguments needs no Ray."""

    def __init__(self, n: int = 1, cpus: float = 1, gpus: float = 0, block: int = DOC_CHUNK):
        check_int(n, "n", "RayWorkers")
        check_int(block, "block", "RayWorkers")
        self.n, self.block = int(n), int(block)
        self.cpus = check_number(cpus, "cpus", "RayWorkers", low=0.0, low_open=True)
        self.gpus = check_number(gpus, "gpus", "RayWorkers", low=0.0)

    def threads(self) -> int:
        """torch threads of one actor: its CPUs (one on a GPU)."""
        return 1 if self.gpus else max(1, int(self.cpus))

    def __repr__(self):
        extra = "".join(f", {k}={v:g}" for k, v, default in (("cpus", self.cpus, 1), ("gpus", self.gpus, 0),
                                                               ("block", self.block, DOC_CHUNK)) if v != default)
        return f"RayWorkers({self.n}{extra})"


@functools.lru_cache(maxsize=4)
def _opened(kind: type, path: str):
    """The saved index at ``path`` (of class ``kind``, a BookIndex), opened once per worker process (a frame corpus
    is read whole, once)."""
    return kind(path)


@functools.lru_cache(maxsize=4)
def _field_text(kind: type, path: str, fields: Tuple[str, ...], max_chars: Optional[int]):
    return _opened(kind, path).field_text(fields, max_chars)


def read_block(kind: type, path: str, fields: Tuple[str, ...], max_chars: Optional[int], start: int,
               stop: int) -> Dict[str, list]:
    """Positions, docnos and texts (as ``docs_iter`` joins them) of books ``start:stop`` of the index at ``path``."""
    from pyterrier_tot.index.corpus import joined_text

    index = _opened(kind, path)
    if index.streamed:
        rows = index._store.rows(range(start, stop))
        docnos, texts = [str(r["docno"]) for r in rows], joined_text(rows, fields, max_chars)
    else:
        docnos = [str(d) for d in index.docnos[start:stop]]
        texts = _field_text(kind, path, fields, max_chars).iloc[start:stop].tolist()
    return {"pos": list(range(start, stop)), "docno": docnos, "text": texts}


class RayDocEncoder:
    """The Ray Data actor that encodes the corpus: one copy of the bi-encoder (taken from the object store), and
    for each ``{"start", "stop"}`` span it is given, the books of that span read from the index folder and
    encoded as :class:`~pyterrier_tot.index.encoding.SortedDocEncoder` encodes them (so the vectors are the
    single-process ones)."""

    def __init__(self, shipped: list, kind: type, path: str, fields: Tuple[str, ...], max_chars: Optional[int],
                 device: str = "cpu", threads: int = 1):
        import ray
        import torch

        torch.set_num_threads(max(1, int(threads)))
        bi_encoder = ray.get(shipped[0])
        if device == "cuda":
            bi_encoder.model.to("cuda")  # Ray sets CUDA_VISIBLE_DEVICES to the GPU it gave this actor
        self.encoder = SortedDocEncoder(bi_encoder)
        self.kind, self.path, self.fields, self.max_chars = kind, path, tuple(fields), max_chars

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        pos, docnos, vecs = [], [], []
        for start, stop in zip(batch["start"], batch["stop"]):
            block = read_block(self.kind, self.path, self.fields, self.max_chars, int(start), int(stop))
            pos.extend(block["pos"])
            docnos.extend(block["docno"])
            vecs.append(self.encoder.encode(block["text"]))
        return {"pos": np.asarray(pos, dtype=np.int64), "docno": np.asarray(docnos, dtype=object),
                "doc_vec": np.concatenate(vecs) if vecs else np.empty((0, 0), dtype=np.float32)}

    def __repr__(self):
        return f"RayDocEncoder({self.encoder!r}, path={self.path!r})"


@contextlib.contextmanager
def _ordered(ray):
    """Ray Data's current context with the blocks kept in input order and Ray's own progress output off (the
    build has its bar); restored afterwards."""
    ctx = ray.data.DataContext.get_current()
    quiet = {"enable_progress_bars": False, "print_on_execution_start": False}
    kept = {k: getattr(ctx, k) for k in quiet if hasattr(ctx, k)}
    order = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    for k in kept:
        setattr(ctx, k, quiet[k])
    try:
        yield ctx
    finally:
        ctx.execution_options.preserve_order = order
        for k, v in kept.items():
            setattr(ctx, k, v)


def ray_encode(index, bi_encoder, fields: Tuple[str, ...], max_chars: Optional[int],
               workers: RayWorkers) -> Iterator[dict]:
    """``{"docno", "doc_vec"}`` of every book of ``index`` (a saved :class:`~pyterrier_tot.index.BookIndex`
    whose folder every node can read), in corpus order, encoded by ``workers`` on the Ray cluster."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init()
    n, path = len(index), str(Path(index.path).absolute())
    spans = [{"start": s, "stop": min(s + workers.block, n)} for s in range(0, n, workers.block)]
    shipped = [ray.put(bi_encoder)]  # in a list: Ray would resolve a bare reference before the constructor
    with _ordered(ray):
        ds = ray.data.from_items(spans, override_num_blocks=len(spans))
        ds = ds.map_batches(RayDocEncoder, fn_constructor_kwargs={
            "shipped": shipped, "kind": type(index), "path": path, "fields": tuple(fields), "max_chars": max_chars,
            "device": "cuda" if workers.gpus else "cpu", "threads": workers.threads()}, batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=workers.n), num_cpus=workers.cpus, num_gpus=workers.gpus)
        expected = 0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=2):
            pos = np.asarray(batch["pos"])
            if len(pos) and not np.array_equal(pos, np.arange(expected, expected + len(pos))):
                raise RuntimeError(f"encoding on Ray: blocks came back out of order (books {pos[0]}.. after "
                                   f"{expected}); the index was not written")
            expected += len(pos)
            for docno, vec in zip(batch["docno"], batch["doc_vec"]):
                yield {"docno": str(docno), "doc_vec": np.asarray(vec, dtype=np.float32)}
    if expected != n:
        raise RuntimeError(f"encoding on Ray: {expected} of the {n} books came back; the index was not written")
