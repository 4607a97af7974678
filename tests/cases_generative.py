"""``GenerativeRetriever`` in the inspect and bad-input matrices (see ``tests/test_inspect.py``)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_inspect import Case, queries, results  # noqa: E402

_BUILT = {}


def _retriever(env):
    """A tiny random T5 over the tiny corpus, built once per environment (untrained: these tests check columns
    and errors, not rankings)."""
    if id(env) not in _BUILT:
        from pyterrier_tot import generative as gen

        ids = gen.book_ids(env.books)
        tok = gen.word_tokenizer(list(env.books["text"]) + list(ids.values()) + list(queries()["query"]))
        _BUILT[id(env)] = gen.GenerativeRetriever(gen.tiny_t5(tok, d_model=32, layers=1), ids, num_results=3)
    return _BUILT[id(env)]


def _saved(env):
    import pyterrier as pt

    path = env.tmp / "generative-model"
    if not path.exists():
        _retriever(env).save(path)
    try:
        model = pt.Artifact.load(str(path))
    except Exception:  # the entry point is not installed yet: open the folder directly
        from pyterrier_tot.generative import GenerativeModel

        model = GenerativeModel(path)
    return model.retriever(num_results=3)


CASES = [
    Case("GenerativeRetriever", "retrieve", _retriever, queries),
    Case("GenerativeRetriever", "score", _retriever, results),
    Case("GenerativeModel.retriever", "retrieve", _saved, queries),
]

STAGES = {
    "GenerativeRetriever[retrieve]": (True, False, False),
    "GenerativeRetriever[score]": (True, False, True),  # looks each candidate's book-id up in its id map
    "GenerativeModel.retriever": (True, False, False),
}
