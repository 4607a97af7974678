"""A process of tests/core/test_train_once.py: asks for one trained artifact and prints what it got as JSON.

    python -m tests.helpers.train_once_worker CASE FOLDER [SLEEP]        # from the checkout's root

CASE: ``base`` (``bases.fine_tuned_base`` on a tiny data set, MiniLM, two steps), ``field`` (a title expert by
``train_field_expert``), ``generative`` (a tiny causal LM trained with a checkpoint folder). The training
function is wrapped to print ``TRAINING <pid>`` when it starts. With ``SLEEP`` > 0 it then waits (up to SLEEP
seconds) until a second process, started with no SLEEP, says it is about to ask (the file ``asking`` beside
FOLDER): so the second surely asks while the first one trains."""
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pandas as pd  # noqa: E402

from tests.helpers import tiny_datasets
from tests.helpers.books import TINY_BOOKS

QUERIES = ["kittens napping all day", "a dragon and a red moon", "a murder at a manor by a lake",
           "children on a spaceship to jupiter", "a ghost in a lighthouse", "a summer with a wild horse"]


class TinyDataset(tiny_datasets.TinyDataset):
    """The tiny train split under its own queries and name, so these tests' cache folders are their own."""

    name = "tiny-train-once"
    queries = QUERIES


def hold(folder: Path, pause: float) -> None:
    """The first process: wait until the second is about to ask (at most ``pause`` seconds), then a little more."""
    deadline = time.monotonic() + pause
    while pause and time.monotonic() < deadline and not (folder.parent / "asking").exists():
        time.sleep(0.05)
    time.sleep(1.0 if pause else 0.0)


def announced(fn, folder, pause):
    def wrapped(*args, **kwargs):
        print(f"TRAINING {os.getpid()}", flush=True)
        hold(folder, pause)
        return fn(*args, **kwargs)
    return wrapped


def asking(folder: Path, pause: float) -> None:
    if not pause:  # the second process: say so, then ask
        (folder.parent / "asking").touch()


def main(case: str, folder: Path, pause: float) -> dict:
    if case == "base":
        from pyterrier_tot.index import BookIndex
        from pyterrier_tot.recipe import bases, expert_training

        expert_training.train_base_retriever = announced(expert_training.train_base_retriever, folder, pause)
        index = BookIndex(pd.DataFrame(TINY_BOOKS), path=folder.parent / f"index-{os.getpid()}")
        asking(folder, pause)
        got = bases.fine_tuned_base(TinyDataset(), 4, path=folder, model="minilm", index=index, verbose=False,
                                    max_steps=2, batch_size=4, max_seq_length=32)
    elif case == "field":
        from pyterrier_tot.recipe import expert_training

        expert_training._train_into = announced(expert_training._train_into, folder, pause)
        ds = TinyDataset()
        clues = ds.topics.assign(clue_title=[q.split(" a ")[-1] for q in ds.topics["query"]])
        asking(folder, pause)
        got = expert_training.train_field_expert("title", clues, ds.qrels, pd.DataFrame(TINY_BOOKS), folder,
                                                 batch_size=4, max_steps=2, max_seq_length=32,
                                                 show_progress_bar=False)
    elif case == "generative":
        from pyterrier_tot.generative import training
        from pyterrier_tot.generative.backbones import tiny_causal, word_tokenizer

        pairs = pd.DataFrame({"source": QUERIES * 2, "target": [b["title"] for b in TINY_BOOKS] * 2})
        backbone = tiny_causal(word_tokenizer(list(pairs["source"]) + list(pairs["target"])), hidden=32, layers=1,
                               heads=2)
        real = backbone.target_logits
        started = {"done": False}

        def first_step(batch):  # announced at the first step this process trains (none when it resumes a finished run)
            if not started["done"]:
                started["done"] = True
                print(f"TRAINING {os.getpid()}", flush=True)
                hold(folder, pause)
            return real(batch)

        backbone.target_logits = first_step
        asking(folder, pause)
        stats = training.train(backbone, pairs, epochs=2, batch_size=4, checkpoint_dir=folder, verbose=False)
        # the model each process ends with: the step reached and its trainable weights (the second resumes the
        # first's finished checkpoint: no step left, the same weights)
        weights = sum(float(v.detach().double().sum()) for v in training._trainable(backbone).values())
        got = {"step_reached": stats["step_reached"], "weights": round(weights, 6)}
    else:
        raise SystemExit(f"unknown case {case}")
    return {"pid": os.getpid(), "got": str(got) if not isinstance(got, dict) else got}


if __name__ == "__main__":
    out = main(sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
    print("RESULT " + json.dumps(out), flush=True)
