"""No training or tuning path of the recipe can read validation: every one of them is run here on a dataset
that refuses (and records) any request for a split other than ``train``, with the trainers replaced by spies
that record which queries they were given. The Reddit-TOMT tuning slice is fixed in code (its fingerprint)
and disjoint from validation."""
import pandas as pd
import pytest

from pyterrier_tot import recipe

BOOKS = ["b1", "b2", "b3", "b4", "b5", "b6"]
QUERIES = ["kittens that nap all day", "a dragon and a blacksmith on the red moon", "a poisoning at a lakeside manor",
           "children stow away on a spaceship", "a ghost keeper in a lighthouse", "training a wild horse"]


class GuardedDataset:
    """Train split: 12 queries; any other split raises (the test fails) and is recorded."""

    name = "guarded"

    def __init__(self):
        qids = [f"t{i}" for i in range(12)]
        self.topics = pd.DataFrame({"qid": qids, "query": [QUERIES[i % 6] + f" ({i})" for i in range(12)]})
        self.qrels = pd.DataFrame({"qid": qids, "docno": [BOOKS[i % 6] for i in range(12)], "label": 1})
        self.asked = []

    def _check(self, split):
        self.asked.append(split)
        if split != "train":
            raise AssertionError(f"a training / tuning path asked for the {split!r} split")

    def get_topics(self, split="train"):
        self._check(split)
        return self.topics.copy()

    def get_qrels(self, split="train"):
        self._check(split)
        return self.qrels.copy()

    def get_corpus_df(self):
        from tests.helpers.books import TINY_BOOKS
        return pd.DataFrame(TINY_BOOKS)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from pyterrier_tot.index import BookIndex
    from tests.helpers.books import TINY_BOOKS
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("leak_index"))


@pytest.fixture
def ds(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    monkeypatch.setattr(recipe, "TUNING_QUERIES", 4)
    return GuardedDataset()


def _slices(ds, n=4):
    tuning = set(recipe.tuning_split(ds.topics, n)["qid"])
    return tuning, set(ds.topics["qid"]) - tuning


def test_train_data_parts_are_disjoint_and_train_only(ds):
    tuning, rest = _slices(ds)
    assert set(recipe.train_data(ds, "tuning", 4)[0]["qid"]) == tuning
    assert set(recipe.train_data(ds, "rest", 4)[1]["qid"]) == rest
    with pytest.raises(ValueError, match="part"):
        recipe.train_data(ds, "validation")
    assert set(ds.asked) == {"train"}


def test_trainers_see_only_the_training_rest(ds, index, monkeypatch, tmp_path):
    from pyterrier_tot.recipe import expert_training
    from pyterrier_tot.rerank import cross_encoder

    tuning, rest = _slices(ds)
    seen = {}
    base_dir = tmp_path / "base"

    def fake_base(topics, qrels, corpus, output_dir=None, **kw):
        seen["base"] = set(topics["qid"]) | set(qrels["qid"])
        output_dir.mkdir(parents=True)
        (output_dir / "pt_meta.json").write_text("{}")
        (output_dir / "model.safetensors").write_bytes(b"")
        return output_dir

    def fake_biencoder(examples, out, **kw):
        seen["hn"] = {ex[0] for ex in examples}
        return out

    def fake_ce(groups, out, **kw):
        seen["ce"] = {g[0] for g in groups}
        return out

    monkeypatch.setattr(expert_training, "train_base_retriever", fake_base)
    monkeypatch.setattr(expert_training, "train_biencoder", fake_biencoder)
    monkeypatch.setattr(cross_encoder, "train_cross_encoder", fake_ce)
    recipe.fine_tuned_base(ds, 4, path=base_dir)
    recipe.fine_tuned_hard(ds, index, epochs=1, n_negatives=1, clue_forms=True, n=4, verbose=False)
    recipe.recipe_cross_encoder(ds, index, negatives="bm25+dense", n_negatives=1, n=4, verbose=False)
    rest_text = set(ds.topics.set_index("qid").loc[sorted(rest), "query"])
    assert seen["base"] == rest
    assert seen["ce"] and seen["ce"] <= rest_text
    assert {q for q in seen["hn"] if q in set(ds.topics["query"])} <= rest_text   # (clue forms are short texts)
    assert set(ds.asked) == {"train"}


def test_base_model_paths_see_only_the_training_rest(ds, index, monkeypatch):
    """fine_tuned_base(model=...), base_grid and the multi-base tuned_pipeline train on the rest only (real
    training, 1 step, a second base given as a model folder), and choose_base / the fused weights read only the
    tuning slice."""
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
    from pyterrier_tot.models import resolve_model
    from pyterrier_tot.recipe import bases, expert_training

    tuning, rest = _slices(ds)
    rest_text = set(ds.topics.set_index("qid").loc[sorted(rest), "query"])
    anchors, fitted = set(), set()
    real = expert_training.train_biencoder

    def spy(pairs, output_dir=None, **kw):
        anchors.update(ex[0] for ex in pairs)
        return real(pairs, output_dir, **{**kw, "max_steps": 1, "max_seq_length": 16, "batch_size": 4})

    fit_w = WeightedFuser.fit

    def spy_w(self, topics, qrels, *a, **kw):
        fitted.update(set(topics["qid"]) | set(qrels["qid"]))
        return fit_w(self, topics, qrels, *a, **kw)

    monkeypatch.setattr(expert_training, "train_biencoder", spy)
    monkeypatch.setattr(WeightedFuser, "fit", spy_w)
    runs = bases.base_grid(ds, "minilm", lrs=(1e-4,), epochs=2, n=4, index=index, verbose=False)
    assert anchors and anchors <= rest_text and len(runs) == 2
    best, table = bases.choose_base(ds, index, runs, n=4)
    other = resolve_model("minilm")  # a second base named by its folder
    dp = recipe.tuned_pipeline(ds, index, base=["minilm", other], n=4, k=3, expert_k=2, verbose=False)
    assert [n for n in dp.experts if n.startswith("dense_ft")] == ["dense_ft", bases.base_expert_name(other)]
    assert anchors <= rest_text and fitted == tuning
    assert set(ds.asked) == {"train"}


def test_fusers_fit_only_on_the_tuning_slice(ds, index, monkeypatch):
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    tuning, _ = _slices(ds)
    seen = {}
    fit_w = WeightedFuser.fit

    def spy_w(self, topics, qrels, *a, **kw):
        seen["weighted"] = set(topics["qid"]) | set(qrels["qid"])
        return fit_w(self, topics, qrels, *a, **kw)

    def spy_l(self, topics, qrels, *a, **kw):
        seen["learned"] = set(kw["feats"]["qid"]) | set(qrels["qid"])
        return self

    monkeypatch.setattr(WeightedFuser, "fit", spy_w)
    monkeypatch.setattr(LearnedFuser, "fit", spy_l)
    monkeypatch.setattr(LearnedFuser, "save", lambda self, path: path)
    recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2)
    recipe.fitted_learned_fuser(ds, index, None, n=4, k=3, expert_k=2, grid=[{}])
    assert seen["weighted"] == tuning and seen["learned"] <= tuning
    best, table = recipe.choose_epoch(ds, index, {0: None}, n=4)
    assert best == 0 and len(table) == 1
    assert set(ds.asked) == {"train"}


def test_reddit_tuning_slice_is_fixed_and_disjoint_from_validation(reddit):
    train, val = reddit.get_topics("train"), reddit.get_topics("validation")
    tuning = recipe.tuning_split(train)
    assert len(tuning) == 300 and recipe.qid_fingerprint(tuning) == recipe.REDDIT_TUNING_FINGERPRINT
    assert not set(tuning["qid"]) & set(val["qid"])
    assert not set(recipe.training_rest(train)["qid"]) & (set(val["qid"]) | set(tuning["qid"]))


def test_a_fuser_on_z_scores_is_fitted_under_its_own_key_and_keeps_its_scale(ds, index):
    """``normalise="zscore"`` fits the recipe's weights on z-scored experts under a key of its own (the min-max
    default's is untouched) and the saved weights carry the scale, so the pipeline scores as it was fitted."""
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    plain = recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2)
    z = recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2, normalise="zscore")
    assert z != plain and WeightedFuser.load(z).normalise[0] == "zscore"
    assert WeightedFuser.load(plain).normalise[0] == "minmax"
    assert recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2) == plain  # the default's key as it was
    dp = recipe.build_pipeline(index, None, k=3, expert_k=2, weights=z)
    tuning, _ = recipe.train_data(ds, "tuning", 4)
    cands = (dp.decomposer >> dp.candidates)(tuning)
    assert dp.fuser.normalise[0] == "zscore"
    feats = dp.fuser.features(cands)
    assert abs(feats.groupby("qid")[dp.fuser.names[0]].mean()).max() < 1e-9  # z-scored within each query


def test_weights_from_precomputed_features_match(ds, index, tmp_path, monkeypatch):
    """fitted_weights(feats=...) (the benchmark's shortcut) fits the same weights as running the experts."""
    from pyterrier_tot.decomposition.learned_fuser import LearnedFuser
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    direct = WeightedFuser.load(recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2))
    dp = recipe.build_pipeline(index, None, k=3, expert_k=2)
    tuning, _ = recipe.train_data(ds, "tuning", 4)
    feats = LearnedFuser(dp.fuser.experts, names=dp.fuser.names).features((dp.decomposer >> dp.candidates)(tuning))
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "other"))
    shortcut = WeightedFuser.load(recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2, feats=feats))
    assert shortcut.names == direct.names and shortcut.normalise == direct.normalise
    assert shortcut.weights.tolist() == direct.weights.tolist() and shortcut.fit_score == direct.fit_score
    # features of other experts (here one column scaled) are refused, never cached as the recipe's fit
    other = feats.assign(**{dp.fuser.names[0]: feats[dp.fuser.names[0]] * 0.5})
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "third"))
    with pytest.raises(ValueError, match="not this recipe's features"):
        recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2, feats=other)
    with pytest.raises(ValueError, match="not this recipe's features"):   # or of other candidates
        recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2, feats=feats[feats.groupby("qid").cumcount() > 0])
    assert not list((tmp_path / "third").glob("models/fuser-*"))
