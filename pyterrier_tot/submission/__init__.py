"""TREC ToT submission: run-file checks, pipeline configs, the ``pyterrier-tot`` command (and title naming).

- :mod:`~pyterrier_tot.submission.run_checks`: :func:`validate_run` / :func:`check_run` against the track rules
- :mod:`~pyterrier_tot.submission.config`: TOML config → dataset, index and pipeline (:func:`load_config`)
- :mod:`~pyterrier_tot.submission.cli`: the ``pyterrier-tot`` console command
- ``configs/*.toml``: example configs shipped with the package (:func:`example_config` finds one)
"""
from pathlib import Path

from pyterrier_tot.submission.config import ConfigError, Fusion, PipelineConfig, load_config, read_topics
from pyterrier_tot.submission.run_checks import RunFailure, RunFileError, RunReport, check_run, validate_run

CONFIG_DIR = Path(__file__).parent / "configs"


def example_config(name: str) -> Path:
    """The path of a shipped example config (``query_stage``, ``decomposition``, ``title_naming``)."""
    path = CONFIG_DIR / f"{name.removesuffix('.toml')}.toml"
    if not path.is_file():
        raise KeyError(f"no example config {name!r}; available: {sorted(p.stem for p in CONFIG_DIR.glob('*.toml'))}")
    return path


__all__ = ["ConfigError", "Fusion", "PipelineConfig", "load_config", "read_topics", "RunFailure", "RunFileError",
           "RunReport", "check_run", "validate_run", "example_config", "CONFIG_DIR"]
