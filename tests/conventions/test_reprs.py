"""Public transformers print as the call that makes them (settings that are not their default, by name), compare
equal when their settings are equal, and take their settings by keyword (by position: a DeprecationWarning)."""
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from tests.helpers.books import TINY_BOOKS


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("reprs_index"))


def _stages(index):
    return [ptt.FieldExpert(index, "title", "bm25"), ptt.FieldExpert(index, "plot", model="minilm", max_chars=200),
            ptt.base_expert(index, "bm25", num_results=50), ptt.DateExpert(index, soft=True, tau=3.0),
            ptt.DateExpert(), ptt.DensityPrior(index, k=2, reference=3, seed=1), ptt.Normalise("rr", rr_k=10.0),
            ptt.DenseReranker(index, k=5, alpha=0.5), ptt.DenseReranker(model="minilm", stored=False),
            ptt.HedgeRemover(extra=["x y"], count=True), ptt.NegationPenalty(index, w=2.0, mode="phrase"),
            WeightedFuser(names=["bm25", "dense"], weights=[1.0, 0.5], normalise="zscore"),
            ptt.LinearFusion(ptt.Normalise(), ptt.Normalise("zscore"), weights=[0.6, 0.4]),
            ptt.ClueConcatenator(("plot", "title"), labels=True), ptt.RuleClueExtractor(reference_year=2020)]


def test_reprs_evaluate_back_to_an_equal_stage(index):
    names = {"index": index, "FieldExpert": ptt.FieldExpert, "DateExpert": ptt.DateExpert,
             "DensityPrior": ptt.DensityPrior, "Normalise": ptt.Normalise, "DenseReranker": ptt.DenseReranker,
             "HedgeRemover": ptt.HedgeRemover, "NegationPenalty": ptt.NegationPenalty,
             "WeightedFuser": WeightedFuser, "LinearFusion": ptt.LinearFusion,
             "ClueConcatenator": ptt.ClueConcatenator, "RuleClueExtractor": ptt.RuleClueExtractor}
    for stage in _stages(index):
        code = repr(stage).replace(repr(index), "index")
        assert code.startswith(type(stage).__name__ + "("), code
        again = eval(code, names)  # noqa: S307 - the test's own reprs
        assert type(again) is type(stage) and repr(again) == repr(stage), code
        if hasattr(type(stage), "_identity"):  # settings equality
            assert again == stage and hash(again) == hash(stage), code


def test_equal_settings_compare_equal_other_settings_do_not(index):
    assert ptt.FieldExpert(index, "title", "bm25") == ptt.FieldExpert(index, "title", "bm25")
    assert ptt.FieldExpert(index, "title", "bm25") != ptt.FieldExpert(index, "title", "dense")
    assert len({ptt.Normalise(), ptt.Normalise(), ptt.Normalise("zscore")}) == 2
    assert ptt.DateExpert(index) != ptt.DateExpert()  # another index (none): not the same stage


def test_settings_by_position_still_work_with_a_deprecation_warning(index):
    with pytest.warns(DeprecationWarning, match=r"DateExpert: pass soft, tau by keyword"):
        old = ptt.DateExpert(index, True, 3.0)
    assert old == ptt.DateExpert(index, soft=True, tau=3.0)
    with pytest.warns(DeprecationWarning, match="rr_k"):
        assert ptt.Normalise("rr", 10.0) == ptt.Normalise("rr", rr_k=10.0)
    with pytest.raises(TypeError, match="multiple values"):
        ptt.Normalise("rr", 10.0, rr_k=5.0)
    with pytest.raises(TypeError, match="at most"):
        ptt.DenseReranker(index, None, 1, 2, 3, 4, 5, 6, 7)


def test_the_index_stages_print_as_the_index_call_that_makes_them(index):
    """``index.bm25(k1=0.9)`` prints as ``BookIndex(...).bm25(fields=(...), k1=0.9)``: evaluated on that index, the
    same stage; its cache key comes from its settings, so the repr never changes a key."""
    from pyterrier_tot._plumbing.cache_key import cache_key

    bm25 = index.bm25(k1=0.9, num_results=50)
    stages = [bm25, (bm25 % 3).compile(), index.bm25_scorer(unknown_docnos="nan"), index.text_loader(),
              index.text_loader(["title", "year"], 20), index.text_loader(("title", "text"), 30, column="x")]
    for stage in stages:
        code = repr(stage)
        assert code.startswith(repr(index) + "."), code
        again = eval(code.replace(repr(index), "index"), {"index": index})  # noqa: S307 - the test's own reprs
        assert repr(again) == code and cache_key(again) == cache_key(stage), code
    assert repr(bm25).endswith(".bm25(fields=('title', 'author', 'text'), k1=0.9, num_results=50)")
    assert cache_key(bm25) != cache_key(index.bm25(num_results=50))
    # the same call on the same index is the same stage; another setting (the stemmer too) is another one
    assert index.bm25(k1=0.9, num_results=50) == bm25 and len({bm25, index.bm25(k1=0.9, num_results=50)}) == 1
    assert index.bm25() != bm25 and index.bm25_scorer() == index.bm25_scorer()
    assert index.text_loader() == index.text_loader() != index.text_loader(max_chars=10)
    plain = index.bm25(stemmer="none")
    assert plain != index.bm25() and cache_key(plain) != cache_key(index.bm25()) and "stemmer='none'" in repr(plain)


def test_llm_and_clarinet_stages_print_as_code(index):
    from pyterrier_tot.clarinet.distribution import RetrievalDistribution
    from pyterrier_tot.clarinet.posterior import LanguagePosterior
    from pyterrier_tot.clarinet.questions import Clarifier
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser

    llm = ptt.LLM("stub", base_url="http://127.0.0.1:9/v1")
    names = {"llm": llm, "index": index, "LLMQueryRewriter": ptt.LLMQueryRewriter, "HyDE": ptt.HyDE,
             "RetrievalDistribution": RetrievalDistribution, "LanguagePosterior": LanguagePosterior,
             "Clarifier": Clarifier, "LearnedFuser": LearnedFuser}
    stages = [ptt.LLMQueryRewriter(llm), ptt.HyDE(llm, combine="append", max_query_chars=100),
              RetrievalDistribution(k=3, temperature=1.0), LanguagePosterior(llm, combine="append"),
              LanguagePosterior(answer_first=True), Clarifier(llm, index, pool_size=4, min_pool=1),
              LearnedFuser(names=["bm25", "title"], params={"num_leaves": 7})]
    for stage in stages:
        code = repr(stage).replace(repr(llm), "llm").replace(repr(index), "index")
        again = eval(code, names)  # noqa: S307 - the test's own reprs
        assert type(again) is type(stage) and repr(again) == repr(stage), code
    assert repr(ptt.HyDE(llm)) == f"HyDE({llm!r}, prompt='hyde')"  # the prompt always named
    clues = ptt.ClueLookup(pd.DataFrame({"qid": ["1", "2"], "clue_title": ["x", None]}), label="llm")
    assert repr(clues) == "ClueLookup(<clues of 2 queries>, label='llm')"  # a frame as what it is
    with pytest.warns(DeprecationWarning, match="HyDE: pass prompt, prompt_dir, combine by keyword"):
        assert repr(ptt.HyDE(llm, None, None, "append")) == repr(ptt.HyDE(llm, combine="append"))


def test_the_lucene_searcher_prints_as_code():
    from pyterrier_tot.query.rm3 import LuceneSearcher

    searcher = LuceneSearcher("/idx", k1=0.9, rm3=(10, 10, 0.5))
    again = eval(repr(searcher), {"LuceneSearcher": LuceneSearcher})
    assert repr(searcher) == "LuceneSearcher('/idx', k1=0.9, rm3=(10, 10, 0.5))" and repr(again) == repr(searcher)
    assert repr(LuceneSearcher("/idx")) == "LuceneSearcher('/idx')"
