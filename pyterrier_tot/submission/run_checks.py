"""Run-file checks: a TREC run file (or result frame) against the TREC ToT submission rules.

    report = ptt.validate_run("run.txt", topics=topics, corpus_docnos=index)   # raises RunFileError if broken
    report = ptt.check_run("run.txt")                                         # never raises; report.ok

Rules (each failure names its line and rule):

============== ===================================================================================
rule           what it checks
============== ===================================================================================
``columns``    six whitespace-separated columns ``qid Q0 docno rank score tag``; ``Q0`` literally,
               an integer rank, a finite score
``tag``        the run tag is 1-25 letters, digits, ``_`` or ``-``, and the same on every line
``unique``     a docno appears at most once per query
``ranks``      the ranks of a query are 1, 2, 3, ... without gaps or repeats
``scores``     scores do not increase with rank
``depth``      at most ``max_per_query`` (1000) results per query
``topics``     every topic has results, and every qid is a topic (when ``topics`` is given)
``corpus``     every docno is in the corpus (when ``corpus_docnos`` is given)
``empty``      the file has at least one line (malformed lines fail ``columns`` instead)
============== ===================================================================================

Without ``topics`` or ``corpus_docnos`` those two rules are not checked, and the report says so
(``OK (format only: topics and corpus not checked)``): a run that passes the format rules alone may still miss a
topic or name a book outside the corpus.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Dict, Iterable, List, Optional, Union

import pandas as pd

from pyterrier_tot.errors import BadInputError

__all__ = ["RunFileError", "RunFailure", "RunReport", "check_run", "validate_run", "fix_ranks", "RULES", "TAG_PATTERN"]

RULES = ("columns", "tag", "unique", "ranks", "scores", "depth", "topics", "corpus", "empty")
TAG_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,25}$")
_SHOWN = 20  # failures spelled out in a message; the rest are counted per rule


@dataclass(frozen=True)
class RunFailure:
    """One broken rule: ``line`` (1-based, ``None`` for a missing topic), ``rule`` (one of :data:`RULES`)."""
    line: Optional[int]
    rule: str
    message: str

    def __str__(self):
        where = f"line {self.line}" if self.line is not None else "file"
        return f"{where}: [{self.rule}] {self.message}"


@dataclass
class RunReport:
    """What :func:`check_run` found: the failures, the number of results (well-formed lines, ``n_lines``), the
    line numbers of the malformed ones (``malformed``: a ``columns`` failure, not counted as results), the number of
    queries and the run tag."""
    source: str
    n_lines: int = 0
    n_queries: int = 0
    tag: Optional[str] = None
    failures: List[RunFailure] = field(default_factory=list)
    #: whether the ``topics`` / ``corpus`` rules ran (they need the topics / the corpus docnos)
    topics_checked: bool = False
    corpus_checked: bool = False
    malformed: List[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def unchecked(self) -> List[str]:
        """The rules that did not run for want of their input: ``"topics"``, ``"corpus"``, both or none."""
        return [r for r, done in (("topics", self.topics_checked), ("corpus", self.corpus_checked)) if not done]

    def scope(self) -> str:
        """What the checks covered, in words: empty when every rule ran, else e.g. ``format only: topics and
        corpus not checked``."""
        missing = self.unchecked
        if not missing:
            return ""
        return ("format only: " if len(missing) == 2 else "") + " and ".join(missing) + " not checked"

    def by_rule(self) -> Dict[str, int]:
        return dict(Counter(f.rule for f in self.failures))

    def summary(self) -> str:
        scope = self.scope()
        bad = self.malformed
        where = ", ".join(map(str, bad[:_SHOWN])) + (f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else "")
        head = (f"{self.source}: {_count(self.n_lines, 'result')}"
                + (f" and {len(bad)} malformed line{'s' * (len(bad) > 1)} (line{'s' * (len(bad) > 1)} {where})"
                   if bad else "")
                + f", {_count(self.n_queries, 'query', 'queries')}, tag {self.tag!r}: "
                + ("OK" if self.ok else f"{_count(len(self.failures), 'failure')} {self.by_rule()}")
                + (f" ({scope})" if scope else ""))
        lines = [head] + [f"  {f}" for f in self.failures[:_SHOWN]]
        if len(self.failures) > _SHOWN:
            lines.append(f"  ... and {len(self.failures) - _SHOWN} more")
        return "\n".join(lines)

    __str__ = summary


def _count(n: int, one: str, many: str = "") -> str:
    """``n`` things, as a reader says it: 1 query, 2 queries."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


class RunFileError(BadInputError):
    """A run file breaks the submission rules; ``report`` holds every failure (line, rule, message)."""

    def __init__(self, report: RunReport):
        super().__init__(report.summary())
        self.report = report


def _frame_lines(frame: pd.DataFrame) -> List[str]:
    """A result frame as the lines of its run file, in frame order (so line numbers are row numbers + 1)."""
    missing = [c for c in ("qid", "docno", "rank", "score") if c not in frame.columns]
    if missing:
        raise BadInputError(f"validate_run: the result frame lacks column(s) {missing}; got {list(frame.columns)}")
    tag_col = next((c for c in ("run_name", "name", "tag") if c in frame.columns), None)
    tags = frame[tag_col].astype(str) if tag_col else pd.Series(["pyterrier_tot"] * len(frame), index=frame.index)
    ranks = frame["rank"]
    if pd.api.types.is_numeric_dtype(ranks):
        # a PyTerrier frame ranks from 0; the file written from it ranks from 1
        ranks = ranks.astype(int) + (1 if len(ranks) and ranks.min() == 0 else 0)
    return [f"{q} Q0 {d} {r} {s!r} {t}"
            for q, d, r, s, t in zip(frame["qid"].astype(str), frame["docno"].astype(str), ranks,
                                     frame["score"].astype(float), tags)]


def _docno_set(corpus_docnos) -> Collection[str]:
    if isinstance(getattr(type(corpus_docnos), "docnos", None), property):
        return set(map(str, corpus_docnos.docnos))  # a BookIndex, in memory or streamed
    if isinstance(corpus_docnos, pd.DataFrame):
        return set(corpus_docnos["docno"].astype(str))
    if isinstance(corpus_docnos, (set, frozenset, dict)):
        return corpus_docnos
    return set(map(str, corpus_docnos))


def _topic_qids(topics) -> List[str]:
    if isinstance(topics, pd.DataFrame):
        return topics["qid"].astype(str).tolist()
    return [str(q) for q in topics]


def check_run(run: Union[str, os.PathLike, pd.DataFrame], topics: Union[pd.DataFrame, Iterable[str], None] = None,
              corpus_docnos=None, max_per_query: int = 1000) -> RunReport:
    """Check a run file (path) or result frame against the rules of :mod:`~pyterrier_tot.submission.run_checks`
    and return a :class:`RunReport` (never raises for a broken run).

    :param topics: the topics the run must answer (a frame with ``qid`` or an iterable of qids).
    :param corpus_docnos: the corpus docnos (a set, an iterable, a frame with ``docno`` or a ``BookIndex``).
    :param max_per_query: most results allowed per query (TREC ToT: 1000).
    """
    if isinstance(run, pd.DataFrame):
        source, lines = "result frame", _frame_lines(run)
    else:
        source = str(run)
        lines = Path(run).read_text(encoding="utf8").splitlines()
    report = RunReport(source, topics_checked=topics is not None, corpus_checked=corpus_docnos is not None)
    fail = lambda line, rule, msg: report.failures.append(RunFailure(line, rule, msg))
    # per query: (rank, score, line) in file order
    entries: Dict[str, list] = defaultdict(list)
    seen: Dict[tuple, int] = {}
    tags: Counter = Counter()
    damaged = set()  # qids with an unreadable line: their rank order is not checked (it would only echo that line)
    docnos = _docno_set(corpus_docnos) if corpus_docnos is not None else None
    for lineno, line in enumerate(lines, 1):
        cols = line.split()
        if len(cols) != 6:
            fail(lineno, "columns", f"expected 6 columns 'qid Q0 docno rank score tag', found {len(cols)}: "
                                    f"{line[:80]!r}")
            damaged.update(cols[:1])
            report.malformed.append(lineno)
            continue
        qid, q0, docno, rank_s, score_s, tag = cols
        before = len(report.failures)
        if q0 != "Q0":
            fail(lineno, "columns", f"column 2 must be 'Q0', not {q0!r}")
        try:
            rank = int(rank_s)
        except ValueError:
            fail(lineno, "columns", f"rank {rank_s!r} is not an integer")
            rank = None
            damaged.add(qid)
        try:
            score = float(score_s)
            if not math.isfinite(score):
                raise ValueError
        except ValueError:
            fail(lineno, "columns", f"score {score_s!r} is not a finite number")
            score = None
        if len(report.failures) > before:  # a columns failure: the line is malformed, not a result
            report.malformed.append(lineno)
        else:
            report.n_lines += 1
        if tag not in tags:  # each distinct tag is reported once, on its first line
            if not TAG_PATTERN.match(tag):
                fail(lineno, "tag", f"run tag {tag!r} must be 1-25 letters, digits, '_' or '-'")
            elif tags:
                fail(lineno, "tag", f"run tag {tag!r} differs from {next(iter(tags))!r} (one tag per file)")
        tags[tag] += 1
        if (qid, docno) in seen:
            fail(lineno, "unique", f"docno {docno!r} repeated for qid {qid!r} (first on line {seen[qid, docno]})")
        else:
            seen[qid, docno] = lineno
        if docnos is not None and docno not in docnos:
            fail(lineno, "corpus", f"docno {docno!r} (qid {qid!r}) is not in the corpus")
        entries[qid].append((rank, score, lineno))
        if len(entries[qid]) == max_per_query + 1:
            fail(lineno, "depth", f"qid {qid!r} has more than {max_per_query} results")
    report.n_queries = len(entries)
    report.tag = tags.most_common(1)[0][0] if tags else None
    for qid, rows in entries.items():
        _check_order(qid, rows, fail, ranks=qid not in damaged)
    if topics is not None:
        wanted = _topic_qids(topics)
        wanted_set = set(wanted)
        for qid in wanted:
            if qid not in entries:
                fail(None, "topics", f"topic {qid!r} has no results")
        for qid, rows in entries.items():
            if qid not in wanted_set:
                fail(rows[0][2], "topics", f"qid {qid!r} is not one of the {len(wanted_set)} topics")
    if report.n_lines == 0 and not report.malformed:  # malformed lines say why there are no results themselves
        fail(None, "empty", "the run has no results")
    report.failures.sort(key=lambda f: (f.line is None, f.line or 0, RULES.index(f.rule)))
    return report


def _check_order(qid: str, rows: list, fail, ranks: bool = True) -> None:
    """Ranks 1..n without gaps or repeats, and scores non-increasing with rank: one failure per rule per query."""
    ranked = sorted((r for r in rows if r[0] is not None), key=lambda r: r[0])
    if ranks and ranked and [r[0] for r in ranked] == list(range(len(ranked))):
        fail(ranked[0][2], "ranks", f"qid {qid!r}: ranks start at 0 (pt.io.write_results keeps a frame's 0-based "
                                    "ranks); TREC wants 1, 2, 3, ...: `pyterrier-tot validate-run --fix` renumbers "
                                    "them, ptt.write_trec_run writes them so")
        ranks = False
    for expected, (rank, _, lineno) in enumerate(ranked if ranks else [], 1):
        if rank != expected:
            what = "repeats a rank" if expected > 1 and rank == expected - 1 else f"should be rank {expected}"
            fail(lineno, "ranks", f"qid {qid!r}: rank {rank} {what} (ranks go 1, 2, 3, ... without gaps)")
            break
    scored = [r for r in ranked if r[1] is not None]
    for prev, cur in zip(scored, scored[1:]):
        if cur[1] > prev[1]:
            fail(cur[2], "scores", f"qid {qid!r}: score {cur[1]} at rank {cur[0]} is above {prev[1]} at rank "
                                   f"{prev[0]} (line {prev[2]}); scores must not increase with rank")
            break


def fix_ranks(run: Union[str, os.PathLike], output: Union[str, os.PathLike, None] = None) -> Path:
    """Rewrite a run file with each query's ranks renumbered 1, 2, 3, ... by descending score (equal scores in
    trec_eval's order, docno descending), through :func:`~pyterrier_tot.evaluation.write_trec_run`; ``output``
    defaults to ``run`` itself. The run tag is kept; a file with several tags or unreadable lines is refused (fix
    those by hand)."""
    from pyterrier_tot.evaluation import read_trec_run, write_trec_run

    report = check_run(run)
    broken = [f for f in report.failures if f.rule not in ("ranks", "scores")]
    if broken:
        raise RunFileError(RunReport(report.source, report.n_lines, report.n_queries, report.tag, broken,
                                     report.topics_checked, report.corpus_checked, report.malformed))
    res = read_trec_run(run)
    return write_trec_run(res, output or run, run_name=report.tag, depth=None)


def validate_run(run: Union[str, os.PathLike, pd.DataFrame], topics: Union[pd.DataFrame, Iterable[str], None] = None,
                 corpus_docnos=None, max_per_query: int = 1000) -> RunReport:
    """:func:`check_run`, raising :class:`RunFileError` (a ``BadInputError``) listing every failure when a rule
    is broken; returns the report of a good run."""
    report = check_run(run, topics, corpus_docnos, max_per_query)
    if not report.ok:
        raise RunFileError(report)
    return report
