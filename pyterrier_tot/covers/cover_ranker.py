"""Ranking books by how well their cover image matches the query's cover clue, with an open_clip model.

Three pieces:

- :class:`ClipModel`: an open_clip model + its image preprocessing + tokenizer, loaded from a pretrained tag
  (online users: ``ClipModel.from_pretrained('ViT-B-32', 'openai')``), a local checkpoint file, a saved
  fine-tuned checkpoint directory (:meth:`ClipModel.load`) or a config dict (random init, used by the tests).
- :class:`CoverIndex`: a ``pt.Artifact`` directory holding one L2-normalised embedding per book cover
  (``embeddings.npy``, opened memory-mapped), the docno list, a has-cover mask and the model metadata.
- :class:`CoverRanker`: a ``pt.Transformer`` that scores books by cosine similarity between the
  ``clue_cover`` text and the cover embedding. Retriever on a query frame, scorer on a result frame.

Design choices (see docs/covers.rst):

- Clues longer than the model's text context (77 tokens for CLIP) are split into consecutive windows of
  ``context_length - 2`` BPE tokens, each window is encoded, and the L2-normalised window embeddings are
  averaged and re-normalised (``long_clues='chunk'``, the default). ``long_clues='truncate'`` keeps only the
  first window, like plain CLIP (and like the paper's CLIP-on-the-full-query baseline).
- A book without a usable cover (no path/URL, file missing, unreadable image, URL while offline) is embedded
  as a blank white image at build time (the paper's choice) and flagged in the index's has-cover mask. At
  ranking time ``missing_cover='blank'`` (default) scores it against the blank image; ``'neutral'`` gives it
  ``neutral_score`` (0.0: no contribution to a weighted sum) and leaves it out of retriever results.
- An N/A clue (None, NaN, blank, "N/A") contributes nothing: a retriever returns no rows for that query, a
  scorer gives all its rows ``neutral_score`` (0.0).
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._util import cache_dir, hub_reachable, is_missing, is_offline, require_columns
from pyterrier_tot.errors import CoverImageError, ModelUnavailableError
from pyterrier_tot.decomposition.clues import clue_column
from pyterrier_tot.normalise import METHODS as _NORM_METHODS, normalise_scores

logger = logging.getLogger(__name__)

COVER_COLUMN = clue_column("cover")
LONG_CLUE_MODES = ("chunk", "truncate")
MISSING_COVER_MODES = ("blank", "neutral")
BLANK_COLOUR = (255, 255, 255)

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
        raise ImportError("the cover ranker needs open_clip_torch (and torchvision): pip install open_clip_torch") from e
    return open_clip


# --------------------------------------------------------------------------------------------------- model


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
        from open_clip.transform import PreprocessCfg, image_transform_v2
        from dataclasses import asdict

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
        """Load a checkpoint directory written by :meth:`save` (or any open_clip ``local-dir:`` folder)."""
        open_clip = _import_open_clip()
        path = Path(path)
        cfg_file = path / "open_clip_config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"{path} is not a CLIP checkpoint directory (no open_clip_config.json)")
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}", device="cpu")
        cfg = json.loads(cfg_file.read_text())
        meta_file = path / "metadata.json"
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
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

    def save(self, path: Union[str, Path], metadata: Optional[Dict[str, Any]] = None) -> Path:
        """Write an open_clip ``local-dir`` checkpoint: ``open_clip_model.safetensors``,
        ``open_clip_config.json`` (model + preprocess config), ``metadata.json`` and ``pt_meta.json``."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(path / "open_clip_model.safetensors"))
        (path / "open_clip_config.json").write_text(json.dumps(
            {"model_cfg": self.model_cfg, "preprocess_cfg": _jsonable(self.preprocess_cfg)}, indent=2))
        meta = {"base_model": self.source, "fingerprint": self.fingerprint()}
        meta.update(metadata or {})
        (path / "metadata.json").write_text(json.dumps(_jsonable(meta), indent=2))
        (path / "pt_meta.json").write_text(json.dumps(
            {"type": "clip_model", "format": "open_clip", "package_hint": "pyterrier-tot"}))
        return path

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
            it = pt.tqdm(it, desc="encoding clues", unit="batch")
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
        raise ModelUnavailableError(
            f"open_clip {arch}/{tag} weights are not in the local cache and the hub cannot be reached "
            f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')!r}); download them on a machine with internet, or "
            f"pass a local weights file (ClipModel.from_pretrained(arch, '/path/to/weights.bin')) or a saved "
            f"checkpoint directory (ClipModel.load(path))")


# --------------------------------------------------------------------------------------------------- images


def blank_cover(size: int = 224):
    """The image a book without a cover is embedded as: plain white, like the paper."""
    from PIL import Image

    return Image.new("RGB", (size, size), BLANK_COLOUR)


def _is_url(s: str) -> bool:
    return s.startswith("http://") or s.startswith("https://")


def load_cover(cover: Any, image_root: Optional[Union[str, Path]] = None, fetch: bool = True,
               timeout: float = 10.0):
    """Open a cover given as a PIL image, bytes, a file path (relative to ``image_root``) or a URL.

    Returns ``(image, status)`` with status one of ``ok``, ``missing`` (no cover given or file absent),
    ``corrupt`` (unreadable), ``unfetched`` (URL while offline / fetch failed). The image is None unless ok.
    """
    from PIL import Image, UnidentifiedImageError

    if cover is None or (not isinstance(cover, (bytes, Image.Image)) and is_missing(cover)):
        return None, "missing"
    if isinstance(cover, Image.Image):
        return cover.convert("RGB"), "ok"
    try:
        if isinstance(cover, bytes):
            data = cover
        else:
            s = str(cover).strip()
            if _is_url(s):
                cached = cache_dir() / "covers" / (hashlib.sha256(s.encode()).hexdigest()[:32])
                if cached.is_file():
                    data = cached.read_bytes()
                elif not fetch or is_offline():
                    return None, "unfetched"
                else:
                    try:
                        with urllib.request.urlopen(s, timeout=timeout) as resp:
                            data = resp.read()
                    except Exception as e:  # network errors of any kind
                        logger.debug("could not fetch cover %s: %s", s, e)
                        return None, "unfetched"
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    cached.write_bytes(data)
            else:
                p = Path(s).expanduser()
                if image_root is not None and not p.is_absolute():
                    p = Path(image_root) / p
                if not p.is_file():
                    return None, "missing"
                data = p.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.convert("RGB"), "ok"
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        logger.debug("unreadable cover %r: %s", cover, e)
        return None, "corrupt"


# --------------------------------------------------------------------------------------------------- index


def _iter_docs(docs) -> Iterable[Dict[str, Any]]:
    if isinstance(docs, pd.DataFrame):
        require_columns(docs, ["docno", "cover"], "CoverIndex.build")
        yield from docs[["docno", "cover"]].to_dict("records")
        return
    for d in docs:
        if "docno" not in d:
            raise KeyError(f"CoverIndex.build needs a 'docno' in every document; got keys {sorted(d)}")
        yield d


class CoverIndex(pt.Artifact):
    """Cover-image embeddings of a book corpus, saved in a directory:

    ``embeddings.npy`` (float32 ``[n_docs, dim]``, L2-normalised, opened with ``mmap_mode='r'``),
    ``docnos.json``, ``has_cover.npy`` (bool: False where the blank image stands in), ``model.json`` (the
    model's source, fingerprint and dim), ``build_stats.json`` (counts of ok/missing/corrupt/unfetched covers)
    and ``pt_meta.json``.

    >>> index = CoverIndex("covers.idx").build(books, model)      # books: dicts/DataFrame with docno, cover
    >>> ranker = index.ranker(model, num_results=100)
    """

    ARTIFACT_TYPE = "cover_index"
    ARTIFACT_FORMAT = "clip_npy"

    def __init__(self, path: Union[str, Path]):
        super().__init__(path)
        self._emb = None
        self._docnos = None
        self._lookup = None
        self._has_cover = None

    def built(self) -> bool:
        return (Path(self.path) / "pt_meta.json").is_file() and (Path(self.path) / "embeddings.npy").is_file()

    def build(self, docs, model: Union[ClipModel, str, tuple, dict], *, batch_size: int = 32,
              image_root: Optional[Union[str, Path]] = None, on_error: str = "warn", fetch: bool = True,
              verbose: bool = True, overwrite: bool = False) -> "CoverIndex":
        """Embed every book's cover once. ``docs``: DataFrame or iterable of dicts with ``docno`` and ``cover``
        (path, URL, PIL image or bytes; empty/None when unknown).

        Missing, unreadable or unfetchable covers are embedded as the blank image, flagged in ``has_cover``,
        counted in ``build_stats.json`` and reported in one warning (``on_error='warn'``, default); with
        ``on_error='raise'`` the first *corrupt* image raises :class:`CoverImageError` naming its docno and
        nothing is left on disk. Missing covers never raise: having no cover is normal.
        """
        if on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', got {on_error!r}")
        model = ClipModel.resolve(model)
        path = Path(self.path)
        if self.built() and not overwrite:
            raise FileExistsError(f"a cover index already exists at {path}; pass overwrite=True to rebuild")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=path.name + ".building.", dir=str(path.parent)))
        try:
            records = list(_iter_docs(docs))
            docnos = [str(d["docno"]) for d in records]
            if len(set(docnos)) != len(docnos):
                dup = pd.Series(docnos)[pd.Series(docnos).duplicated()].tolist()[:5]
                raise ValueError(f"CoverIndex.build: duplicate docno(s) {dup}")
            n = len(records)
            emb = np.lib.format.open_memmap(str(tmp / "embeddings.npy"), mode="w+", dtype=np.float32,
                                            shape=(n, model.embed_dim))
            has_cover = np.zeros(n, dtype=bool)
            stats = {"ok": 0, "missing": 0, "corrupt": 0, "unfetched": 0}
            bad: Dict[str, List[str]] = {"corrupt": [], "unfetched": []}
            blank_size = int(np.max(model.preprocess_cfg.get("size", 224)))
            blank = model.encode_images([blank_cover(blank_size)])[0]
            it = range(0, n, batch_size)
            if verbose:
                it = pt.tqdm(it, desc="embedding covers", unit="batch")
            for s in it:
                imgs, rows = [], []
                for i in range(s, min(s + batch_size, n)):
                    im, status = load_cover(records[i].get("cover"), image_root=image_root, fetch=fetch)
                    stats[status] += 1
                    if status == "corrupt" and on_error == "raise":
                        raise CoverImageError(
                            f"cover of docno {docnos[i]!r} ({records[i].get('cover')!r}) is not a readable image")
                    if status in bad:
                        bad[status].append(docnos[i])
                    if im is None:
                        emb[i] = blank
                    else:
                        imgs.append(im)
                        rows.append(i)
                if imgs:
                    emb[rows] = model.encode_images(imgs, batch_size=batch_size)
                    has_cover[rows] = True
            emb.flush()
            del emb
            np.save(tmp / "has_cover.npy", has_cover)
            (tmp / "docnos.json").write_text(json.dumps(docnos))
            (tmp / "model.json").write_text(json.dumps(_jsonable({
                "source": model.source, "fingerprint": model.fingerprint(), "embed_dim": model.embed_dim,
                "context_length": model.context_length})))
            stats_doc = dict(stats, n_docs=n, corrupt_docnos=bad["corrupt"][:100],
                             unfetched_docnos=bad["unfetched"][:100])
            (tmp / "build_stats.json").write_text(json.dumps(stats_doc, indent=2))
            (tmp / "pt_meta.json").write_text(json.dumps({
                "type": self.ARTIFACT_TYPE, "format": self.ARTIFACT_FORMAT, "package_hint": "pyterrier-tot",
                "doc_count": n}))
            if path.exists():
                shutil.rmtree(path)
            tmp.rename(path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._emb = self._docnos = self._lookup = self._has_cover = None
        problems = {k: stats[k] for k in ("missing", "corrupt", "unfetched") if stats[k]}
        if problems:
            msg = (f"CoverIndex: {n - stats['ok']} of {n} books have no usable cover ({problems}) and were "
                   f"embedded as a blank image")
            if bad["corrupt"]:
                msg += f"; unreadable images for docnos {bad['corrupt'][:5]}"
            if bad["unfetched"]:
                msg += f"; URLs not fetched (offline or failed) for docnos {bad['unfetched'][:5]}"
            warnings.warn(msg)
        return self

    # -- access
    def _require_built(self):
        if not self.built():
            raise FileNotFoundError(f"no cover index at {self.path}; call .build(docs, model) first")

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            self._require_built()
            self._emb = np.load(Path(self.path) / "embeddings.npy", mmap_mode="r")
        return self._emb

    @property
    def docnos(self) -> List[str]:
        if self._docnos is None:
            self._require_built()
            self._docnos = json.loads((Path(self.path) / "docnos.json").read_text())
        return self._docnos

    @property
    def has_cover(self) -> np.ndarray:
        if self._has_cover is None:
            self._require_built()
            self._has_cover = np.load(Path(self.path) / "has_cover.npy")
        return self._has_cover

    def docno_lookup(self) -> Dict[str, int]:
        if self._lookup is None:
            self._lookup = {d: i for i, d in enumerate(self.docnos)}
        return self._lookup

    def model_info(self) -> Dict[str, Any]:
        self._require_built()
        return json.loads((Path(self.path) / "model.json").read_text())

    def build_stats(self) -> Dict[str, Any]:
        self._require_built()
        return json.loads((Path(self.path) / "build_stats.json").read_text())

    def __len__(self):
        return len(self.docnos)

    def ranker(self, model=None, **kwargs) -> "CoverRanker":
        """A :class:`CoverRanker` over this index (``model`` defaults to the one recorded at build time)."""
        return CoverRanker(self, model, **kwargs)

    def __repr__(self):
        return f"CoverIndex({str(self.path)!r})"


# --------------------------------------------------------------------------------------------------- ranker


class CoverRanker(pt.Transformer):
    """Scores books by CLIP similarity (cosine, in [-1, 1]) between ``clue_cover`` and the cover image.

    - Retriever (input has no ``docno``): a query frame with ``qid`` and ``clue_cover``; returns the top
      ``num_results`` books of the whole index per query (``qid, docno, score, rank`` + the query columns).
      Queries with an N/A clue get no rows. With ``missing_cover='neutral'`` books without a cover are not
      retrieved.
    - Scorer (input has ``docno``): a result frame with ``qid, docno, clue_cover``; returns the same rows
      re-scored. Rows whose clue is N/A get ``neutral_score``; with ``missing_cover='neutral'`` so do books
      without a cover and docnos that are not in the index (with ``'blank'`` those score against the blank image).
    - ``normalise='minmax'`` (or any :func:`~pyterrier_tot.normalise.normalise_scores` method) rescales the
      CLIP scores within each query, before neutral rows are filled in (they stay at ``neutral_score``), so the
      output can go straight into a weighted fuser.

    ``model`` may be a :class:`ClipModel`, a checkpoint directory, ``(arch, pretrained)`` or ``"arch/tag"``;
    by default the model recorded in the index (pretrained tag or checkpoint path) is loaded. A model whose
    weights differ from the index's raises unless ``check_model=False``.
    """

    def __init__(self, index: Union[CoverIndex, str, Path], model=None, *, num_results: int = 100,
                 missing_cover: str = "blank", neutral_score: float = 0.0, long_clues: str = "chunk",
                 normalise: Optional[str] = None, batch_size: int = 64, check_model: bool = True,
                 verbose: bool = False):
        if missing_cover not in MISSING_COVER_MODES:
            raise ValueError(f"missing_cover must be one of {MISSING_COVER_MODES}, got {missing_cover!r}")
        if long_clues not in LONG_CLUE_MODES:
            raise ValueError(f"long_clues must be one of {LONG_CLUE_MODES}, got {long_clues!r}")
        if normalise is not None and normalise not in _NORM_METHODS:
            raise ValueError(f"normalise must be None or one of {_NORM_METHODS}, got {normalise!r}")
        if num_results < 1:
            raise ValueError(f"num_results must be >= 1, got {num_results}")
        self.index = index if isinstance(index, CoverIndex) else CoverIndex(index)
        self.index._require_built()
        info = self.index.model_info()
        if model is None:
            src = info["source"]
            if src.get("kind") == "pretrained":
                model = (src["arch"], src["pretrained"])
            elif src.get("kind") == "checkpoint":
                model = src["path"]
            else:
                raise ValueError(f"{self.index!r} was built with an in-memory model ({src}); pass model=")
        self.model = ClipModel.resolve(model)
        if self.model.embed_dim != info["embed_dim"]:
            raise ValueError(f"model embed_dim {self.model.embed_dim} != index embed_dim {info['embed_dim']}")
        if check_model and self.model.fingerprint() != info["fingerprint"]:
            raise ValueError(f"{self.model!r} is not the model {self.index!r} was built with "
                             f"(fingerprint {self.model.fingerprint()} != {info['fingerprint']}); rebuild the "
                             f"index or pass check_model=False")
        self.num_results = int(num_results)
        self.missing_cover = missing_cover
        self.neutral_score = float(neutral_score)
        self.long_clues = long_clues
        self.normalise = normalise
        self.batch_size = int(batch_size)
        self.verbose = verbose

    def __repr__(self):
        args = [repr(self.index), repr(self.model)]
        if self.num_results != 100:
            args.append(f"num_results={self.num_results}")
        if self.missing_cover != "blank":
            args.append(f"missing_cover={self.missing_cover!r}")
        if self.neutral_score != 0.0:
            args.append(f"neutral_score={self.neutral_score}")
        if self.long_clues != "chunk":
            args.append(f"long_clues={self.long_clues!r}")
        if self.normalise:
            args.append(f"normalise={self.normalise!r}")
        return f"CoverRanker({', '.join(args)})"

    # -- helpers
    def _encode_clues(self, clues: pd.Series) -> Tuple[np.ndarray, Dict[str, int]]:
        uniq = sorted({str(c) for c in clues if not is_missing(c)})
        vecs = self.model.encode_texts(uniq, batch_size=self.batch_size, long_clues=self.long_clues,
                                       verbose=self.verbose)
        return vecs, {c: i for i, c in enumerate(uniq)}

    def _normalise(self, df: pd.DataFrame, real: np.ndarray) -> pd.DataFrame:
        if self.normalise and self.normalise != "none" and real.any():
            sub = df.loc[real, ["qid", "score"]]
            df.loc[real, "score"] = normalise_scores(sub, self.normalise).to_numpy()
        return df

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(inp, pd.DataFrame):
            raise TypeError(f"CoverRanker expects a DataFrame, got {type(inp).__name__}")
        if "docno" in inp.columns:
            return self._score(inp)
        return self._retrieve(inp)

    def _retrieve(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp, extra_columns=[COVER_COLUMN])
        emb = self.index.embeddings
        docnos = np.asarray(self.index.docnos, dtype=object)
        allowed = self.index.has_cover if self.missing_cover == "neutral" else None
        vecs, pos = self._encode_clues(inp[COVER_COLUMN])
        query_cols = [c for c in inp.columns if c not in ("docno", "score", "rank")]
        frames = []
        rows = inp.reset_index(drop=True)
        it = rows.iterrows()
        if self.verbose:
            it = pt.tqdm(it, total=len(rows), desc="CoverRanker", unit="q")
        for _, q in it:
            clue = q[COVER_COLUMN]
            if is_missing(clue):
                continue
            scores = _dot_chunked(emb, vecs[pos[str(clue)]])
            cand = np.flatnonzero(allowed) if allowed is not None else np.arange(len(scores))
            if len(cand) == 0:
                continue
            k = min(self.num_results, len(cand))
            sub = scores[cand]
            top = np.argpartition(-sub, k - 1)[:k] if k < len(cand) else np.arange(len(cand))
            top = top[np.lexsort((cand[top], -sub[top]))]  # score desc, index order on ties
            idx = cand[top]
            res = pd.DataFrame({"docno": docnos[idx], "score": scores[idx].astype(np.float64)})
            for c in query_cols:
                res[c] = [q[c]] * len(res)
            frames.append(res)
        if not frames:
            out = pd.DataFrame({c: pd.Series(dtype=inp[c].dtype) for c in query_cols})
            out["docno"] = pd.Series(dtype=object)
            out["score"] = pd.Series(dtype=np.float64)
        else:
            out = pd.concat(frames, ignore_index=True)
        out = out[query_cols + ["docno", "score"]]
        out = self._normalise(out, np.ones(len(out), dtype=bool))
        return pt.model.add_ranks(out)

    def _score(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.result_frame(inp, extra_columns=[COVER_COLUMN])
        out = inp.copy().reset_index(drop=True)
        lookup = self.index.docno_lookup()
        emb = self.index.embeddings
        vecs, pos = self._encode_clues(out[COVER_COLUMN])
        clue_idx = np.array([-1 if is_missing(c) else pos[str(c)] for c in out[COVER_COLUMN]], dtype=np.int64)
        doc_idx = np.array([lookup.get(str(d), -1) for d in out["docno"]], dtype=np.int64)
        has_clue = clue_idx >= 0
        if self.missing_cover == "neutral":
            covered = doc_idx >= 0
            covered[covered] = self.index.has_cover[doc_idx[covered]]
        else:
            covered = np.ones(len(out), dtype=bool)
        real = has_clue & covered
        scores = np.full(len(out), self.neutral_score, dtype=np.float64)
        if real.any():
            blank = None
            if (doc_idx[real] < 0).any():
                blank = self._blank_embedding()
            di = doc_idx[real]
            order = np.argsort(di, kind="stable")  # sorted row access is kinder to a memory-mapped file
            docvecs = np.empty((len(di), emb.shape[1]), dtype=np.float32)
            known = di[order] >= 0
            docvecs[order[known]] = emb[di[order][known]]
            if blank is not None:
                docvecs[order[~known]] = blank
            scores[real] = np.einsum("ij,ij->i", docvecs, vecs[clue_idx[real]]).astype(np.float64)
        out["score"] = scores
        out = self._normalise(out, real)
        return pt.model.add_ranks(out)

    def _blank_embedding(self) -> np.ndarray:
        if not hasattr(self, "_blank"):
            size = int(np.max(self.model.preprocess_cfg.get("size", 224)))
            self._blank = self.model.encode_images([blank_cover(size)])[0]
        return self._blank


def _dot_chunked(emb: np.ndarray, vec: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """``emb @ vec`` in row chunks, so a memory-mapped index is streamed rather than loaded at once."""
    out = np.empty(emb.shape[0], dtype=np.float32)
    for s in range(0, emb.shape[0], chunk):
        out[s:s + chunk] = np.asarray(emb[s:s + chunk]) @ vec
    return out
