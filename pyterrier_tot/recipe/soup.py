"""A model soup: one fine-tuned model whose weights are the element-wise mean of several models fine-tuned from the
same pretrained start (a "uniform soup", Wortsman et al., 2022). Runs that differ only in their seed end near one
another in weight space, so their mean is a model of its own, as fast as one of them, that tends to rank better
than the runs it averages (their seed-to-seed spread is large here:
``benchmarks/recipe_rejected/results/seed_ensemble.md``)::

    from pyterrier_tot.recipe import soup
    path = soup.average_models([run_42, run_43, run_44], "soup-folder")

Only this module's imports are torch and safetensors, so a GPU machine without the library's stack can run it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence, Union

WEIGHTS = "model.safetensors"
RECORD = "pyterrier_tot_training.json"


def average_models(paths: Sequence[Union[str, Path]], output_dir: Union[str, Path]) -> Path:
    """The uniform soup of the model folders ``paths`` saved as ``output_dir`` (replaced when it exists): every
    floating tensor the mean (in fp32) of the ingredients', every other tensor and file the first folder's. The
    folders must hold the same tensors (names and shapes), or a ``ValueError`` names the first that differs. The
    training record says which folders were averaged, with their seeds."""
    import torch
    from safetensors.torch import load_file, save_file

    folders = [Path(p) for p in paths]
    if len(folders) < 2:
        raise ValueError(f"average_models: a soup needs at least two models, got {len(folders)}")
    missing = [str(p) for p in folders if not (p / WEIGHTS).is_file()]
    if missing:
        raise ValueError(f"average_models: no {WEIGHTS} in {missing}")
    total = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(folders[0] / WEIGHTS)).items()}
    for p in folders[1:]:
        w = load_file(str(p / WEIGHTS))
        if set(w) != set(total):
            raise ValueError(f"average_models: {p} holds other tensors than {folders[0]}: "
                             f"{sorted(set(w) ^ set(total))[:5]}")
        for k, v in w.items():
            if v.shape != total[k].shape:
                raise ValueError(f"average_models: tensor {k!r} has shape {tuple(v.shape)} in {p}, "
                                 f"{tuple(total[k].shape)} in {folders[0]}")
            if v.is_floating_point():
                total[k] += v.float()
            elif not torch.equal(v, total[k]):
                raise ValueError(f"average_models: the integer tensor {k!r} differs between {folders[0]} and {p}")
    first = load_file(str(folders[0] / WEIGHTS))
    soup = {k: (v / len(folders)).to(first[k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    out = Path(output_dir)
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folders[0], tmp, ignore=shutil.ignore_patterns(WEIGHTS, "*.bin"))
    save_file(soup, str(tmp / WEIGHTS), metadata={"format": "pt"})
    records = [_record(p) for p in folders]
    record = {**records[0], "kind": records[0].get("kind", "biencoder"), "soup": {
        "of": [p.name for p in folders], "seeds": [r.get("seed") for r in records],
        "seconds": [r.get("seconds") for r in records]}}
    record.pop("seed", None)
    for key in ("seconds", "steps"):  # the soup's training cost is all of its runs'
        if all(r.get(key) is not None for r in records):
            record[key] = round(sum(r[key] for r in records), 1)
    (tmp / RECORD).write_text(json.dumps(record, indent=2))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _record(path: Path) -> dict:
    f = path / RECORD
    return json.loads(f.read_text()) if f.is_file() else {}
