"""The six tiny books most tests index, and result frames over them."""

TINY_BOOKS = [
    {"docno": "b1", "title": "The Sleepy Kitten", "author": "Ann Marsh", "genres": "picture book, animals",
     "year": 1996, "text": "Four kittens play all day while their brother naps; at night he wakes and copies them."},
    {"docno": "b2", "title": "Dragons of the Red Moon", "author": "Carl Voss", "genres": "fantasy",
     "year": 2004, "text": "A young blacksmith befriends a dragon and flies to the red moon to save her village."},
    {"docno": "b3", "title": "Murder at Lakeside Manor", "author": "Dora Quill", "genres": "mystery",
     "year": 1988, "text": "A detective investigates a poisoning at a lakeside mansion during a thunderstorm."},
    {"docno": "b4", "title": "Spaceship Nine", "author": "Eli Grant", "genres": "science fiction",
     "year": 2012, "text": "Children stow away on a spaceship bound for Jupiter and must repair its engine."},
    {"docno": "b5", "title": "The Haunted Lighthouse", "author": "Fay Lorne", "genres": "horror, young adult",
     "year": 2001,
     "text": "Teenagers spend a night in an abandoned lighthouse where a ghost keeper still climbs the stairs."},
    {"docno": "b6", "title": "Summer of Horses", "author": "Gil Arden", "genres": "young adult, animals",
     "year": None, "text": "A girl spends her summer training a wild horse on her grandmother's ranch."},
]




def tiny_ranking(query, docnos=("b1", "b3", "b4", "b6", "b5", "b2"), qid="q1"):
    """A result frame of TINY_BOOKS for one query, scores descending in the order given (the re-rankers' tests)."""
    import pandas as pd
    import pyterrier as pt

    n = len(docnos)
    return pt.model.add_ranks(pd.DataFrame({"qid": qid, "query": query, "docno": list(docnos),
                                            "score": [float(n - i) for i in range(n)]}))


def ranked_docnos(res, qid="q1"):
    """The docnos of one query of a result frame, by rank."""
    return res[res["qid"] == qid].sort_values("rank")["docno"].tolist()
