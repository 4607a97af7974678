"""Synthetic book covers drawn with PIL, each with a matching text description (a "cover clue").

A cover has a background colour, a central shape in a second colour, a dark silhouette (tree, house, person)
in a corner and a title word along the top. The description names the background colour, the shape with its
colour and the silhouette, e.g. "a red cover with a yellow circle and a tree". Used by the tests and by
benchmarks/covers/covers.py; deterministic for a given seed.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Optional

COLOURS = {
    "red": (220, 30, 30),
    "blue": (30, 60, 220),
    "green": (30, 170, 60),
    "yellow": (240, 220, 40),
    "black": (15, 15, 15),
    "white": (245, 245, 245),
    "purple": (140, 40, 170),
    "orange": (250, 140, 20),
}
SHAPES = ("circle", "square", "triangle", "stripe")
SILHOUETTES = ("tree", "house", "person", "none")
WORDS = ("moon", "river", "ghost", "crown", "storm", "garden", "night", "wolf", "glass", "fire", "stone", "sea")


def draw_cover(bg: str, shape: str, fg: str, silhouette: str = "none", word: str = "", size: int = 64,
               jitter: Optional[random.Random] = None):
    """A PIL cover image. ``jitter`` (a Random) moves/resizes the shape slightly."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (size, size), COLOURS[bg])
    d = ImageDraw.Draw(im)
    r = jitter or random.Random(0)
    s = size
    cx, cy = s * (0.5 + r.uniform(-0.06, 0.06)), s * (0.55 + r.uniform(-0.06, 0.06))
    rad = s * r.uniform(0.2, 0.26)
    col = COLOURS[fg]
    if shape == "circle":
        d.ellipse([cx - rad, cy - rad, cx + rad, cy + rad], fill=col)
    elif shape == "square":
        d.rectangle([cx - rad, cy - rad, cx + rad, cy + rad], fill=col)
    elif shape == "triangle":
        d.polygon([(cx, cy - rad), (cx - rad, cy + rad), (cx + rad, cy + rad)], fill=col)
    elif shape == "stripe":
        d.rectangle([0, cy - rad / 2.5, s, cy + rad / 2.5], fill=col)
    else:
        raise ValueError(shape)
    dark = (40, 40, 40) if bg != "black" else (200, 200, 200)
    x0, y0 = s * 0.72, s * 0.68
    u = s * 0.12
    if silhouette == "tree":
        d.polygon([(x0 + u, y0), (x0, y0 + 1.6 * u), (x0 + 2 * u, y0 + 1.6 * u)], fill=dark)
        d.rectangle([x0 + 0.8 * u, y0 + 1.6 * u, x0 + 1.2 * u, y0 + 2.3 * u], fill=dark)
    elif silhouette == "house":
        d.polygon([(x0 + u, y0), (x0, y0 + u), (x0 + 2 * u, y0 + u)], fill=dark)
        d.rectangle([x0 + 0.2 * u, y0 + u, x0 + 1.8 * u, y0 + 2.3 * u], fill=dark)
    elif silhouette == "person":
        d.ellipse([x0 + 0.6 * u, y0, x0 + 1.4 * u, y0 + 0.8 * u], fill=dark)
        d.rectangle([x0 + 0.5 * u, y0 + 0.9 * u, x0 + 1.5 * u, y0 + 2.3 * u], fill=dark)
    if word:
        d.text((s * 0.06, s * 0.04), word.upper(), fill=dark)
    return im


def describe(bg: str, shape: str, fg: str, silhouette: str = "none", word: str = "") -> str:
    text = f"a {bg} cover with a {fg} {shape}"
    if silhouette != "none":
        text += f" and a {silhouette}"
    return text


def make_books(n: int, seed: int = 0, size: int = 64) -> List[Dict]:
    """``n`` distinct synthetic books: dicts with docno, image (PIL), clue_cover and the attributes."""
    r = random.Random(seed)
    combos = [(bg, sh, fg, si) for bg in COLOURS for sh in SHAPES for fg in COLOURS if fg != bg for si in SILHOUETTES]
    r.shuffle(combos)
    if n > len(combos):
        raise ValueError(f"at most {len(combos)} distinct books")
    books = []
    for i, (bg, sh, fg, si) in enumerate(combos[:n]):
        word = r.choice(WORDS)
        books.append({
            "docno": f"book{i:04d}", "bg": bg, "shape": sh, "fg": fg, "silhouette": si, "word": word,
            "image": draw_cover(bg, sh, fg, si, word, size=size, jitter=random.Random(seed * 100003 + i)),
            "clue_cover": describe(bg, sh, fg, si, word),
        })
    return books


def write_covers(books: List[Dict], folder: Path, fmt: str = "png") -> List[Dict]:
    """Save each book's image to ``folder/<docno>.<fmt>``; returns the books with a ``cover`` path added."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for b in books:
        p = folder / f"{b['docno']}.{fmt}"
        b["image"].save(p)
        out.append(dict(b, cover=str(p)))
    return out
