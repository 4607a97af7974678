"""The library's exceptions, in one place.

Each keeps the built-in base it had before (``RuntimeError``, ``FileNotFoundError``, ``ValueError``) so
existing ``except`` clauses still catch it, and all share :class:`ToTError`, so ``except ptt.ToTError``
catches anything the library raises on purpose. Bad input columns raise PyTerrier's own
``pt.validate.InputValidationError`` (a ``KeyError``) from ``pt.validate``.
"""
from __future__ import annotations


class ToTError(Exception):
    """Base class of every error pyterrier_tot raises on purpose."""


class ModelUnavailableError(ToTError, RuntimeError):
    """A model is neither on disk nor downloadable from here (the message says what to install)."""


class DatasetUnavailableError(ToTError, FileNotFoundError):
    """The data is not on disk and cannot be downloaded from here."""


class LLMConfigurationError(ToTError, RuntimeError):
    """The LLM cannot be used at all (no server, bad key, unknown model): retrying would not help."""


class LLMFailure(ToTError, RuntimeError):
    """One LLM request failed after its retries (caught by the stages, which degrade to N/A)."""


class LLMUnavailableError(LLMConfigurationError):
    """The LLM failed so many requests in a row that the stage stopped (circuit breaker) instead of writing
    N/A for every remaining query. Attributes: ``asked``, ``answered``, ``failed``, ``not_sent`` (request
    counts), ``done`` (indices of the answered requests); a stage adds ``qids_done`` / ``qids_pending``."""

    def __init__(self, message: str, *, asked: int = 0, answered: int = 0, failed: int = 0, not_sent: int = 0,
                 done=(), qids_done=(), qids_pending=()):
        super().__init__(message)
        self.asked, self.answered, self.failed, self.not_sent = asked, answered, failed, not_sent
        self.done, self.qids_done, self.qids_pending = list(done), list(qids_done), list(qids_pending)


class TerrierUnavailableError(ToTError, RuntimeError):
    """Terrier (Java) cannot be started here, so a Terrier-only stage (RM3) cannot run."""


class CoverImageError(ToTError, RuntimeError):
    """A cover image cannot be read or fetched."""


class BadInputError(ToTError, ValueError):
    """Input values a stage cannot use (empty queries, unknown docnos, ...); the message names them."""


class UnknownDocnoError(BadInputError, KeyError):
    """A result frame names a docno that the book index does not hold (a ``KeyError`` too, as before)."""

    def __str__(self):  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class ConfigError(BadInputError):
    """A submission config the library cannot use; ``key`` names the offending key (``pipeline[2].k``) and
    ``source`` the file. Raised by :func:`~pyterrier_tot.submission.config.load_config`; it lives here, below both
    the config loader and its parameter checks, so neither imports the other to raise it."""

    def __init__(self, key: str, message: str, source=None):
        self.key, self.source = key, source
        super().__init__(f"{source + ': ' if source else ''}{key}: {message}")


class BadInputTypeError(BadInputError, TypeError):
    """An input value of the wrong type (a number where query text belongs); a ``TypeError`` too."""


class NoResultsWarning(UserWarning):
    """A retriever found nothing for a valid query: that qid has no rows (the message names it)."""


class UnknownDocnoWarning(UserWarning):
    """Unknown docnos were scored NaN because the stage was asked to (``unknown_docnos="nan"``)."""



class LockTimeoutError(ToTError, TimeoutError):
    """Another process kept building the same folder for longer than the lock timeout (the message names the
    folder, the holder's pid and how to wait longer)."""



class StreamedCorpusError(ToTError, RuntimeError):
    """An operation needs the whole corpus in memory, but the index streamed it to disk (too large); the message
    names what to use instead (``books_of``, ``docnos``, ``docs_iter``)."""


__all__ = ["ToTError", "ModelUnavailableError", "DatasetUnavailableError", "LLMConfigurationError", "LLMFailure",
           "TerrierUnavailableError", "CoverImageError", "BadInputError", "UnknownDocnoError", "BadInputTypeError",
           "NoResultsWarning", "UnknownDocnoWarning", "LockTimeoutError",
           "LLMUnavailableError", "StreamedCorpusError", "CorruptArtifactError", "ConfigError",
           "FrozenCatalogueError"]


class CorruptArtifactError(ToTError, ValueError):
    """A saved folder (index, model, fuser, ...) whose files are damaged: a half-written or edited
    ``pt_meta.json`` or corpus. The message names the folder and the file, and says how to rebuild it."""


class FrozenCatalogueError(ToTError, ValueError):
    """A request encoder trained against a frozen book index (one model's vectors of one corpus) used with another:
    its requests live in the space of those vectors only. The message names both indexes and what to do."""
