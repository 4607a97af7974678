"""A scripted LLM world for the stub server: 24 requests whose clues are known, the responder that answers every
packaged prompt from them, and an ``LLM`` client on a stub."""
import json

import pandas as pd

from pyterrier_tot.decomposition.clues import CLUE_FIELDS
from pyterrier_tot.llm.client import LLM
from pyterrier_tot.llm.templates import load_prompt

ANIMALS = ["fox", "owl", "otter", "badger", "whale", "mouse", "heron", "tortoise"]
COLOURS = ["bright yellow", "dark green", "pale blue", "deep red"]
WORDS = ["Moon", "River", "Lantern", "Secret", "Winter", "Garden"]


def make_queries(n=24):
    rows, truth = [], {}
    for i in range(n):
        animal, colour, word = ANIMALS[i % 8], COLOURS[i % 4], WORDS[i % 6]
        year = 1990 + i
        q = (f"I read a book around {year} about a {animal} who builds a boat to find its lost family. "
             f"The cover was {colour} with a {animal} on it. I think the title had the word {word} in it.")
        if i % 3 == 0:
            q += " It was a children's adventure."
        rows.append({"qid": f"q{i}", "query": q})
        truth[q] = {"title": f"the title had the word {word} in it", "author": None, "date": f"around {year}",
                    "cover": f"{colour} with a {animal} on it", "genre": None if i % 3 else "children's adventure",
                    "plot": f"a {animal} who builds a boat to find its lost family"}
        if i % 5 == 4:  # a hallucinated, ungrounded author the extractive check must drop
            truth[q]["author"] = "Herman Melville"
    return pd.DataFrame(rows), truth


TOPICS, TRUTH = make_queries()
#: the kind of answer (a clue field, ``joint``, ``rewrite``, ``hyde``) each packaged prompt's system message asks for
PROMPT_KIND = {}
for _m in ("extractive", "predictive"):
    for _f in CLUE_FIELDS:
        PROMPT_KIND[load_prompt(f"{_m}_{_f}").template[0]["content"]] = _f
    PROMPT_KIND[load_prompt(f"joint_{_m}").template[0]["content"]] = "joint"
PROMPT_KIND[load_prompt("rewrite").template[0]["content"]] = "rewrite"
PROMPT_KIND[load_prompt("hyde").template[0]["content"]] = "hyde"


def responder(messages):
    kind = PROMPT_KIND[messages[0]["content"]]
    query = messages[-1]["content"].removeprefix("Request: ")
    info = TRUTH.get(query, {})
    if kind == "joint":
        if "garbage" in query:
            return "Sorry, I cannot help with that."
        return json.dumps({f: info.get(f) or "N/A" for f in CLUE_FIELDS})
    if kind == "rewrite":
        return "REWRITTEN " + " ".join(query.split()[:5])
    if kind == "hyde":
        return "A story about " + " ".join(query.split()[-6:])
    return info.get(kind) or "N/A"


def make_llm(stub, tmp_path, name="cache.sqlite3", **kw):
    kw.setdefault("concurrency", 4)
    return LLM(model="stub", base_url=stub.base_url, api_key="sk-test-SECRET-42", cache=tmp_path / name,
               verbose=False, **kw)
