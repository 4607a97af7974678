"""A catalogue of one's own: 40 books with title, author, year and description, indexed from a frame.

Where books have authors the default retrievers read them ("the book by Celia Bright" finds her book), while a
corpus without authors keeps the fields, folders and scores it always had; and results can be read the PyTerrier
way, one column per book field (``index.text_loader(["title", "author", "year"])``), on an in-memory corpus and a
streamed one alike, with the joined ``text`` form the re-rankers read unchanged.
"""
import json
import warnings

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt

# (title, author, year, description); her book's description never names her, and other books share a word with her
BOOKS = [
    ("The Lantern Keeper's Daughter", 'Celia Bright', 2009,
     "A girl tends her father's lighthouse lamp alone through a winter of storms and rescues a drowning sailor."),
    ('Salt and Thunder', 'Nora Bright', 2014,
     "Two fishermen's sons race a storm across the bay in a stolen boat to warn the harbour town."),
    ('The Orchard Wall', 'Celia Stone', 1998,
     'An old woman tells her granddaughter how the apple orchard was divided by a bitter family feud.'),
    ('A Comet Over Millbrook', 'Harold Finch', 1987,
     'A bright comet appears over a mill town and a boy becomes convinced it is a ship coming for him.'),
    ('Glass Rivers', 'Amara Osei', 2019,
     "In a city of canals made of glass, a courier girl discovers the water carries other people's memories."),
    ("The Clockmaker's Fox", 'Julian Reyes', 2003,
     'A mechanical fox built by a lonely clockmaker escapes into the forest and learns to hunt.'),
    ('Winter at Hollow Farm', 'Beatrice Lane', None,
     'Three orphaned siblings keep their farm running through a hard winter after their uncle disappears.'),
    ('The Last Librarian', 'Owen Price', 2011,
     'After the cities fall silent, one man guards a library and trades a book of maps for his life.'),
    ('Moth and Ember', 'Priya Nair', 2016,
     "A moth-winged girl and a fire spirit must cross a burning desert to reach the moon's city."),
    ('Under the Copper Sky', 'Daniel Mbeki', 2008,
     'Miners trapped underground after a collapse tell each other stories while waiting for rescue.'),
    ('The Secret of Gull Island', 'Margaret Hale', 1962,
     'Four cousins on a summer holiday find smugglers hiding in the caves of a small island.'),
    ('Paper Soldiers', 'Tomas Weller', 1979,
     'A boy in an occupied town folds paper soldiers that come alive at night to fight the invaders.'),
    ('The Quiet Violin', 'Lena Fischer', 2005,
     'A deaf girl learns to play the violin by feeling its vibrations and enters a national competition.'),
    ('Harvest Moon Murders', 'Victor Crane', 1994,
     'A retired detective investigates a string of poisonings at village harvest fairs.'),
    ('Starlight Express to Nowhere', 'Ruby Calder', 2012,
     'A girl boards a night train that stops at stations for places that no longer exist.'),
    ('The Bone Garden', 'Silas Morrow', 2001,
     "A gardener digging new flower beds uncovers bones and the village's oldest secret."),
    ('Wolves of the Northern Pass', 'Ingrid Sol', 1990,
     'A young shepherd befriends a wolf pack and leads them away from hunters through the mountains.'),
    ("The Cartographer's Son", 'Felix Duarte', 2017,
     "A boy finishes his dead father's map of an unexplored jungle and finds the city it promised."),
    ('Lemonade Summer', 'Josie Park', 2020,
     'Two best friends open a lemonade stand to pay for a dog and end up running the whole street market.'),
    ('Iron Crown', 'Marcus Thorne', 1985,
     "A blacksmith's apprentice forges a crown for a tyrant king and hides a curse inside it."),
    ('The Whispering Wardrobe', 'Agnes Pollard', 1958,
     'Children evacuated to a country house hear voices from an old wardrobe in the attic.'),
    ('Riverboat Blues', 'Calvin Hayes', 1999,
     "A jazz pianist plays on a Mississippi riverboat and falls for a gambler's daughter."),
    ("The Snow Leopard's Promise", 'Tenzin Dorje', 2010,
     'A Himalayan girl protects a snow leopard cub from poachers during a blizzard.'),
    ('Kites Over Kabul', 'Farah Noor', 2006,
     "A boy and his sister build a bright red kite to win the city's great kite-fighting contest."),
    ('Station Eleven Below', 'Hugo Lind', 2015,
     'Scientists at an Antarctic station lose contact with the world and must decide who goes for help.'),
    ('The Tea Shop on Cobble Lane', 'Rosalind Kerr', 2013,
     'A widow opens a tea shop and matches her lonely customers with the perfect blend and partner.'),
    ('Dust and Dragons', 'Leo Vance', 2002,
     'A farm boy finds a dragon egg in a dust storm and raises the hatchling in the barn.'),
    ("The Mapmaker's Apprentice", 'Sofia Marin', 1993,
     'A girl apprenticed to a royal mapmaker discovers that the maps change the land they draw.'),
    ('Northern Lights Academy', 'Erik Holm', 2018,
     'A boarding school in the far north teaches students to weave the aurora into spells.'),
    ('The Forgotten Carousel', 'Ivy Sutton', 1996,
     'An abandoned carousel in a seaside park turns at midnight and carries children into the past.'),
    ('Blood on the Rails', 'Frank Delaney', 1976,
     'A railway detective hunts a killer aboard a transcontinental express.'),
    ('The Honey Thief', 'Maya Lindqvist', 2021,
     "A bear cub steals honey from a village and the beekeeper's son sets out to make peace with it."),
    ('A House of Many Windows', 'Eleanor Voss', 1971,
     'A widowed architect builds a house with a window for every memory of her husband.'),
    ('Pirates of the Painted Sea', 'Gideon Shaw', 2004,
     "A painter's daughter sails into her father's canvas and joins a crew of painted pirates."),
    ("The Astronomer's Cat", 'Hannah Bell', 2007,
     'A cat who lives in an observatory helps an old astronomer find a new star before he retires.'),
    ('Shadows of Marrow Hall', 'Percival Ashby', 1983,
     'A governess arrives at a remote manor where the children insist their dead mother still walks.'),
    ('Goalkeeper', 'Samir Haddad', 2011,
     "A refugee boy becomes the goalkeeper of his new school's football team and leads it to the final."),
    ('The Book of Small Things', 'Clara Moss', 1989,
     'A girl keeps a book of every small kindness in her town and it becomes a town legend.'),
    ('Frost Giants', 'Bjorn Halvorsen', 1997,
     'Two brothers climb a frozen mountain to bargain with giants who have stolen the spring.'),
    ('The Bright Side of Midnight', 'Stella Vaughn', 2022,
     'A night-shift nurse and an insomniac writer meet every midnight in a hospital cafeteria.'),
]
CELIA = "c00"  # The Lantern Keeper's Daughter, by Celia Bright


def catalogue() -> pd.DataFrame:
    return pd.DataFrame([{"docno": f"c{i:02d}", "title": t, "author": a, "year": y, "text": x}
                         for i, (t, a, y, x) in enumerate(BOOKS)])


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    return ptt.BookIndex(catalogue(), path=tmp_path_factory.mktemp("own") / "index", name="my-books")


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    return ptt.BookIndex(catalogue(), path=tmp_path_factory.mktemp("own") / "streamed", stream=True)


def _parts(index):
    return sorted(p.name for p in index.path.iterdir() if p.is_dir() and not p.name.startswith("."))


# ------------------------------------------------------------------------------------------------ default fields
def test_the_author_is_searched_by_default(own):
    bm25 = own.bm25()
    res = bm25.search("the book by Celia Bright")
    assert res.iloc[0]["docno"] == CELIA
    assert repr(bm25) == f"{own!r}.bm25(fields=('title', 'author', 'text'))"
    assert own.bm25_fields == ("title", "author", "text")
    assert {"c01", "c02"} <= set(res["docno"])  # her namesakes (Nora Bright, Celia Stone) match one name: below her
    assert "bm25-title+author+text-porter2" in _parts(own)
    scorer = own.bm25_scorer()  # the scorer reads what the retriever reads
    assert "bm25_scorer(fields=('title', 'author', 'text')" in repr(scorer)
    assert scorer(res[["qid", "query", "docno"]]).sort_values("rank").iloc[0]["docno"] == CELIA


def test_named_fields_are_read_as_named(own):
    assert repr(own.bm25(fields=("title", "text"))) == f"{own!r}.bm25(fields=('title', 'text'))"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ptt.NoResultsWarning)  # nothing but her name: title + text have nothing
        res = own.bm25(fields=("title", "text")).search("Celia Bright")
    assert CELIA not in set(res["docno"])


def test_a_corpus_without_authors_keeps_its_fields_folders_and_scores(tmp_path):
    plain = ptt.BookIndex(catalogue().drop(columns=["author"]), path=tmp_path / "plain")
    query = pd.DataFrame({"qid": ["1"], "query": ["a girl keeps a lighthouse lamp burning in a storm"]})
    default, named = plain.bm25()(query), plain.bm25(fields=("title", "text"))(query)
    pd.testing.assert_frame_equal(default, named)
    assert repr(plain.bm25()) == f"{plain!r}.bm25(fields=('title', 'text'))"
    assert _parts(plain) == ["bm25-title+text-porter2"]  # the folder every index built before has
    assert plain.bm25_fields == ("title", "text")
    blank = ptt.BookIndex(catalogue().assign(author=" "), path=tmp_path / "blank")  # blank names are no authors
    assert blank.bm25_fields == ("title", "text")


def test_reddit_tomt_keeps_title_and_text(reddit_index):
    """The published numbers' corpus has no authors: its default BM25 reads title + text, as always."""
    assert reddit_index.bm25_fields == ("title", "text")
    assert not (reddit_index.corpus["author"] != "").any()


def test_dense_reads_title_and_text_unless_told(own):
    """Dense retrieval keeps title + text by default, also where books have authors: the bi-encoders the library
    trains learn books in that form. The author is a field away."""
    assert repr(own.dense()) == f"{own!r}.dense('sentence-transformers/all-MiniLM-L6-v2')"
    assert repr(own.dense_scorer()) == f"{own!r}.dense_scorer('sentence-transformers/all-MiniLM-L6-v2')"
    with_author = own.dense(fields=("title", "author", "text"))
    assert CELIA in with_author.search("the book by Celia Bright")["docno"].head(3).tolist()
    assert any(p.endswith("-title+author+text-all") for p in _parts(own))


# ------------------------------------------------------------------------------------------------ readable results
def test_results_read_with_one_column_per_field(own):
    res = (own.bm25() >> own.text_loader(["title", "author"])).search("the book by Celia Bright")
    first = res.iloc[0]
    assert (first["docno"], first["title"], first["author"]) == (CELIA, "The Lantern Keeper's Daughter",
                                                                 "Celia Bright")
    assert "text" not in res.columns
    loaded = (own.bm25() % 40 >> own.text_loader(["title", "author", "year"])).search("farm winter siblings")
    assert str(loaded["year"].dtype) == "Int64"
    assert loaded.set_index("docno").loc["c06", "year"] is pd.NA  # Winter at Hollow Farm: no year known
    assert loaded.set_index("docno").loc["c00", "year"] == 2009
    # PyTerrier's own helper asks the index for the same columns
    via_pt = (own.bm25() >> pt.text.get_text(own, ["title", "author"])).search("the book by Celia Bright")
    pd.testing.assert_frame_equal(via_pt, res)


def test_a_missing_value_is_empty_never_nan(tmp_path):
    books = catalogue()
    books.loc[books["docno"] == "c03", "author"] = None
    books["year"] = books["year"].astype(float)  # a year column with NaN, as pandas reads a CSV
    index = ptt.BookIndex(books, path=tmp_path / "gaps")
    frame = pd.DataFrame({"qid": ["1", "1", "1"], "docno": ["c03", "c06", "c00"]})
    out = index.text_loader(["author", "year", "genres"])(frame)
    assert out["author"].tolist() == ["", "Beatrice Lane", "Celia Bright"]
    assert out["genres"].tolist() == ["", "", ""]
    assert out["year"].tolist()[0] == 1987 and out["year"].isna().tolist() == [False, True, False]
    assert not out.astype(str).isin(["nan", "None"]).any().any()
    again = ptt.BookIndex(str(index.path)).text_loader(["author", "year", "genres"])(frame)
    pd.testing.assert_frame_equal(again, out)  # as read back from the folder


def test_every_field_and_cut_fields(own):
    frame = pd.DataFrame({"qid": ["1"], "docno": ["c00"]})
    every = own.text_loader("*")(frame)
    assert list(every.columns) == ["qid", "docno", *ptt.BOOK_FIELDS]
    cut = own.text_loader(["title", "text", "year"], max_chars=7, join=False)(frame)
    assert (cut.loc[0, "title"], cut.loc[0, "text"], cut.loc[0, "year"]) == ("The Lan", "A girl ", 2009)
    assert repr(own.text_loader(["title", "year"])) == f"{own!r}.text_loader(['title', 'year'])"


def test_the_joined_text_the_rerankers_read_is_unchanged(own):
    """A tuple of fields, one field as a string, the default call and any call naming column= join the fields by
    newlines into one column, as before (the dense re-ranker and the cross-encoder call text_loader(fields,
    max_chars) with a tuple)."""
    frame = pd.DataFrame({"qid": ["1", "1"], "docno": ["c00", "c06"]})
    lantern = "The Lantern Keeper's Daughter\nA girl tends"
    assert own.text_loader()(frame)["text"].tolist()[0].startswith(lantern)
    assert own.text_loader(("title", "text"), 20)(frame)["text"].tolist() == [lantern[:20], "Winter at Hollow Far"]
    joined = own.text_loader(("title", "author"), None)(frame)["text"].tolist()
    assert joined[0] == "The Lantern Keeper's Daughter\nCelia Bright"
    titles = ["The Lantern Keeper's Daughter", "Winter at Hollow Farm"]
    assert own.text_loader("title")(frame)["text"].tolist() == titles
    named = own.text_loader(["title", "author"], column="passage")(frame)
    assert list(named.columns) == ["qid", "docno", "passage"]
    assert own.text_loader(["title", "text"], join=True)(frame)["text"].tolist()[0].startswith(lantern)
    assert repr(own.text_loader(("title", "text"), 20)) == f"{own!r}.text_loader(('title', 'text'), max_chars=20)"
    with pytest.raises(ValueError, match="cannot join.*year"):
        own.text_loader(("title", "year"))
    with pytest.raises(ValueError, match="column="):
        own.text_loader(["title"], column="t", join=False)
    with pytest.raises(ValueError, match="no book field"):
        own.text_loader(["title", "blurb"])


def test_loaders_answer_empty_frames_and_unknown_docnos(own, streamed):
    empty = pd.DataFrame({"qid": pd.Series(dtype=str), "docno": pd.Series(dtype=str)})
    full = pd.DataFrame({"qid": ["1"], "docno": ["c00"]})
    for index in (own, streamed):
        loader = index.text_loader(["title", "author", "year"])
        out = loader(empty)
        assert list(out.columns) == ["qid", "docno", "title", "author", "year"]
        assert [str(out[c].dtype) for c in ("title", "year")] == [str(loader(full)[c].dtype) for c in ("title", "year")]
        assert pt.inspect.transformer_inputs(loader) == [["qid", "docno"]]
        assert pt.inspect.transformer_outputs(loader, ["qid", "docno"]) == list(loader(full).columns)
        with pytest.raises(KeyError, match="nope"):
            loader(pd.DataFrame({"qid": ["1", "1"], "docno": ["c00", "nope"]}))


# ------------------------------------------------------------------------------------------------ streamed
def test_a_streamed_catalogue_reads_the_same(own, streamed):
    assert streamed.streamed and streamed.bm25_fields == ("title", "author", "text")
    query = pd.DataFrame({"qid": ["1", "2"], "query": ["the book by Celia Bright", "a dragon egg in a dust storm"]})
    pd.testing.assert_frame_equal(streamed.bm25()(query), own.bm25()(query))
    res = own.bm25()(query)
    for fields in (["title", "author", "year"], "*"):
        pd.testing.assert_frame_equal(streamed.text_loader(fields)(res), own.text_loader(fields)(res))
    pd.testing.assert_frame_equal(streamed.text_loader(("title", "author"), 12)(res),
                                  own.text_loader(("title", "author"), 12)(res))
    assert repr(streamed.text_loader(["title"])) == f"{streamed!r}.text_loader(['title'])"
    assert "streamed" in repr(streamed)


def test_a_streamed_folder_from_before_keeps_title_and_text(streamed):
    """A streamed folder written before the fields it fills were recorded opens with the defaults it was built
    with (reading 6.4M pages to find an author would cost more than it could change)."""
    meta_file = streamed.path / "pt_meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["filled"] == ["title", "author", "text", "year"]
    try:
        meta_file.write_text(json.dumps({k: v for k, v in meta.items() if k != "filled"}))
        assert ptt.BookIndex(str(streamed.path)).bm25_fields == ("title", "text")
    finally:
        meta_file.write_text(json.dumps(meta))
