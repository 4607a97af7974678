"""Negation penalty: push down books that a ToT request explicitly rules out.

ToT requests often say what the book is *not*: "it's not a sequel", "no magic", "It is not Mick Harte Was
Here". :class:`NegationPenalty` finds negation cues in the query, works out the negated concept, and subtracts
``w`` from the score of every retrieved book whose title or first paragraph contains that concept, then
re-ranks::

    pipe = index.bm25() >> ptt.NegationPenalty(index=index)                # paper setting: head list, w=3.0
    pipe = index.bm25() >> ptt.NegationPenalty(index=index, mode="phrase") # + noun phrases and titles

Modes:

``heads`` (default, as in the paper)
    a negated concept is one of the heads listed in ``resources/negation_heads.txt`` (or ``heads=``) found
    within ``window`` words after a cue and before the next punctuation ("not a sequel", "wasn't really a
    horror").
``phrase``
    everything ``heads`` finds, plus (a) a Title Case run after the cue, read as a title or name ("it's not
    Where the Wild Things Are", "Not Anne of Green Gables, Pollyanna"), and (b) the noun phrase after "no" /
    "without" / "nor", or after "not" / "n't" when it starts with a determiner ("wasn't a talking cat"),
    cut at the next punctuation, conjunction or preposition, stopwords trimmed, at most ``max_words`` words.

Cues are no, not, never, without, nor, neither and any "n't" contraction. A cue followed by an uncertainty word
("not sure", "don't remember", "don't know") negates nothing. A concept matches a book when all its words
occur in the title, or its words occur in sequence in the first paragraph (stopwords ignored, plural "s"
folded). The penalty is applied once per book however many concepts match; the amount is kept in a
``negation_penalty`` column (0.0 for untouched books).

Book text comes from ``title`` / ``text`` columns of the result frame when present, else from the
:class:`~pyterrier_tot.index.BookIndex` passed as ``index``.
"""
from __future__ import annotations

import re
from importlib import resources
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import explain_columns
from pyterrier_tot.checks import check_index, check_int, check_number, check_result_frame, unknown_docnos

MODES = ("heads", "phrase")

_CUE = re.compile(r"(?<![\w'’])(not|no|never|without|nor|neither|\w+n['’]t|cannot|isnt|wasnt|arent|werent|"
                  r"doesnt|didnt|dont|aint)(?![\w'’])", re.IGNORECASE)
_BOUNDARY = re.compile(r"[.,;:!?()\[\]\"“”\n]|\s[-–—]\s|\bbut\b|\band\b|\bor\b|\bbecause\b", re.IGNORECASE)
_TOKEN = re.compile(r"[^\W_]+(?:[-'’][^\W_]+)*", re.UNICODE)

#: words right after a cue that make it about the requester's memory, not about the book
UNCERTAIN = {"sure", "certain", "positive", "remember", "recall", "know", "knowing", "recollect", "care", "mind",
             "matter", "quite", "only", "just", "even", "until", "long", "longer", "much", "many", "exactly",
             "totally", "entirely", "completely", "100", "too", "very", "able", "recognise", "recognize",
             "find", "found", "help", "worry", "thanks", "problem", "idea", "clue", "luck"}
STOPWORDS = {"a", "an", "the", "it", "its", "it's", "i'm", "i've", "i'd", "i'll", "that's", "there's", "was", "is",
             "be", "been", "being", "are", "were", "am", "have",
             "has", "had", "do", "does", "did", "of", "to", "in", "on", "at", "by", "for", "with", "from", "about",
             "as", "that", "this", "these", "those", "there", "any", "some", "one", "really", "actually",
             "definitely", "necessarily", "exactly", "think", "believe", "so", "just", "very", "too", "i", "my",
             "me", "you", "he", "she", "they", "his", "her", "their", "them", "we", "our", "and", "or", "but",
             "if", "than", "then", "which", "who", "whom", "what", "when", "where", "why", "how", "all", "more",
             "most", "such", "own", "same", "other", "into", "out", "up", "down", "over", "again", "also",
             "not", "no", "never", "would", "could", "should", "will", "can", "may", "might", "must"}
#: vague words that never make a negated concept on their own ("no later than", "not a lot", "no name")
VAGUE = {"later", "earlier", "year", "years", "lot", "lots", "way", "else", "even", "get", "got", "name", "title",
         "author", "idea", "clue", "matter", "longer", "avail", "comment", "reply", "replies", "one", "thing",
         "something", "anything", "nothing", "much", "more", "less", "time", "luck", "doubt", "problem",
         "help", "wonder", "exception", "joke", "kidding", "sure", "version", "edit", "answer", "result",
         "results", "memory", "recollection", "detail", "details", "spoiler", "spoilers", "offense", "worries",
         "need", "reason", "chance", "point", "use", "good", "bad", "big", "real", "really", "whatsoever",
         "i'm", "i've", "i'd", "i'll", "it's", "that's", "there's", "extra", "single", "same", "different",
         "other", "another", "own", "part", "kind", "type", "sort", "word", "words", "sense"}
DETERMINERS = {"a", "an", "the", "any", "some", "one", "another", "that", "this", "those", "these"}
_PASS = {"be", "been", "being", "is", "was", "are", "were", "have", "has", "had", "do", "does", "did", "really",
         "actually", "definitely", "necessarily", "think", "believe", "it", "it's", "its", "part",
         "of", "set", "in", "quite", "at", "all", "even", "meant", "supposed", "to", "considered"}
_CUT = {"about", "with", "by", "for", "from", "in", "on", "at", "of", "that", "which", "who", "where", "when",
        "because", "since", "as", "like", "than", "so", "to", "into", "while", "though", "although", "if",
        "and", "or", "but", "nor", "either", "i", "it", "he", "she", "they", "we", "you"}
_GENERIC = {"book", "books", "novel", "novels", "story", "stories", "thing", "kind", "type", "sort", "one"}
_TITLE_GLUE = {"of", "a", "an", "the", "and", "in", "on", "to", "for", "at", "by", "with", "from", "or", "&"}

LexArg = Union[None, str, Iterable[str]]


def _fold(tok: str) -> str:
    tok = tok.lower().replace("’", "'")
    if tok.endswith("'s"):
        tok = tok[:-2]
    if tok in ("series", "species"):
        return tok
    if len(tok) > 4 and tok.endswith("ies"):
        return tok[:-3] + "y"
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        tok = tok[:-1]
    return tok


def _content(tokens: Sequence[str]) -> List[str]:
    return [_fold(t) for t in tokens if t.lower().replace("’", "'") not in STOPWORDS]


def read_heads(source: LexArg = None) -> List[str]:
    """Negation heads from the packaged list (``None``), a file path, or an iterable of strings."""
    if source is None:
        lines = resources.files("pyterrier_tot").joinpath("resources/negation_heads.txt").read_text("utf8").splitlines()
    elif isinstance(source, str):
        with open(source, encoding="utf8") as f:
            lines = f.read().splitlines()
    else:
        lines = list(source)
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


class NegationPenalty(pt.Transformer):
    """Subtracts ``w`` from books matching a concept the query negates, then re-ranks.

    :param index: a :class:`~pyterrier_tot.index.BookIndex` to read titles / text from when the result
        frame has no ``title`` and ``text`` columns.
    :param w: the penalty (default 3.0, the paper's value).
    :param mode: ``"heads"`` or ``"phrase"`` (see module doc).
    :param heads: replacement head list (iterable or file); ``extra_heads`` adds to the packaged list.
    :param window: how many words after a cue a head may appear (``heads`` matching).
    :param max_words: longest noun phrase / title kept in ``phrase`` mode.
    :param para_chars: characters of the first paragraph searched.
    :param query_column: the column scanned for negations (``query``; ``query_0`` to read the text before
        an earlier rewriter).
    """

    @keyword_settings
    def __init__(self, index=None, w: float = 3.0, *, mode: str = "heads", heads: LexArg = None,
                 extra_heads: Optional[Iterable[str]] = None, window: int = 5, max_words: int = 6,
                 para_chars: int = 1000, query_column: str = "query"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if check_number(w, "w", "NegationPenalty") < 0:
            raise ValueError(f"w is the amount subtracted and must be >= 0, not {w}")
        check_int(window, "window", "NegationPenalty")
        if index is not None:
            check_index(index, "NegationPenalty")
        self.index = index
        self.w = float(w)
        self.mode = mode
        self.window = int(window)
        self.max_words = int(max_words)
        self.para_chars = int(para_chars)
        self.query_column = query_column
        self.custom_heads = heads is not None
        # as given, for the repr (a list of heads, or a file path)
        self._heads_arg = list(heads) if isinstance(heads, (list, tuple, set)) else heads
        self._extra_heads_arg = list(extra_heads) if extra_heads is not None else None
        head_list = read_heads(heads) + list(extra_heads or [])
        self.heads: List[Tuple[str, ...]] = sorted(
            {tuple(_fold(t) for t in _TOKEN.findall(h)) for h in head_list if _TOKEN.findall(h)},
            key=lambda h: -len(h))
        self._book_cache: Dict[str, Tuple[Set[str], List[str]]] = {}

    # ------------------------------------------------------------------ query side
    def concepts(self, query: str) -> List[Tuple[str, ...]]:
        """The negated concepts of ``query`` (each a tuple of folded content words), in order, no repeats."""
        query = str(query)
        found: List[Tuple[str, ...]] = []
        for m in _CUE.finditer(query):
            rest = query[m.end():]
            stop = _BOUNDARY.search(rest)
            scope_text = rest[: stop.start()] if stop else rest
            raw = _TOKEN.findall(scope_text)
            if not raw:
                continue
            first_real = next((t for t in raw if t.lower() not in {"really", "actually", "definitely", "even"}), "")
            if first_real.lower().replace("’", "'") in UNCERTAIN:
                continue
            cue = m.group(1).lower()
            heads = self._heads_in(raw[: self.window])
            for c in heads:
                if c not in found:
                    found.append(c)
            if self.mode == "phrase":
                for c in self._titles(cue, rest) + ([] if heads else self._noun_phrase(cue, raw)):
                    if c and c not in found:
                        found.append(c)
        return found

    def _heads_in(self, raw: List[str]) -> List[Tuple[str, ...]]:
        folded = [_fold(t) for t in raw]
        shouting = all(not t[0].islower() for t in raw)
        out = []
        for head in self.heads:
            n = len(head)
            for i in range(len(folded) - n + 1):
                # a capitalised head inside normal text is part of a title ("not Memoirs of a ..."): skip it
                if tuple(folded[i:i + n]) == head and (shouting or not raw[i][0].isupper()):
                    out.append(head)
                    break
        return out

    def _titles(self, cue: str, rest: str) -> List[Tuple[str, ...]]:
        """Title Case runs right after the cue (a comma-separated list of them too)."""
        out = []
        text = rest
        while True:
            m = re.match(r"\s*((?:[A-Z0-9][\w'’-]*|[a-z]+)(?:\s+(?:[A-Z0-9][\w'’-]*|[a-z]+))*)", text)
            if not m:
                break
            toks = m.group(1).split()
            run = []
            for t in toks:
                if t[0].isupper() or t[0].isdigit() or (run and t.lower() in _TITLE_GLUE):
                    run.append(t)
                else:
                    break
            while run and run[-1].lower() in _TITLE_GLUE:
                run.pop()
            if not run or run == ["I"] or not any(t[0].isupper() and t.lower() not in _TITLE_GLUE for t in run):
                break
            content = _content(run)[: self.max_words]
            if content:
                out.append(tuple(content))
            consumed = text[: m.start(1)] + " ".join(run)
            after = text[len(consumed):] if text.startswith(consumed) else ""
            nxt = re.match(r"\s*,\s*(?:or\s+|nor\s+)?(?=[A-Z])", after)
            if not nxt or len(out) >= 4:
                break
            text = after[nxt.end():]
        return out

    def _noun_phrase(self, cue: str, raw: List[str]) -> List[Tuple[str, ...]]:
        toks = list(raw)
        if cue in ("no", "without", "nor", "neither"):
            start = 0
        else:
            i = 0
            while i < len(toks) and toks[i].lower().replace("’", "'") in _PASS:
                i += 1
            if i >= len(toks) or toks[i].lower() not in DETERMINERS:
                return []
            start = i
        words = []
        for t in toks[start:]:
            low = t.lower()
            if words and low in _CUT:
                break
            if not words and (low in DETERMINERS or low in STOPWORDS):
                continue
            if low in _CUT:
                break
            words.append(t)
            if len(words) >= self.max_words:
                break
        content = _content(words)
        specific = [w for w in content if w not in _GENERIC and w not in VAGUE and not w.endswith("ly")]
        return [tuple(specific)] if specific else []

    # ------------------------------------------------------------------ document side
    def _book(self, docno: str, title: str, text: str) -> Tuple[Set[str], List[str]]:
        got = self._book_cache.get(docno) if docno is not None else None
        if got is None:
            para = next((p for p in re.split(r"\n\s*\n|\n", str(text or "")) if p.strip()), "")[: self.para_chars]
            got = (set(_content(_TOKEN.findall(str(title or "")))), _content(_TOKEN.findall(para)))
            if docno is not None and len(self._book_cache) < 200_000:
                self._book_cache[docno] = got
        return got

    @staticmethod
    def _matches(concept: Tuple[str, ...], title: Set[str], para: List[str]) -> bool:
        if all(c in title for c in concept):
            return True
        n = len(concept)
        return any(tuple(para[i:i + n]) == concept for i in range(len(para) - n + 1))

    # ------------------------------------------------------------------ transformer
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        needs = [self.query_column, "score"]
        hint = (f"needs a result frame with {needs}" if self.index is not None else
                f"needs a result frame with {needs} and 'title' and 'text' columns, or a BookIndex "
                "(NegationPenalty(index=...))")
        with explain_columns(repr(self), hint), pta.validate.any(inp) as v:
            # book text comes from the frame when it has it; only an index makes those columns optional
            v.result_frame([*needs, "title", "text"], mode="columns")
            if self.index is not None:
                v.result_frame(needs, mode="index")
            elif len(inp) == 0 and {"qid", "docno", *needs} <= set(inp.columns):
                # no rows, no books to read: pt.Experiment probes pipelines with such frames
                v.result_frame(needs, mode="empty")
        check_result_frame(inp, repr(self), self.query_column, score=True)
        if v.mode == "index" and len(inp):
            unknown_docnos(inp, self.index.docnos, repr(self))
        out = inp.copy()
        out["negation_penalty"] = pd.Series(0.0, index=out.index, dtype=float)
        if len(out) == 0:
            if "rank" not in out.columns:
                out["rank"] = pd.Series(dtype=int)
            return out
        from_columns = v.mode == "columns"
        per_query = {qid: self.concepts(q) for qid, q in
                     out.drop_duplicates("qid").set_index("qid")[self.query_column].items()}
        rows = out["qid"].map(lambda q: bool(per_query.get(q)))
        if rows.any():
            sub = out.loc[rows]
            if from_columns:
                titles, texts = sub["title"].tolist(), sub["text"].tolist()
            else:
                books = self.index.books_of(sub["docno"].astype(str).tolist())
                titles, texts = books["title"].tolist(), books["text"].tolist()
            hits = []
            for qid, docno, title, text in zip(sub["qid"], sub["docno"], titles, texts):
                key = None if from_columns else str(docno)
                t_set, para = self._book(key, title, text)
                hits.append(any(self._matches(c, t_set, para) for c in per_query[qid]))
            penal = pd.Series(hits, index=sub.index)
            out.loc[penal[penal].index, "negation_penalty"] = self.w
            out["score"] = out["score"].astype(float) - out["negation_penalty"]
        if "rank" in out.columns:
            out = out.drop(columns=["rank"])
        return pt.model.add_ranks(out)

    def __repr__(self):
        return code_repr(self, [], {"w": self.w, "mode": self.mode, "heads": self._heads_arg,
                                    "extra_heads": self._extra_heads_arg, "window": self.window,
                                    "max_words": self.max_words, "para_chars": self.para_chars,
                                    "query_column": self.query_column, "index": self.index})
