"""An open_clip model with its image preprocessing and tokenizer, as the cover family uses it.

:class:`ClipModel` is loaded from a pretrained tag (online users: ``ClipModel.from_pretrained('ViT-B-32',
'openai')``), a local weights file, a saved checkpoint folder (:meth:`ClipModel.load`, a
:class:`ClipCheckpoint`) or a config dict (random init, used by the tests).

Clues longer than the model's text context (77 tokens for CLIP) are split into consecutive windows of
``context_length - 2`` BPE tokens, each window is encoded, and the L2-normalised window embeddings are averaged
and re-normalised (``long_clues='chunk'``, the default). ``long_clues='truncate'`` keeps only the first window,
like plain CLIP (and like the paper's CLIP-on-the-full-query baseline).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from pyterrier_tot._plumbing.artifact import RESERVED, ToTArtifact, building
from pyterrier_tot._plumbing.util import hub_reachable, is_offline
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.decomposition.clues import clue_column
from pyterrier_tot.errors import ModelUnavailableError

LONG_CLUE_MODES = ("chunk", "truncate")
#: The query column that holds the cover clue (what the ranker scores and the trainer pairs with a cover).
COVER_COLUMN = clue_column("cover")

#: A tiny open_clip config (random init only) for tests, benchmarks and smoke runs: ~3.5M parameters,
#: almost all of them the 49408-token embedding table that CLIP's BPE tokenizer needs.
TINY_CLIP_CONFIG: Dict[str, Any] = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def _import_open_clip():
    try:
        import open_clip  # noqa: F401
    except ImportError as e:  # pragma: no cover - open_clip is a dependency
        raise ImportError("the cover ranker needs open_clip_torch (and torchvision): "
                          "pip install open_clip_torch") from e
    return open_clip


class ClipModel:
    """An open_clip model with its inference preprocessing and tokenizer, on CPU by default.

    Use the constructors: :meth:`from_pretrained`, :meth:`from_config`, :meth:`load` (or :meth:`resolve`,
    which accepts any of them). ``source`` is a JSON-able description stored in indexes and checkpoints.
    """

    def __init__(self, model, preprocess, tokenizer, *, model_cfg: Dict[str, Any], preprocess_cfg: Dict[str, Any],
                 source: Dict[str, Any], device: Optional[str] = None):
        import torch

        self.device = torch.device(device or "cpu")
        self.model = model.to(self.device).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.model_cfg = model_cfg
        self.preprocess_cfg = preprocess_cfg
        self.source = source
        self._fingerprint: Optional[str] = None

    # -- constructors
    @classmethod
    def from_pretrained(cls, arch: str = "ViT-B-32", pretrained: Optional[str] = "openai",
                        device: Optional[str] = None) -> "ClipModel":
        """A released open_clip model: ``arch`` with a pretrained tag (downloaded once, then cached) or a
        local weights file. Fails fast with :class:`ModelUnavailableError` when the weights cannot be had."""
        open_clip = _import_open_clip()
        if pretrained and not os.path.isfile(str(pretrained)):
            _check_pretrained_available(arch, pretrained)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=pretrained, device="cpu")
        except Exception as e:
            raise ModelUnavailableError(
                f"could not load open_clip {arch!r} with pretrained={pretrained!r}: {e}. Offline, pass a local "
                f"weights file as `pretrained` or a saved checkpoint directory to ClipModel.load()") from e
        if arch.startswith("hf-hub:"):
            cfg = open_clip.factory._get_hf_config(arch[len("hf-hub:"):])["model_cfg"]
        elif arch.startswith("local-dir:"):
            cfg = json.loads((Path(arch[len("local-dir:"):]) / "open_clip_config.json").read_text())["model_cfg"]
        else:
            cfg = open_clip.get_model_config(arch)
        return cls(model, preprocess, open_clip.get_tokenizer(arch), model_cfg=cfg,
                   preprocess_cfg=dict(model.visual.preprocess_cfg),
                   source={"kind": "pretrained", "arch": arch, "pretrained": str(pretrained) if pretrained else None},
                   device=device)

    @classmethod
    def from_config(cls, model_cfg: Optional[Dict[str, Any]] = None, seed: int = 0, name: str = "custom",
                    device: Optional[str] = None) -> "ClipModel":
        """A randomly initialised CLIP built from an open_clip config dict (default :data:`TINY_CLIP_CONFIG`)."""
        import copy

        import torch
        open_clip = _import_open_clip()
        from dataclasses import asdict

        from open_clip.transform import PreprocessCfg, image_transform_v2

        model_cfg = copy.deepcopy(model_cfg or TINY_CLIP_CONFIG)
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            model = open_clip.model.CLIP(**copy.deepcopy(model_cfg))
        finally:
            torch.random.set_rng_state(state)
        pcfg = asdict(PreprocessCfg())
        pcfg["size"] = model.visual.image_size
        open_clip.model.set_model_preprocess_cfg(model, pcfg)
        preprocess = image_transform_v2(PreprocessCfg(**pcfg), is_train=False)
        tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=model_cfg["text_cfg"].get("context_length", 77))
        return cls(model, preprocess, tokenizer, model_cfg=model_cfg, preprocess_cfg=pcfg,
                   source={"kind": "config", "name": name, "seed": seed}, device=device)

    @classmethod
    def load(cls, path: Union[str, Path], device: Optional[str] = None) -> "ClipModel":
        """Load a checkpoint folder written by :meth:`save` (or any open_clip ``local-dir:`` folder); weights are
        read from safetensors, or with ``torch.load(weights_only=True)``, never unpickled."""
        open_clip = _import_open_clip()
        path = Path(path)
        cfg_file = path / "open_clip_config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"{path} is not a CLIP checkpoint directory (no open_clip_config.json)")
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}", device="cpu",
                                                                      weights_only=True)
        cfg = json.loads(cfg_file.read_text())
        meta = ClipCheckpoint(path).metadata()
        source = {"kind": "checkpoint", "path": str(path)}
        if "base_model" in meta:
            source["base_model"] = meta["base_model"]
        return cls(model, preprocess, open_clip.get_tokenizer(f"local-dir:{path}"), model_cfg=cfg["model_cfg"],
                   preprocess_cfg=dict(model.visual.preprocess_cfg), source=source, device=device)

    @classmethod
    def resolve(cls, model: Union["ClipModel", str, Path, Tuple[str, str], Dict[str, Any], None],
                device: Optional[str] = None) -> "ClipModel":
        """Accept a :class:`ClipModel`, a checkpoint directory, ``(arch, pretrained)``, ``"arch/pretrained"``
        (e.g. ``"ViT-B-32/openai"``), an open_clip ``"hf-hub:org/repo"`` / ``"local-dir:path"`` name or an open_clip
        config dict."""
        if isinstance(model, ClipModel):
            return model
        if model is None:
            return cls.from_pretrained(device=device)
        if isinstance(model, dict):
            return cls.from_config(model, device=device)
        if isinstance(model, tuple):
            return cls.from_pretrained(model[0], model[1], device=device)
        if Path(str(model)).expanduser().is_dir():
            return cls.load(Path(str(model)).expanduser(), device=device)
        if str(model).startswith(("hf-hub:", "local-dir:")):
            return cls.from_pretrained(str(model), None, device=device)
        arch, _, tag = str(model).partition("/")
        return cls.from_pretrained(arch, tag or None, device=device)

    def save(self, path: Union[str, Path], metadata: Optional[Dict[str, Any]] = None,
             overwrite: bool = False) -> Path:
        """Write this model as a :class:`ClipCheckpoint` folder (also an
        open_clip ``local-dir:`` model); ``metadata`` (e.g. training history) goes into its ``pt_meta.json``."""
        return Path(ClipCheckpoint(path).build(self, metadata=metadata, overwrite=overwrite).path)

    # -- properties
    @property
    def context_length(self) -> int:
        return int(self.model_cfg.get("text_cfg", {}).get("context_length", 77))

    @property
    def embed_dim(self) -> int:
        return int(self.model_cfg["embed_dim"])

    def fingerprint(self) -> str:
        """sha256 (first 16 hex digits) of the weights: tells whether an index was built with this model."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for k, v in sorted(self.model.state_dict().items()):
                h.update(k.encode())
                h.update(v.detach().cpu().float().numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    def invalidate_fingerprint(self) -> None:
        self._fingerprint = None

    def __repr__(self):
        src = self.source
        if src.get("kind") == "pretrained":
            return f"ClipModel({src['arch']!r}, {src['pretrained']!r})"
        if src.get("kind") == "checkpoint":
            return f"ClipModel.load({src['path']!r})"
        return f"ClipModel.from_config({src.get('name', 'custom')!r}, seed={src.get('seed')})"

    # -- encoding
    def _chunk_tokens(self, text: str, long_clues: str) -> List[Any]:
        """Token tensors (one row per window) for one text."""
        import torch

        ctx = self.context_length
        tok = self.tokenizer
        if hasattr(tok, "encode") and hasattr(tok, "sot_token_id"):
            ids = tok.encode(text)
            span = ctx - 2
            windows = [ids[i:i + span] for i in range(0, max(len(ids), 1), span)] or [[]]
            if long_clues == "truncate":
                windows = windows[:1]
            rows = torch.zeros(len(windows), ctx, dtype=torch.long)
            for i, w in enumerate(windows):
                toks = [tok.sot_token_id] + list(w) + [tok.eot_token_id]
                rows[i, :len(toks)] = torch.tensor(toks)
            return [rows]
        # other tokenizers (HF): window on words, ~0.75 words per token, and let the tokenizer truncate
        words = text.split()
        per = max(1, int((ctx - 2) * 0.75))
        pieces = [" ".join(words[i:i + per]) for i in range(0, max(len(words), 1), per)] or [""]
        if long_clues == "truncate":
            return [tok([text])]
        return [tok(pieces)]

    def encode_texts(self, texts: Sequence[str], batch_size: int = 64, long_clues: str = "chunk",
                     verbose: bool = False) -> np.ndarray:
        """L2-normalised text embeddings, float32 ``[len(texts), embed_dim]``; long texts as per ``long_clues``."""
        import torch

        if long_clues not in LONG_CLUE_MODES:
            raise ValueError(f"long_clues must be one of {LONG_CLUE_MODES}, got {long_clues!r}")
        texts = [str(t) for t in texts]
        out = np.zeros((len(texts), self.embed_dim), dtype=np.float32)
        if not texts:
            return out
        rows, owner = [], []
        for i, t in enumerate(texts):
            toks = self._chunk_tokens(t, long_clues)[0]
            rows.append(toks)
            owner.extend([i] * toks.shape[0])
        allrows = torch.cat(rows)
        owner = np.asarray(owner)
        embs = []
        it = range(0, len(allrows), batch_size)
        if verbose:
            it = progress_bar(it, desc="encoding clues", unit="batch")
        with torch.inference_mode():
            for s in it:
                e = self.model.encode_text(allrows[s:s + batch_size].to(self.device), normalize=True)
                embs.append(e.float().cpu().numpy())
        embs = np.concatenate(embs)
        np.add.at(out, owner, embs)  # mean of unit vectors, then re-normalised
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def preprocess_images(self, images: Sequence[Any]):
        import torch

        return torch.stack([self.preprocess(im.convert("RGB")) for im in images])

    def encode_images(self, images: Sequence[Any], batch_size: int = 32) -> np.ndarray:
        """L2-normalised image embeddings (float32) for PIL images."""
        import torch

        out = []
        with torch.inference_mode():
            for s in range(0, len(images), batch_size):
                x = self.preprocess_images(images[s:s + batch_size]).to(self.device)
                out.append(self.model.encode_image(x, normalize=True).float().cpu().numpy())
        if not out:
            return np.zeros((0, self.embed_dim), dtype=np.float32)
        return np.concatenate(out)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return obj


def _check_pretrained_available(arch: str, tag: str) -> None:
    """Raise quickly when a pretrained tag's weights are not cached and cannot be downloaded."""
    open_clip = _import_open_clip()
    cfg = open_clip.pretrained.get_pretrained_cfg(arch, tag)
    if not cfg:
        known = open_clip.pretrained.list_pretrained_tags_by_model(arch)
        raise ModelUnavailableError(f"open_clip has no pretrained tag {tag!r} for {arch!r}; known tags: {known}")
    repo = (cfg.get("hf_hub") or "").strip("/")
    if repo:
        try:
            from huggingface_hub import try_to_load_from_cache

            for fname in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin", "open_clip_pytorch_model.pth"):
                if isinstance(try_to_load_from_cache(repo, fname), str):
                    return
        except ImportError:  # pragma: no cover
            pass
    if not hub_reachable():
        why = "offline mode is on (HF_HUB_OFFLINE)" if is_offline() else "huggingface.co cannot be reached"
        raise ModelUnavailableError(
            f"open_clip {arch}/{tag} weights are not in the local cache and {why}; download them on a machine "
            f"with internet, or "
            f"pass a local weights file (ClipModel.from_pretrained(arch, '/path/to/weights.bin')) or a saved "
            f"checkpoint directory (ClipModel.load(path))")


class ClipCheckpoint(ToTArtifact):
    """A saved (fine-tuned) CLIP model: an open_clip ``local-dir`` folder with ``open_clip_model.safetensors``,
    ``open_clip_config.json`` (model + preprocess config) and ``pt_meta.json``, whose own keys are the base
    model, the weight fingerprint and, for a fine-tuned model, the training settings, per-epoch history and
    best epoch. Written by :meth:`build` / :meth:`ClipModel.save`; ``pt.Artifact.load(path)`` opens it.
    Folders from before the metadata moved into ``pt_meta.json`` (a ``metadata.json`` beside it) still open."""

    ARTIFACT_TYPE = "clip_model"
    ARTIFACT_FORMAT = "open_clip"

    def build(self, model: ClipModel, metadata: Optional[Dict[str, Any]] = None,
              overwrite: bool = False) -> "ClipCheckpoint":
        """Save ``model`` here (atomically: a crash leaves no half-written checkpoint)."""
        from safetensors.torch import save_file

        meta = {"base_model": model.source, "fingerprint": model.fingerprint()}
        meta.update(metadata or {})
        clash = [k for k in meta if k in RESERVED]
        if clash:
            raise ValueError(f"ClipCheckpoint metadata keys {clash} are reserved by pt_meta.json")
        with building(self.path, overwrite=overwrite) as tmp:
            state = {k: v.detach().cpu().contiguous() for k, v in model.model.state_dict().items()}
            save_file(state, str(tmp / "open_clip_model.safetensors"))
            (tmp / "open_clip_config.json").write_text(json.dumps(
                {"model_cfg": model.model_cfg, "preprocess_cfg": _jsonable(model.preprocess_cfg)}, indent=2))
            self._write_meta(tmp, **_jsonable(meta))
        return self

    def model(self, device: Optional[str] = None) -> ClipModel:
        return ClipModel.load(self.path, device=device)

    def metadata(self) -> Dict[str, Any]:
        """The checkpoint's own metadata (base model, fingerprint, training); empty for a foreign folder."""
        old = Path(self.path) / "metadata.json"
        if old.is_file():
            return json.loads(old.read_text())
        if not self.built():
            return {}
        return {k: v for k, v in self.meta().items() if k not in RESERVED}

    def __repr__(self):
        return f"ClipCheckpoint({str(self.path)!r})"
