"""CLARINET clarification games on Reddit-TOMT (Books) over the recipe's fine-tuned MiniLM (top 100).

    python benchmarks/clarification/clarification.py --phase tune    # tuning slice: explicit posterior's tau, combine
    python benchmarks/clarification/clarification.py --phase nonllm  # all 233 validation queries x 3 turns, no LLM
    python benchmarks/clarification/clarification.py --phase llm --gguf PATH [--llm-n 50] [--pool 20]
                                                                     # (or --model / --base-url)
    python benchmarks/clarification/clarification.py --phase report  # rewrite the markdown and plot from the JSON

Non-LLM conditions: generic questions asked in order, answered by the deterministic oracle (the gold
description's sentence most similar to the question, names removed, 8 words), by the oracle about a wrong book,
or uninformatively ("I don't remember.", "No."), each with the language posterior (default: the informative
answers, then the request) and the explicit posterior; random / EIG / KL selection over the generic
pool (kernel likelihoods, the oracle playing each candidate). LLM conditions (``--llm-n`` validation queries):
the LLM's question pools (``--pool`` questions sampled at T = 0.8, deduplicated by meaning), answered by the LLM
user with the LLM language posterior (the paper's loop), or by the oracle; random / EIG / KL over each query's
turn-1 LLM pool, EIG / KL with the LLM's log-prob likelihoods. Every number comes from ``pt.Experiment``; every
LLM answer is cached, so a rerun replays for free. Phases merge into one JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.clarinet import (  # noqa: E402
    GENERIC_QUESTIONS,
    ClarificationGame,
    Clarifier,
    ConstantUser,
    ExplicitPosterior,
    FirstSelection,
    LanguagePosterior,
    LLMLikelihood,
    OracleUser,
    RandomSelection,
    UserSimulator,
    UtilitySelection,
    WrongBookUser,
    compare,
    paired_table,
    per_query,
    turn_table,
)
from pyterrier_tot.clarinet.posterior import DEFAULT_TAU  # noqa: E402
from pyterrier_tot.models import load_sentence_transformer  # noqa: E402

warnings.filterwarnings("ignore")
NAME = "clarification"
GENERIC3 = GENERIC_QUESTIONS[:3]
TAUS = (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
#: The paper's Table 1 (its Reddit-TOMT Books split, 10 turns, gpt-3.5 user): MRR, top-1, cumulative top-1.
ANCHOR = {"Random (language posterior)": (0.5118, 0.4219, 0.6496), "Random (explicit posterior)": (0.3694, 0.2739,
          0.5838), "EIG": (0.5709, 0.4893, 0.6786), "KL": (0.5806, 0.5000, 0.7766),
          "Clarinet (delta)": (0.6590, 0.5853, 0.7640)}


class Env:
    def __init__(self):
        self.ds = ptt.get_dataset("reddit-tomt-books")
        self.index = ptt.BookIndex(self.ds)
        ft = recipe.fine_tuned_base(self.ds, train=False)
        if ft is None:
            sys.exit("the fine-tuned base retriever is not cached: run benchmarks/recipe/decomposition_pipeline.py")
        self.ft = ft
        self.retriever = self.index.dense(ft, num_results=100)
        self.scorer = self.index.dense_scorer(ft)
        st = load_sentence_transformer(ft)
        self._memo = {}

        def encode(texts):
            texts = list(texts)
            new = [t for t in dict.fromkeys(texts) if t not in self._memo]
            if new:
                self._memo.update(zip(new, st.encode(new, batch_size=64, normalize_embeddings=True,
                                                     show_progress_bar=False)))
            return np.vstack([self._memo[t] for t in texts]) if texts else np.zeros((0, 384))

        self.encode = encode
        self.oracle = OracleUser(self.index, encode, words=8)

    def game(self, name, qrels, user, posterior=None, clarifier=None, turns=3):
        clarifier = clarifier or Clarifier(None, self.index, pool=GENERIC3, selection=FirstSelection())
        return ClarificationGame(self.retriever, clarifier, user, qrels, turns=turns, posterior=posterior, k=100,
                                 name=name, index=self.index, verbose=False)

    def utility(self, rule, pool, likelihood=None, k=5):
        sel = RandomSelection() if rule == "random" else UtilitySelection(rule, k=k, likelihood=likelihood)
        return Clarifier(None, self.index, pool=pool, selection=sel, answerer=self.oracle, encoder=self.encode)


def run_games(games, topics, qrels, payload, section):
    out = payload.setdefault(section, {})
    for name, game in games.items():
        t0 = time.perf_counter()
        perq = per_query({name: game}, topics, qrels)
        table = turn_table({name: game}, topics, qrels, perq=perq)
        tr = game.transcript.drop(columns=["prompt", "pool"])
        out[name] = {"table": table.to_dict("records"), "perquery": perq.to_dict("list"),
                     "paired": paired_table(perq, split=True).to_dict("records"),
                     "seconds": round(time.perf_counter() - t0, 1),
                     "example": tr[tr["qid"] == tr["qid"].iloc[0]].to_dict("records") if len(tr) else []}
        last = table.iloc[-1]
        print(f"{name:55s} MRR {table.iloc[0]['MRR']:.3f} -> {last['MRR']:.3f}  top1 {last['top1']:.3f} "
              f"({out[name]['seconds']} s)", flush=True)
    return out


def phase_tune(env, payload):
    topics, qrels = recipe.train_data(env.ds, "tuning")
    games = {f"explicit tau={t}": env.game(f"explicit tau={t}", qrels, env.oracle, ExplicitPosterior(env.scorer, t))
             for t in TAUS}
    games.update({f"language {c}": env.game(f"language {c}", qrels, env.oracle, LanguagePosterior(combine=c))
                  for c in ("append", "prepend", "replace")})
    games.update({f"explicit tau={t}, I don't remember": env.game("x", qrels, ConstantUser(), ExplicitPosterior(
        env.scorer, t)) for t in (0.05, 0.3)})
    games["explicit invert, No."] = env.game("x", qrels, ConstantUser("No."), ExplicitPosterior(
        env.scorer, 0.3, negative="invert"))
    for w in (4, 8, 16):
        games[f"language append, oracle {w} words"] = env.game("x", qrels, OracleUser(env.index, env.encode, w),
                                                                LanguagePosterior(combine="append"))
    wrong = WrongBookUser(env.oracle, env.index)
    games.update({f"explicit tau={t}, wrong book": env.game("x", qrels, wrong, ExplicitPosterior(env.scorer, t))
                  for t in TAUS})
    games.update({f"language {c}, wrong book": env.game("x", qrels, wrong, LanguagePosterior(combine=c))
                  for c in ("append", "prepend", "replace")})
    sec = payload.setdefault("tuning", {"games": {}})
    sec["n"] = len(topics)
    todo = {k: g for k, g in games.items() if k not in sec["games"]}  # a rerun plays only what is new
    run_games(todo, topics, qrels, sec, "games")
    sec["chosen"] = choose(sec["games"])
    print("chosen on the tuning slice:", sec["chosen"], flush=True)


def last_mrr(game_record):
    t = pd.DataFrame(game_record["table"])
    return float(t.loc[t["turn"].idxmax(), "MRR"])


def choose(games):
    """The rule: the setting with the best mean MRR after 3 turns over oracle answers and wrong-book answers (a
    person's answers are neither all right nor all wrong; the choice must gain from the one and lose little to
    the other)."""
    score = {t: (last_mrr(games[f"explicit tau={t}"]) + last_mrr(games[f"explicit tau={t}, wrong book"])) / 2
             for t in TAUS if f"explicit tau={t}, wrong book" in games}
    comb = {c: (last_mrr(games[f"language {c}"]) + last_mrr(games[f"language {c}, wrong book"])) / 2
            for c in ("append", "prepend", "replace") if f"language {c}, wrong book" in games}
    return {"tau": max(score, key=score.get) if score else None, "tau_scores": score,
            "combine": max(comb, key=comb.get) if comb else None, "combine_scores": comb}


def phase_nonllm(env, payload, n):
    topics = env.ds.get_topics("validation").head(n)
    qrels = env.ds.get_qrels("validation")
    tau = payload.get("tuning", {}).get("chosen", {}).get("tau") or DEFAULT_TAU
    if tau != DEFAULT_TAU:
        print(f"note: the tuning slice chose tau={tau}; the library default is {DEFAULT_TAU}", flush=True)
    payload["nonllm_tau"] = tau
    expl = ExplicitPosterior(env.scorer, tau)
    wrong = WrongBookUser(env.oracle, env.index)
    games = {}
    for label, user in (("oracle", env.oracle), ("wrong book", wrong), ("I don't remember.", ConstantUser()),
                        ("No.", ConstantUser("No."))):
        games[f"generic + {label} + language"] = env.game(label, qrels, user)
        games[f"generic + {label} + explicit"] = env.game(label, qrels, user, expl)
    games["generic + No. + explicit (invert)"] = env.game("x", qrels, ConstantUser("No."),
                                                          ExplicitPosterior(env.scorer, tau, negative="invert"))
    games["generic + oracle + explicit tau=0.05 (old)"] = env.game("x", qrels, env.oracle,
                                                                   ExplicitPosterior(env.scorer, 0.05))
    games["generic + oracle + language replace (paper)"] = env.game("x", qrels, env.oracle,
                                                                    LanguagePosterior(combine="replace"))
    games["generic + oracle + language append"] = env.game("x", qrels, env.oracle, LanguagePosterior(combine="append"))
    for rule in ("random", "eig", "kl"):
        for post, p in (("language", None), ("explicit", expl)):
            games[f"pool24 {rule} + oracle + {post}"] = env.game(rule, qrels, env.oracle, p,
                                                                 env.utility(rule, GENERIC_QUESTIONS))
    payload["nonllm"] = {"n": len(topics), "games": {}}
    run_games(games, topics, qrels, payload["nonllm"], "games")


def phase_llm(env, payload, args):
    from pyterrier_tot.llm import LLM, LlamaServer

    topics = env.ds.get_topics("validation").sample(frac=1.0, random_state=0).head(args.llm_n)
    qrels = env.ds.get_qrels("validation")
    sec = payload.setdefault("llm", {"games": {}, "cost": {}})
    sec.update({"n": len(topics), "pool": args.pool, "utility_k": args.utility_k,
                "logprob_n": min(args.logprob_n or len(topics), len(topics))})
    server = LlamaServer(model_path=args.gguf, n_threads=args.threads, n_ctx=4096) if args.gguf else None
    try:
        if server is not None:
            server.start()
            llm = server.llm(max_tokens=80, timeout=1800, verbose=False)
            sec["model"] = Path(args.gguf).name
        else:
            llm = LLM(model=args.model, base_url=args.base_url, max_tokens=80, timeout=600, verbose=False)
            sec["model"] = args.model

        def clar(selection=None, pool=None, likelihood=False, answerer=None):
            if pool is not None:
                return env.utility(selection or "random", pool, LLMLikelihood(llm, env.index, env.encode)
                                   if likelihood else None, k=args.utility_k)
            return Clarifier(llm, env.index, pool_size=args.pool, selection=RandomSelection(), encoder=env.encode,
                             query_chars=800, description_chars=250)

        def timed(label, make, played=topics):
            if label not in args.llm_conditions.split(",") and args.llm_conditions != "all":
                return
            u0 = llm.usage.as_dict()
            t0 = time.perf_counter()
            game = make()
            run_games({label: game}, played, qrels, sec, "games")
            u1 = llm.usage.as_dict()
            cost = {k: round(u1[k] - u0[k], 1) for k in ("calls", "cache_hits", "prompt_tokens",
                                                         "completion_tokens", "failures")}
            cost["seconds"] = round(time.perf_counter() - t0, 1)
            cost["queries"] = len(played)
            c = game.clarifier
            cost.update({"question_leaks": c.leaks, "copied_examples": c.copied, "duplicates": c.duplicates,
                         "fallback_questions": c.fallbacks})
            if c.selection is not None and getattr(c.selection, "likelihood", None) is not None:
                cost["likelihood_fallbacks"] = c.selection.likelihood.fallbacks
            if isinstance(game.simulator, UserSimulator):
                cost.update({"answer_leaks": game.simulator.leaks, "answers_withheld": game.simulator.withheld})
            old = sec["cost"].get(label, {})
            sec["cost"][label] = cost if cost["calls"] > 0 or not old else {**old, "replayed_seconds": cost["seconds"]}
            print(f"  cost {label}: {sec['cost'][label]}", flush=True)
            write(payload)

        # turn-1 pools: one LLM pool per query, cached; every "cached pool" condition draws from it
        pool_maker = clar()
        state = pd.DataFrame({"qid": topics["qid"].astype(str), "query": topics["query"],
                              "query_0": topics["query"], "history": [[] for _ in range(len(topics))]})
        t0 = time.perf_counter()
        game = env.game("x", qrels, env.oracle)  # its turn-0 distribution: (docnos, probabilities) by rank
        res = game.distribution(game.retriever(state[["qid", "query"]]))
        cands = {q: (g["docno"].tolist(), g["prob"].to_numpy(float))
                 for q, g in res.sort_values(["qid", "rank"]).groupby("qid", sort=False)}
        u0 = llm.usage.as_dict()
        _, pools, _ = pool_maker.ask(state, cands, turn=1)
        cached = dict(zip(state["qid"], pools))
        u1 = llm.usage.as_dict()
        sec["pools"] = {"sizes": [len(p) for p in pools], "example": pools[0],
                        "cost": {"calls": u1["calls"] - u0["calls"], "completion_tokens": u1["completion_tokens"] -
                                 u0["completion_tokens"], "seconds": round(time.perf_counter() - t0, 1),
                                 "copied_examples": pool_maker.copied, "duplicates": pool_maker.duplicates,
                                 "leaks": pool_maker.leaks}}
        print(f"pools: mean size {np.mean(sec['pools']['sizes']):.1f}, {sec['pools']['cost']}", flush=True)
        write(payload)
        for rule in ("random", "eig", "kl"):
            timed(f"LLM pool {rule} + oracle + language", lambda r=rule: env.game(r, qrels, env.oracle, None,
                                                                                    clar(r, cached)))
        timed("LLM pools + random + oracle + language", lambda: env.game("x", qrels, env.oracle, None, clar()))
        timed("LLM pools + random + LLM user + LLM language", lambda: env.game(
            "x", qrels, UserSimulator(llm, env.index, max_tokens=40), LanguagePosterior(llm, max_tokens=80), clar()))
        # one request per question x candidate x turn: the log-prob conditions play the first --logprob-n queries
        # (compared with the other conditions on the queries both played)
        for rule in ("eig", "kl"):
            timed(f"LLM pool {rule} (LLM log-probs) + oracle + language",
                  lambda r=rule: env.game(r, qrels, env.oracle, None, clar(r, cached, likelihood=True)),
                  played=topics.head(args.logprob_n or len(topics)))
    finally:
        if server is not None:
            server.stop()


def fmt_p(p):
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def section_md(title, sec, turns_note):
    games = sec.get("games", {})
    if not games:
        return []
    md = [f"## {title} ({sec.get('n')} queries)", "", turns_note, "",
          "| condition | MRR t0 | t1 | t2 | t3 | top-1 t0 → t3 | cum. top-1 t3 | ΔMRR t3 | better / worse | "
          "p (t-test) | p (Wilcoxon) | ΔMRR t0 rank 1 | ΔMRR t0 rank > 1 |", "|" + "---|" * 13]
    for name, g in games.items():
        t = pd.DataFrame(g["table"])
        pr = pd.DataFrame(g["paired"])
        last = int(t["turn"].max())
        row = pr[(pr["turn"] == last)].set_index("queries")
        mrr = [f"{t.loc[t['turn'] == i, 'MRR'].iloc[0]:.3f}" if i <= last else "" for i in range(4)]
        a = row.loc["all"]
        md.append(f"| {name} | " + " | ".join(mrr) + f" | {t.iloc[0]['top1']:.3f} → {t.iloc[-1]['top1']:.3f} | "
                  f"{t.iloc[-1]['cum_top1']:.3f} | {a['diff']:+.3f} | {a['better']} / {a['worse']} | "
                  f"{fmt_p(a['p_t'])} | {fmt_p(a['p_wilcoxon'])} | {row.loc['rank 1', 'diff']:+.3f} "
                  f"(n={row.loc['rank 1', 'n']}) | {row.loc['rank > 1', 'diff']:+.3f} (n={row.loc['rank > 1', 'n']}) |")
    return md + [""]


def write(payload):
    for sec in ("tuning", "nonllm", "llm"):  # per-query columns, not records: a third of the size
        for g in payload.get(sec, {}).get("games", {}).values():
            if isinstance(g.get("perquery"), list):
                g["perquery"] = pd.DataFrame(g["perquery"]).to_dict("list")
    md = ["# CLARINET clarification games (Reddit-TOMT Books)", "",
          "Retriever: the recipe's fine-tuned MiniLM (`recipe.fine_tuned_base`), top 100; belief: softmax at T = 0.05 "
          "over those 100. Turn 0 is the same retrieval run for every condition (the same-run baseline); every "
          "number is `pt.Experiment` (ir_measures RR, Success@1) over `game.turn(t)`; differences are paired per "
          "query (turn 3 against turn 0 of the same game; `scipy` paired t-test and Wilcoxon signed-rank), and split "
          "by whether the book was first at turn 0.", ""]
    note = ("Questions: `generic` = three generic questions in order; `pool24` = the 24-question generic pool; "
            "oracle answers: the gold description's sentence most similar to the question, names removed, 8 words.")
    md += section_md("All validation queries, no LLM", payload.get("nonllm", {}), note)
    llm = payload.get("llm", {})
    if llm.get("games"):
        md += section_md(f"LLM conditions: {llm.get('model')}", llm,
                         f"{llm.get('n')} validation queries (a fixed random sample), pools of {llm.get('pool')} "
                         f"questions at T = 0.8, EIG / KL over the top {llm.get('utility_k')} candidates; "
                         f"the log-prob conditions played the first {llm.get('logprob_n', llm.get('n'))} of them.")
        md += cost_table(llm)
    md += comparisons(payload)
    if payload.get("nonllm", {}).get("games"):
        md += paper_table(payload)
    tune = payload.get("tuning", {})
    if tune.get("games"):
        ch = tune.get("chosen", {})
        md += section_md("Tuning slice (training queries): how the defaults were chosen", tune,
                         "The rule: the best mean MRR after 3 turns over oracle answers and wrong-book answers. "
                         f"Chosen: explicit posterior tau = {ch.get('tau')} (scores {ch.get('tau_scores')}); "
                         f"language posterior combine = {ch.get('combine')!r} (scores {ch.get('combine_scores')}). "
                         f"The non-LLM validation phase ran with tau = {payload.get('nonllm_tau')}.")
    _common.write_results(NAME, payload, "\n".join(md), indent=None)
    plot(payload)


#: (section, condition, against[, the against's section]): conditions compared at the last turn, per query (on the
#: queries both played)
PAIRS = [("nonllm", "generic + oracle + language", "generic + oracle + explicit"),
         ("nonllm", "generic + oracle + language", "generic + oracle + language replace (paper)"),
         ("nonllm", "generic + oracle + explicit", "generic + oracle + explicit tau=0.05 (old)"),
         ("nonllm", "pool24 eig + oracle + language", "pool24 random + oracle + language"),
         ("nonllm", "pool24 kl + oracle + language", "pool24 random + oracle + language"),
         ("nonllm", "pool24 eig + oracle + language", "pool24 kl + oracle + language"),
         ("nonllm", "pool24 eig + oracle + explicit", "pool24 random + oracle + explicit"),
         ("nonllm", "pool24 kl + oracle + explicit", "pool24 random + oracle + explicit"),
         ("llm", "LLM pool eig + oracle + language", "LLM pool random + oracle + language"),
         ("llm", "LLM pool kl + oracle + language", "LLM pool random + oracle + language"),
         ("llm", "LLM pool eig (LLM log-probs) + oracle + language", "LLM pool random + oracle + language"),
         ("llm", "LLM pool kl (LLM log-probs) + oracle + language", "LLM pool random + oracle + language"),
         ("llm", "LLM pool eig (LLM log-probs) + oracle + language", "LLM pool eig + oracle + language"),
         ("llm", "LLM pools + random + oracle + language", "LLM pool random + oracle + language"),
         ("llm", "LLM pool random + oracle + language", "generic + oracle + language", "nonllm"),
         ("llm", "LLM pool kl + oracle + language", "generic + oracle + language", "nonllm"),
         ("llm", "LLM pools + random + LLM user + LLM language", "generic + oracle + language", "nonllm"),
         ("llm", "LLM pools + random + LLM user + LLM language", "LLM pool random + oracle + language")]


COST_COLS = [("queries", "queries"), ("calls", "LLM calls"), ("cache_hits", "cache hits"),
             ("prompt_tokens", "prompt tokens"), ("completion_tokens", "completion tokens"), ("seconds", "wall s"),
             ("leaks", "questions dropped (leak)"), ("question_leaks", "questions dropped (leak)"),
             ("copied_examples", "copied examples"), ("fallback_questions", "fallback questions"),
             ("answer_leaks", "answers redacted"), ("answers_withheld", "answers withheld"),
             ("likelihood_fallbacks", "kernel fallbacks")]


def cost_table(llm):
    """The LLM cost of the shared turn-1 pools and of each condition, one line each."""
    rows = {"turn-1 pools (shared by the cached-pool conditions)": {**llm.get("pools", {}).get("cost", {}),
                                                                   "queries": llm.get("n")},
            **llm.get("cost", {})}
    heads = list(dict.fromkeys(h for _, h in COST_COLS))
    lines = ["### Cost of each LLM condition", "", "| condition | " + " | ".join(heads) + " |",
             "|---|" + "---|" * len(heads)]
    for name, c in rows.items():
        cells = {h: c[k] for k, h in COST_COLS if k in c}
        lines.append(f"| {name} | " + " | ".join(str(cells.get(h, "")) for h in heads) + " |")
    return lines + ["", "A cached-pool condition makes no LLM call of its own: its questions come from the turn-1 "
                    "pools, its answers from the oracle.", ""]


def comparisons(payload):
    rows = []
    for sec, a, b, *other in PAIRS:
        games = payload.get(sec, {}).get("games", {})
        games_b = payload.get(other[0] if other else sec, {}).get("games", {})
        if a in games and b in games_b:
            perq = pd.concat([pd.DataFrame(games[a]["perquery"]).assign(name=a),
                              pd.DataFrame(games_b[b]["perquery"]).assign(name=b)])
            c = compare(perq, a, b, int(perq["turn"].max()))
            rows.append(f"| {a} | {b} | {c['n']} | {c['mean_a']:.3f} | {c['mean_b']:.3f} | {c['diff']:+.3f} | "
                        f"{c['better']} / {c['worse']} | {fmt_p(c['p_t'])} | {fmt_p(c['p_wilcoxon'])} |")
    if not rows:
        return []
    return ["## Conditions against each other (last turn, paired per query)", "",
            "| A | B | queries | MRR A | MRR B | A − B | A better / worse | p (t-test) | p (Wilcoxon) |",
            "|---|---|---|---|---|---|---|---|---|"] + rows + [""]


def paper_table(payload):
    rows = ["## Beside the paper's Table 1", "", "The paper: 10 turns (9 questions), its own 628 evaluation queries, "
            "DPR fine-tuned on WhatsThatBook, gpt-3.5 as questioner and user. Ours: 3 questions, 233 queries, "
            "MiniLM fine-tuned on Reddit-TOMT training queries, oracle or Qwen2.5-1.5B answers.", "",
            "| system | MRR | top-1 | cum. top-1 |", "|---|---|---|---|"]
    rows += [f"| paper: {k} | {v[0]:.3f} | {v[1]:.3f} | {v[2]:.3f} |" for k, v in ANCHOR.items()]
    for sec in ("nonllm", "llm"):
        for name, g in payload.get(sec, {}).get("games", {}).items():
            t = pd.DataFrame(g["table"])
            if name.startswith(("generic + oracle + language", "pool24", "LLM")) or name == \
                    "generic + oracle + explicit":
                last = t.iloc[-1]
                rows.append(f"| ours ({payload[sec]['n']} q): {name}, turn {int(last['turn'])} | {last['MRR']:.3f} "
                            f"| {last['top1']:.3f} | {last['cum_top1']:.3f} |")
    first = pd.DataFrame(next(iter(payload["nonllm"]["games"].values()))["table"]).iloc[0]
    rows.append(f"| ours: turn 0, no questions | {first['MRR']:.3f} | {first['top1']:.3f} | {first['cum_top1']:.3f} |")
    return rows + [""]


def plot(payload):
    from pyterrier_tot.clarinet import plot_turns

    keep = ["generic + oracle + language", "generic + oracle + explicit", "generic + wrong book + language",
            "generic + I don't remember. + language", "generic + I don't remember. + explicit",
            "pool24 eig + oracle + language", "pool24 kl + oracle + language", "pool24 random + oracle + language"]
    games = payload.get("nonllm", {}).get("games", {})
    tables = [pd.DataFrame(games[k]["table"]).assign(name=k) for k in keep if k in games]
    tables += [pd.DataFrame(g["table"]).assign(name=f"{k} ({payload['llm']['n']} q)")
               for k, g in payload.get("llm", {}).get("games", {}).items()]
    if tables:
        plot_turns(pd.concat(tables, ignore_index=True), _common.results_dir() / f"{NAME}.png",
                   title="CLARINET games on Reddit-TOMT validation: MRR, top-1, cumulative top-1 by turn")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=["tune", "nonllm", "llm", "report"], required=True)
    ap.add_argument("--n", type=int, default=233, help="validation queries for the non-LLM phase")
    ap.add_argument("--llm-n", type=int, default=50)
    ap.add_argument("--pool", type=int, default=20)
    ap.add_argument("--utility-k", type=int, default=3)
    ap.add_argument("--llm-conditions", default="all")
    ap.add_argument("--logprob-n", type=int, default=0,
                    help="queries for the log-prob EIG / KL conditions (the first of the LLM sample; 0: all)")
    ap.add_argument("--gguf", help="a GGUF file served by llama.cpp (LlamaServer)")
    ap.add_argument("--model", help="an OpenAI-compatible model name (with --base-url)")
    ap.add_argument("--base-url")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    previous = _common.results_dir() / f"{NAME}.json"
    payload = json.loads(previous.read_text()) if previous.is_file() else {}
    payload = {k: v for k, v in payload.items() if k in ("tuning", "nonllm", "llm", "seconds", "nonllm_tau")}
    if args.phase == "report":
        return write(payload)
    import torch

    torch.set_num_threads(2)
    env = Env()
    t0 = time.perf_counter()
    if args.phase == "tune":
        phase_tune(env, payload)
    elif args.phase == "nonllm":
        phase_nonllm(env, payload, args.n)
    else:
        if not (args.gguf or args.model):
            sys.exit("--phase llm needs --gguf PATH or --model NAME [--base-url URL]")
        phase_llm(env, payload, args)
    payload.setdefault("seconds", {})[args.phase] = round(time.perf_counter() - t0, 1)
    write(payload)


if __name__ == "__main__":
    main()
