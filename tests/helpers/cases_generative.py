"""``GenerativeRetriever`` in the inspect and bad-input matrices (see ``tests/conventions/test_inspect.py``)."""

from tests.helpers.matrix_inputs import Case, queries, results  # noqa: E402

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


def _tiny_lm(env):
    """A tiny random causal LM over a word tokenizer of the tiny corpus (``;`` separates listed titles)."""
    key = ("lm", id(env))
    if key not in _BUILT:
        from pyterrier_tot import generative as gen

        tok = gen.word_tokenizer(list(env.books["text"]) + list(env.books["title"]) + list(queries()["query"])
                                 + [";"])
        _BUILT[key] = gen.tiny_causal(tok, hidden=32, layers=1)
    return _BUILT[key]


def _genre(env):
    from pyterrier_tot import generative as gen

    return gen.GenerativeRetriever.genre(gen.prompted(_tiny_lm(env)), env.books, num_results=3)


def _sentence(env):
    """An untrained MiniLM + decoder over semantic ids of the tiny corpus."""
    key = ("sentence", id(env))
    if key not in _BUILT:
        import numpy as np

        from pyterrier_tot import generative as gen

        docnos = list(env.books["docno"])
        ids = gen.semantic_ids(np.random.default_rng(0).normal(size=(len(docnos), 4)), docnos, k=2, leaf=2)
        _BUILT[key] = gen.GenerativeRetriever(gen.sentence_backbone(ids, codes=True, layers=1), ids, num_results=3)
    return _BUILT[key]


def _constrained_namer(env):
    import pyterrier_tot as ptt

    return ptt.TitleNamer(_tiny_lm(env), env.index, num_titles=3, constrained=True)


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
    Case("GenerativeRetriever", "genre-retrieve", _genre, queries),
    Case("GenerativeRetriever", "genre-score", _genre, results),
    Case("GenerativeRetriever", "sentence-retrieve", _sentence, queries),
    Case("GenerativeRetriever", "sentence-score", _sentence, results),
    Case("TitleNamer", "constrained-retrieve", _constrained_namer, queries),
    Case("TitleNamer", "constrained-score", _constrained_namer, results),
]

STAGES = {
    "GenerativeRetriever[retrieve]": (True, False, False),
    "GenerativeRetriever[score]": (True, False, True),  # looks each candidate's book-id up in its id map
    "GenerativeModel.retriever": (True, False, False),
    "GenerativeRetriever[genre-retrieve]": (True, False, False),
    "GenerativeRetriever[genre-score]": (True, False, True),
    "GenerativeRetriever[sentence-retrieve]": (True, False, False),
    "GenerativeRetriever[sentence-score]": (True, False, True),
}
