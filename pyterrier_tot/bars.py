"""One switch for the progress output of every pyterrier_tot stage.

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
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterable, Iterator, Optional

import pyterrier as pt

#: Environment variable with the default of :func:`progress_enabled` ("0", "false", "no" or "off" silence bars).
ENV = "PYTERRIER_TOT_PROGRESS"
#: Seconds between redraws of a training loop's bar (one step can take a second; a redraw per step is noise).
TRAINING_INTERVAL = 10.0
_OFF = {"0", "false", "no", "off"}
_state: dict = {"enabled": None}


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
    ``training`` redraws every :data:`TRAINING_INTERVAL` seconds; ``kwargs`` go to tqdm."""
    if not desc:
        raise ValueError("a progress bar needs a label (desc=...)")
    n = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("mininterval", TRAINING_INTERVAL if training else 1.0)
    disable = kwargs.pop("disable", False) or not progress_enabled() or (n is not None and n < min_items)
    return pt.tqdm(iterable, desc=desc, total=total, unit=unit, disable=disable, **kwargs)


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


@contextlib.contextmanager
def quiet_per_call_bars() -> Iterator[None]:
    """Inside: ``pt.tqdm`` bars are off. For calls into libraries that draw an unlabelled bar on every call with
    no way to turn it off (pyterrier-dr's ``NumpyScorer``: one bar per scoring call of a pipeline)."""
    original = pt.tqdm

    def silent(*args, **kwargs):
        kwargs["disable"] = True
        return original(*args, **kwargs)

    pt.tqdm = silent
    try:
        yield
    finally:
        pt.tqdm = original


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
