"""TREC ToT submission: run-file checks, pipeline configs, the ``pyterrier-tot`` command (and title naming).

- :mod:`~pyterrier_tot.submission.run_checks`: :func:`validate_run` / :func:`check_run` against the track rules
- :mod:`~pyterrier_tot.submission.config`: TOML config → dataset, index and pipeline (:func:`load_config`)
- :mod:`~pyterrier_tot.submission.cli`: the ``pyterrier-tot`` console command
- ``configs/*.toml``: example configs shipped with the package (:func:`example_config` finds one)
"""
from pyterrier_tot.submission.config import (
    CONFIG_DIR,
    ConfigError,
    Fusion,
    PipelineConfig,
    example_config,
    example_configs,
    load_config,
    read_topics,
)
from pyterrier_tot.submission.run_checks import RunFailure, RunFileError, RunReport, check_run, validate_run

__all__ = ["ConfigError", "Fusion", "PipelineConfig", "load_config", "read_topics", "RunFailure", "RunFileError",
           "RunReport", "check_run", "validate_run", "example_config", "example_configs",
           "CONFIG_DIR"]
