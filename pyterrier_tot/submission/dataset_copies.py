"""Which copy of a TREC ToT data set works here, for the messages of ``pyterrier-tot validate-run``.

The topics and qrels of a TREC ToT year live in two places: the ``trec-tot-local/<year>-<split>`` folder of the
shared data (no corpus) and the ir_datasets id ``trec-tot/<year>/<split>`` (the corpus too, where ir_datasets
has its files). A message that sends the user from one to the other names the other only when it works here.
"""
from __future__ import annotations

import re
from typing import Optional

from pyterrier_tot._plumbing.util import shared_data_dir
from pyterrier_tot.errors import ToTError

__all__ = ["local_copy", "irds_copy"]


def local_copy(irds_id: str) -> Optional[str]:
    """``trec-tot-local/<year>-<split>`` for the ir_datasets id ``trec-tot/<year>/<split>`` when the shared data
    holds that folder's ``queries.jsonl``; else None."""
    parts = str(irds_id).split("/")
    if len(parts) != 3 or parts[0] != "trec-tot":
        return None
    name = f"{parts[1]}-{parts[2]}"
    return f"trec-tot-local/{name}" if (shared_data_dir() / "trec-tot" / name / "queries.jsonl").is_file() else None


def irds_copy(local_name: str) -> Optional[str]:
    """The ir_datasets id ``trec-tot/<year>/<split>`` of ``trec-tot-local/<year>-<split>`` when its corpus can be
    read here (on disk, or downloadable now); else None."""
    m = re.fullmatch(r"trec-tot-local/(\d{4})-([A-Za-z0-9_]+)", str(local_name))
    if m is None:
        return None
    irds_id = f"trec-tot/{m[1]}/{m[2]}"
    try:
        from pyterrier_tot.datasets.trec_tot import TrecTot

        TrecTot(irds_id)._require("docs")
    except (ToTError, KeyError, ValueError, ImportError, NotImplementedError, AttributeError):
        return None
    return irds_id
