"""What it takes to serve TREC ToT 2025's 6,407,814 pages: measured on a synthetic corpus, extrapolated to 6.4M.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed_scale/scale.py --sizes 100000 300000 1000000 --budget-min 20

The corpus is generated, not downloaded (a seeded vocabulary with a Zipfian word distribution and topic words:
short titles + ~150-word descriptions), so the run needs no data and is the same on every machine. Its dense
vectors are *cheaply made*, not MiniLM encodings: each document's vector is the idf-weighted sum of fixed random
384-d word vectors (encoding 1M documents with MiniLM is ~4.4 h on 2 CPU cores). They share the words, and hence
the neighbourhood structure, of the text, which random Gaussian vectors would not. Every size is a prefix of the
same corpus; a step whose predicted time would overrun ``--budget-min`` is skipped and the results say so.
"""
from __future__ import annotations

import argparse
import math
import resource
import shutil
import sys
import time
from pathlib import Path

import ir_measures
import numpy as np
import pandas as pd
from ir_measures import R

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
from _common import WORK, md_table, results_dir, write_results  # noqa: E402

TARGET_N = 6_407_814
DIM = 384
VOCAB = 50_000
TOPICS = 1_000
CHUNK = 10_000
GB = 1024 ** 3
# the head of a real vocabulary is function words, which PISA's stopword list removes from 150-word queries
STOPWORDS = ("the of and to a in is was for on that with as by he it his at from an her be are which this or had "
             "has not but were she they their its have one after who been also first into two more other when "
             "him new all there would out up about time only some what so can no them will book story").split()
FIT_X = {"linear": lambda n: n, "nlogn": lambda n: n * np.log(n), "sqrt": np.sqrt, "log": np.log}


# ---------------------------------------------------------------------- the synthetic corpus
class Corpus:
    """A deterministic book-like corpus: chunk ``c`` is the same whatever size is asked for."""

    def __init__(self, seed: int = 13):
        rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        words = set()
        while len(words) < VOCAB - len(STOPWORDS):
            word = "".join(rng.choice(letters, rng.integers(3, 11)))
            if word not in STOPWORDS:
                words.add(word)
        self.words = np.array(STOPWORDS + sorted(words, key=lambda w: (len(w), w)), dtype=object)
        p = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
        self.p = p / p.sum()
        self.cdf = np.cumsum(self.p)
        self.idf = (-np.log(self.p)).astype(np.float32)
        # each topic draws 30% of a document's words from 200 mid-frequency words of its own
        self.topic_words = rng.integers(500, VOCAB, size=(TOPICS, 200))
        # word vectors of low intrinsic dimension (48) plus noise: sentence-encoder vectors are far from
        # isotropic, and on isotropic random vectors ANN recall would look much worse than it is in practice
        latent = rng.standard_normal((VOCAB, 48)) @ rng.standard_normal((48, DIM)) / np.sqrt(48)
        self.emb = (latent + 0.3 * rng.standard_normal((VOCAB, DIM))).astype(np.float32)
        self.seed = seed

    def zipf(self, rng, n):
        return np.minimum(np.searchsorted(self.cdf, rng.random(n)), VOCAB - 1)

    def chunk(self, c: int):
        """(docnos, title word ids, description word ids, offsets into them) of chunk ``c``."""
        rng = np.random.default_rng((self.seed, c))
        lens = rng.integers(100, 201, CHUNK)
        tlens = rng.integers(2, 6, CHUNK)
        topics = rng.integers(0, TOPICS, CHUNK)
        n = int(lens.sum())
        ids = self.zipf(rng, n)
        owner = np.repeat(np.arange(CHUNK), lens)
        topical = rng.random(n) < 0.3
        ids[topical] = self.topic_words[topics[owner[topical]], rng.integers(0, 200, int(topical.sum()))]
        tids = self.topic_words[np.repeat(topics, tlens), rng.integers(0, 200, int(tlens.sum()))]
        docnos = [f"d{c * CHUNK + i}" for i in range(CHUNK)]
        return docnos, tids, np.concatenate([[0], np.cumsum(tlens)]), ids, np.concatenate([[0], np.cumsum(lens)])

    def vectors(self, ids, offsets) -> np.ndarray:
        from scipy.sparse import csr_matrix
        m = csr_matrix((self.idf[ids], ids, offsets), shape=(len(offsets) - 1, VOCAB))
        v = np.asarray(m @ self.emb, dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def docs(self, n: int, vecs: np.ndarray, clock: dict):
        """Streams ``n`` documents to an indexer; fills ``vecs``; adds the generation time to ``clock['gen']``."""
        for c in range(math.ceil(n / CHUNK)):
            t0 = time.perf_counter()
            docnos, tids, toff, ids, off = self.chunk(c)
            tw, dw = self.words[tids].tolist(), self.words[ids].tolist()
            rows = [{"docno": docnos[i],
                     "text": " ".join(tw[toff[i]:toff[i + 1]]) + " . " + " ".join(dw[off[i]:off[i + 1]])}
                    for i in range(CHUNK)]
            if not vecs[c * CHUNK].any():
                vecs[c * CHUNK:(c + 1) * CHUNK] = self.vectors(ids, off)
            clock["gen"] += time.perf_counter() - t0
            yield from rows[: max(0, n - c * CHUNK)]

    def queries(self, nq: int, pool: int):
        """ToT-style queries: 150 words, half from a target book (a known item in every size), half vague."""
        rng = np.random.default_rng((self.seed, 10 ** 6))
        qids, texts, vecs, targets = [], [], [], []
        for q in range(nq):
            target = int(rng.integers(0, pool))
            _, _, _, ids, off = self.chunk(target // CHUNK)
            i = target % CHUNK
            own = rng.choice(ids[off[i]:off[i + 1]], 75)
            qi = np.concatenate([own, self.zipf(rng, 75)])
            qids.append(f"q{q}")
            texts.append(" ".join(self.words[qi].tolist()))
            vecs.append(self.vectors(qi, np.array([0, len(qi)]))[0])
            targets.append(f"d{target}")
        return pd.DataFrame({"qid": qids, "query": texts, "target": targets}), np.stack(vecs)


# ---------------------------------------------------------------------- measuring
def latencies(fn, n: int, warm: int = 3) -> dict:
    for i in range(min(warm, n)):
        fn(i)
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        ts.append((time.perf_counter() - t0) * 1000)
    return {"ms_mean": round(float(np.mean(ts)), 2), "ms_p95": round(float(np.percentile(ts, 95)), 2)}


def _run_frame(ids: np.ndarray) -> pd.DataFrame:
    """Rows of FAISS ids per query as a result frame (score falls with rank)."""
    q, r = np.indices(ids.shape)
    return pd.DataFrame({"query_id": q.ravel().astype(str), "doc_id": ids.ravel().astype(str),
                         "score": (-r.ravel()).astype(float)})


def r100_vs_exact(found: np.ndarray, truth: np.ndarray) -> float:
    """R@100 of an ANN search with the exact top 100 as the relevant set, through ir_measures."""
    qrels = _run_frame(truth).drop(columns="score").assign(relevance=1)
    return round(float(ir_measures.calc_aggregate([R @ 100], qrels, _run_frame(found))[R @ 100]), 4)


def r_at_k(run: pd.DataFrame, relevant: pd.DataFrame, k: int) -> float:
    """R@k of a PyTerrier result frame against ``relevant`` (qid, docno) pairs, through ir_measures."""
    qrels = relevant.rename(columns={"qid": "query_id", "docno": "doc_id"}).assign(relevance=1)
    res = run.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]]
    return round(float(ir_measures.calc_aggregate([R @ k], qrels, res)[R @ k]), 3)


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Budget:
    def __init__(self, minutes: float):
        self.end = time.time() + minutes * 60
        self.skipped = []

    def allows(self, what: str, n: int, predicted_s: float) -> bool:
        if time.time() + predicted_s <= self.end:
            return True
        self.skipped.append(f"{what} at {n:,} docs (predicted {predicted_s:.0f} s, budget left "
                            f"{max(0, self.end - time.time()):.0f} s)")
        print("SKIP", self.skipped[-1], flush=True)
        return False


def predict(prev: dict, key: str, n: int, model: str = "linear") -> float:
    """Time of step ``key`` at ``n`` docs, scaled from the largest size measured so far."""
    if not prev or prev.get(key) is None:
        return 0.0
    f = FIT_X[model]
    return prev[key] * float(f(n) / f(prev["n"]))


def bm25_step(corpus, n, vecs, topics, threads, work):
    import pyterrier_pisa
    path = work / f"pisa_{n}"
    shutil.rmtree(path, ignore_errors=True)
    clock = {"gen": 0.0}
    t0 = time.perf_counter()
    idx = pyterrier_pisa.PisaIndex(str(path), threads=threads)
    idx.index(corpus.docs(n, vecs, clock))
    total = time.perf_counter() - t0
    bm25 = idx.bm25(k1=1.2, b=0.75, num_results=1000, query_algorithm="maxscore", threads=1)
    t0 = time.perf_counter()
    bm25(topics.iloc[[0]][["qid", "query"]])  # PISA compresses the index and computes score bounds on first use
    compress = time.perf_counter() - t0
    frames = [topics.iloc[[i]][["qid", "query"]] for i in range(len(topics))]
    res = {"n": n, "pisa_build_s": round(total - clock["gen"] + compress, 1), "pisa_compress_s": round(compress, 1),
           "corpus_gen_s": round(clock["gen"], 1),
           "pisa_disk_gb": round(dir_size(path) / GB, 3),
           **{f"bm25_{k}": v for k, v in latencies(lambda i: bm25(frames[i]), len(frames)).items()}}
    run = bm25(topics[["qid", "query"]])
    res["bm25_target_in_top1000"] = r_at_k(run, topics[["qid", "target"]].rename(columns={"target": "docno"}), 1000)
    # what serving needs: the compressed index, its score bounds and the lexicons; PISA keeps the forward and
    # uncompressed inverted files of the build beside them, which can be deleted
    build_only = ("fwd", "inv.docs", "inv.freqs")
    res["pisa_serving_gb"] = round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()
                                       and not any(f.name == b or f.name.startswith("fwd.") for b in build_only))
                                   / GB, 3)
    shutil.rmtree(path, ignore_errors=True)
    return res


def bm25_variants(corpus, n, topics, threads, work) -> list:
    """Ways to bring 150-word BM25 queries down at ``n`` documents (``--bm25-variants``), maxscore beside them."""
    import pyterrier_pisa
    path = work / f"pisa_{n}"
    shutil.rmtree(path, ignore_errors=True)
    pyterrier_pisa.PisaIndex(str(path), threads=threads).index(corpus.docs(n, np.zeros((n, DIM), np.float32),
                                                                            {"gen": 0.0}))
    idx = pyterrier_pisa.PisaIndex(str(path), threads=threads)
    rank = {w: i for i, w in enumerate(corpus.words)}
    # idf-style pruning: keep the 32 rarest distinct terms of the query (rank in the Zipfian vocabulary)
    pruned = topics.assign(query=[" ".join(sorted(set(q.split()), key=rank.get)[-32:]) for q in topics["query"]])
    full = None
    rows = []
    for algo, qs, label in (("maxscore", topics, "maxscore, 150 words (reference)"),
                            ("block_max_maxscore", topics, "block_max_maxscore, 150 words"),
                            ("block_max_wand", topics, "block_max_wand, 150 words"),
                            ("maxscore", pruned, "maxscore, 32 rarest terms")):
        retr = idx.bm25(k1=1.2, b=0.75, num_results=1000, query_algorithm=algo, threads=1)
        frames = [qs.iloc[[i]][["qid", "query"]] for i in range(len(qs))]
        run = retr(qs[["qid", "query"]])
        full = run if full is None else full
        rows.append({"n": n, "bm25": label, **latencies(lambda i, r=retr, f=frames: r(f[i]), len(frames)),
                     "overlap@100_with_reference": r_at_k(run, full[full["rank"] < 100][["qid", "docno"]], 100),
                     "target_in_top1000": r_at_k(run, qs[["qid", "target"]].rename(columns={"target": "docno"}),
                                                    1000)})
        print(rows[-1], flush=True)
    shutil.rmtree(path, ignore_errors=True)
    return rows


def dense_step(x, qv, budget, prev, work):
    import faiss
    from faiss.contrib.ivf_tools import add_preassigned
    n = len(x)
    res = {"n": n}
    t0 = time.perf_counter()
    flat = faiss.IndexFlatIP(DIM)
    flat.add(x)
    res["flat_build_s"] = round(time.perf_counter() - t0, 2)
    res["flat_mem_gb"] = round(n * DIM * 4 / GB, 3)
    _, truth = flat.search(qv, 100)
    res.update({f"flat_{k}": v for k, v in latencies(lambda i: flat.search(qv[i:i + 1], 100), len(qv)).items()})
    flat.reset()

    nlist = int(round(4 * math.sqrt(n)))
    res["ivf_nlist"] = nlist
    if budget.allows("IVF", n, predict(prev, "ivf_build_s", n, "nlogn")):
        t0 = time.perf_counter()
        sample = x[np.random.default_rng(0).choice(n, min(n, 30 * nlist), replace=False)]
        km = faiss.Kmeans(DIM, nlist, niter=10, spherical=True, seed=1)
        km.train(sample)
        quant = faiss.IndexFlatIP(DIM)
        quant.add(km.centroids)
        _, assign = quant.search(x, 1)
        train_assign_s = time.perf_counter() - t0
        variants = {"ivf": faiss.IndexIVFFlat(quant, DIM, nlist, faiss.METRIC_INNER_PRODUCT),
                    "ivf_fp16": faiss.IndexIVFScalarQuantizer(quant, DIM, nlist, faiss.ScalarQuantizer.QT_fp16,
                                                              faiss.METRIC_INNER_PRODUCT),
                    "ivfpq48": faiss.IndexIVFPQ(quant, DIM, nlist, 48, 8, faiss.METRIC_INNER_PRODUCT)}
        bytes_per = {"ivf": DIM * 4 + 8, "ivf_fp16": DIM * 2 + 8, "ivfpq48": 48 + 8}
        for name, index in variants.items():
            t1 = time.perf_counter()
            if not index.is_trained:
                index.train(sample[:65_536])
            add_preassigned(index, x, assign.ravel())
            res[f"{name}_build_s"] = round(train_assign_s + time.perf_counter() - t1, 2)
            res[f"{name}_mem_gb"] = round((n * bytes_per[name] + nlist * DIM * 4) / GB, 3)
            for nprobe in (16, 64):
                index.nprobe = nprobe
                _, found = index.search(qv, 100)
                res[f"{name}_np{nprobe}_recall100"] = r100_vs_exact(found, truth)
                lat = latencies(lambda i, index=index: index.search(qv[i:i + 1], 100), len(qv))
                res.update({f"{name}_np{nprobe}_{k}": v for k, v in lat.items()})
        del variants, quant

    if budget.allows("HNSW", n, predict(prev, "hnsw_build_s", n, "nlogn")):
        t0 = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
        hnsw.add(x)
        res["hnsw_build_s"] = round(time.perf_counter() - t0, 2)
        links = hnsw.hnsw.neighbors.size() * 4 + n * 12
        res["hnsw_mem_gb"] = round((n * DIM * 4 + links) / GB, 3)
        res["hnsw_fp16_mem_gb"] = round((n * DIM * 2 + links) / GB, 3)
        for ef in (64, 128):
            hnsw.hnsw.efSearch = ef
            _, found = hnsw.search(qv, 100)
            res[f"hnsw_ef{ef}_recall100"] = r100_vs_exact(found, truth)
            res.update({f"hnsw_ef{ef}_{k}": v for k, v in
                        latencies(lambda i: hnsw.search(qv[i:i + 1], 100), len(qv)).items()})
        del hnsw
    return res


def flex_step(x, qv, work):
    """pyterrier-dr's FlexIndex (what ``BookIndex.dense`` uses): exact retrieval and the expert scorer mode."""
    import pyterrier_dr
    n = len(x)
    path = work / f"flex_{n}"
    shutil.rmtree(path, ignore_errors=True)
    flex = pyterrier_dr.FlexIndex(str(path))
    t0 = time.perf_counter()
    flex.index({"docno": f"d{i}", "doc_vec": x[i]} for i in range(n))
    res = {"n": n, "flex_build_s": round(time.perf_counter() - t0, 2), "flex_disk_gb": round(dir_size(path) / GB, 3)}
    retr, scorer = flex.np_retriever(num_results=1000), flex.np_scorer()
    qs = [pd.DataFrame({"qid": [f"q{i}"], "query_vec": [qv[i]]}) for i in range(len(qv))]
    # brute force through pandas is slow at 1M: 10 queries are enough for its mean
    res.update({f"flex_exact_{k}": v for k, v in latencies(lambda i: retr(qs[i]), min(10, len(qs)), 1).items()})
    rng = np.random.default_rng(2)
    # scorer mode, as a field expert runs it: 1000 candidates of a query, read from the memory-mapped vectors
    cands = [pd.DataFrame({"qid": f"q{i}", "query_vec": [qv[i]] * 1000,
                           "docno": [f"d{j}" for j in rng.integers(0, n, 1000)]}) for i in range(len(qv))]
    res.update({f"flex_score1000_{k}": v for k, v in latencies(lambda i: scorer(cands[i]), len(cands)).items()})
    shutil.rmtree(path, ignore_errors=True)
    return res


def encode_step(topics) -> dict:
    """Query-side cost of the dense stages: MiniLM on one 150-word query and on one short clue, on CPU."""
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        from pyterrier_tot.models import DEFAULT_MODEL, resolve_model
        torch.set_num_threads(1)  # one query, one core: the other core serves the next query
        model = SentenceTransformer(resolve_model(DEFAULT_MODEL), device="cpu")
    except Exception as e:  # the model is optional here: the rest of the benchmark does not need it
        return {"encode_error": f"{type(e).__name__}: {e}"[:200]}
    q = topics["query"].tolist()
    long = latencies(lambda i: model.encode([q[i]]), min(20, len(q)))
    short = latencies(lambda i: model.encode([" ".join(q[i].split()[:8])]), min(20, len(q)))
    return {"encode_query_ms_mean": long["ms_mean"], "encode_clue_ms_mean": short["ms_mean"]}


# ---------------------------------------------------------------------- extrapolating to 6.4M
def fit(rows: list, key: str, model: str, n: int = TARGET_N):
    """``key`` at ``n`` documents, fitted as a + b·f(N) on the measured points (one point: scaled by f)."""
    pts = [(r["n"], r[key]) for r in rows if r.get(key) is not None]
    if not pts:
        return None
    f = FIT_X[model]
    xs, ys = np.array([f(p[0]) for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)
    if len(pts) == 1:
        return float(ys[0] * f(n) / xs[0])
    b, a = np.polyfit(xs, ys, 1)
    y = float(a + b * f(n))
    return max(y, float(ys[-1])) if n >= pts[-1][0] else max(y, 0.0)


def curve(rows, key, model, ns):
    return [fit(rows, key, model, n) for n in ns]


# (label, measured key, fit for build, fit for latency, memory GB at 6.4M, recall key)
def options(n: int, nlist: int, hnsw_link_bytes: float):
    vec = {"fp32": DIM * 4, "fp16": DIM * 2}
    cent = nlist * DIM * 4
    return [
        ("exact fp32 (IndexFlatIP / FlexIndex)", "flat", "linear", "linear", n * vec["fp32"], None),
        ("IVF-Flat fp32, nprobe 64", "ivf", "nlogn", "sqrt", n * (vec["fp32"] + 8) + cent, "ivf_np64_recall100"),
        ("IVF-SQ fp16, nprobe 64", "ivf_fp16", "nlogn", "sqrt", n * (vec["fp16"] + 8) + cent,
         "ivf_fp16_np64_recall100"),
        ("IVF-PQ48 (48 B/vector), nprobe 64", "ivfpq48", "nlogn", "sqrt", n * 56 + cent, "ivfpq48_np64_recall100"),
        ("HNSW32 fp32, efSearch 128", "hnsw", "nlogn", "log", n * (vec["fp32"] + hnsw_link_bytes),
         "hnsw_ef128_recall100"),
        ("HNSW32 fp16 (IndexHNSWSQ), efSearch 128", "hnsw", "nlogn", "log", n * (vec["fp16"] + hnsw_link_bytes),
         "hnsw_ef128_recall100"),
    ]


def lat_key(stem: str) -> str:
    return {"flat": "flat_ms_mean", "hnsw": "hnsw_ef128_ms_mean"}.get(stem, f"{stem}_np64_ms_mean")


def extrapolate(bm25_rows, dense_rows, flex_rows, enc):
    n = TARGET_N
    nlist = int(round(4 * math.sqrt(n)))
    hn = [r for r in dense_rows if r.get("hnsw_build_s") is not None]
    link_bytes = ((hn[-1]["hnsw_mem_gb"] * GB - hn[-1]["n"] * DIM * 4) / hn[-1]["n"]) if hn else 32 * 2 * 4 + 12
    last = dense_rows[-1] if dense_rows else {}
    table = []
    bm = {"component": "BM25 (PISA, maxscore, top 1000)", "memory_gb": fit(bm25_rows, "pisa_serving_gb", "linear"),
          "disk_gb": fit(bm25_rows, "pisa_disk_gb", "linear"),
          "build_min": (fit(bm25_rows, "pisa_build_s", "linear") or 0) / 60,
          "ms_per_query": fit(bm25_rows, "bm25_ms_mean", "linear"), "recall@100_vs_exact": None,
          "fit": "linear in N (build, size, latency)"}
    table.append(bm)
    for label, stem, bfit, lfit, mem, rkey in options(n, nlist, link_bytes):
        table.append({"component": "dense first stage: " + label, "memory_gb": mem / GB, "disk_gb": mem / GB,
                      "build_min": (fit(dense_rows, f"{stem}_build_s", bfit) or float("nan")) / 60,
                      "ms_per_query": fit(dense_rows, lat_key(stem), lfit),
                      "recall@100_vs_exact": last.get(rkey) if rkey else 1.0,
                      "fit": f"build {bfit}, latency {lfit} in N; memory analytic"})
    score = fit(flex_rows, "flex_score1000_ms_mean", "log")
    table.append({"component": "one expert, scorer mode: 1000 candidates from a memory-mapped fp16 FlexIndex",
                  "memory_gb": 0.0, "disk_gb": n * DIM * 2 / GB, "build_min": None, "ms_per_query": score,
                  "recall@100_vs_exact": 1.0, "fit": "log N (warm page cache); vectors stay on disk"})
    table.append({"component": "query encoding (MiniLM, CPU): 1 query + 4 clues", "memory_gb": 0.1, "disk_gb": 0.1,
                  "build_min": None, "ms_per_query": (enc.get("encode_query_ms_mean", float("nan"))
                                                      + 4 * enc.get("encode_clue_ms_mean", float("nan"))),
                  "recall@100_vs_exact": None, "fit": "measured, independent of N"})
    table.append({"component": "corpus store (offsets, docnos, order: memory-mapped)", "memory_gb": n * 32 / GB,
                  "disk_gb": n * 32 / GB, "build_min": None, "ms_per_query": None, "recall@100_vs_exact": None,
                  "fit": "analytic (8 + ~16 + 8 bytes per page)"})
    return table, nlist


def pipeline(table) -> list:
    """Whole non-LLM pipelines: BM25 + a dense first stage + 4 dense experts (IVF-PQ to retrieve, fp16 to score)."""
    row = {r["component"]: r for r in table}
    bm, enc = row["BM25 (PISA, maxscore, top 1000)"], [r for r in table if r["component"].startswith("query enc")][0]
    score = [r for r in table if r["component"].startswith("one expert")][0]
    pq = [r for r in table if "IVF-PQ48" in r["component"]][0]
    store = [r for r in table if r["component"].startswith("corpus store")][0]
    out = []
    for first in ("HNSW32 fp32, efSearch 128", "HNSW32 fp16 (IndexHNSWSQ), efSearch 128", "IVF-SQ fp16, nprobe 64",
                  "IVF-PQ48 (48 B/vector), nprobe 64", "exact fp32 (IndexFlatIP / FlexIndex)"):
        d = row["dense first stage: " + first]
        overhead_gb = 2.0  # python, pyterrier, torch + MiniLM, pandas frames: an allowance, not measured here
        mem = bm["memory_gb"] + d["memory_gb"] + 4 * pq["memory_gb"] + store["memory_gb"] + overhead_gb
        ms = [bm["ms_per_query"], d["ms_per_query"], 4 * pq["ms_per_query"], 4 * score["ms_per_query"],
              enc["ms_per_query"]]
        ms = float(np.nansum([m for m in ms if m is not None]))
        out.append({"pipeline (BM25 + dense first stage + 4 experts)": first, "resident_gb": round(mem, 2),
                    "ms_per_query": round(ms, 1), "fits_16gb": mem <= 16, "within_200ms": ms <= 200})
    return out


def plot(bm25_rows, dense_rows, flex_rows, path: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = np.geomspace(min(r["n"] for r in bm25_rows + dense_rows), TARGET_N, 40)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    series = [  # (axis, rows, key, fit, label)
        (0, bm25_rows, "pisa_build_s", "linear", "PISA build"), (0, dense_rows, "ivf_build_s", "nlogn", "IVF build"),
        (0, dense_rows, "hnsw_build_s", "nlogn", "HNSW32 build"),
        (1, bm25_rows, "bm25_ms_mean", "linear", "BM25 maxscore"), (1, dense_rows, "flat_ms_mean", "linear", "exact"),
        (1, dense_rows, "ivf_np64_ms_mean", "sqrt", "IVF nprobe 64"),
        (1, dense_rows, "ivfpq48_np64_ms_mean", "sqrt", "IVF-PQ48 nprobe 64"),
        (1, dense_rows, "hnsw_ef128_ms_mean", "log", "HNSW ef 128"),
        (1, flex_rows, "flex_score1000_ms_mean", "log", "expert scorer (1000 cands)"),
        (2, bm25_rows, "pisa_serving_gb", "linear", "PISA index (serving)"),
        (2, dense_rows, "flat_mem_gb", "linear", "fp32 vectors"),
        (2, dense_rows, "ivf_fp16_mem_gb", "linear", "IVF fp16"),
        (2, dense_rows, "ivfpq48_mem_gb", "linear", "IVF-PQ48"),
        (2, dense_rows, "hnsw_mem_gb", "linear", "HNSW32 fp32")]
    for ax_i, rows, key, model, label in series:
        pts = [(r["n"], r[key]) for r in rows if r.get(key) is not None]
        if not pts:
            continue
        line, = axes[ax_i].plot(*zip(*pts), "o", label=label)
        axes[ax_i].plot(ns, curve(rows, key, model, ns), "--", color=line.get_color())
    titles = ("build time (s)", "latency (ms/query)", "memory / disk (GB)")
    for ax, title in zip(axes, titles):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axvline(TARGET_N, color="grey", lw=0.8)
        ax.set_xlabel("documents (dots measured, dashes fitted to 6.4M)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    axes[1].axhline(200, color="red", lw=0.8)
    axes[2].axhline(16, color="red", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)



def fmt(rows):
    return md_table(pd.DataFrame(rows).replace({np.nan: None}).fillna("–"), "{:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget-min", type=float, default=20.0, help="skip steps predicted to end after this")
    ap.add_argument("--bm25-variants", type=int, metavar="N",
                    help="only measure faster BM25 settings at N documents and add them to scale.json/.md")
    args = ap.parse_args(argv)
    if args.bm25_variants:
        return add_bm25_variants(args)
    import faiss
    faiss.omp_set_num_threads(args.threads)
    budget, work = Budget(args.budget_min), WORK / "scale"
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    corpus = Corpus()
    sizes = sorted(args.sizes)
    topics, qv = corpus.queries(args.queries, min(sizes[0], 100_000))
    vecs = np.zeros((sizes[-1], DIM), dtype=np.float32)
    bm25_rows, dense_rows, flex_rows = [], [], []
    for n in sizes:
        prev = bm25_rows[-1] if bm25_rows else {}
        if budget.allows("PISA build + BM25", n, predict(prev, "pisa_build_s", n) + predict(prev, "corpus_gen_s", n)):
            bm25_rows.append(bm25_step(corpus, n, vecs, topics, args.threads, work))
            print(bm25_rows[-1], flush=True)
        if not vecs[n - 1].any():
            break  # the corpus (and so its vectors) was not generated this far
        prev = dense_rows[-1] if dense_rows else {}
        dense_rows.append(dense_step(vecs[:n], qv, budget, prev, work))
        print(dense_rows[-1], flush=True)
        prev = flex_rows[-1] if flex_rows else {}
        if budget.allows("FlexIndex", n, predict(prev, "flex_build_s", n) + 5):
            flex_rows.append(flex_step(vecs[:n], qv, work))
            print(flex_rows[-1], flush=True)
    enc = encode_step(topics)
    print(enc, flush=True)
    table, nlist = extrapolate(bm25_rows, dense_rows, flex_rows, enc)
    pipes = pipeline(table)
    plot(bm25_rows, dense_rows, flex_rows, results_dir() / "scale.png")
    fits = [p for p in pipes if p["fits_16gb"] and p["within_200ms"]]
    verdict = (f"**Yes**: at 6,407,814 pages the non-LLM pipeline fits 16 GB and 200 ms/query with "
               f"{', '.join(p['pipeline (BM25 + dense first stage + 4 experts)'] for p in fits)} as dense first stage."
               if fits else "**No** configuration measured here fits both 16 GB and 200 ms/query at 6,407,814 pages.")
    bm = table[0]["ms_per_query"] or 0.0
    if not fits and any(p["fits_16gb"] for p in pipes) and bm > 100:
        verdict += (f" Memory fits; the latency is dominated by BM25 on 150-word queries ({bm:.0f} ms/query "
                    "extrapolated): it needs shorter BM25 queries (hedge removal, rarest-term pruning, see "
                    "`--bm25-variants`) and an ANN first stage (IVF-PQ or HNSW fp16) with fp16 expert vectors on disk.")
    for r in table:
        for k in ("memory_gb", "disk_gb", "build_min", "ms_per_query"):
            r[k] = None if r[k] is None or (isinstance(r[k], float) and math.isnan(r[k])) else round(r[k], 2)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    notes = [f"Corpus: synthetic, {VOCAB:,}-word Zipfian (s=1.07) vocabulary, {TOPICS} topics; titles 2-5 words, "
             "descriptions 100-200 words (~155 tokens per document). Queries: "
             f"{args.queries} ToT-style 150-word queries, half the words from a target book, half vague.",
             "Dense vectors are cheaply made, not MiniLM: idf-weighted sums of random 384-d word vectors of intrinsic "
             "dimension 48 (+ noise), L2-normalised. ANN recall on real MiniLM vectors will differ.",
             "Recall@100 in the extrapolation is the value measured at the largest size, not extrapolated.",
             "GB throughout means 2^30 bytes (GiB).",
             f"Threads: {args.threads} for indexing and FAISS; BM25 retrieval single-threaded, one query at a time.",
             f"Run took {(time.time() - t_start) / 60:.1f} min; peak RSS {peak_gb:.1f} GB.",
             *(["Skipped (budget): " + "; ".join(budget.skipped)] if budget.skipped else [])]
    md = "\n\n".join([
        "# Scale benchmark: towards TREC ToT 2025's 6,407,814 pages",
        "`HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed_scale/scale.py --sizes "
        + " ".join(map(str, sizes)) + f" --budget-min {args.budget_min:g}`",
        "\n".join("- " + x for x in notes),
        "## Verdict\n\n" + verdict,
        "## BM25 (PISA, BM25 k1=1.2 b=0.75, maxscore, top 1000)", fmt(bm25_rows),
        "## Dense retrieval (FAISS, 384-d, inner product, top 100; exact search is the same-run reference)",
        fmt(dense_rows),
        "## pyterrier-dr FlexIndex (exact numpy retrieval, and a field expert's scorer mode on 1000 candidates)",
        fmt(flex_rows), "## Query encoding\n\n" + str(enc),
        f"## Extrapolated to {TARGET_N:,} documents (IVF nlist = {nlist})", fmt(table),
        "## Whole non-LLM pipeline at 6.4M (16 GB machine)",
        "BM25 + dense first stage + 4 dense field experts (IVF-PQ48 to add their candidates, memory-mapped fp16 "
        "vectors to score them) + query encoding; a 2 GB allowance for the Python process. Latencies add up "
        "stage by stage (one core per query).", fmt(pipes),
        "![measured points and fits](scale.png)"])
    write_results("scale", {"sizes": sizes, "notes": notes, "bm25": bm25_rows, "dense": dense_rows,
                            "flex": flex_rows, "encoding": enc, "extrapolation": table, "pipelines": pipes,
                            "verdict": verdict, "skipped": budget.skipped}, md + "\n")
    shutil.rmtree(work, ignore_errors=True)


def add_bm25_variants(args):
    import json
    corpus, work = Corpus(), WORK / "scale_bm25"
    topics, _ = corpus.queries(args.queries, 100_000)
    rows = bm25_variants(corpus, args.bm25_variants, topics, args.threads, work)
    payload = json.loads((results_dir() / "scale.json").read_text())
    payload["bm25_variants"] = rows
    md = (results_dir() / "scale.md").read_text().split("\n## Faster BM25")[0].rstrip("\n")
    md += (f"\n\n## Faster BM25 at {args.bm25_variants:,} documents\n\n`... scale.py --bm25-variants "
           f"{args.bm25_variants}`; overlap@100 is with the maxscore top 100 of the full query.\n\n" + fmt(rows))
    payload.pop("benchmark", None)
    payload.pop("machine", None)
    write_results("scale", payload, md + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
