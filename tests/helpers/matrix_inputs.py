"""What the inspect and bad-input matrices are made of: a :class:`Case` (one mode of one public transformer), the
tiny inputs of each mode, and :class:`Env` (one tiny index, one stub LLM, one tiny CLIP cover index)."""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import pandas as pd
import pyterrier as pt

import pyterrier_tot as ptt
from tests.helpers.books import TINY_BOOKS


@dataclass
class Case:
    name: str                                   # public name (``Class``, ``function`` or ``Class.method``)
    mode: str
    build: Callable[["Env"], pt.Transformer]
    inp: Callable[["Env"], pd.DataFrame]
    needs: Optional[str] = None                 # "terrier" or "covers": skipped when unavailable
    marks: List = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.mode}]"


# -- tiny inputs ----------------------------------------------------------------------------------------------
CLUES = {"clue_title": ["red moon dragons", None], "clue_author": [None, "Fay Lorne"],
         "clue_date": ["around 2005", None], "clue_cover": ["a dragon on a red moon", None],
         "clue_genre": ["fantasy", "horror"], "clue_plot": ["a blacksmith befriends a dragon", "a ghost keeper"],
         "clue_year": pd.array([2005, pd.NA], dtype="Int64")}


def queries(env=None) -> pd.DataFrame:
    return pd.DataFrame({"qid": ["q1", "q2"],
                         "query": ["I think it was about a dragon and a blacksmith, not a sequel",
                                   "maybe a ghost in a lighthouse, no romance"]})


def clue_queries(env=None) -> pd.DataFrame:
    return queries().assign(**CLUES)


def results(env=None) -> pd.DataFrame:
    res = clue_queries().merge(pd.DataFrame({"docno": ["b2", "b5", "b1"], "score": [3.0, 2.0, 1.0]}), how="cross")
    return pt.model.add_ranks(res)


def results_with_text(env=None) -> pd.DataFrame:
    books = pd.DataFrame(TINY_BOOKS)[["docno", "title", "text", "year"]]
    return results().merge(books, on="docno")


# -- environment: one tiny index, one stub LLM, one tiny CLIP cover index -----------------------------------------
def responder(messages):
    return json.dumps({"title": "Dragons of the Red Moon", "author": "N/A", "date": "around 2005", "cover": "N/A",
                       "genre": "fantasy", "plot": "a blacksmith befriends a dragon"})


class Env:
    def __init__(self, tmp: Path, llm):
        self.tmp = tmp
        self.books = pd.DataFrame(TINY_BOOKS)
        self.index = ptt.BookIndex(self.books, path=tmp / "index")
        self.llm = llm
        self._covers = None

    def bm25_experts(self):
        return {"base": ptt.base_expert(self.index, "bm25"), "title": ptt.FieldExpert(self.index, "title", "bm25"),
                "date": ptt.DateExpert(self.index)}

    def covers(self):
        if self._covers is None:
            from pyterrier_tot.covers import ClipModel, CoverIndex
            from tests.helpers.synthetic_covers import make_books, write_covers

            model = ClipModel.from_config(seed=0)
            made = write_covers(make_books(len(TINY_BOOKS), seed=3, size=48), self.tmp / "covers")
            docs = [{"docno": b["docno"], "cover": m["cover"]} for b, m in zip(TINY_BOOKS, made)]
            index = CoverIndex(self.tmp / "cover-index").build(docs, model, batch_size=8, verbose=False)
            self._covers = (index, model)
        return self._covers
