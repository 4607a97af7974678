import time

import pandas as pd
import pytest

from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, YEAR_COLUMN
from pyterrier_tot.decomposition.date_resolver import date_mentions, latest_possible_year
from pyterrier_tot.decomposition.rule_clue_extractor import RuleClueExtractor, extract_clues


@pytest.mark.parametrize("text,year", [
    ("I read it in the late 90s", 1999),
    ("[Late 90s]Book about kittens", 1999),
    ("sometime in the early 2000s", 2003),
    ("it was the mid-80s", 1986),
    ("probably 2002-2005, maybe", 2005),
    ("between 1994 and 96", 1996),
    ("read it around 2005", 2005),
    ("I read this 15 years ago", 2005),
    ("about ten years ago", 2010),
    ("[BEFORE 2014] YA novel", 2014),
    ("a novel set in 1850 that I read in 2011", 2011),
    ("the 1990s", 1999),
    ("no dates here, 250 pages, $1999 price", None),
])
def test_latest_possible_year(text, year):
    assert latest_possible_year(text, reference_year=2020) == year


def test_date_mentions_in_order():
    found = date_mentions("Read it in 2003, it came out in the 90s", 2020)
    assert [(y, t) for _, y, t in found] == [(2003, "2003"), (1999, "90s")]


def test_extract_clues_fields():
    c = extract_clues('[Late 90s] Fantasy book called The Glass Owl by Mira Holt? I read it 15 years ago. '
                      'The cover was yellow with an owl. A girl finds an owl made of glass.', 2020)
    assert c["clue_title"] == "The Glass Owl"
    assert c["clue_author"] == "Mira Holt"
    assert c["clue_cover"] == "The cover was yellow with an owl."
    assert c["clue_genre"] == "fantasy"
    assert c[YEAR_COLUMN] == 1999 and "15 years ago" in c["clue_date"]
    assert "girl finds an owl" in c["clue_plot"] and "cover" not in c["clue_plot"]


def test_na_when_nothing_found():
    c = extract_clues("a story about a boy and his dog", 2020)
    assert c["clue_title"] is None and c["clue_author"] is None and c["clue_cover"] is None
    assert c["clue_date"] is None and c[YEAR_COLUMN] is None and c["clue_genre"] is None
    assert c["clue_plot"] == "a story about a boy and his dog"


def test_transformer_on_training_queries(reddit):
    topics = reddit.get_topics("train")
    t0 = time.time()
    out = RuleClueExtractor(reference_year=2022)(topics)
    assert time.time() - t0 < 30  # the whole training set in seconds
    assert len(out) == len(topics) and list(out["qid"]) == list(topics["qid"])
    for col in (*CLUE_COLUMNS, YEAR_COLUMN):
        assert col in out.columns
    rates = out[list(CLUE_COLUMNS)].notna().mean()
    assert rates["clue_plot"] > 0.95 and 0.3 < rates["clue_date"] < 0.9 and rates["clue_cover"] > 0.1
    assert out[YEAR_COLUMN].dropna().between(1900, 2022).all()
    assert str(out[YEAR_COLUMN].dtype) == "Int64"


def test_empty_frame_and_bad_input():
    empty = RuleClueExtractor()(pd.DataFrame(columns=["qid", "query"]))
    assert set(CLUE_COLUMNS) <= set(empty.columns) and len(empty) == 0
    import pyterrier as pt
    with pytest.raises(pt.validate.InputValidationError):
        RuleClueExtractor()(pd.DataFrame({"qid": ["1"], "text": ["x"]}))
    assert repr(RuleClueExtractor(reference_year=2020)) == "RuleClueExtractor(reference_year=2020)"
