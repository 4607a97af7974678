"""The task prompts of a sentence-transformers model, applied wherever the library encodes or trains with it.

Some embedding models were trained with a prefix on each side and lose quality without it: nomic-embed-text reads
``"search_query: "`` before a request and ``"search_document: "`` before a book (E5: ``"query: "`` / ``"passage: "``). A
sentence-transformers folder keeps them in ``config_sentence_transformers.json`` (``prompts``, named ``query`` and
``document``); sentence-transformers' ``encode_query`` / ``encode_document`` apply them, a plain ``encode`` does not.
So every path of the library goes through them:

- requests: the bi-encoders of :func:`~pyterrier_tot.models.load_biencoder` (:func:`with_prompts`), which the
  dense retrievers and scorers of a ``BookIndex`` and the dense re-ranker encode with;
- books: the same bi-encoders, and the corpus encoders of a dense index (:mod:`pyterrier_tot.index.encoding`:
  ``encode_document``);
- training: the (request, book, ...) examples of :mod:`pyterrier_tot.recipe.expert_training`
  (:func:`prompted_examples`); a model trained from a prompted base keeps the prompts in its folder.

A model without prompts (MiniLM, mpnet) is encoded exactly as before.
"""
from __future__ import annotations

import functools
from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["model_prompts", "prompted_examples", "with_prompts"]

#: Prompt names a document prompt may have (sentence-transformers' ``encode_document`` order).
DOCUMENT_NAMES = ("document", "passage", "corpus")


def model_prompts(model) -> Tuple[str, str]:
    """``(query prompt, document prompt)`` of a ``SentenceTransformer`` (or a bi-encoder holding one as
    ``.model``); ``""`` for a side without one."""
    prompts = getattr(model, "prompts", None)
    if prompts is None:
        prompts = getattr(getattr(model, "model", None), "prompts", None) or {}
    doc = next((prompts[k] for k in DOCUMENT_NAMES if prompts.get(k)), "")
    return prompts.get("query") or "", doc


def prompted_examples(model, examples: Sequence[Sequence[str]]) -> List[List[str]]:
    """Training examples ``(request, book, [negative books...])`` as the model reads them: the query prompt before
    the request, the document prompt before every book."""
    query, doc = model_prompts(model)
    return [[query + str(ex[0]), *(doc + str(t) for t in ex[1:])] for ex in examples]


def _encode(encoder, texts, batch_size, method) -> np.ndarray:
    # pyterrier-dr's own encode, through encode_query / encode_document (which apply the prompts)
    show = False
    if hasattr(texts, "disable") and hasattr(texts, "iterable"):  # a tqdm bar around the texts
        texts.disable, show = True, True
    texts = list(texts)
    if not texts:
        return np.empty((0, 0), dtype=np.float32)
    vecs = method(texts, batch_size=batch_size or encoder.batch_size, show_progress_bar=show,
                  normalize_embeddings=False, convert_to_numpy=True)
    return np.asarray(vecs, dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _prompted_class(base: type) -> type:
    class Prompted(base):
        """``base`` whose requests and books are encoded with the model's prompts (its repr is ``base``'s)."""

        _prompted = True

        def encode_queries(self, texts, batch_size=None):
            return _encode(self, texts, batch_size, self.model.encode_query)

        def encode_docs(self, texts, batch_size=None):
            return _encode(self, texts, batch_size, self.model.encode_document)

        def encode_queries_torch(self, texts, batch_size=None, prompt=None, **kwargs):
            prompt = model_prompts(self.model)[0] if prompt is None else prompt
            return super().encode_queries_torch(texts, batch_size=batch_size, prompt=prompt, **kwargs)

    Prompted.__name__ = Prompted.__qualname__ = f"Prompted{base.__name__}"
    return Prompted


def with_prompts(encoder):
    """``encoder`` (a pyterrier-dr ``SBertBiEncoder``) made to encode requests and books with its model's prompts,
    when the model has any; unchanged otherwise."""
    if any(model_prompts(encoder.model)) and not getattr(type(encoder), "_prompted", False):
        encoder.__class__ = _prompted_class(type(encoder))
    return encoder
