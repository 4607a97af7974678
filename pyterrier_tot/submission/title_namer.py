"""LLM title naming, the TREC ToT track's LLM baseline: the LLM names candidate titles, the index maps them to books.

For each query the LLM (an :class:`~pyterrier_tot.llm.client.LLM`: cached, retried) lists up to ``num_titles``
titles, most likely first (prompt ``prompts/title_namer.txt``). Each name is looked up by BM25 over the book titles
(:meth:`BookIndex.bm25` with ``fields=("title",)``); of the ``candidates`` best hits the one whose title (or alias,
where the corpus has an ``aliases`` column) is most similar to the name wins, if the similarity
(:func:`title_similarity`, a ``difflib`` ratio on normalised text, robust to case, punctuation, leading articles,
subtitles and a trailing "by Author") reaches ``min_similarity``. The score comes from the naming rank alone
(``num_titles - rank``), so the LLM's order is kept::

    namer = ptt.TitleNamer(llm, index)                          # the LLM's titles as a ranking
    fused = pta.fusion.RRFusion(index.bm25(), namer)            # reciprocal-rank fusion of two rankings
    fused = index.bm25() >> ptt.WeightedFuser([ptt.base_expert(index, "bm25"), namer])  # namer as a scorer
    top = namer % 5

On a result frame the namer is a scorer (for :class:`~pyterrier_tot.decomposition.weighted_fuser.WeightedFuser`
and ``>>``): every row is kept, a named book scores ``num_titles - rank``, any other 0.

A name that maps to no book is dropped (``.unmatched``); a query whose LLM request failed gets no rows, with a
warning (``.failures``); a query none of whose names maps gets no rows with a
:class:`~pyterrier_tot.errors.NoResultsWarning` (``.empty_results``).

**Constrained mode** (``constrained=True``): the LLM is an in-process causal LM (a generative
:class:`~pyterrier_tot.generative.backbones.Backbone`, e.g. ``generative.smollm2()`` or
``generative.gguf_lm(path)``) and its list is decoded under a prefix trie of the corpus' titles
(:func:`pyterrier_tot.generative.genre.name_titles`): each line it writes is a title of the corpus, none twice,
so every name is a book and nothing is looked up or dropped. Books that share a title share its rank::

    namer = ptt.TitleNamer(generative.smollm2(), index, constrained=True)
"""
from __future__ import annotations

import difflib
import json
import re
import unicodedata
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot.checks import check_query_frame, check_result_frame, report_missing_qids
from pyterrier_tot.errors import NoResultsWarning
from pyterrier_tot.index.retrievers import tokenise_query
from pyterrier_tot.llm.templates import load_prompt

_RANKED = ["docno", "score", "rank"]
_BULLET = re.compile(r"^\s*(?:[-*•]+|\(?\d{1,3}[.):]|#\d{1,3}[.):]?)\s*")
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
_NON_WORD = re.compile(r"[^\w\s]+")
_BY_AUTHOR = re.compile(r"\s+(?:by|-|–|—)\s+[^,;:]{2,60}$", re.IGNORECASE)
_PREAMBLE = re.compile(r"^(?:here (?:are|is)|sure\b)", re.IGNORECASE)


def normalise_title(text: str) -> str:
    """Lower case, accents, punctuation and a leading article removed, spaces collapsed."""
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii").lower()
    text = " ".join(_NON_WORD.sub(" ", text.replace("&", " and ")).split())
    return _ARTICLE.sub("", text)


def _variants(title: str, named: bool) -> List[str]:
    """The forms a title is compared in: whole, and before a subtitle; for a name also without "by Author"."""
    forms = [title]
    if named:
        stripped = _BY_AUTHOR.sub("", title)
        if stripped != title:
            forms.append(stripped)
    for f in list(forms):
        for sep in (":", " - ", " – ", "("):
            if sep in f:
                forms.append(f.split(sep, 1)[0])
    out = []
    for f in forms:
        n = normalise_title(f)
        if n and n not in out:
            out.append(n)
    return out


def title_similarity(name: str, title: str) -> float:
    """How close an LLM's name is to a book title, in [0, 1]: the best ``difflib`` ratio over the normalised
    forms of both (with and without subtitle, and the name without a trailing "by Author")."""
    best = 0.0
    for a in _variants(name, named=True):
        for b in _variants(title, named=False):
            best = max(best, difflib.SequenceMatcher(None, a, b, autojunk=False).ratio())
    return best


def parse_titles(answer: Optional[str], limit: int) -> List[str]:
    """The titles in an LLM answer, in order, at most ``limit``, each once: one per line (numbering, bullets,
    quotes and preambles removed), or a JSON list of strings / of objects with a ``title``, or an object with
    ``title`` / ``titles``."""
    if answer is None:
        return []
    text = answer.strip()
    names: List[str] = []
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if data is not None:
        items = data.get("titles", data.get("title")) if isinstance(data, dict) else data
        for item in items if isinstance(items, list) else [items]:
            value = item.get("title") if isinstance(item, dict) else item
            if isinstance(value, str):
                names.append(value)
    else:
        for line in text.splitlines():
            line = _BULLET.sub("", line).strip().strip("\"'“”‘’*_").strip()
            if not line or line.endswith(":") or _PREAMBLE.match(line):  # a heading, not a title
                continue
            names.append(line)
    out, seen = [], set()
    for n in names:
        n = " ".join(str(n).split())[:300]
        key = normalise_title(n)
        if key and key not in seen:
            seen.add(key)
            out.append(n)
        if len(out) >= limit:
            break
    return out


class TitleNamer(pt.Transformer):
    """Retrieves the books whose titles an LLM names for each query (see the module docstring).

    :param llm: an :class:`~pyterrier_tot.llm.client.LLM` (e.g. ``LlamaServer().llm()``).
    :param index: the :class:`~pyterrier_tot.index.BookIndex` the titles are looked up in.
    :param num_titles: how many titles the LLM is asked for (at most this many rows per query).
    :param candidates: BM25 hits over titles compared with each name.
    :param min_similarity: the least :func:`title_similarity` that maps a name to a book.
    :param prompt: prompt name (``prompts/<name>.txt``); ``{num_titles}`` in it is filled in.
    :param max_query_chars: query characters sent to the LLM.
    :param constrained: decode the list under a trie of the corpus' titles (``llm`` is then a causal
        :class:`~pyterrier_tot.generative.backbones.Backbone`; see the module docstring).
    :param max_query_tokens: in constrained mode, the request is cut to this many of the LM's tokens.
    """

    @keyword_settings
    def __init__(self, llm, index, *, num_titles: int = 10, candidates: int = 10, min_similarity: float = 0.8,
                 prompt: str = "title_namer", prompt_dir: Union[str, Path, None] = None, max_query_chars: int = 6000,
                 max_tokens: Optional[int] = None, constrained: bool = False, max_query_tokens: int = 384):
        if int(num_titles) < 1:
            raise ValueError(f"num_titles must be >= 1, not {num_titles}")
        if int(candidates) < 1:
            raise ValueError(f"candidates must be >= 1, not {candidates}")
        if not 0.0 <= float(min_similarity) <= 1.0:
            raise ValueError(f"min_similarity must be in [0, 1], not {min_similarity}")
        self.llm, self.index = llm, index
        self.num_titles, self.candidates = int(num_titles), int(candidates)
        self.min_similarity = float(min_similarity)
        self.prompt = load_prompt(prompt, prompt_dir)
        self.max_query_chars = int(max_query_chars)
        # about 12 tokens a title; the client's default budget would cut a long list
        self.max_tokens = int(max_tokens) if max_tokens else 16 * self.num_titles + 32
        self.constrained, self.max_query_tokens = bool(constrained), int(max_query_tokens)
        if self.constrained:
            self._constrain(llm, index)
        else:
            self._lookup = index.bm25(fields=("title",), num_results=self.candidates)
        self._titles = index.corpus.set_index("docno")["title"].astype(str)
        self._aliases = self._alias_map(index.corpus)
        self.failures = self.unmatched = self.named = self.empty_results = 0

    def _constrain(self, llm, index) -> None:
        from pyterrier_tot.generative.backbones import CAUSAL, Backbone
        from pyterrier_tot.generative.genre import PromptedBackbone, line_trie, title_ids

        if not isinstance(llm, Backbone) or llm.kind != CAUSAL:
            raise TypeError("TitleNamer(constrained=True) decodes in process: pass a causal LM backbone "
                            "(pyterrier_tot.generative.smollm2() or gguf_lm(path)), not "
                            f"{type(llm).__name__}; an LLM behind an HTTP API cannot be constrained here")
        self._lm = PromptedBackbone(llm, self.prompt, fill={"num_titles": self.num_titles})
        self._lines, self._line_docnos = line_trie(self._lm, title_ids(index.corpus))

    @staticmethod
    def _alias_map(corpus: pd.DataFrame) -> Dict[str, List[str]]:
        if "aliases" not in corpus.columns:
            return {}
        out = {}
        for docno, value in zip(corpus["docno"], corpus["aliases"]):
            if isinstance(value, str):
                value = [v for v in value.split("|")]
            if isinstance(value, (list, tuple)):
                out[str(docno)] = [str(v) for v in value if str(v).strip()]
        return out

    def _messages(self, query: str):
        msgs = self.prompt.messages(query[: self.max_query_chars])
        for m in msgs:
            m["content"] = m["content"].replace("{num_titles}", str(self.num_titles))
        return msgs

    def map_titles(self, names: Sequence[str]) -> List[Tuple[Optional[str], float]]:
        """(docno or None, similarity) for each name: the most similar of its BM25 title hits, if similar enough."""
        searchable = [(i, tokenise_query(n)) for i, n in enumerate(names)]
        searchable = [(i, q) for i, q in searchable if q]
        out: List[Tuple[Optional[str], float]] = [(None, 0.0)] * len(names)
        if not searchable:
            return out
        frame = pd.DataFrame({"qid": [str(i) for i, _ in searchable], "query": [q for _, q in searchable]})
        with warnings.catch_warnings():  # a name with no hit is counted by the caller, not warned about per name
            warnings.simplefilter("ignore", NoResultsWarning)
            hits = self._lookup(frame)
        for qid, group in hits.groupby("qid", sort=False):
            name = names[int(qid)]
            best, best_sim = None, 0.0
            for docno in group.sort_values("rank")["docno"].astype(str):
                titles = [self._titles.get(docno, "")] + self._aliases.get(docno, [])
                sim = max(title_similarity(name, t) for t in titles)
                if sim > best_sim:  # strict: ties go to the better BM25 hit
                    best, best_sim = docno, sim
            if best_sim >= self.min_similarity:
                out[int(qid)] = (best, best_sim)
        return out

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        with pta.validate.any(inp) as v:
            v.result_frame(extra_columns=["query"], mode="score")
            v.query_frame(extra_columns=["query"], mode="retrieve")
        scoring = v.mode == "score"
        cols = list(inp.columns) if scoring else [*[c for c in inp.columns if c not in _RANKED], *_RANKED]
        cols += [c for c in ("score", "rank") if c not in cols]
        if len(inp) == 0:
            return pd.DataFrame(columns=cols)
        if scoring:
            check_result_frame(inp, repr(self), column="query")
        else:
            check_query_frame(inp, repr(self))
        queries = inp.drop_duplicates("qid")[["qid", "query"]].reset_index(drop=True)
        named, failed = self._name(queries)
        if scoring:
            # a candidate the LLM did not name scores 0, below every named one (num_titles - rank >= 1)
            key = dict(zip(zip(named["qid"], named["docno"]), named["score"]))
            out = inp.drop(columns=["score", "rank"], errors="ignore").assign(
                score=[key.get((q, str(d)), 0.0) for q, d in zip(inp["qid"], inp["docno"])])
            return pt.model.add_ranks(out)[cols]
        out = inp.drop(columns=[c for c in _RANKED if c in inp.columns]).merge(named, on="qid")
        out = pt.model.add_ranks(out) if len(out) else out.assign(rank=pd.Series(dtype=int))
        # failed requests were warned about already; the rest found nothing that maps
        report_missing_qids(queries[~queries["qid"].isin(failed)], out, repr(self), self)
        return out[cols]

    def _name(self, queries: pd.DataFrame) -> Tuple[pd.DataFrame, List]:
        """(qid, docno, score) of the books the LLM names for each query, and the qids whose request failed."""
        if self.constrained:
            return self._name_constrained(queries), []
        answers = self.llm.chat_many([self._messages(q) for q in queries["query"]],
                                     prompt_version=self.prompt.version, desc="TitleNamer",
                                     max_tokens=self.max_tokens)
        names = [parse_titles(a, self.num_titles) for a in answers]
        mapped = iter(self.map_titles([n for ns in names for n in ns]))
        rows, failed = [], []
        for qid, answer, ns in zip(queries["qid"], answers, names):
            if answer is None:
                failed.append(qid)
            seen = set()
            for rank in range(len(ns)):
                docno, _ = next(mapped)
                self.named += 1
                if docno is None:
                    self.unmatched += 1
                elif docno not in seen:  # a book named twice keeps its better rank
                    seen.add(docno)
                    rows.append((qid, docno, float(self.num_titles - rank)))
        if failed:
            self.failures += len(failed)
            warnings.warn(f"{self!r}: the LLM request failed for {len(failed)} query(ies), which get no titles: "
                          f"{[str(q) for q in failed[:5]]}", stacklevel=3)
        return pd.DataFrame(rows, columns=["qid", "docno", "score"]), failed

    def _name_constrained(self, queries: pd.DataFrame) -> pd.DataFrame:
        from pyterrier_tot.generative.genre import name_titles

        rows = []
        for qid, query in pt.tqdm(list(zip(queries["qid"], queries["query"])), desc="TitleNamer (constrained)",
                                  disable=len(queries) < 5, mininterval=10):
            src = self._lm.source_ids(str(query), self.max_query_tokens)
            for rank, line in enumerate(name_titles(self._lm, [src], self._lines, self.num_titles)[0]):
                self.named += 1
                rows += [(qid, docno, float(self.num_titles - rank)) for docno in self._line_docnos[line]]
        return pd.DataFrame(rows, columns=["qid", "docno", "score"])

    def __repr__(self):
        # num_titles always shown: how many names the LLM is asked for
        return code_repr(self, [self.llm, self.index], {
            "num_titles": self.num_titles, "candidates": self.candidates, "min_similarity": self.min_similarity,
            "max_query_chars": self.max_query_chars, "max_tokens": self.max_tokens, "constrained": self.constrained,
            "max_query_tokens": self.max_query_tokens},
            defaults={"candidates": 10, "min_similarity": 0.8, "max_query_chars": 6000, "max_tokens": None,
                      "constrained": False, "max_query_tokens": 384})
