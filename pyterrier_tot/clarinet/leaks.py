"""The leak check shared by the question generator and the user simulator: no text may name a book (its title)
or its characters (capitalised names inside its description, a heuristic). A leaking text is regenerated with
another seed; after ``max_regenerations`` the caller falls back (a generic question, a redacted answer)."""
from __future__ import annotations

import re
from typing import Iterable, List

_WORD = re.compile(r"[A-Za-z0-9']+")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]{2,})\b")
_SERIES = re.compile(r"\s*[\(\[].*?[\)\]]\s*")  # "Title (Series, #2)" is also leaked by "Title"
_ARTICLES = {"the", "a", "an"}
#: capitalised words that are not names (months, days, pronouns and common sentence words)
_NOT_NAMES = set("""I The A An He She They It We You His Her Their Its This That These Those When Where What Who Why How
After Before While During Then There Here One Two Three Four Five Six Seven Eight Nine Ten First Second Last
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August September
October November December But And Or So If In On At As For From With Without Into Out Up Down Now Soon Even Yet
Mr Mrs Ms Dr Sir Lady Lord King Queen Prince Princess Book Books Series Novel Story Earth God English American
Christmas Summer Winter Spring Fall Not All Every Each Some Many Most More No Yes""".split())


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(str(text).lower().replace("’", "'")))


def title_forms(title: str) -> List[str]:
    """The normalised forms of a title that count as naming it (with and without a series note or article);
    forms of fewer than four letters are left out, as they match ordinary words."""
    forms = []
    for t in {str(title), _SERIES.sub(" ", str(title))}:
        n = _norm(t)
        words = n.split()
        for form in (n, " ".join(words[1:]) if words and words[0] in _ARTICLES else ""):
            if len(form.replace(" ", "")) >= 4 and form not in forms:
                forms.append(form)
    return forms


def character_names(description: str, limit: int = 12) -> List[str]:
    """Capitalised words inside sentences of ``description`` (not at a sentence start), most frequent first."""
    counts: dict = {}
    for m in _NAME.finditer(str(description or "")):
        w = m.group(1)
        if w not in _NOT_NAMES:
            counts[w] = counts.get(w, 0) + 1
    return [w.lower() for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]]


def forbidden(title: str, description: str = "", characters: bool = True) -> List[str]:
    """What a text about this book must not contain: its title forms and (``characters``) its character names."""
    return title_forms(title) + (character_names(description) if characters else [])


def leaked(text: str, names: Iterable[str]) -> List[str]:
    """The forbidden names (normalised) that ``text`` contains as whole words."""
    padded = f" {_norm(text)} "
    return [n for n in names if n and f" {n} " in padded]


def redact(text: str, names: Iterable[str], replacement: str = "something") -> str:
    """``text`` with every forbidden name replaced (case-insensitive, whole words, any punctuation between)."""
    out = str(text)
    for n in sorted(set(names), key=len, reverse=True):
        words = n.split()
        if not words:
            continue
        pattern = r"\b" + r"[^A-Za-z0-9']+".join(re.escape(w) for w in words) + r"\b"
        out = re.sub(pattern, replacement, out, flags=re.IGNORECASE)
    return out
