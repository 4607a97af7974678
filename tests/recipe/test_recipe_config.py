"""Issue 30.2: the shipped ``decomposition`` config is the reported recipe (fine-tuned base, fitted weights, depth
1000), so ``pyterrier-tot run decomposition --split validation`` gives ``tuned_pipeline``'s validation numbers."""
import pandas as pd
import pytest

from pyterrier_tot.submission import example_config, load_config


def test_the_shipped_config_is_the_recipe():
    from pyterrier_tot import recipe

    cfg = load_config(example_config("decomposition"))
    (spec,) = cfg.pipeline
    assert spec["stage"] == "tuned_pipeline"
    assert tuple(spec.get("base", recipe.DEFAULT_BASE)) == recipe.DEFAULT_BASE == ("mpnet", "nomic")  # the default
    assert spec.get("fine_tuned", True) is True, "the shipped config must not be the zero-shot pipeline"
    assert spec.get("depth", 1000) == cfg.depth == 1000


@pytest.mark.slow
def test_cli_run_reproduces_tuned_pipeline_on_the_sample(reddit, tmp_path, monkeypatch):
    import pyterrier_tot as ptt
    from pyterrier_tot.evaluation import tot_experiment
    from pyterrier_tot.submission.cli import main

    monkeypatch.setenv("PYTERRIER_TOT_SAMPLE", "30")
    ds = ptt.get_dataset("reddit-tomt-books")
    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    out = tmp_path / "recipe.run"
    # the shipped config with MiniLM as the base (mpnet's and nomic's weights are not part of the test environment)
    config = tmp_path / "decomposition.toml"
    shipped = example_config("decomposition").read_text()
    assert 'base = ["mpnet", "nomic"]' in shipped
    config.write_text(shipped.replace('base = ["mpnet", "nomic"]', 'base = "minilm"'))
    assert main(["run", str(config), "--split", "validation", "-o", str(out)]) == 0
    run = pd.read_csv(out, sep=r"\s+", header=None, names=["qid", "Q0", "docno", "rank", "score", "tag"],
                      dtype={"qid": str, "docno": str})
    dp = ptt.tuned_pipeline(ds, verbose=False, base="minilm")
    assert "dense_ft" in dp.experts            # the fine-tuned base, as the config says
    mine = dp(topics)
    assert run.groupby("qid").size().eq(mine.groupby("qid").size()).all()
    # the same fused top for every query, and the same numbers (deep in the base's tail, batches of queries can
    # swap near-tied neighbours: the CLI encodes queries in batches, and padding moves cosines by float noise)
    a = run.sort_values(["qid", "rank"]).groupby("qid")["docno"].apply(list)
    b = mine.sort_values(["qid", "rank"]).groupby("qid")["docno"].apply(list)
    assert all(a[q][:100] == b[q][:100] for q in a.index)
    table = tot_experiment([pt_from(run), mine], topics, qrels, measures=["R@5", "RR", "R@1000"],
                           names=["cli", "python"])
    assert table.iloc[0][["R@5", "RR", "R@1000"]].tolist() == table.iloc[1][["R@5", "RR", "R@1000"]].tolist()


def pt_from(run):
    return run[["qid", "docno", "score"]].astype({"score": float})


def test_the_default_bases_are_mpnet_and_nomic_and_never_fall_back(reddit, tmp_path, monkeypatch):
    """Without mpnet's weights offline, tuned_pipeline(ds) stops with the command that fetches them: it never
    quietly trains or uses MiniLM under the recommended recipe's name; nor does it without nomic's. With
    train=False it warns, naming both."""
    import pyterrier_tot as ptt
    from pyterrier_tot import recipe
    from pyterrier_tot.errors import ModelUnavailableError
    from pyterrier_tot.models import loading as models

    monkeypatch.setenv("PYTERRIER_TOT_SAMPLE", "30")
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))          # no mpnet, nor an mpnet base, cached here
    monkeypatch.setenv("PYTERRIER_TOT_MPNET", str(tmp_path / "no-such-model"))
    monkeypatch.setattr(models, "_in_hf_cache", lambda name: False)     # whatever this machine has cached
    monkeypatch.setattr(models, "hub_reachable", lambda *a, **k: False)
    ds = ptt.get_dataset("reddit-tomt-books")
    with pytest.raises(ModelUnavailableError, match="pyterrier-tot fetch mpnet"):
        ptt.tuned_pipeline(ds, verbose=False, k=3, expert_k=2)
    with pytest.warns(UserWarning, match=r"\['mpnet', 'nomic'\] are not trained and train=False"):
        found = recipe.fine_tuned_bases(ds, None, train=False, verbose=False)   # what tuned_pipeline(train=False) calls
    assert found == {}
    with pytest.raises(ModelUnavailableError, match="pyterrier-tot fetch nomic"):
        models.resolve_model("nomic")
