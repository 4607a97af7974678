"""Is the converted nomic-embed-text-v1.5 the model of its GGUF file? PyTorch (the sentence-transformers folder of
``pyterrier_tot.models.nomic.convert_gguf``) against llama.cpp (llama-cpp-python on the same GGUF,
``embedding=True``) on the first 50 Reddit-TOMT validation requests and 50 books (their gold books, then the corpus
in order), each with its prompt (``search_query: `` / ``search_document: ``), books as the dense index encodes them
(title + text).

Rule, written before the run: the conversion stands when the mean cosine between the two engines' vectors is at
least 0.999 over the 100 texts, and every request ranks the same top 10 of the 50 books with both.

    python benchmarks/fetch_models.py nomic                # once: the GGUF and its converted folder
    python benchmarks/encoders/nomic_conversion.py         # writes results/nomic_conversion.{json,md}
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402

N = 50
TOP = 10
MIN_COSINE = 0.999


def texts(ds, index):
    """(request texts, book texts) of the check, prompts not yet added."""
    topics = ds.get_topics("validation").head(N)
    qrels = ds.get_qrels("validation")
    gold = qrels[qrels["qid"].isin(topics["qid"]) & (qrels["label"] > 0)]["docno"].astype(str).tolist()
    books = {d["docno"]: d["text"] for d in index.docs_iter(("title", "text"))}
    chosen = list(dict.fromkeys(d for d in gold if d in books))[:N]
    chosen += [d for d in books if d not in set(chosen)][: N - len(chosen)]
    return topics["query"].astype(str).tolist(), [books[d] for d in chosen]


def llama_vectors(gguf: Path, items, n_ctx: int) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), embedding=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2,
                verbose=False)
    try:
        vecs = np.asarray([llm.embed(t, truncate=True) for t in items], dtype=np.float32)
    finally:
        llm.close()
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def markdown(p: dict) -> str:
    c = p["cosine"]
    lines = ["# nomic-embed-text-v1.5: the converted PyTorch model against llama.cpp on the same GGUF", "",
             f"{p['n_requests']} Reddit-TOMT validation requests and {p['n_books']} books (their gold books first), "
             f"with their prompts, {p['max_seq_length']} tokens; PyTorch fp32 (sentence-transformers on the folder "
             f"`fetch_models.py nomic` converts) against llama-cpp-python {p['llama_cpp']} on the f16 GGUF.", "",
             f"Rule (written before the run): mean cosine >= {MIN_COSINE} over all {p['n_requests'] + p['n_books']} "
             f"texts and the same top {TOP} of the books for every request.", "",
             "| texts | mean cosine | min cosine |", "|---|---|---|"]
    for k in ("requests", "books", "all"):
        lines.append(f"| {k} | {c[k]['mean']:.6f} | {c[k]['min']:.6f} |")
    r = p["ranking"]
    lines += ["", f"Top {TOP} of the {p['n_books']} books per request: the same set for {r['same_set']} of "
              f"{p['n_requests']} requests, the same order for {r['same_order']}; mean overlap "
              f"{r['mean_overlap']:.2f} of {TOP}. Token ids (up to the {p['max_seq_length']}-token cut): identical for "
              f"{p['same_tokens']} of {p['n_requests'] + p['n_books']} texts. Past the cut, sentence-transformers "
              "ends a text with [SEP] where llama.cpp only cuts it.", "",
              f"Verdict: **{'the conversion stands' if p['passes'] else 'the conversion does not pass'}**.", "",
              f"Seconds for the {p['n_requests'] + p['n_books']} texts on 2 cores, one text at a time in llama.cpp: "
              f"PyTorch {p['seconds']['torch']:.1f} s, llama.cpp {p['seconds']['llama_cpp']:.1f} s.", "",
              _common.trailer(p["seconds"]["total"], "nomic_conversion")]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = _common.parse_or_render(argparse.ArgumentParser(description=__doc__), "nomic_conversion", markdown)
    if args is None:
        return
    import llama_cpp
    import torch

    from pyterrier_tot.models import load_sentence_transformer
    from pyterrier_tot.models.nomic import DOCUMENT_PROMPT, QUERY_PROMPT, nomic_gguf

    torch.set_num_threads(2)
    t0 = time.time()
    ds, index = _common.reddit()
    requests, books = texts(ds, index)
    st = load_sentence_transformer("nomic")
    seconds = {}
    t = time.time()
    mine_q = st.encode_query(requests, batch_size=8, convert_to_numpy=True)
    mine_d = st.encode_document(books, batch_size=8, convert_to_numpy=True)
    seconds["torch"] = time.time() - t
    t = time.time()
    theirs_q = llama_vectors(nomic_gguf(), [QUERY_PROMPT + r for r in requests], st.max_seq_length)
    theirs_d = llama_vectors(nomic_gguf(), [DOCUMENT_PROMPT + b for b in books], st.max_seq_length)
    seconds["llama_cpp"] = time.time() - t
    cos_q, cos_d = (mine_q * theirs_q).sum(1), (mine_d * theirs_d).sum(1)
    both = np.concatenate([cos_q, cos_d])
    cosine = {k: {"mean": float(v.mean()), "min": float(v.min())}
              for k, v in {"requests": cos_q, "books": cos_d, "all": both}.items()}
    top_mine = np.argsort(-(mine_q @ mine_d.T), axis=1)[:, :TOP]
    top_theirs = np.argsort(-(theirs_q @ theirs_d.T), axis=1)[:, :TOP]
    overlap = [len(set(a) & set(b)) for a, b in zip(top_mine, top_theirs)]
    ranking = {"same_set": int(sum(o == TOP for o in overlap)),
               "same_order": int(sum((a == b).all() for a, b in zip(top_mine, top_theirs))),
               "mean_overlap": float(np.mean(overlap))}
    ids = [st.tokenizer(QUERY_PROMPT + r, truncation=True, max_length=st.max_seq_length)["input_ids"]
           for r in requests] + [st.tokenizer(DOCUMENT_PROMPT + b, truncation=True,
                                              max_length=st.max_seq_length)["input_ids"] for b in books]
    from llama_cpp import Llama

    vocab = Llama(model_path=str(nomic_gguf()), vocab_only=True, verbose=False)
    # up to the cut: a text longer than the window ends in [SEP] here and is merely cut in llama.cpp
    same_tokens = sum(vocab.tokenize(t.encode("utf8"), add_bos=True)[: len(i) - 1] == i[:-1]
                      for t, i in zip([QUERY_PROMPT + r for r in requests] + [DOCUMENT_PROMPT + b for b in books],
                                      ids))
    vocab.close()
    seconds["total"] = time.time() - t0
    payload = {"n_requests": len(requests), "n_books": len(books), "max_seq_length": st.max_seq_length,
               "llama_cpp": llama_cpp.__version__, "cosine": cosine, "cosine_per_text": [round(float(c), 6)
                                                                                        for c in both],
               "ranking": ranking, "same_tokens": int(same_tokens), "seconds": seconds,
               "passes": bool(cosine["all"]["mean"] >= MIN_COSINE and ranking["same_set"] == len(requests))}
    _common.write_results("nomic_conversion", payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
