"""Inspect / bad-input cases for issue 17's stages: the cross-encoder reranker and the LambdaMART fuser."""
import numpy as np
import pandas as pd

from pyterrier_tot.decomposition.learned_fuser import LearnedFuser, LearnedFuserModel
from pyterrier_tot.rerank.cross_encoder import CrossEncoderModel, CrossEncoderReranker, train_cross_encoder
from tests.helpers.matrix_inputs import Case, clue_queries, results, results_with_text

_MADE = {}


def _tiny_cross_encoder(env):
    """A 1-layer random BERT with MiniLM's tokenizer, trained for one step (a real saved artifact)."""
    if "ce" not in _MADE:
        from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

        from pyterrier_tot.models import resolve_model

        base = env.tmp / "tiny-bert"
        tok = AutoTokenizer.from_pretrained(resolve_model(None))
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                         intermediate_size=32, max_position_embeddings=64, num_labels=1)
        BertForSequenceClassification(cfg).save_pretrained(str(base), safe_serialization=True)
        tok.save_pretrained(str(base))
        _MADE["ce"] = train_cross_encoder([("a dragon", "Dragons of the Red Moon", ["The Sleepy Kitten"])],
                                          env.tmp / "tiny-ce", base_model=base, max_length=48, max_query_tokens=16,
                                          show_progress_bar=False)
    return _MADE["ce"]


QRELS = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b2", "b5"], "label": 1})


def _learned(env):
    experts = env.bm25_experts()
    fuser = LearnedFuser(list(experts.values()), names=list(experts),
                         params={"min_child_samples": 1, "n_estimators": 5})
    return fuser.fit(clue_queries(), QRELS, candidates=lambda q: results())


def _with_features(env=None):
    res = results()
    return res.assign(features=[np.array([float(s), float(r)]) for s, r in zip(res["score"], res["rank"])])


def _learned_features(env):
    fuser = LearnedFuser(names=["f0", "f1"], params={"min_child_samples": 1, "n_estimators": 5})
    return fuser.fit(_with_features(), QRELS)


def _saved_learned(env):
    path = env.tmp / "learned-fuser"
    if not path.exists():
        _learned_features(env).save(path)
    return LearnedFuserModel(path).fuser()


CASES = [
    Case("CrossEncoderModel.reranker", "index",
         lambda e: CrossEncoderModel(_tiny_cross_encoder(e)).reranker(e.index, k=2), results),
    Case("LearnedFuserModel.fuser", "features", _saved_learned, _with_features),
    Case("CrossEncoderReranker", "index", lambda e: CrossEncoderReranker(_tiny_cross_encoder(e), e.index, k=2),
         results),
    Case("CrossEncoderReranker", "text-column", lambda e: CrossEncoderReranker(_tiny_cross_encoder(e), k=2),
         results_with_text),
    Case("LearnedFuser", "experts", _learned, results),
    Case("LearnedFuser", "features", _learned_features, _with_features),
]

STAGES = {
    "CrossEncoderModel.reranker": (True, True, True),
    "LearnedFuserModel.fuser": (False, False, False),
    "CrossEncoderReranker[index]": (True, True, True),
    "CrossEncoderReranker[text-column]": (True, True, False),
    "LearnedFuser[experts]": (True, False, True),     # through its experts (a BM25 base expert reads the query)
    "LearnedFuser[features]": (False, False, False),  # reads the ** features only
}
