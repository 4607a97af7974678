"""ClueDecomposer: an LLM splits a tip-of-the-tongue query into per-field clues (title, author, date, cover,
genre, plot), as in the query-decomposition paper (``../shared/papers/decomposing-complex-queries-tot.md``).

Example::

    from pyterrier_tot import ClueDecomposer, LLM
    dec = ClueDecomposer(LLM(model="gpt-4o-mini"), mode="extractive", strategy="per_field")
    clues = dec(topics)         # adds clue_title … clue_plot (None = N/A) and clue_year (Int64)
    dec.stats                   # per field: asked, found, na, failed, unparsable, ungrounded, copied, repeated

Modes:

- ``extractive``: the clue must be copied from the query. An answer that is not grounded in the query (less
  than ``grounding`` of its words found there, with a fuzzy word match for typos and inflections) is dropped
  and counted as ``ungrounded``;
- ``predictive``: the model's guess of the field's value (a title or author guess, genre tags, a cover
  description, a plot synopsis, the latest possible publication year).

Strategies: ``per_field`` asks one question per field (six calls a query, sent concurrently as the paper does);
``joint`` asks one question returning a JSON object for all fields (one call a query).

The date clue is resolved to ``clue_year``, the latest possible publication year, with
:func:`~pyterrier_tot.decomposition.date_resolver.latest_possible_year` ("15 years ago", "late 90s", "2002-2005");
``reference_year`` (an int, or the name of a column holding each query's year) anchors relative dates.

Copied answers: small models often answer with a few-shot example of the prompt, or with one answer for every
query. An answer equal (or, for long fields, nearly equal) to a few-shot example's answer for that field, or one
that the same field got for more than ``max_repeat_share`` of a batch of at least four queries, becomes N/A and is
counted as ``copied`` / ``repeated``, unless the query itself grounds it (a request that says "fantasy" may get
the genre "fantasy" however often). ``stats_frame()`` shows them beside ``pct_not_na``.

Failures never lose a query: a request that fails after the LLM's retries, or an answer that cannot be parsed,
makes that field N/A, with a warning and a counter in ``stats``. When the LLM fails many requests in a row (its
circuit breaker, ``LLM(max_consecutive_failures=...)``) the stage stops with
:class:`~pyterrier_tot.llm.client.LLMUnavailableError` naming the qids done and pending; their answers are
cached, so a rerun resumes. Prompts are the package files
``prompts/<mode>_<field>.txt`` and ``prompts/joint_<mode>.txt`` (``prompt_dir`` overrides them by name).
"""
from __future__ import annotations

import ast
import difflib
import json
import re
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import explain_columns, is_missing
from pyterrier_tot.checks import check_llm, check_number, check_query_frame
from pyterrier_tot.decomposition.clues import CLUE_FIELDS, YEAR_COLUMN, clue_column
from pyterrier_tot.decomposition.date_resolver import latest_possible_year
from pyterrier_tot.errors import LLMUnavailableError
from pyterrier_tot.llm.templates import load_prompt

MODES = ("extractive", "predictive")
STRATEGIES = ("per_field", "joint")
_COUNTERS = ("asked", "found", "na", "failed", "unparsable", "ungrounded", "copied", "repeated")
#: Batches smaller than this are not checked for one answer repeated across queries.
MIN_REPEAT_BATCH = 4
_WORD = re.compile(r"[0-9a-z]+(?:'[a-z]+)?")
_LABEL = re.compile(r"^\s*(?:(?:the\s+)?(?:" + "|".join(CLUE_FIELDS) + r"|genres|answer|clue|output)"
                    r"(?:\s+clue)?\s*[:=-]\s*)", re.I)
_NA = re.compile(r"^\s*[\"'`(]*\s*(?:n/?a|none|null|unknown|not (?:mentioned|given|stated|specified)|no "
                 r"(?:information|mention|clue)s?)\b\s*[.\"'`)]*\s*$", re.I)


def _words(text: str) -> List[str]:
    return _WORD.findall(str(text).lower())


def groundedness(clue: str, query: str) -> float:
    """Share of the clue's words found in the query (exactly, or a close match of four or more letters)."""
    cw = _words(clue)
    if not cw:
        return 0.0
    qset = set(_words(query))
    qlong = [w for w in qset if len(w) >= 4]
    hit = 0
    for w in cw:
        if w in qset or (len(w) >= 4 and difflib.get_close_matches(w, qlong, n=1, cutoff=0.8)):
            hit += 1
    return hit / len(cw)


#: Fields whose clue is one line: a longer answer keeps its first non-empty line (small models ramble on).
ONE_LINE_FIELDS = frozenset({"title", "author", "date", "genre"})


def clean_answer(text: Optional[str], max_chars: int = 1500, field: Optional[str] = None,
                 one_line: Optional[bool] = None) -> Optional[str]:
    """One field's answer as a clue string, or None for N/A (labels, quotes and N/A spellings handled).
    With ``one_line`` (default: the field is one of :data:`ONE_LINE_FIELDS`) only the first non-empty line is
    kept (at most 200 characters); otherwise, when a field or ``one_line=False`` is given, the first paragraph."""
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        text = ", ".join(str(t) for t in text if not is_missing(t))
    s = str(text).strip()
    if one_line is None and field is not None:
        one_line = field in ONE_LINE_FIELDS
    if one_line is not None:
        if one_line:
            s = next((line.strip() for line in s.splitlines() if line.strip()), "")
            max_chars = min(max_chars, 200)
        else:
            s = re.split(r"\n\s*\n", s, maxsplit=1)[0]
    s = _LABEL.sub("", s, count=1).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'`":
        s = s[1:-1].strip()
    if not s or _NA.match(s) or is_missing(s):
        return None
    return s[:max_chars]


def _norm(text: str) -> str:
    return " ".join(_words(text))


def _same(answer: str, example: str) -> bool:
    """Equal after lower-casing and dropping punctuation; long answers (plots, covers) also when nearly equal."""
    a, b = _norm(answer), _norm(example)
    if a == b:
        return True
    return min(len(a), len(b)) >= 40 and difflib.SequenceMatcher(None, a, b).ratio() >= 0.9


def parse_joint(text: Optional[str], fields: Sequence[str] = CLUE_FIELDS) -> Optional[Dict[str, Optional[str]]]:
    """The field → clue dict of a joint (JSON) answer; None when no field can be read from it."""
    if text is None:
        return None
    s = str(text).strip()
    s = re.sub(r"^```(?:json)?\s*|\s*```$", "", s)
    obj = None
    start, end = s.find("{"), s.rfind("}")
    if start != -1 and end > start:
        blob = s[start:end + 1]
        for loader in (json.loads, ast.literal_eval):
            try:
                obj = loader(blob)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    if not isinstance(obj, dict):  # lenient: "title": "..." lines in a broken object
        obj = {}
        for f in fields:
            m = re.search(r"[\"']?" + f + r"[\"']?\s*:\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^,\n}]*))", s, re.I)
            if m:
                obj[f] = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
        if not obj:
            return None
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    if "genres" in lowered and "genre" not in lowered:
        lowered["genre"] = lowered["genres"]
    if not any(f in lowered for f in fields):
        return None
    return {f: clean_answer(lowered.get(f), field=f) for f in fields}


class ClueDecomposer(pt.Transformer):
    """Adds ``clue_<field>`` columns (None = N/A) and ``clue_year`` to a query frame using an LLM."""

    @keyword_settings
    def __init__(self, llm, mode: str = "extractive", strategy: str = "per_field", *,
                 fields: Sequence[str] = CLUE_FIELDS, grounding: float = 0.8,
                 reference_year: Union[int, str, None] = None, prompt_dir: Union[str, Path, None] = None,
                 query_column: str = "query", max_query_chars: int = 6000, verbose: bool = True,
                 max_repeat_share: Optional[float] = 0.5):
        if mode not in MODES:
            raise ValueError(f"ClueDecomposer mode must be one of {MODES}, not {mode!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"ClueDecomposer strategy must be one of {STRATEGIES}, not {strategy!r}")
        check_number(grounding, "grounding", "ClueDecomposer", 0.0, 1.0)
        for f in fields:
            clue_column(f)  # validates the name
        if not fields:
            raise ValueError("ClueDecomposer needs at least one field")
        self.llm, self.mode, self.strategy, self.fields = llm, mode, strategy, tuple(fields)
        self.grounding = float(grounding)
        self.reference_year, self.prompt_dir = reference_year, prompt_dir
        self.query_column, self.max_query_chars, self.verbose = query_column, int(max_query_chars), verbose
        if max_repeat_share is not None and not 0 < float(max_repeat_share) <= 1:
            raise ValueError(f"ClueDecomposer max_repeat_share must be in (0, 1] or None, not {max_repeat_share!r}")
        self.max_repeat_share = None if max_repeat_share is None else float(max_repeat_share)
        check_llm(llm, "ClueDecomposer")
        if strategy == "joint":
            self.prompts = {"joint": load_prompt(f"joint_{mode}", prompt_dir)}
            parsed = [parse_joint(a, self.fields) or {} for a in self.prompts["joint"].example_answers()]
            self.examples = {f: [p[f] for p in parsed if p.get(f)] for f in self.fields}
        else:
            self.prompts = {f: load_prompt(f"{mode}_{f}", prompt_dir) for f in self.fields}
            self.examples = {f: [c for a in self.prompts[f].example_answers() if (c := clean_answer(a, field=f))]
                             for f in self.fields}
        self.reset_stats()

    # -- counters ---------------------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        self.stats: Dict[str, Dict[str, int]] = {f: {c: 0 for c in _COUNTERS} for f in self.fields}

    def stats_frame(self) -> pd.DataFrame:
        """The counters as a frame, one row per field, with the share of queries that got a clue."""
        df = pd.DataFrame(self.stats).T
        df["pct_not_na"] = 100.0 * df["found"] / df["asked"].where(df["asked"] > 0)
        return df

    # -- transform --------------------------------------------------------------------------------------------
    def _ref_years(self, inp: pd.DataFrame) -> List[Optional[int]]:
        if isinstance(self.reference_year, str):
            return [None if is_missing(v) else int(v) for v in inp[self.reference_year]]
        return [self.reference_year] * len(inp)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        needs = [self.query_column]
        if isinstance(self.reference_year, str):
            needs.append(self.reference_year)
        with explain_columns(repr(self), f"needs a query frame with the column(s) {needs}"):
            pta.validate.query_frame(inp, extra_columns=needs)
        out = inp.copy()
        if len(out) == 0:
            for f in self.fields:
                out[clue_column(f)] = pd.Series(dtype=object)
            out[YEAR_COLUMN] = pd.Series(dtype="Int64")
            return out
        check_query_frame(out, repr(self), self.query_column)
        queries = [str(q)[: self.max_query_chars] for q in out[self.query_column]]
        refs = self._ref_years(out)
        before = {f: dict(c) for f, c in self.stats.items()}
        clues: Dict[str, List[Optional[str]]] = defaultdict(lambda: [None] * len(queries))
        if self.strategy == "joint":
            prompt = self.prompts["joint"]
            answers = self._ask([prompt.messages(q) for q in queries], list(range(len(queries))), out,
                                prompt_version=prompt.version, desc=f"{self.mode} clues (joint)",
                                validate=lambda a: parse_joint(a, self.fields) is not None)
            for i, ans in enumerate(answers):
                parsed = parse_joint(ans, self.fields) if ans is not None else None
                for f in self.fields:
                    st = self.stats[f]
                    st["asked"] += 1
                    if ans is None:
                        st["failed"] += 1
                    elif parsed is None:
                        st["unparsable"] += 1
                    else:
                        clues[f][i] = self._keep(f, parsed[f], queries[i])
        else:
            reqs, where = [], []
            for i, q in enumerate(queries):
                for f in self.fields:
                    reqs.append(self.prompts[f].messages(q))
                    where.append((i, f))
            answers = self._ask(reqs, [i for i, _ in where], out,
                                prompt_version=[self.prompts[f].version for _, f in where],
                                desc=f"{self.mode} clues (per field)")
            for (i, f), ans in zip(where, answers):
                st = self.stats[f]
                st["asked"] += 1
                if ans is None:
                    st["failed"] += 1
                else:
                    clues[f][i] = self._keep(f, clean_answer(ans, field=f), queries[i])
        for f in self.fields:
            self._drop_repeats(f, clues[f], queries)
            col = clues[f]
            self.stats[f]["found"] += sum(c is not None for c in col)
            self.stats[f]["na"] += sum(c is None for c in col)
            out[clue_column(f)] = pd.Series(col, index=out.index, dtype=object)
        dates = clues["date"] if "date" in self.fields else [None] * len(queries)
        out[YEAR_COLUMN] = pd.array([latest_possible_year(d, r) if d else None for d, r in zip(dates, refs)],
                                    dtype="Int64")
        self._warn(before, len(queries))
        return out

    def _ask(self, requests, owner: List[int], inp: pd.DataFrame, **kw) -> List[Optional[str]]:
        """``llm.chat_many``, with a tripped circuit breaker reported by qid (request j belongs to query
        ``owner[j]``): a query is done when every one of its requests was answered."""
        try:
            return self.llm.chat_many(requests, **kw)
        except LLMUnavailableError as exc:
            qids = [str(q) for q in inp["qid"]]
            complete = [True] * len(qids)
            answered = set(exc.done)
            for j, i in enumerate(owner):
                complete[i] = complete[i] and j in answered
            done = [q for q, ok in zip(qids, complete) if ok]
            pending = [q for q, ok in zip(qids, complete) if not ok]

            def few(xs):
                return ", ".join(xs[:10]) + (f" and {len(xs) - 10} more" if len(xs) > 10 else "") if xs else "none"
            raise LLMUnavailableError(
                f"{self!r} stopped after {len(done)} of {len(qids)} queries: queries done: {few(done)}; not done: "
                f"{few(pending)}. {exc}", asked=exc.asked, answered=exc.answered, failed=exc.failed,
                not_sent=exc.not_sent, done=exc.done, qids_done=done, qids_pending=pending) from None

    def _keep(self, field: str, clue: Optional[str], query: str) -> Optional[str]:
        if clue is None:
            return None
        grounded = groundedness(clue, query) >= self.grounding
        if self.mode == "extractive" and not grounded:
            self.stats[field]["ungrounded"] += 1
            return None
        if not grounded and any(_same(clue, ex) for ex in self.examples.get(field, ())):
            self.stats[field]["copied"] += 1
            return None
        return clue

    def _drop_repeats(self, field: str, col: List[Optional[str]], queries: List[str]) -> None:
        """N/A (in place) for one ungrounded answer given to more than ``max_repeat_share`` of the batch."""
        if self.max_repeat_share is None or len(col) < MIN_REPEAT_BATCH:
            return
        counts: Dict[str, int] = defaultdict(int)
        for c in col:
            if c is not None:
                counts[_norm(c)] += 1
        limit = max(2, self.max_repeat_share * len(col))
        for i, c in enumerate(col):
            if c is not None and counts[_norm(c)] > limit and groundedness(c, queries[i]) < self.grounding:
                col[i] = None
                self.stats[field]["repeated"] += 1

    def _warn(self, before: Dict[str, Dict[str, int]], n: int) -> None:
        new = {c: sum(self.stats[f][c] - before[f][c] for f in self.fields)
               for c in ("failed", "unparsable", "copied", "repeated")}
        if new["failed"] or new["unparsable"]:
            warnings.warn(f"{self!r}: over {n} queries, {new['failed']} field answer(s) failed and "
                          f"{new['unparsable']} could not be parsed; those fields are N/A (counters in .stats)",
                          stacklevel=3)
        if new["copied"] or new["repeated"]:
            warnings.warn(f"{self!r}: over {n} queries, {new['copied']} field answer(s) copied a few-shot example of "
                          f"the prompt and {new['repeated']} repeated one answer across most of the batch; those "
                          "fields are N/A (counters copied / repeated in .stats and stats_frame())", stacklevel=3)

    def __repr__(self):
        # mode and strategy always shown (they say which prompts run), the other settings where not the default
        return code_repr(self, [self.llm], {
            "mode": self.mode, "strategy": self.strategy, "fields": list(self.fields), "grounding": self.grounding,
            "reference_year": self.reference_year, "prompt_dir": self.prompt_dir, "query_column": self.query_column,
            "max_query_chars": self.max_query_chars, "max_repeat_share": self.max_repeat_share},
            defaults={"fields": list(CLUE_FIELDS), "grounding": 0.8, "reference_year": None, "prompt_dir": None,
                      "query_column": "query", "max_query_chars": 6000, "max_repeat_share": 0.5})
