"""Opening book covers: file paths, URLs (fetched once, then cached), bytes or PIL images.

A cover that cannot be used never raises here: :func:`load_cover` returns a status (``missing``, ``corrupt``,
``unfetched``) so the caller decides; the cover index embeds such books as :func:`blank_cover`, the paper's
choice. URLs are fetched only when the library is online (:func:`pyterrier_tot._plumbing.util.online`, which honours
the one offline switch ``HF_HUB_OFFLINE``).
"""
from __future__ import annotations

import hashlib
import io
import logging
import urllib.request
from pathlib import Path
from typing import Any, Optional, Tuple, Union
from urllib.parse import urlparse

from pyterrier_tot._plumbing.util import cache_dir, is_missing, online

logger = logging.getLogger(__name__)

BLANK_COLOUR = (255, 255, 255)
#: What :func:`load_cover` reports besides ``ok``.
COVER_STATUSES = ("ok", "missing", "corrupt", "unfetched")


def blank_cover(size: int = 224):
    """The image a book without a cover is embedded as: plain white, like the paper."""
    from PIL import Image

    return Image.new("RGB", (size, size), BLANK_COLOUR)


def is_url(s: str) -> bool:
    return s.startswith("http://") or s.startswith("https://")


def cached_cover_path(url: str) -> Path:
    """Where a fetched cover URL is kept (under the library's cache folder)."""
    return cache_dir() / "covers" / hashlib.sha256(url.encode()).hexdigest()[:32]


def fetch_cover(url: str, fetch: bool = True, timeout: float = 10.0) -> Optional[bytes]:
    """The bytes behind a cover URL: from the cache, else downloaded (and cached) when ``fetch`` and online;
    None when it cannot be had (offline, host unreachable, HTTP error)."""
    cached = cached_cover_path(url)
    if cached.is_file():
        return cached.read_bytes()
    host = urlparse(url).hostname
    if not fetch or not host or not online(host):
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = resp.read()
    except Exception as e:  # network errors of any kind mean "not fetched", never a failed build
        logger.debug("could not fetch cover %s: %s", url, e)
        return None
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return data


def load_cover(cover: Any, image_root: Optional[Union[str, Path]] = None, fetch: bool = True,
               timeout: float = 10.0) -> Tuple[Any, str]:
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
            if is_url(s):
                data = fetch_cover(s, fetch=fetch, timeout=timeout)
                if data is None:
                    return None, "unfetched"
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
        # truncated or garbage files raise any of these from PIL; all mean "not a readable image"
        logger.debug("unreadable cover %r: %s", cover, e)
        return None, "corrupt"
