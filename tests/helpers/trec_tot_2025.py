"""TREC ToT 2025 offline: six pages, queries and qrels written in the official layout into a temporary
``IR_DATASETS_HOME`` (the ``irds_2025`` fixture, imported by the modules that use it)."""
import gzip
import json

import pytest

from pyterrier_tot.datasets import registry as ptt_registry

SPLITS = ["train", "dev1", "dev2", "dev3", "test"]
PAGES = [
    ("1001", "The Haunted Lighthouse", "A 1998 film: teenagers spend a night in an abandoned lighthouse with a ghost."),
    ("1002", "Dragons of the Red Moon", "A video game in which a blacksmith rides a dragon to the red moon."),
    ("1003", "Murder at Lakeside Manor", "A novel: a detective investigates a poisoning at a lakeside mansion."),
    ("1004", "Spaceship Nine", "An animated series about children who stow away on a ship bound for Jupiter."),
    ("1005", "Summer of Horses", "A film about a girl training a wild horse on her grandmother's ranch."),
    ("1006", "Eiffel Tower", "A wrought-iron lattice tower in Paris, France."),
]
QUERIES = {"dev1": [("d1-1", "movie with kids and a ghost in an old lighthouse", "1001"),
                    ("d1-2", "game where you fly a dragon to the moon", "1002")],
           "dev2": [("d2-1", "cartoon where kids hide on a spaceship to jupiter", "1004")]}


def _write_2025(home):
    """The files ir_datasets 0.6 expects for trec-tot/2025 (``ir_datasets/etc/downloads.json``): the corpus as
    one gzip member per page plus the byte offsets of each member, and per split ``<split>-2025-queries.jsonl``
    (``query_id``, ``query``) and ``<split>-2025-qrel.txt`` (none for ``test``)."""
    folder = home / "trec-tot" / "2025"
    folder.mkdir(parents=True)
    offsets, data = [], b""
    for doc_id, title, text in PAGES:
        member = gzip.compress((json.dumps({"id": doc_id, "title": title, "url": f"https://en.wikipedia.org/wiki/"
                                            f"{title.replace(' ', '_')}", "text": text}) + "\n").encode())
        offsets.append({"id": doc_id, "offset_start": len(data), "offset_end": len(data) + len(member)})
        data += member
    (folder / "trec-tot-2025-corpus.jsonl.gz").write_bytes(data)
    with gzip.open(folder / "trec-tot-2025-offsets.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(o) + "\n" for o in offsets)
    for split in SPLITS:
        queries = QUERIES.get(split, [(f"{split}-1", "a tower in paris", "1006")])
        (folder / f"{split}-2025-queries.jsonl").write_text(
            "".join(json.dumps({"query_id": q, "query": text}) + "\n" for q, text, _ in queries))
        if split != "test":
            (folder / f"{split}-2025-qrel.txt").write_text("".join(f"{q} 0 {d} 1\n" for q, _, d in queries))


@pytest.fixture
def irds_2025(tmp_path, monkeypatch):
    """ir_datasets fixes a dataset's file paths when it registers it (at import), so the trec-tot/2025 entries
    are registered again under the temporary home for this test and put back afterwards."""
    import ir_datasets
    from ir_datasets.datasets import trec_tot_2025

    home = tmp_path / "irds"
    _write_2025(home)
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    reg = ir_datasets.registry._registered
    saved = {k: reg.pop(k) for k in list(reg) if k.startswith("trec-tot/2025")}
    ptt_registry.forget_datasets()
    trec_tot_2025.register_dataset()
    yield home
    for k in [k for k in reg if k.startswith("trec-tot/2025")]:
        del reg[k]
    reg.update(saved)
    ptt_registry.forget_datasets()
