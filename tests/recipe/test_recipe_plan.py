"""The first call of the recipe says what it will do and what that costs before it trains, follows it with one
progress display, and says nothing with verbose=False; a cached recipe says everything is cached."""
import os
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot import console, recipe
from pyterrier_tot.recipe import plan as planning
from tests.helpers.books import TINY_BOOKS
from tests.helpers.train_once_worker import TinyDataset

TINY = {"max_steps": 2, "batch_size": 4, "max_seq_length": 32}


@pytest.fixture
def cold(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    return TinyDataset(), ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")


def test_durations_read_as_people_say_them():
    assert [planning.duration(s) for s in (0.2, 42, 60, 149, 3600, 4500)] == \
        ["1 s", "42 s", "1 min", "2 min", "1 h 00 min", "1 h 15 min"]


def test_the_plan_of_a_cold_call_lists_every_step_timed_here(cold):
    ds, index = cold
    plan = recipe.recipe_plan(ds, index, base="minilm", n=4, train_settings=TINY)
    kinds = [s.kind for s in plan.todo]
    assert kinds[0] == "train" and "index" in kinds and "encode" in kinds and kinds[-1] == "fit"
    assert plan.todo[0].what == "train the minilm base: 4 steps"   # 8 queries outside the slice, batch 4: 2 x 2
    assert all(s.seconds > 0 for s in plan.todo) and plan.seconds == sum(s.seconds for s in plan.todo)
    text = str(plan)
    assert text.startswith("the recipe, first call on this machine (") and "in all about" in text
    assert "a step timed here" in text and "books/s timed here" in text
    models = Path(os.environ["PYTERRIER_TOT_CACHE"]) / "models"
    assert not any(models.glob("base-*")) and not list(Path(index.path).glob("dense-*"))  # nothing trained, built


def test_training_is_timed_on_a_random_draw_of_examples_with_the_training_loop_itself(monkeypatch):
    pairs = [(f"request {i}", f"book {i}") for i in range(200)]
    sample = planning.frame_sample(pairs)
    assert sample == planning.frame_sample(pairs) and len(sample) == 32     # the same draw on every call
    assert sample != tuple(pairs[:32]) and max(int(q.split()[1]) for q, _ in sample) > 100   # not the list's head
    assert len(planning.frame_sample(pairs[:5])) == 5
    from pyterrier_tot.recipe import training_loop

    calls = []
    real = training_loop._fit

    def fit(model, loader, loss, epochs, steps, *rest):
        calls.append((epochs, steps, [len(b) for b in loader.batches], len(list(iter(loader)))))
        return real(model, loader, loss, epochs, steps, *rest)

    monkeypatch.setattr(training_loop, "_fit", fit)
    planning.training_step_seconds.cache_clear()
    seconds = planning.training_step_seconds("minilm", 16, 16, False, 0, sample)
    # the loop training runs, one step an "epoch": two batches of 16 from the draw, twice (the second pass timed)
    assert calls == [(4, 1, [16, 16], 4)] and seconds > 0


def test_encoding_is_timed_on_books_drawn_at_random_at_the_length_the_trained_model_keeps(monkeypatch):
    texts = [f"book {i} " + "word " * (i % 7) for i in range(300)]
    sample = planning.text_sample(texts)
    assert sample == planning.text_sample(texts) and len(sample) == planning.ENCODE_SAMPLE
    assert all(isinstance(t, str) for t in sample) and max(int(t.split()[1]) for t in sample) > 100
    from pyterrier_tot.models.loading import load_biencoder

    enc = load_biencoder("minilm")
    before, seen = enc.model.max_seq_length, []
    real = type(enc).encode_docs

    def encode_docs(self, batch, batch_size=None):
        seen.append((len(batch), self.model.max_seq_length, list(batch) == sorted(batch, key=len)))
        return real(self, batch, batch_size=batch_size)

    monkeypatch.setattr(type(enc), "encode_docs", encode_docs)
    assert planning.encoding_seconds("minilm", sample, max_seq_length=24) > 0
    # one warm-up batch, then the whole draw timed in length order, truncated as the trained model will be
    assert seen[1:] == [(len(sample), 24, True)] and seen[0][:2] == (16, 24)
    assert enc.model.max_seq_length == before      # the shared encoder is given back as it was


def test_the_first_call_prints_its_plan_then_trains_and_a_second_call_finds_it_all_cached(cold, capsys):
    ds, index = cold
    dp = recipe.tuned_pipeline(ds, index, base="minilm", n=4, k=3, expert_k=2, train_settings=TINY)
    out = capsys.readouterr().out
    taken = dp.first_call.taken()     # every step the plan printed, beside what it took
    assert list(taken["step"]) == [s.what for s in dp.first_call.todo] + ["in all"]
    assert all(s.took > 0 for s in dp.first_call.todo)   # (the table rounds to tenths: a tiny step shows 0.0)
    assert taken["took_s"].iloc[-1] == pytest.approx(taken["took_s"].iloc[:-1].sum())
    first = out.index("the recipe, first call on this machine")
    assert first < out.index("fine-tuning the minilm base")           # the plan comes before any training
    assert "fit the fuser on 4 tuning queries" in out
    again = recipe.recipe_plan(ds, index, base="minilm", n=4, k=3, expert_k=2, train_settings=TINY)
    assert not again.todo and str(again).endswith("everything is cached; building the pipeline takes seconds")
    recipe.tuned_pipeline(ds, index, base="minilm", n=4, k=3, expert_k=2, train_settings=TINY)
    assert "first call" not in capsys.readouterr().out                 # cached: no plan printed
    assert isinstance(dp, ptt.TunedPipeline)


def test_verbose_false_prints_nothing(cold, capsys):
    ds, index = cold
    recipe.tuned_pipeline(ds, index, base="minilm", n=4, k=3, expert_k=2, train_settings=TINY, verbose=False)
    assert capsys.readouterr().out == ""


def test_the_overall_bar_follows_the_loops_of_each_step():
    """In estimated seconds: a step's loops move the bar in proportion to their own progress; a finished step
    counts whole; loops of another kind (not the step's) do not move it."""
    plan = planning.RecipePlan([planning.Step("train", "train a", False, 100.0, loops=("training",)),
                                planning.Step("fit", "fit", False, 50.0, loops=("fuser",)),
                                planning.Step("encode", "x", True)], "here")
    with plan.progress(enabled=True) as prog:
        assert prog.bar.total == 150
        with prog.step(plan.steps[0]):
            loop = console.bar(total=4, desc="training base", unit="step", disable=True)
            loop.update(1)
            assert prog.bar.n == pytest.approx(25.0)
            for _ in console.bar(range(3), desc="something else", disable=True):
                pass
            assert prog.bar.n == pytest.approx(25.0)
        assert prog.bar.n == pytest.approx(100.0)
        with prog.step(plan.steps[1]):
            for _ in console.bar(range(2), desc="fuser: bootstrap fits", disable=True):
                pass
        assert prog.bar.n == pytest.approx(150.0)
    assert not console._observers                                          # nothing left listening


def test_a_plan_without_mpnet_lists_the_fetch_and_says_what_is_cached_where_and_how_busy(cold, tmp_path,
                                                                                          monkeypatch):
    """``recipe_plan(ds)`` raised ModelUnavailableError without mpnet; the plan said nothing of an empty cache, of
    where the cache lives, or of a load that inflated its timings."""
    ds, index = cold
    monkeypatch.setenv("PYTERRIER_TOT_MPNET", str(tmp_path / "missing"))
    monkeypatch.setattr(os, "getloadavg", lambda: (5.5, 4.0, 3.0))
    plan = recipe.recipe_plan(ds, index, base="mpnet", helpers=(), n=4, train_settings=TINY)
    assert plan.todo[0].kind == "fetch" and plan.todo[0].what == "fetch all-mpnet-base-v2"
    text = str(plan)
    assert "fetch all-mpnet-base-v2: not timed (`pyterrier-tot fetch mpnet`" in text
    assert "train the mpnet base: 4 steps: not timed (timed once all-mpnet-base-v2 is fetched)" in text
    assert "cached already: nothing yet" in text
    assert f"(the cache: {os.environ['PYTERRIER_TOT_CACHE']}, $PYTERRIER_TOT_CACHE)" in text
    assert "load average 5.5 on" in text
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert "load average" not in str(recipe.recipe_plan(ds, index, base="minilm", n=4, train_settings=TINY))


def test_the_plan_asks_each_expert_what_it_reads(cold):
    """What a plan builds and times comes from the experts themselves (``index_parts()``): BM25 field sets, dense
    parts by (model, fields, max_chars, precision); one part read by two experts is listed once; a stage that says
    nothing (the date expert) reads nothing to build."""
    _, index = cold
    experts = {"bm25": ptt.base_expert(index, "bm25"), "dense": ptt.base_expert(index, "dense"),
               "title": ptt.FieldExpert(index, "title", "dense", precision="bf16", max_chars=64),
               "density": recipe.DensityPrior(index, k=2), "date": ptt.DateExpert(index)}
    assert experts["title"].index_parts() == [("dense", None, ("title",), 64, "bf16")]
    assert experts["density"].index_parts() == [("dense", None, ("title", "text"), None, "fp32")]
    bm25, parts = planning.expert_parts(experts)
    assert bm25 == [tuple(experts["bm25"].book_fields)]
    assert list(parts) == [(None, ("title", "text"), None, "fp32"), (None, ("title",), 64, "bf16")]
    assert parts[(None, ("title", "text"), None, "fp32")].startswith("dense expert (MiniLM")
