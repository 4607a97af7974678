"""A person plays: :func:`interactive_search` asks *you* the clarification questions, in Jupyter or a terminal::

    session = ptt.interactive_search(index.bm25(), index)      # asks for your description, then loops
    session.transcript                                          # turn, question, answer, query, shown, found

Each turn shows the likeliest books (title, author, year and the start of the description) and asks whether the
book is among them (its number ends the search); an empty reply asks the next question, ``q`` stops, and so do
the end of the input (Ctrl-D) and Ctrl-C, keeping what was said (``session.ended`` tells which). Questions come
from any :class:`Clarifier` (an LLM's pool with random / EIG / KL selection), by default the generic pool in
order, so no LLM is needed. Answers go through the same posteriors as simulated games (default: your informative
answers, then the request, with your own words before the questions they answer, ``answer_first=True``; "I don't
remember" changes nothing). :class:`HumanUser` is the person as a game's user, for a
:class:`ClarificationGame` played by hand. Reading goes through ``input()``, which Jupyter turns into a text box;
both ``input`` and ``output`` can be replaced (scripted tests, other front ends).

From a terminal: ``pyterrier-tot ask --index DIR`` (or ``--dataset reddit-tomt-books``); see
``pyterrier-tot ask --help``. It searches with the best retriever already cached (:func:`ask_retriever`: the
recipe, else its fine-tuned base, else zero-shot dense; never training one) and says which in one line;
``--retriever`` picks one. Its exit status: 0 when the search ran (found or not, ``q``, Ctrl-D), 130 after
Ctrl-C, 2 when no description was given (or the retriever asked for is not cached); ``--transcript`` is written
in every case.
"""
from __future__ import annotations

import argparse
import builtins
import json
import numbers
import textwrap
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import pandas as pd
import pyterrier as pt

from pyterrier_tot.clarinet.ask_retriever import RETRIEVERS, ask_retriever
from pyterrier_tot.clarinet.distribution import RetrievalDistribution
from pyterrier_tot.clarinet.game import update_belief
from pyterrier_tot.clarinet.posterior import ExplicitPosterior, LanguagePosterior
from pyterrier_tot.clarinet.questions import GENERIC_QUESTIONS, Clarifier
from pyterrier_tot.clarinet.selection import FirstSelection
from pyterrier_tot.clarinet.simulator import NO_MEMORY
from pyterrier_tot.errors import BadInputError

STOP_WORDS = {"q", "quit", "exit", "stop"}
#: characters of a shown book's description (one line under its title)
DESCRIBE = 110
#: width of the query shown each turn ("Searching for: ..."), wrapped, never cut
WRAP = 100
_ENDED = {"eof": "End of input", "interrupted": "Interrupted"}


class HumanUser:
    """A person answering a game's questions through ``input`` (default ``builtins.input``; an empty reply reads
    "I don't remember."). The books asked about are not shown: the person knows their own book."""

    def __init__(self, input: Optional[Callable[[str], str]] = None, prompt: str = "> "):
        self.input, self.prompt = input, prompt

    def answer(self, questions: Sequence[str], docnos: Sequence[str] = ()) -> List[str]:
        read = self.input or builtins.input
        return [(read(f"{q}\n{self.prompt}") or "").strip() or NO_MEMORY for q in questions]

    def __repr__(self):
        return "HumanUser()"


class SearchSession:
    """What :func:`interactive_search` returns: ``transcript`` (one row per turn), ``found`` (the docno chosen,
    or None), ``title``, ``turns`` (questions asked) and ``ended``: how the search ended (``"found"``,
    ``"stopped"`` by ``q``, ``"turns"`` when the questions ran out, ``"eof"`` when the input ended (Ctrl-D),
    ``"interrupted"`` by Ctrl-C)."""

    def __init__(self, request: str):
        self.request, self.found, self.title, self.ended = request, None, None, None
        self.rows: List[dict] = []

    @property
    def transcript(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["turn", "question", "answer", "query", "shown", "found"])

    @property
    def turns(self) -> int:
        return sum(r["question"] is not None for r in self.rows)

    def to_json(self, path) -> None:
        Path(path).write_text(json.dumps({"request": self.request, "found": self.found, "title": self.title,
                                          "ended": self.ended, "transcript": self.rows}, indent=1, default=str))

    def __repr__(self):
        state = f"found {self.title!r}" if self.found else "not found"
        return f"SearchSession({self.turns} question(s), {state})"


def _known(value) -> bool:
    try:
        return not pd.isna(value) and str(value).strip() not in ("", "nan", "None", "<NA>")
    except (TypeError, ValueError):  # a list or array is known
        return True


def _short(text, width: int) -> str:
    """``text`` on one line, cut at a word before ``width`` characters (``...`` marks the cut)."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[: width - 3].rsplit(" ", 1)[0] if " " in text[: width - 3] else text[: width - 3]
    return cut.rstrip(" ,;:.") + "..."


def _line(book) -> str:
    """A shown book: its title, with author and year where known."""
    extra = [str(book.get(f)) for f in ("author", "year") if _known(book.get(f))]
    if extra and _known(book.get("year")) and extra[-1].endswith(".0"):  # a year read as a float
        extra[-1] = extra[-1][:-2]
    return f"{book['title']}" + (f" ({', '.join(extra)})" if extra else "")


def _check_count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BadInputError(f"interactive_search: {name} must be a whole number, not {value!r}")
    if value < least:
        raise BadInputError(f"interactive_search: {name} must be at least {least}, not {value}")
    return int(value)


def interactive_search(retriever: pt.Transformer, index, request: Optional[str] = None,
                       clarifier: Optional[Clarifier] = None, posterior=None, turns: int = 5, show: int = 5,
                       k: int = 100, temperature: float = 0.05, input: Optional[Callable[[str], str]] = None,
                       output: Optional[Callable[[str], None]] = None, describe: int = DESCRIBE) -> SearchSession:
    """Search for a half-remembered book with a person answering (see the module doc). ``retriever``: any
    retriever over ``index``'s docnos; ``posterior``: a :class:`LanguagePosterior` (default: without an LLM, the
    person's words first, ``answer_first=True``) or an :class:`ExplicitPosterior`; ``turns``: at most this many
    questions (0: only the first ranking); ``show``: books shown per turn, each with author, year and the start
    of its description (``describe`` characters; 0: none). The end of the input (Ctrl-D) or Ctrl-C ends the
    search with what was said so far (``session.ended``) instead of raising."""
    read = input or builtins.input
    say = output or (lambda text: print(text, flush=True))
    turns, show, describe = _check_count("turns", turns, 0), _check_count("show", show, 1), int(describe)
    clarifier = clarifier or Clarifier(None, index, pool=GENERIC_QUESTIONS, selection=FirstSelection())
    posterior = posterior if posterior is not None else LanguagePosterior(answer_first=True)
    if not isinstance(posterior, (LanguagePosterior, ExplicitPosterior)):
        raise BadInputError(f"posterior must be a LanguagePosterior or an ExplicitPosterior, not {posterior!r}")
    user = HumanUser(read)
    if request is None:
        try:
            request = read("Describe the book you are looking for (anything you remember):\n> ")
        except (EOFError, KeyboardInterrupt) as e:
            session = SearchSession("")
            session.ended = "eof" if isinstance(e, EOFError) else "interrupted"
            say(f"\n{_ENDED[session.ended]}: no description, nothing searched.")
            return session
    request = " ".join(str(request or "").split())
    if not request:
        raise BadInputError("interactive_search: the description of the book is empty")
    session = SearchSession(request)
    dist = RetrievalDistribution(k=k, temperature=temperature)

    def retrieve(frame):
        return dist(retriever(frame[["qid", "query"]]))[["qid", "docno", "score", "prob", "rank"]]

    state = pd.DataFrame({"qid": ["you"], "query": [request], "query_0": [request], "history": [[]], "forbid": [[]]})
    asked = None  # a question answered whose turn is not shown yet
    try:
        res = retrieve(state)
        for t in range(turns + 1):
            question, answer = asked or (None, None)
            top = res.sort_values("rank").head(show)
            books = index.books_of(top["docno"].astype(str).tolist()) if len(top) else top.assign(title=[])
            row = {"turn": t, "question": question, "answer": answer, "query": state.loc[0, "query"],
                   "shown": list(books["docno"].astype(str)) if len(top) else [], "found": None}
            session.rows.append(row)
            asked = None
            if t and isinstance(posterior, LanguagePosterior):
                say("\n" + textwrap.fill(" ".join(str(state.loc[0, "query"]).split()), WRAP,
                                         initial_indent="Searching for: ", subsequent_indent="  "))
            say(f"\nTurn {t}: the likeliest books now" if len(books) else f"\nTurn {t}: nothing found yet")
            for i, (_, book) in enumerate(books.iterrows(), 1):
                say(f"  {i}. {_line(book)}")
                if describe > 0 and _known(book.get("text")):
                    say(f"     {_short(book['text'], describe)}")
            nxt = "Enter or q ends it (no questions left)" if t == turns else "Enter asks another question; q stops"
            reply = (read(f"Is your book here? Its number ends the search; {nxt}.\n> ") or "").strip().lower()
            if reply.isdigit() and 1 <= int(reply) <= len(books):
                row["found"] = session.found = str(books.iloc[int(reply) - 1]["docno"])
                session.title = str(books.iloc[int(reply) - 1]["title"])
                session.ended = "found"
                say(f"Found: {session.title}")
                return session
            if reply in STOP_WORDS or t == turns:
                session.ended = "stopped" if reply in STOP_WORDS else "turns"
                break
            ranked = res.sort_values("rank")
            cands = {"you": (ranked["docno"].astype(str).tolist(), ranked["prob"].to_numpy(float))}
            question = clarifier.ask(state, cands, turn=t + 1)[0][0]
            answer = user.answer([question])[0]
            asked = (question, answer)
            state["history"] = [state.loc[0, "history"] + [(question, answer)]]
            res = update_belief(posterior, retrieve, state, res, [question], [answer])
    except (EOFError, KeyboardInterrupt) as e:
        session.ended = "eof" if isinstance(e, EOFError) else "interrupted"
        if asked:  # answered, but stopped before its turn was shown: keep the answer
            session.rows.append({"turn": len(session.rows), "question": asked[0], "answer": asked[1],
                                 "query": None, "shown": [], "found": None})
        say(f"\n{_ENDED[session.ended]}: the search stopped after {session.turns} question(s).")
        return session
    say("Search ended without the book.")
    return session


# -- the terminal: pyterrier-tot ask ----------------------------------------------------------------------------------
def _count(least: int):
    """An argparse type: a whole number of at least ``least`` (argparse names the option in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value
    return parse


def add_ask_parser(sub) -> None:
    """The ``ask`` subcommand of ``pyterrier-tot`` (added by :func:`pyterrier_tot.submission.cli.build_parser`)."""
    s = sub.add_parser("ask", help="find a book by answering clarification questions (interactive)")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="a BookIndex folder")
    where.add_argument("--dataset", help="a dataset name, e.g. reddit-tomt-books (its index is built if needed)")
    s.add_argument("--retriever", choices=RETRIEVERS, default=None,
                   help="recipe (the trained recipe), base (its fine-tuned base), dense (--model, default MiniLM) or "
                        "bm25; default: the first of these that is cached (dense with --model); never trains")
    s.add_argument("--model", help="dense retriever model (name or folder)")
    s.add_argument("--request", help="your description of the book (asked for when left out)")
    s.add_argument("--turns", type=_count(0), default=5, help="at most this many questions (default 5; 0: only "
                                                              "the first ranking)")
    s.add_argument("--show", type=_count(1), default=5, help="books shown each turn (default 5)")
    s.add_argument("--posterior", choices=["language", "explicit"], default="language",
                   help="language: your answers (your words first), then the request (default); explicit: "
                        "Bayes' rule")
    s.add_argument("--describe", type=_count(0), default=DESCRIBE, help="characters of each shown book's "
                   f"description (default {DESCRIBE}; 0: titles, authors and years only)")
    s.add_argument("--llm-model", help="an OpenAI-compatible model that writes the questions (default: generic "
                                       "questions, no LLM)")
    s.add_argument("--base-url", help="the LLM server's URL (with --llm-model)")
    s.add_argument("--gguf", help="a GGUF file served locally by llama.cpp to write the questions")
    s.add_argument("--transcript", help="write the session (JSON) here, also when it ends early (Ctrl-D, Ctrl-C)")
    s.set_defaults(func=cmd_ask)


def cmd_ask(args) -> int:
    import contextlib

    from pyterrier_tot.index import BookIndex

    if args.index:
        index, dataset = BookIndex(args.index), None
    else:
        from pyterrier_tot.datasets import get_dataset

        dataset = get_dataset(args.dataset)
        index = BookIndex(dataset)
    retriever, which = ask_retriever(index, dataset, args.retriever, args.model)
    print(which, flush=True)
    posterior = (ExplicitPosterior(index.dense_scorer(args.model)) if args.posterior == "explicit"
                 else LanguagePosterior(answer_first=True))
    with contextlib.ExitStack() as stack:
        clarifier = None
        if args.gguf or args.llm_model:
            from pyterrier_tot.llm import LLM, LlamaServer

            if args.gguf:
                llm = stack.enter_context(LlamaServer(model_path=args.gguf, n_threads=1)).llm(verbose=False)
            else:
                llm = LLM(model=args.llm_model, base_url=args.base_url, verbose=False)
            clarifier = Clarifier(llm, index, pool_size=8)
        session = interactive_search(retriever, index, request=args.request, clarifier=clarifier,
                                     posterior=posterior, turns=args.turns, show=args.show, describe=args.describe)
    if args.transcript:
        session.to_json(args.transcript)
        print(f"transcript written to {args.transcript}", flush=True)
    if session.ended == "interrupted":
        return 130
    return 0 if session.request else 2
