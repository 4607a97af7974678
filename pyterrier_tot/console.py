"""One switch for the progress output of every pyterrier_tot stage::

    ptt.set_progress(False)           # no bars from any stage of the library, nor from the model loaders it calls
    with ptt.progress(False):         # ... or only inside a block
        table = pt.Experiment(...)
    PYTERRIER_TOT_PROGRESS=0          # the default of a process (CI logs, batch jobs)

The bars are PyTerrier's own (``pt.tqdm``), so they follow its setting: in Jupyter with ipywidgets installed
(``pip install 'pyterrier-tot[notebook]'``) they are widgets, and ``pt.utils.set_tqdm("tqdm")`` makes them text.
Each bar is labelled, shows only for loops of at least ``min_items`` items, is removed when it finishes
(``leave=False``, so a pipeline leaves no trail of finished bars) and redraws at most once a second (training
loops: every ``TRAINING_INTERVAL`` seconds), so a log file or a notebook cell does not fill with lines. Loading
a local model never shows a bar (transformers' "Loading weights" bar is off while the library loads one).

Native libraries write their own logs straight to the process's file descriptors 1 and 2 (PISA: ``[info]`` lines
and ``Storing terms statistics: 5%`` bars while an index is built). The library silences them around such calls
(:func:`quiet_native_output`), also in Jupyter, where fds 1 and 2 feed the cell. They come back on failure, and
on request: ``with native_logs():`` or ``PYTERRIER_TOT_NATIVE_LOGS=1``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
from typing import Iterable, Iterator, Optional

import pyterrier as pt

#: Environment variable with the default of :func:`progress_enabled` ("0", "false", "no" or "off" silence bars).
ENV = "PYTERRIER_TOT_PROGRESS"
#: Seconds between redraws of a training loop's bar (one step can take a second; a redraw per step is noise).
TRAINING_INTERVAL = 10.0
#: Environment variable that lets native libraries' own logs through (PISA's ``[info]`` lines): "1" shows them.
NATIVE_ENV = "PYTERRIER_TOT_NATIVE_LOGS"
_OFF = {"0", "false", "no", "off"}
_state: dict = {"enabled": None, "native": None}


def progress_enabled() -> bool:
    """Whether the library shows progress bars: :func:`set_progress`'s value, else ``$PYTERRIER_TOT_PROGRESS``
    (default on)."""
    if _state["enabled"] is not None:
        return _state["enabled"]
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


def set_progress(enabled: Optional[bool]) -> None:
    """Turn the library's progress bars on or off (``None``: back to ``$PYTERRIER_TOT_PROGRESS``). Off also
    silences the bars of transformers and the Hugging Face hub while this process runs the library's stages."""
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_progress takes True, False or None, not {enabled!r}")
    _state["enabled"] = enabled
    _third_party(progress_enabled())


@contextlib.contextmanager
def progress(enabled: bool = False) -> Iterator[None]:
    """Progress bars on or off inside a ``with`` block (default off); the previous setting comes back after."""
    before = _state["enabled"]
    set_progress(enabled)
    try:
        yield
    finally:
        set_progress(before)


def bar(iterable: Optional[Iterable] = None, desc: str = "", total: Optional[int] = None, unit: str = "it",
        min_items: int = 2, training: bool = False, **kwargs):
    """A labelled ``pt.tqdm`` bar that honours :func:`progress_enabled` (the library's only way to make one).
    ``training`` redraws every :data:`TRAINING_INTERVAL` seconds; ``kwargs`` go to tqdm. Inside :func:`observe`,
    each step the loop makes is also reported to the observers (shown or not)."""
    if not desc:
        raise ValueError("a progress bar needs a label (desc=...)")
    n = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("mininterval", TRAINING_INTERVAL if training else 1.0)
    disable = kwargs.pop("disable", False) or not progress_enabled() or (n is not None and n < min_items)
    shown = pt.tqdm(iterable, desc=desc, total=total, unit=unit, disable=disable, **kwargs)
    return _Observed(shown, iterable, desc, n) if _observers else shown


#: Callables ``(desc, done, total)`` told of every step of every :func:`bar` loop (see :func:`observe`).
_observers: list = []


@contextlib.contextmanager
def observe(callback) -> Iterator[None]:
    """Inside: ``callback(desc, done, total)`` hears of each step of every library loop made with :func:`bar`
    (``total`` None when unknown), whether or not its bar is shown: an overall progress display (the recipe's)
    follows the loops of the phase it runs without each loop knowing of it."""
    _observers.append(callback)
    try:
        yield
    finally:
        _observers.remove(callback)


class _Observed:
    """A bar whose steps are also reported to the observers (it counts them itself: tqdm's own count of an
    iterated bar is written back only at redraws)."""

    def __init__(self, shown, iterable, desc: str, total: Optional[int]):
        self._shown, self._iterable, self._desc, self._total, self._done = shown, iterable, desc, total, 0
        self._tell = list(_observers)

    def _step(self, k: float) -> None:
        self._done += k
        for tell in self._tell:
            tell(self._desc, self._done, self._total)

    def __iter__(self):
        for item in self._shown:
            yield item
            self._step(1)

    def update(self, k: float = 1):
        self._step(k)
        return self._shown.update(k)

    def __len__(self):
        return len(self._shown)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._shown.close()
        return False

    def __getattr__(self, name):
        return getattr(self._shown, name)


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bar while a model loads from disk (transformers draws one per file of weights)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # transformers is not installed: nothing draws a loading bar
        yield
        return
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was and progress_enabled():
            hf_logging.enable_progress_bar()


def native_logs_enabled() -> bool:
    """Whether native libraries may write their own logs (:func:`native_logs`, else ``$PYTERRIER_TOT_NATIVE_LOGS``;
    default off)."""
    if _state["native"] is not None:
        return _state["native"]
    return os.environ.get(NATIVE_ENV, "0").strip().lower() not in _OFF | {""}


@contextlib.contextmanager
def native_logs(enabled: bool = True) -> Iterator[None]:
    """Inside: native libraries' own logs (PISA's ``[info]`` lines and progress) are shown (``enabled=True``) or
    silenced; the previous setting comes back after."""
    before = _state["native"]
    _state["native"] = bool(enabled)
    try:
        yield
    finally:
        _state["native"] = before


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so what a native library buffered goes where fds 1 and 2 point now."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (not POSIX): nothing buffered to flush
        pass


@contextlib.contextmanager
def quiet_native_output(enabled: Optional[bool] = None) -> Iterator[None]:
    """Silence what native code writes to file descriptors 1 and 2 (PISA's logs and progress bars) inside the
    block; it is written to stderr after all if the block fails. ``enabled`` (default: unless
    :func:`native_logs_enabled`) turns the silencing on or off.

    The process's own fds 1 and 2 are redirected, not ``sys.stdout.fileno()``: in Jupyter (ipykernel) that is a
    copy of the terminal's stream, while fds 1 and 2 are the pipes that feed the cell, so redirecting it let
    every ``[info]`` line into the notebook."""
    if enabled is None:
        enabled = not native_logs_enabled()
    if not enabled:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no fds 1 / 2 (a detached process): nothing native can be seen anyway
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        _flush_c_stdio()
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            _flush_c_stdio()
            for fd, keep in zip((1, 2), saved):
                os.dup2(keep, fd)
                os.close(keep)
            if failed:
                tmp.seek(0)
                sys.stderr.write(tmp.read()[-4000:].decode("utf8", "replace"))


def _third_party(enabled: bool) -> None:
    try:
        from transformers.utils import logging as hf_logging

        (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    except ImportError:
        pass
    try:
        import huggingface_hub.utils as hub

        (hub.enable_progress_bars if enabled else hub.disable_progress_bars)()
    except ImportError:
        pass
