"""The cover index: one L2-normalised CLIP embedding per book cover, saved as a ``pt.Artifact`` folder.

Files: ``embeddings.npy`` (float32 ``[n_docs, dim]``, opened memory-mapped), ``docnos.json``, ``has_cover.npy``
(False where the blank image stands in) and ``pt_meta.json``, which besides the library's common keys holds
``doc_count``, ``model`` (the model's source, weight fingerprint, embedding size, text context) and
``build_stats`` (counts of ok/missing/corrupt/unfetched covers, first docnos of each problem). Folders written
before these were folded into ``pt_meta.json`` (with ``model.json`` / ``build_stats.json``) still open.

A book without a usable cover (no path/URL, file missing, unreadable image, URL while offline) is embedded as
a blank white image (the paper's choice) and flagged in ``has_cover``.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np
import pandas as pd

from pyterrier_tot._plumbing.artifact import ToTArtifact, building
from pyterrier_tot._plumbing.util import require_columns
from pyterrier_tot.console import bar as progress_bar
from pyterrier_tot.covers.clip_model import ClipModel, _jsonable
from pyterrier_tot.covers.images import blank_cover, load_cover
from pyterrier_tot.errors import CoverImageError


def _iter_docs(docs) -> Iterable[Dict[str, Any]]:
    if isinstance(docs, pd.DataFrame):
        require_columns(docs, ["docno", "cover"], "CoverIndex.build")
        yield from docs[["docno", "cover"]].to_dict("records")
        return
    for d in docs:
        if "docno" not in d:
            raise KeyError(f"CoverIndex.build needs a 'docno' in every document; got keys {sorted(d)}")
        yield d


class CoverIndex(ToTArtifact):
    """Cover-image embeddings of a book corpus (see the module docstring for the folder's contents).

    >>> index = CoverIndex("covers.idx").build(books, model)      # books: dicts/DataFrame with docno, cover
    >>> ranker = index.ranker(model, num_results=100)
    >>> pt.Artifact.load("covers.idx")                             # opens it again, as a CoverIndex
    """

    ARTIFACT_TYPE = "cover_index"
    ARTIFACT_FORMAT = "clip_npy"

    def __init__(self, path: Union[str, Path]):
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._emb = self._docnos = self._lookup = self._has_cover = self._meta = None

    def built(self) -> bool:
        return super().built() and (Path(self.path) / "embeddings.npy").is_file()

    def build(self, docs, model: Union[ClipModel, str, tuple, dict], *, batch_size: int = 32,
              image_root: Optional[Union[str, Path]] = None, on_error: str = "warn", fetch: bool = True,
              verbose: bool = True, overwrite: bool = False) -> "CoverIndex":
        """Embed every book's cover once. ``docs``: DataFrame or iterable of dicts with ``docno`` and ``cover``
        (path, URL, PIL image or bytes; empty/None when unknown).

        Missing, unreadable or unfetchable covers are embedded as the blank image, flagged in ``has_cover``,
        counted in the ``build_stats`` metadata and reported in one warning (``on_error='warn'``, default); with
        ``on_error='raise'`` the first *corrupt* image raises :class:`CoverImageError` naming its docno and
        nothing is left on disk. Missing covers never raise: having no cover is normal.
        """
        if on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', got {on_error!r}")
        model = ClipModel.resolve(model)
        path = Path(self.path)
        # an empty folder (e.g. made by the caller) is not an index worth protecting
        replace = overwrite or (path.is_dir() and not any(path.iterdir()))
        with building(path, overwrite=replace) as tmp:
            stats, bad, n = self._build_into(tmp, docs, model, batch_size, image_root, on_error, fetch, verbose)
        self._reset()
        problems = {k: stats[k] for k in ("missing", "corrupt", "unfetched") if stats[k]}
        if problems:
            msg = (f"CoverIndex: {n - stats['ok']} of {n} books have no usable cover ({problems}) and were "
                   f"embedded as a blank image")
            if bad["corrupt"]:
                msg += f"; unreadable images for docnos {bad['corrupt'][:5]}"
            if bad["unfetched"]:
                msg += f"; URLs not fetched (offline or failed) for docnos {bad['unfetched'][:5]}"
            warnings.warn(msg, stacklevel=2)
        return self

    def _build_into(self, tmp: Path, docs, model: ClipModel, batch_size: int, image_root, on_error: str,
                    fetch: bool, verbose: bool):
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
            it = progress_bar(it, desc="embedding covers", unit="batch")
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
        np.save(tmp / "has_cover.npy", has_cover, allow_pickle=False)
        (tmp / "docnos.json").write_text(json.dumps(docnos))
        self._write_meta(tmp, doc_count=n, model=_jsonable({
            "source": model.source, "fingerprint": model.fingerprint(), "embed_dim": model.embed_dim,
            "context_length": model.context_length}), build_stats=dict(
            stats, n_docs=n, corrupt_docnos=bad["corrupt"][:100], unfetched_docnos=bad["unfetched"][:100]))
        return stats, bad, n

    # -- access
    def _require_built(self):
        if not self.built():
            raise FileNotFoundError(f"no cover index at {self.path}; call .build(docs, model) first")

    def _meta_key(self, key: str, old_file: str) -> Dict[str, Any]:
        if self._meta is None:
            self._require_built()
            self._check_type()
            self._meta = self.meta()
        if key in self._meta:
            return self._meta[key]
        return json.loads((Path(self.path) / old_file).read_text())  # folders from before pt_meta held it

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            self._require_built()
            self._emb = np.load(Path(self.path) / "embeddings.npy", mmap_mode="r", allow_pickle=False)
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
            self._has_cover = np.load(Path(self.path) / "has_cover.npy", allow_pickle=False)
        return self._has_cover

    def docno_lookup(self) -> Dict[str, int]:
        if self._lookup is None:
            self._lookup = {d: i for i, d in enumerate(self.docnos)}
        return self._lookup

    def model_info(self) -> Dict[str, Any]:
        """The model the covers were embedded with: ``source``, ``fingerprint``, ``embed_dim``, ``context_length``."""
        return self._meta_key("model", "model.json")

    def build_stats(self) -> Dict[str, Any]:
        """Counts of ``ok`` / ``missing`` / ``corrupt`` / ``unfetched`` covers and the first problem docnos."""
        return self._meta_key("build_stats", "build_stats.json")

    def __len__(self):
        return len(self.docnos)

    def __repr__(self):
        return f"CoverIndex({str(self.path)!r})"
