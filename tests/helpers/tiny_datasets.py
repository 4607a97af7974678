"""Dataset-shaped objects over the six tiny books of :mod:`tests.helpers.books` for the recipe's training and
tuning paths: ``get_topics`` / ``get_qrels`` and a ``name`` that tags their cache folders."""
import pandas as pd

QUERIES = ["kittens nap and then copy their siblings at night", "a blacksmith flies a dragon to the moon",
           "a detective and a poisoning at a lake house", "kids hide on a spaceship going to jupiter",
           "a ghost climbs the stairs of an old lighthouse", "a girl tames a wild horse on a ranch"]


class TinyDataset:
    """Train split: 12 queries over the 6 tiny books (two per book)."""

    name = "tiny-bases"
    queries = QUERIES   # six, one per book (a subclass names its own and its own cache tag)

    def __init__(self):
        qids = [f"q{i}" for i in range(12)]
        self.topics = pd.DataFrame({"qid": qids, "query": [self.queries[i % 6] + ("" if i < 6 else ", I think")
                                                           for i in range(12)]})
        self.qrels = pd.DataFrame({"qid": qids, "docno": [f"b{i % 6 + 1}" for i in range(12)], "label": 1})

    def get_topics(self, split="train"):
        return self.topics

    def get_qrels(self, split="train"):
        return self.qrels



class FourQueries:
    """Four training queries, one book each."""

    name = "tiny-recipe"

    def __init__(self):
        self.topics = pd.DataFrame({"qid": ["t1", "t2", "t3", "t4"],
                                    "query": ["a book about dragons and a red moon", "kittens that nap all day",
                                              "a ghost in a lighthouse", "a spaceship called nine"]})
        self.qrels = pd.DataFrame({"qid": ["t1", "t2", "t3", "t4"], "docno": ["b2", "b1", "b5", "b4"],
                                   "label": [1, 1, 1, 1]})

    def get_topics(self, split):
        return self.topics

    def get_qrels(self, split):
        return self.qrels
