"""Encoders: finding, loading and fingerprinting the sentence-transformers models the library encodes with.

- :mod:`~pyterrier_tot.models.loading`: a name, an alias or a trained :class:`BiEncoderModel` to a model that loads
  offline (:func:`resolve_model`), the bi-encoders over it (:func:`load_biencoder`), precision and device choices;
  a new encoder's loader goes here (or beside it, as :mod:`~pyterrier_tot.models.nomic`);
- :mod:`~pyterrier_tot.models.prompts`: the task prompts a model was trained with, applied wherever it encodes;
- :mod:`~pyterrier_tot.models.fingerprint`: content fingerprints of model files, for cache keys;
- :mod:`~pyterrier_tot.models.fetch` and :mod:`~pyterrier_tot.models.nomic`: fetching the offline models that
  are not package dependencies (mpnet, nomic-embed-text from its GGUF file).
"""
from pyterrier_tot.errors import ModelUnavailableError
from pyterrier_tot.models.loading import (
    ALIASES,
    DEFAULT_MODEL,
    PRECISIONS,
    QUERY_MEMO,
    TRAINING_FILE,
    BiEncoderModel,
    QueryMemo,
    auto_precision,
    canonical_model,
    check_precision,
    device_label,
    forget_queries,
    load_biencoder,
    load_sentence_transformer,
    model_identity,
    model_precision,
    native_bf16,
    resolve_model,
    training_device,
)

__all__ = ["ALIASES", "DEFAULT_MODEL", "PRECISIONS", "QUERY_MEMO", "TRAINING_FILE", "BiEncoderModel", "QueryMemo",
           "ModelUnavailableError", "auto_precision", "canonical_model", "check_precision", "device_label",
           "forget_queries", "load_biencoder", "load_sentence_transformer", "model_identity", "model_precision",
           "native_bf16", "resolve_model", "training_device"]
