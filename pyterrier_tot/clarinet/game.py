"""The clarification game: T turns of question, simulated answer and posterior update per query, with the
results of every turn as a frame ``pt.Experiment`` can score::

    game = ClarificationGame(retriever, clarifier, OracleUser(index, encode), qrels, turns=3)
    record = game.play(topics)              # transcript + result frames of turns 0..3 (0: the initial query)
    table = turn_table({"random": game}, topics, qrels)     # turn, MRR, top-1, cumulative top-1
    plot_turns(table, "turns.png")

Turn 0 is the retriever on the initial query. Each later turn the clarifier asks one question given the
current belief (the top candidates of the last turn), the simulated user answers about the gold book (the first
relevant docno of the qrels), and the posterior moves: the language posterior (the default: the informative answers,
then the request, no LLM) re-retrieves with the new query; the explicit posterior re-weights the turn-0
candidates (its results are those ``k`` books, scored by their probability). Games are played once per qid and
kept (``game.turn(t)`` reuses them), and every LLM call is cached by the LLM layer, so replaying a game costs
nothing. The user is any object with ``answer(questions, docnos)``: an :class:`OracleUser`, a
:class:`UserSimulator`, a :class:`HumanUser` (a person), a control.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Union

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import Shown, code_repr, keyword_settings
from pyterrier_tot.checks import add_ranks, check_query_frame
from pyterrier_tot.clarinet.distribution import RetrievalDistribution
from pyterrier_tot.clarinet.posterior import ExplicitPosterior, LanguagePosterior
from pyterrier_tot.errors import BadInputError


def update_belief(posterior, retrieve, state: pd.DataFrame, res: pd.DataFrame, questions, answers) -> pd.DataFrame:
    """One posterior step: ``state`` (qid, query_0, history with the new answers; its ``query`` is updated) and
    the last results ``res`` (qid, docno, score, prob, rank) give the next results. A :class:`LanguagePosterior`
    rewrites the query and calls ``retrieve(frame)``; an :class:`ExplicitPosterior` re-weights ``res``."""
    if isinstance(posterior, LanguagePosterior):
        rewritten = posterior(state[["qid", "query_0", "history"]].rename(columns={"query_0": "query"}))
        state["query"] = rewritten["query"].tolist()
        return retrieve(rewritten)
    asked = {qid: (q, a) for qid, q, a in zip(state["qid"], questions, answers)}
    groups = [(qid, g) for qid, g in res.sort_values(["qid", "rank"]).groupby("qid", sort=False)]
    if not groups:
        return res
    posts = posterior.update_many([(qid, g["docno"].tolist(), g["prob"].to_numpy(float), *asked[qid])
                                   for qid, g in groups])
    parts = [g.assign(prob=post, score=post) for (_, g), post in zip(groups, posts)]
    return add_ranks(pd.concat(parts, ignore_index=True).drop(columns=["rank"]))


class ClarificationGame(pt.Transformer):
    """Plays ``turns`` questions per query (see the module doc); as a transformer it returns the last turn's
    results. ``posterior``: a :class:`LanguagePosterior` (default: ``LanguagePosterior()``, no LLM) or an
    :class:`ExplicitPosterior`. ``index``: where the gold titles come from (default: the user's or the
    clarifier's), so that no question names the book."""

    @keyword_settings
    def __init__(self, retriever: pt.Transformer, clarifier, simulator, qrels: pd.DataFrame, *, turns: int = 3,
                 posterior: Union[LanguagePosterior, ExplicitPosterior, None] = None, k: int = 100,
                 temperature: float = 0.05, name: Optional[str] = None, verbose: bool = True, index=None):
        posterior = posterior if posterior is not None else LanguagePosterior()
        self.index = index or getattr(simulator, "index", None) or getattr(clarifier, "index", None)
        self.retriever, self.clarifier, self.simulator = retriever, clarifier, simulator
        self.posterior, self.turns, self.k = posterior, int(turns), int(k)
        self.distribution = RetrievalDistribution(k=k, temperature=temperature)
        self._given_name, self._given_index = name, index
        rel = qrels[qrels["label"] > 0] if "label" in qrels.columns else qrels
        self.gold: Dict[str, str] = {}
        for q, d in zip(rel["qid"], rel["docno"]):
            self.gold.setdefault(str(q), str(d))  # a known item has one book; the first relevant one is taken
        self.name = name or type(posterior).__name__
        self.verbose = verbose
        self._results: Dict[int, List[pd.DataFrame]] = {t: [] for t in range(self.turns + 1)}
        self._transcript: List[dict] = []
        self._played: set = set()

    # -- playing ---------------------------------------------------------------------------------------------
    def _retrieve(self, frame: pd.DataFrame) -> pd.DataFrame:
        res = self.distribution(self.retriever(frame[["qid", "query"]]))
        return res[["qid", "docno", "score", "prob", "rank"]]

    @staticmethod
    def _cands(res: pd.DataFrame) -> dict:
        return {q: (g["docno"].tolist(), g["prob"].to_numpy(float))
                for q, g in res.sort_values(["qid", "rank"]).groupby("qid", sort=False)}

    def play(self, topics: pd.DataFrame) -> "ClarificationGame":
        """Play the queries of ``topics`` not played yet (each must have a relevant docno in the qrels)."""
        pta.validate.query_frame(topics, extra_columns=["query"])
        check_query_frame(topics, repr(self))
        new = topics[~topics["qid"].astype(str).isin(self._played)][["qid", "query"]].copy()
        new["qid"] = new["qid"].astype(str)
        if len(new) == 0:
            return self
        missing = [q for q in new["qid"] if q not in self.gold]
        if missing:
            raise BadInputError(f"{self!r}: no relevant docno in the qrels for qid(s) {missing[:5]}; a game needs "
                                "the gold book to simulate the user")
        titles = {}
        if self.index is not None:
            books = self.index.books_of(new["qid"].map(self.gold))
            titles = dict(zip(books["docno"].astype(str), books["title"]))
        state = pd.DataFrame({"qid": new["qid"], "query": new["query"], "query_0": new["query"],
                              "history": [[] for _ in range(len(new))],
                              "forbid": [[titles[self.gold[q]]] if self.gold[q] in titles else []
                                         for q in new["qid"]]})
        res = self._retrieve(new)
        self._results[0].append(res)
        self._log(res, state, 0)
        turns = range(1, self.turns + 1)
        for t in pt.tqdm(turns, desc=f"{self.name}: turns", unit="turn") if self.verbose else turns:
            questions, pools, texts = self.clarifier.ask(state, self._cands(res), turn=t)
            answers = self.simulator.answer(questions, [self.gold[q] for q in state["qid"]])
            state["history"] = [h + [(q, a)] for h, q, a in zip(state["history"], questions, answers)]
            res = self._update(state, res, questions, answers)
            self._results[t].append(res)
            self._log(res, state, t, questions, answers, pools, texts)
        self._played.update(new["qid"])
        return self

    def _update(self, state, res, questions, answers) -> pd.DataFrame:
        return update_belief(self.posterior, self._retrieve, state, res, questions, answers)

    def _log(self, res, state, turn, questions=None, answers=None, pools=None, texts=None) -> None:
        ranks = {q: int(g.loc[g["docno"] == self.gold[q], "rank"].min()) + 1 if (g["docno"] == self.gold[q]).any()
                 else None for q, g in res.groupby("qid")}
        for i, r in enumerate(state.itertuples(index=False)):
            self._transcript.append({"qid": r.qid, "turn": turn, "question": questions[i] if questions else None,
                                     "answer": answers[i] if answers else None, "query": r.query,
                                     "pool": pools[i] if pools else None, "prompt": texts[i] if texts else None,
                                     "gold_rank": ranks.get(r.qid)})

    # -- results -------------------------------------------------------------------------------------------------
    @property
    def transcript(self) -> pd.DataFrame:
        """One row per qid and turn: question, answer, query retrieved with, pool, the question prompt's text,
        gold rank (from 1; None when outside the top ``k``)."""
        return pd.DataFrame(self._transcript, columns=["qid", "turn", "question", "answer", "query", "pool",
                                                       "prompt", "gold_rank"])

    def results(self, turn: int) -> pd.DataFrame:
        if not 0 <= turn <= self.turns:
            raise ValueError(f"turn must be in 0..{self.turns}, not {turn!r}")
        parts = self._results[turn]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["qid", "docno", "score", "prob", "rank"])

    def turn(self, t: int) -> pt.Transformer:
        """A transformer giving turn ``t``'s results for its topics (playing the games it needs)."""
        return GameTurn(self, t)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return GameTurn(self, self.turns).transform(inp)

    def __repr__(self):
        # the qrels as what they are (a frame); the posterior always shown (it names the game)
        return code_repr(self, [self.retriever, self.clarifier, self.simulator, Shown(f"qrels of {len(self.gold)} "
                                                                                       "queries")],
                         {"turns": self.turns, "posterior": self.posterior, "k": self.k,
                          "temperature": self.distribution.temperature, "name": self._given_name,
                          "index": self._given_index}, defaults={"turns": 3, "k": 100, "temperature": 0.05,
                                                                 "name": None, "index": None})


class GameTurn(pt.Transformer):
    """Turn ``t`` of a :class:`ClarificationGame` as a retriever: query frame in, that turn's ranking out."""

    def __init__(self, game: ClarificationGame, t: int):
        self.game, self.t = game, int(t)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        cols = ["qid", "docno", "score", "prob", "rank"]
        if len(inp) == 0:
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("qid", "docno") else float) for c in cols})
        self.game.play(inp)
        res = self.game.results(self.t)
        return res[res["qid"].isin(inp["qid"].astype(str))].reset_index(drop=True)

    def __repr__(self):
        return f"{self.game.name}@turn{self.t}"
