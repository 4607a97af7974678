"""Numpy evaluation of fuser weight vectors over a cached feature matrix, and the weight search of
:meth:`WeightedFuser.fit`: the experts run once, then each weight setting is measured without touching pandas or
the experts. Recall@k, Success@k and RR come from the ranks of the relevant books alone (they equal ir_measures'
values; the fit tests compare them); any other measure goes through ir_measures on the full ranking.
Queries may carry weights (:meth:`FastEvaluator.reweighted`): a bootstrap resample is the slice with counts."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np
import pandas as pd

from pyterrier_tot._plumbing.util import require_columns
from pyterrier_tot.console import bar as progress_bar

#: Measures computed from the relevant rows' ranks (others go through ir_measures, which cannot weigh queries).
FAST_MEASURES = ("R", "Success", "RR")
#: Above this many (relevant row x candidate) comparisons, the relevant ranks come from a full sort.
PAD_LIMIT = 20_000_000


class FastEvaluator:
    """Evaluates weight vectors on a cached feature frame with numpy (no re-running of experts)."""

    def __init__(self, feats: pd.DataFrame, qrels: pd.DataFrame, names: Sequence[str]):
        require_columns(qrels, ["qid", "docno"], "WeightedFuser.fit qrels")
        q = qrels.copy()
        if "label" not in q.columns:
            q["label"] = 1
        q["qid"] = q["qid"].astype(str)
        q["docno"] = q["docno"].astype(str)
        q = q.drop_duplicates(["qid", "docno"], keep="last")  # a pair listed twice is one relevant book
        self.qrels = q
        qids = feats["qid"].astype(str).to_numpy()
        order = np.argsort(qids, kind="stable")
        self.qid_sorted = qids[order]
        self.X = feats[list(names)].to_numpy(dtype=float)[order]
        self.docnos = feats["docno"].astype(str).to_numpy()[order]
        rel = dict(zip(zip(q["qid"], q["docno"]), q["label"].astype(float)))
        self.gain = np.array([rel.get(k, 0.0) for k in zip(self.qid_sorted, self.docnos)])
        uq, self.starts = np.unique(self.qid_sorted, return_index=True)
        self.uq = uq
        # the mean runs over the queries of the candidate frame (qrels may cover a larger split) that have qrels:
        # like ir_measures, a query without any judgement is left out (one judged only 0 counts, with 0)
        self.n_queries = max(len(uq), 1)
        self.qweight = np.ones(len(uq))
        self.judged = np.isin(uq, q["qid"].unique()).astype(float)
        if len(uq) and not self.judged.any():
            raise ValueError(f"no query of the candidate frame has qrels (candidate qids {list(uq[:3])}, qrels qids "
                             f"{list(q['qid'].unique()[:3])}): the fit would have nothing to measure")
        self.n_rel = q[q["label"] > 0].groupby("qid").size().reindex(uq).fillna(0).to_numpy()
        sizes = np.diff(np.append(self.starts, len(self.qid_sorted)))
        self.group = np.repeat(np.arange(len(uq)), sizes)
        # equal scores in trec_eval's order, docno descending, for every measure (as ``tot_experiment`` and
        # ``write_trec_run`` order them; ir_measures' own RR@k provider would take them ascending)
        self._tb_asc = pd.factorize(self.docnos, sort=True)[0]
        self._tiebreak = self._tb_asc.max(initial=0) - self._tb_asc
        # each relevant row is compared with the rows of its own query, laid out as a padded matrix
        self._rel = np.flatnonzero(self.gain > 0)
        pos = np.arange(len(self.group)) - self.starts[self.group] if len(self.group) else np.zeros(0, int)
        self._pad = np.full((len(uq), int(sizes.max()) if len(sizes) else 0), -1)
        self._pad[self.group, pos] = np.arange(len(self.group))
        self._pad_tb = np.where(self._pad >= 0, self._tiebreak[self._pad], np.iinfo(np.int64).max)
        self._pad_tb_asc = np.where(self._pad >= 0, self._tb_asc[self._pad], np.iinfo(np.int64).max)

    def reweighted(self, qweight: np.ndarray) -> "FastEvaluator":
        """The same evaluator with a weight per query (in ``self.uq`` order), e.g. bootstrap counts."""
        other = object.__new__(FastEvaluator)
        other.__dict__.update(self.__dict__)
        other.qweight = np.asarray(qweight, dtype=float)
        return other

    def ranks(self, w: np.ndarray, ascending: bool = False) -> np.ndarray:
        """Each row's rank in its query under weights ``w``, equal scores by docno (descending by default)."""
        s = self.X @ w
        order = np.lexsort((self._tb_asc if ascending else self._tiebreak, -s, self.group))
        ranks = np.empty(len(s), dtype=int)
        pos = np.arange(len(s)) - self.starts[self.group[order]]
        ranks[order] = pos + 1
        return ranks

    def relevant_ranks(self, w: np.ndarray, ascending: bool = False) -> np.ndarray:
        """The rank (as :meth:`ranks` gives it) of each relevant row (``self._rel``) under weights ``w``."""
        if len(self._rel) * self._pad.shape[1] > PAD_LIMIT:  # many relevant rows x long lists: sort instead
            return self.ranks(np.asarray(w, dtype=float), ascending)[self._rel]
        tb, pad_tb = (self._tb_asc, self._pad_tb_asc) if ascending else (self._tiebreak, self._pad_tb)
        s = self.X @ np.asarray(w, dtype=float)
        rel, g = self._rel, self.group[self._rel]
        rows = self._pad[g]
        scores = np.where(rows >= 0, s[rows], -np.inf)
        sr = s[rel][:, None]
        before = (scores > sr) | ((scores == sr) & (pad_tb[g] < tb[rel][:, None]))
        return before.sum(axis=1) + 1

    def _mean(self, per_q: np.ndarray) -> float:
        weight = self.qweight * self.judged
        total = weight.sum()
        return float(per_q @ weight / total) if total > 0 else 0.0

    def measures(self, w: np.ndarray, measures: Sequence) -> np.ndarray:
        """The value of each of ``measures`` for weights ``w`` (the relevant books are ranked once)."""
        w = np.asarray(w, dtype=float)
        rr = self.relevant_ranks(w)
        g = self.group[self._rel]
        out = []
        for m in measures:
            name, cutoff = m.NAME, m.params.get("cutoff")
            if name in ("R", "Success") and cutoff:
                hit = np.bincount(g, weights=(rr <= cutoff).astype(float), minlength=len(self.uq)).astype(float)
                per_q = (hit > 0).astype(float) if name == "Success" else \
                    np.divide(hit, self.n_rel, out=np.zeros_like(hit), where=self.n_rel > 0)
                out.append(self._mean(per_q))
            elif name == "RR" and cutoff:
                per_q = np.zeros(len(self.uq))
                np.maximum.at(per_q, g, np.where(rr <= cutoff, 1.0 / rr, 0.0))
                out.append(self._mean(per_q))
            elif name == "RR":
                inv = 1.0 / rr
                per_q = np.zeros(len(self.uq))
                np.maximum.at(per_q, g, inv)
                out.append(self._mean(per_q))
            else:
                out.append(self._ir_measures(w, m))
        return np.array(out)

    def measure(self, w: np.ndarray, measure) -> float:
        return float(self.measures(w, [measure])[0])

    def _ir_measures(self, w: np.ndarray, measure) -> float:
        import ir_measures

        if not np.all(self.qweight == 1):
            raise ValueError(f"{measure} goes through ir_measures, which cannot weigh queries; fit with R@k, "
                             "Success@k or RR to resample queries")
        ranks = self.ranks(w)
        run = pd.DataFrame({"query_id": self.qid_sorted, "doc_id": self.docnos, "score": -ranks.astype(float)})
        qrels = self.qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
        qrels["relevance"] = qrels["relevance"].astype(int)
        return float(ir_measures.calc_aggregate([measure], qrels, run)[measure])

    def objective(self, w: np.ndarray, measure) -> float:
        """``measure`` (or the mean of a list of measures), ties broken by MRR."""
        from ir_measures import RR

        parts = list(measure) if isinstance(measure, (list, tuple)) else [measure]
        vals = self.measures(w, [*parts, RR])
        return float(np.mean(vals[:-1])) + 1e-3 * vals[-1]


def parse_metric(metric):
    """One measure, or a list of them (a list, or a string naming several) whose mean the fit maximises."""
    from pyterrier_tot.evaluation import parse_measure, parse_measures

    if isinstance(metric, (list, tuple)) or (isinstance(metric, str) and "," in metric):
        return parse_measures(metric)
    return parse_measure(metric)


def check_bags(bags, measures: Sequence) -> int:
    """``bags`` as a whole number >= 0; with bags, every measure must be one the evaluator can weigh per query."""
    if isinstance(bags, bool) or not float(bags).is_integer() or bags < 0:
        raise ValueError(f"WeightedFuser.fit: bags must be a whole number >= 0, not {bags!r}")
    slow = [str(m) for m in measures if m.NAME not in FAST_MEASURES or (m.NAME != "RR" and not m.params.get("cutoff"))]
    if bags and slow:
        raise ValueError(f"WeightedFuser.fit: bags resample queries, which {slow} (through ir_measures) cannot be "
                         "weighed for; use R@k, Success@k or RR")
    return int(bags)


def coordinate_ascent(evaluator: FastEvaluator, w: np.ndarray, measure, grid: Sequence[float], rounds: int,
                      feasible: Callable[[np.ndarray], bool], on_step: Optional[Callable] = None) -> np.ndarray:
    """Weights from ``w`` on, one coordinate at a time over ``grid``, keeping a change only if it raises the
    objective and stays ``feasible``; ``rounds`` passes at most. ``on_step(w, objective)`` sees each kept step."""
    w = np.asarray(w, dtype=float).copy()
    best = evaluator.objective(w, measure)
    if on_step:
        on_step(w, best)
    for _ in range(rounds):
        improved = False
        for j in range(len(w)):
            for g in grid:
                if g == w[j]:
                    continue
                trial = w.copy()
                trial[j] = g
                if not trial.any():
                    continue
                val = evaluator.objective(trial, measure)
                if val > best + 1e-12 and feasible(trial):
                    best, w, improved = val, trial, True
                    if on_step:
                        on_step(w, best)
        if not improved:
            break
    return w


def floor_check(evaluator: FastEvaluator, floor_w: Optional[np.ndarray], held: List) -> Callable:
    """A feasibility test: none of ``held`` below its value for ``floor_w`` on the evaluator's queries."""
    if floor_w is None:
        return lambda v: True
    minimum = evaluator.measures(floor_w, held) - 1e-12
    return lambda v: bool((evaluator.measures(v, held) >= minimum).all())


def bagged_weights(evaluator: FastEvaluator, init: np.ndarray, floor_w: Optional[np.ndarray], held: List, measure,
                   grid: Sequence[float], rounds: int, bags: int, seed: int) -> np.ndarray:
    """The mean of the weights that :func:`coordinate_ascent` (with the floor) finds on ``bags`` bootstrap
    resamples of the queries: a step that only one draw of the slice favours is averaged away."""
    rng = np.random.default_rng(seed)
    judged = np.flatnonzero(evaluator.judged > 0)  # resample the queries that are measured
    n = len(judged)
    found = []
    for _ in progress_bar(range(bags), desc="fuser: bootstrap fits", unit="fit"):
        counts = np.zeros(len(evaluator.uq))
        counts[judged] = rng.multinomial(n, np.full(n, 1.0 / n))
        ev = evaluator.reweighted(counts)
        feasible = floor_check(ev, floor_w, held)
        start = init if feasible(init) or floor_w is None else floor_w
        found.append(coordinate_ascent(ev, start, measure, grid, rounds, feasible))
    return np.mean(found, axis=0)
