"""Every trained artifact is built once across processes: a second process asking for the same model waits on
the build lock for the whole training, then reuses what the first made; a killed trainer frees the lock and the
next call trains. Real processes (tests/helpers/train_once_worker.py), tiny models, a few steps."""
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pyterrier_tot._plumbing.artifact import leftovers, lock_path
from pyterrier_tot.models import ModelUnavailableError, resolve_model
from tests.helpers.paths import child_env

WORKER = "tests.helpers.train_once_worker"


@pytest.fixture(autouse=True)
def _minilm():
    try:
        resolve_model("minilm")
    except ModelUnavailableError as e:
        pytest.skip(str(e))


def _start(case, folder, pause=0.0, **env):
    return subprocess.Popen([sys.executable, "-m", WORKER, case, str(folder), str(pause)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(**env))


def _finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    return result, out.count("TRAINING "), err


def _lock_held(folder) -> bool:
    fd = os.open(lock_path(folder), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wait_until_training(proc, folder, limit=120.0):
    """Until ``proc`` holds the build lock of ``folder`` and has said it trains."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if lock_path(folder).is_file() and _lock_held(folder):
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    pytest.fail(f"{folder} was never locked")


@pytest.mark.parametrize("case", ["base", "field", "generative"])
def test_two_processes_train_once_and_share_the_folder(tmp_path, case):
    folder = tmp_path / "model"
    first = _start(case, folder, pause=120.0)
    _wait_until_training(first, folder)
    second = _start(case, folder)
    (r1, trained1, _), (r2, trained2, err2) = _finish(first), _finish(second)
    assert trained1 == 1 and trained2 == 0, (trained1, trained2)  # training ran once, in the first process
    assert r1["got"] == r2["got"]                                  # both got the same model
    assert "waiting for another process" in err2                   # the second one waited on the lock
    assert not leftovers(folder) and not _lock_held(folder)


def test_a_killed_trainer_frees_the_lock_and_the_next_call_trains(tmp_path):
    folder = tmp_path / "model"
    doomed = _start("base", folder, pause=120.0)
    _wait_until_training(doomed, folder)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    assert not _lock_held(folder)                                  # the OS dropped the dead process's lock
    t0 = time.monotonic()
    result, trained, _ = _finish(_start("base", folder, PYTERRIER_TOT_LOCK_TIMEOUT="60"))
    assert trained == 1 and result["got"] == str(folder)           # the next call trained, at once
    assert time.monotonic() - t0 < 60 and not leftovers(folder)
