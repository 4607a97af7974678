import pandas as pd
import pytest

import pyterrier_tot as ptt


def test_run_file_format(tmp_path):
    res = pd.DataFrame({"qid": ["2", "1", "1", "1"], "docno": ["x", "a", "b", "c"],
                        "score": [0.5, 1.0, 3.0, 2.0], "rank": [0, 2, 0, 1]})
    path = ptt.write_trec_run(res, tmp_path / "sub" / "my.run", run_name="myrun")
    lines = [line.split() for line in path.read_text().splitlines()]
    assert lines == [["1", "Q0", "b", "1", "3.0", "myrun"], ["1", "Q0", "c", "2", "2.0", "myrun"],
                     ["1", "Q0", "a", "3", "1.0", "myrun"], ["2", "Q0", "x", "1", "0.5", "myrun"]]
    back = ptt.read_trec_run(path)
    assert back["rank"].tolist() == [1, 2, 3, 1] and back["qid"].tolist() == ["1", "1", "1", "2"]
    short = ptt.write_trec_run(res, tmp_path / "d.run", depth=1)
    assert len(short.read_text().splitlines()) == 2


def test_run_file_bad_input(tmp_path):
    ok = pd.DataFrame({"qid": ["1"], "docno": ["a"], "score": [1.0]})
    with pytest.raises(KeyError, match="score"):
        ptt.write_trec_run(ok.drop(columns=["score"]), tmp_path / "r")
    with pytest.raises(ValueError, match="empty"):
        ptt.write_trec_run(ok.head(0), tmp_path / "r")
    with pytest.raises(ValueError, match="run_name"):
        ptt.write_trec_run(ok, tmp_path / "r", run_name="two words")
    with pytest.raises(ValueError, match="docno"):
        ptt.write_trec_run(ok.assign(docno=["a b"]), tmp_path / "r")
    with pytest.raises(ValueError, match="twice"):
        ptt.write_trec_run(pd.concat([ok, ok]), tmp_path / "r")
    for bad in (float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="finite"):
            ptt.write_trec_run(ok.assign(score=[bad]), tmp_path / "r")


@pytest.mark.parametrize("scores", [[0.9999999, 0.9999998, 0.9999995],            # saturated, distinct
                                    [3e-9, 2e-9, 1e-12],                          # generative likelihoods
                                    [1.0, 1.0, 0.5]])                             # a real tie
def test_run_file_evaluates_as_the_frame_does(tmp_path, scores):
    import ir_measures

    res = pd.DataFrame({"qid": ["q1"] * 3, "docno": ["a", "b", "c"], "score": scores})
    qrels = pd.DataFrame({"query_id": ["q1"], "doc_id": ["a"], "relevance": [1]})
    ms = [ir_measures.RR, ir_measures.R @ 1]
    frame = ir_measures.calc_aggregate(ms, qrels, res.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    back = ptt.read_trec_run(ptt.write_trec_run(res, tmp_path / "r.run"))
    assert back["score"].tolist() == sorted(scores, reverse=True)            # read back exactly
    assert ir_measures.calc_aggregate(ms, qrels, back.rename(columns={"qid": "query_id", "docno": "doc_id"})) \
        == pytest.approx(frame)
    # the ranks written are the order trec_eval evaluates: a tie goes docno descending (b before a)
    assert back.sort_values("rank")["docno"].tolist() == (["b", "a", "c"] if scores[0] == scores[1] else
                                                          ["a", "b", "c"])


def test_measures():
    names = [str(m) for m in ptt.TOT_MEASURES]
    for m in ["R@1", "R@5", "R@10", "R@20", "R@100", "RR", "nDCG@10", "Success@10"]:
        assert m in names


def test_tied_scores_are_ordered_alike_by_every_measure_and_the_run_file(tmp_path):
    import pyterrier as pt

    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["x", "y"]})
    qrels = pd.DataFrame({"qid": ["1", "2"], "docno": ["a", "d"], "label": [1, 1]})
    # "a" ties with "b" at the top; trec_eval (docno descending) puts "b" first, so "a" is at rank 2
    run = pd.DataFrame({"qid": ["1", "1", "2", "2"], "docno": ["a", "b", "c", "d"], "score": [1.0, 1.0, 2.0, 1.0]})
    measures = ["RR", "RR@10", "R@1"]
    for system in (run, pt.Transformer.from_df(run)):
        res = ptt.tot_experiment([system], topics, qrels, measures=measures).iloc[0]
        assert res["RR"] == res["RR@10"] == 0.5 and res["R@1"] == 0.0
    named = ptt.tot_experiment({"tied": run}, topics, qrels, measures=measures)
    assert list(named["name"]) == ["tied"] and named.iloc[0]["RR@10"] == 0.5
    ptt.write_trec_run(run, tmp_path / "tied.run", run_name="tied")
    from_file = ptt.read_trec_run(tmp_path / "tied.run")
    assert ptt.tot_experiment([from_file], topics, qrels, measures=measures).iloc[0]["RR@10"] == 0.5
    # digit docnos read as integers still tie-break as text, as the run file does ("925083" > "3877968")
    ints = pd.DataFrame({"qid": ["1", "1"], "docno": [925083, 3877968], "score": [1.0, 1.0]})
    iq = pd.DataFrame({"qid": ["1"], "docno": ["925083"], "label": [1]})
    assert ptt.tot_experiment([ints], topics.head(1), iq, measures=measures).iloc[0]["RR@10"] == 1.0
    # the rankings saved by save_dir keep their scores (nudged in the last place only)
    ptt.tot_experiment([pt.Transformer.from_df(run)], topics, qrels, measures=measures, names=["tied"],
                       save_dir=str(tmp_path))
    saved = pt.io.read_results(str(tmp_path / "tied.res.gz"))
    assert sorted(saved["score"].round(9)) == sorted(run["score"])
    assert not saved.duplicated(["qid", "score"]).any()
