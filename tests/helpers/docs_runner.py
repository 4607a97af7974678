"""Runs the code blocks of README.md and docs/*.rst, so the docs stay copy-paste runnable.

    python tests/helpers/docs_runner.py docs/experts.rst        # one page: every block, a status table
    python tests/helpers/docs_runner.py --list                  # every block of every page, without running anything

Blocks: rst ``.. code-block:: python`` / ``sh`` / ``bash`` / ``console``, literal ``::`` blocks that are Python
(they compile and call or import something), README fenced ``python`` / ``sh`` / ``bash`` / ``console`` blocks.
Python blocks of one file run in order in one namespace, in a fresh interpreter; shell blocks run in the same
order as subprocesses (``python`` and ``pyterrier-tot`` resolve to this interpreter's environment). Blocks run in
a temporary folder with the test environment: Hugging Face offline, the checkout's test cache and the tiny data
sample of :mod:`pyterrier_tot.datasets.sample` (``PYTERRIER_TOT_SAMPLE``), so ``ptt.get_dataset(...)`` in a block
gives a small, self-consistent slice under its own name (its indexes and models never take the full data's).

A block that cannot run in tests is skipped only with a marker on the line before it, which says why::

    .. docs-runner: skip -- needs the Qwen GGUF model            (rst, a comment: invisible in the HTML)
    <!-- docs-runner: skip -- builds the whole environment -->   (README)

Other languages (``toml``, ``text``, ...) are not run; TOML blocks must parse.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[2]
PYTHON_LANGS = {"python", "py", "python3", "pycon"}
SHELL_LANGS = {"sh", "bash", "console", "shell", "shell-session"}
#: queries per split of the sample every page runs on (pyterrier_tot.datasets.sample; train keeps 300 more)
SAMPLE = 30
_SKIP_RST = re.compile(r"^\s*\.\.\s+docs-runner:\s*skip\s*--\s*(\S.*?)\s*$")
_SKIP_MD = re.compile(r"^\s*<!--\s*docs-runner:\s*skip\s*--\s*(\S.*?)\s*-->\s*$")
_MARKER_ANY = re.compile(r"docs-runner:")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:code-block|code|sourcecode)::\s*(\S*)\s*$")
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
# a literal block that is really a shell command (it must say so: ``.. code-block:: sh``)
_SHELL_LOOKING = re.compile(r"^\s*(\$ |make |pip |pyterrier-tot |python |\.venv/|[A-Z_]+=\S* )")


@dataclass
class Block:
    path: str            # relative to the checkout
    line: int            # 1-based line of the directive / fence / introducing paragraph
    lang: str            # python, sh, toml, text, ...
    code: str
    kind: str            # "python", "shell" or "other"
    skip: Optional[str] = None      # the reason given in the docs
    status: str = "pending"         # ran, skipped, failed, not run (other), error
    seconds: float = 0.0
    error: str = ""
    notes: List[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _kind(lang: str) -> str:
    lang = lang.lower()
    if lang in PYTHON_LANGS:
        return "python"
    if lang in SHELL_LANGS:
        return "shell"
    return "other"


def is_python(code: str) -> bool:
    """A literal block is Python when it compiles and imports or calls something (TOML tables and assignments
    compile too, but call nothing)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom, ast.Call)) for n in ast.walk(tree))


def _indented_block(lines: List[str], start: int) -> tuple:
    """The indented block that starts after line ``start`` (skipping blank lines and directive options);
    returns (code, index of the first line after it)."""
    i = start + 1
    base_indent = None
    # directive options (":caption: ...") and blank lines come first
    while i < len(lines) and (not lines[i].strip() or (base_indent is None and lines[i].strip().startswith(":")
                                                       and lines[i].startswith(" "))):
        i += 1
    body = []
    while i < len(lines):
        line = lines[i]
        if line.strip():
            indent = len(line) - len(line.lstrip())
            if base_indent is None:
                base_indent = indent
                if indent == 0:
                    break
            if indent < base_indent:
                break
        body.append(line)
        i += 1
    while body and not body[-1].strip():
        body.pop()
    code = "\n".join(line[base_indent:] if line.strip() else "" for line in body) if base_indent else ""
    return code + ("\n" if code else ""), i


def _marker_before(lines: List[str], head: int, pattern) -> Optional[str]:
    j = head - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j >= 0:
        m = pattern.match(lines[j])
        if m:
            return m.group(1)
    return None


def _paragraph_start(lines: List[str], i: int) -> int:
    while i > 0 and lines[i - 1].strip() and not lines[i - 1].lstrip().startswith(".. "):
        i -= 1
    return i


def rst_blocks(path: Path) -> List[Block]:
    rel = str(path.relative_to(ROOT)) if path.is_absolute() and ROOT in path.parents else str(path)
    lines = path.read_text(encoding="utf8").splitlines()
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if m:
            lang = m.group(2) or "python"
            code, nxt = _indented_block(lines, i)
            blocks.append(Block(rel, i + 1, lang, code, _kind(lang), _marker_before(lines, i, _SKIP_RST)))
            i = nxt
            continue
        stripped = line.rstrip()
        is_comment = line.lstrip().startswith("..")
        if stripped.endswith("::") and not is_comment and not re.match(r"^\s*\.\. ", line):
            code, nxt = _indented_block(lines, i)
            if code:
                head = i if stripped.strip() == "::" else _paragraph_start(lines, i)
                if is_python(code):
                    blocks.append(Block(rel, head + 1, "python", code, "python",
                                        _marker_before(lines, head, _SKIP_RST)))
                else:
                    b = Block(rel, head + 1, "text", code, "other")
                    if any(_SHELL_LOOKING.match(c) for c in code.splitlines()):
                        b.kind, b.lang = "shell", "sh (literal)"
                        b.notes.append("a shell command in a literal block: write it as `.. code-block:: sh`")
                        b.status = "error"
                    blocks.append(b)
                i = nxt
                continue
        i += 1
    return blocks


def md_blocks(path: Path) -> List[Block]:
    rel = str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)
    lines = path.read_text(encoding="utf8").splitlines()
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(2), (m.group(3) or "text")
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith(fence):
            j += 1
        code = "\n".join(lines[i + 1:j]) + "\n"
        blocks.append(Block(rel, i + 1, lang, code, _kind(lang), _marker_before(lines, i, _SKIP_MD)))
        i = j + 1
    return blocks


def blocks_of(path: Path) -> List[Block]:
    path = Path(path).resolve()
    blocks = md_blocks(path) if path.suffix == ".md" else rst_blocks(path)
    for b in blocks:
        if b.kind == "other" and b.status == "pending":
            b.status = "not code"
            if b.lang.lower() == "toml":
                import tomllib

                try:
                    tomllib.loads(b.code)
                except tomllib.TOMLDecodeError as e:
                    b.status, b.error = "error", f"TOML does not parse: {e}"
        elif b.skip and b.status == "pending":
            b.status = "skipped"
    return blocks


def stray_markers(path: Path, blocks: List[Block]) -> List[str]:
    """Skip markers that are not right before a block (a typo, or a block that moved away)."""
    lines = Path(path).read_text(encoding="utf8").splitlines()
    pattern = _SKIP_MD if str(path).endswith(".md") else _SKIP_RST
    heads = {b.line - 1 for b in blocks if b.skip}
    out = []
    for n, line in enumerate(lines):
        if _MARKER_ANY.search(line) and "docs-runner: skip" in line.replace("  ", " ") and pattern.match(line):
            k = n + 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k not in heads:
                out.append(f"{path}:{n + 1}: a skip marker that is not right before a code block")
        elif _MARKER_ANY.search(line) and not pattern.match(line) and not line.lstrip().startswith(("#", '"', "`")):
            if ".. docs-runner" in line or "<!-- docs-runner" in line:
                out.append(f"{path}:{n + 1}: malformed marker (want '.. docs-runner: skip -- <reason>')")
    return out


def docs_files() -> List[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.rst"))


# ---------------------------------------------------------------------------------------------------------------
# running: one driver process per file


def runner_env(tmp: Path, threads: int = 1) -> dict:
    env = dict(os.environ)
    env.update({
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        "PYTERRIER_TOT_OFFLINE": "1",
        "PYTERRIER_TOT_CACHE": str(ROOT / ".cache" / "test-cache"),   # never the shared cache
        "PYTERRIER_TOT_SAMPLE": str(SAMPLE),
        "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "MPLBACKEND": "Agg",
        # two pages run at once on two cores: one torch thread each (spinning threads on busy cores run 7-20x slower)
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        # bin of this interpreter first: `python` and `pyterrier-tot` in shell blocks are this environment's
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    })
    # the shared data beside the checkout, also when the blocks run in a temporary folder
    from_data = env.get("PYTERRIER_TOT_DATA")
    if not from_data and (ROOT.parent / "shared" / "data").is_dir():
        env["PYTERRIER_TOT_DATA"] = str(ROOT.parent / "shared" / "data")
    return env


#: top-level entries of the checkout a block never sees (the runner's own outputs go to the temporary folder)
_NOT_MIRRORED = {".git", ".cache", "runs", ".pytest_cache"}


def mirror_checkout(tmp: Path) -> None:
    """Makes ``tmp`` look like the checkout root to commands written for it (``cp pyterrier_tot/...``,
    ``.venv/bin/pyterrier-tot``): a symlink per top-level entry, ``.venv`` to this interpreter's environment.
    New files land in ``tmp``."""
    for entry in ROOT.iterdir():
        if entry.name not in _NOT_MIRRORED and not (tmp / entry.name).exists():
            (tmp / entry.name).symlink_to(entry)
    if not (tmp / ".venv").exists():
        (tmp / ".venv").symlink_to(Path(sys.prefix))


def run_file(path: Path, timeout: float = 900, workdir: Optional[Path] = None, threads: int = 1,
             background: Optional["Background"] = None) -> List[Block]:
    """Runs every block of ``path`` that has no skip marker, in order, in a fresh interpreter (as a
    ``background`` run's page when given: at the lowest priority, stopped with it); returns the blocks with
    their status."""
    path = Path(path).resolve()
    blocks = blocks_of(path)
    todo = [b for b in blocks if b.status == "pending" and b.kind in ("python", "shell")]
    if not todo:
        return blocks
    with tempfile.TemporaryDirectory(prefix="docs-runner-") as tmp_s:
        tmp = Path(workdir or tmp_s)
        mirror_checkout(tmp)
        spec = tmp / ".docs-blocks.json"
        report = tmp / ".docs-report.jsonl"
        spec.write_text(json.dumps([asdict(b) for b in todo]))
        t0 = time.time()
        # a process group of its own (a timeout or stop() kills it whole); in the background, the lowest priority
        own_session = background is None or _autogroup_settable()
        lowest = None if background is None else _lowest_priority if own_session else _nice_19
        proc = subprocess.Popen([sys.executable, __file__, "--drive", str(spec), str(report)], cwd=tmp,
                                env=runner_env(tmp, threads), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=own_session, process_group=None if own_session else 0,
                                preexec_fn=lowest)
        if background is not None:
            background.live.add(proc)
            if background.stopped.is_set():   # stopped while this page started
                _kill(proc)
        try:
            tail = proc.communicate(timeout=timeout)[0][-4000:]
        except subprocess.TimeoutExpired:
            _kill(proc)
            tail = f"timed out after {timeout:.0f} s\n" + (proc.communicate()[0] or "")[-2000:]
        finally:
            if background is not None:
                background.live.discard(proc)
        done = {}
        if report.exists():
            for line in report.read_text().splitlines():
                r = json.loads(line)
                done[r["line"]] = r
        for b in todo:
            r = done.get(b.line)
            if r is None:
                b.status, b.error = "failed", f"the driver stopped before this block:\n{tail}"
            else:
                b.status, b.seconds, b.error = r["status"], r["seconds"], r.get("error", "")
        todo[-1].notes.append(f"file total {time.time() - t0:.0f} s")
    return blocks


def shell_script(code: str) -> str:
    """The script of a shell block: a console block (``$`` prompts) keeps its commands and drops their output;
    other blocks run as written."""
    lines = code.splitlines()
    if not any(line.lstrip().startswith("$ ") for line in lines):
        return code
    out, cont = [], False
    for line in lines:
        s = line.strip()
        if s.startswith("$ "):
            out.append(s[2:])
        elif cont or s.startswith("> "):
            out.append(s[2:] if s.startswith("> ") else s)
        cont = s.endswith("\\") and (s.startswith("$ ") or cont)
    return "\n".join(out) + "\n"


def _drive(spec: Path, report: Path) -> int:
    """Inside the fresh interpreter: exec each Python block in one namespace, run each shell block, in order."""
    import traceback

    blocks = json.loads(spec.read_text())
    ns = {"__name__": "__main__"}
    failed = 0
    for b in blocks:
        t0 = time.time()
        status, err = "ran", ""
        print(f"=== {b['path']}:{b['line']} ({b['lang']})", flush=True)
        try:
            if b["kind"] == "python":
                exec(compile(b["code"], f"{b['path']}:{b['line']}", "exec"), ns)
            else:
                script = shell_script(b["code"])
                res = subprocess.run(["/bin/bash", "-e", "-o", "pipefail", "-c", script], capture_output=True,
                                     text=True)
                sys.stdout.write(res.stdout[-3000:] + res.stderr[-3000:])
                if res.returncode != 0:
                    raise RuntimeError(f"the shell block exited with {res.returncode}:\n"
                                       f"{(res.stdout + res.stderr)[-3000:]}")
        except BaseException as e:  # noqa: BLE001 - a block's failure is reported, the rest still runs
            status, err = "failed", "".join(traceback.format_exception(e))[-4000:]
            failed += 1
            if isinstance(e, KeyboardInterrupt):
                raise
        with open(report, "a") as f:
            f.write(json.dumps({"line": b["line"], "status": status, "seconds": round(time.time() - t0, 2),
                                "error": err}) + "\n")
    return 1 if failed else 0


#: calls that train or fit the recipe's cached models: pages making them run one after another, README first, so
#: that two processes never train the same sample model at once (the other pages run beside them)
_RECIPE_CALLS = ("tuned_pipeline(", "fine_tuned_base(", "fitted_weights(")


def uses_recipe(path: Path) -> bool:
    return any(c in b.code for b in blocks_of(path) if b.kind == "python" and not b.skip for c in _RECIPE_CALLS)


#: pages without the recipe that take longest (tests/durations.md: 82, 54, 29, 27 and 24 s on two busy cores): they
#: start first, so that the short pages fill the lanes at the end instead of one long page running alone
SLOW_PAGES = ("experts.rst", "submission.rst", "llm.rst", "llm_stages.rst", "generative.rst")


def run_files(paths: List[Path], timeout: float = 900, workers: int = 2,
              background: Optional["Background"] = None) -> dict:
    """Runs the pages in ``workers`` parallel lanes. The pages that use the recipe run one after another in the
    first lane (README first); the other pages wait in one queue, the slow ones first, and every lane takes the
    next of them when it is free (the first lane once its recipe pages are done). Returns {path: blocks}."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    paths = [Path(p).resolve() for p in paths]
    recipe = sorted((p for p in paths if uses_recipe(p)), key=lambda p: (p.name != "README.md", str(p)))
    slow = {name: i for i, name in enumerate(SLOW_PAGES)}
    others: queue.Queue = queue.Queue()
    for p in sorted((p for p in paths if p not in recipe), key=lambda p: (slow.get(p.name, len(slow)), str(p))):
        others.put(p)
    results: dict = {}
    threads = 1 if workers > 1 else 2

    def lane(own):
        stopped = background.stopped if background is not None else threading.Event()
        for f in own:
            if stopped.is_set():
                return
            results[f] = run_file(f, timeout=timeout, threads=threads, background=background)
        while not stopped.is_set():
            try:
                f = others.get_nowait()
            except queue.Empty:
                return
            results[f] = run_file(f, timeout=timeout, threads=threads, background=background)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for fut in [pool.submit(lane, recipe if i == 0 else []) for i in range(max(1, workers))]:
            fut.result()
    return results


class Background:
    """:func:`run_files` started on a thread of this process, each page at the lowest priority: the test session
    starts the pages when it starts, so that they use what its tests leave idle (its small tests keep one core of
    two busy), and the docs test only collects what they found. ``result()`` waits for their blocks, ``stop()``
    takes no further page and kills the pages running now (their blocks are reported as failed)."""

    def __init__(self, paths: List[Path], timeout: float = 900, workers: int = 2):
        from concurrent.futures import ThreadPoolExecutor

        self.live: set = set()       # the page processes running now
        self.stopped = threading.Event()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docs-runner")
        self.future = pool.submit(run_files, paths, timeout, workers, self)
        pool.shutdown(wait=False)

    def result(self, timeout: Optional[float] = None) -> dict:
        return self.future.result(timeout)

    def done(self) -> bool:
        return self.future.done()

    def stop(self) -> None:
        self.stopped.set()
        for proc in list(self.live):
            _kill(proc)


def _autogroup_settable() -> bool:
    """Whether a page in a session of its own can lower its session's weight (Linux autogroup scheduling on, and
    ``/proc/self/autogroup`` writable). Where autogroups are on but cannot be set, a page stays in the tests'
    session instead: a session of its own would weigh as much as all the tests together, whatever its niceness."""
    try:
        enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return True      # no autogroups: niceness weighs across sessions
    return not enabled or os.access("/proc/self/autogroup", os.W_OK)


def _lowest_priority() -> None:
    """In a page's process (a session of its own), before it starts: the lowest CPU priority. Linux's autogroup
    scheduling weighs each session as a whole against the others (the tests, a notebook kernel, a llama.cpp
    server, each in a session of its own), so the session's weight is set, and the niceness for kernels
    without autogroups."""
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
    except OSError:
        pass
    os.nice(19)


def _nice_19() -> None:
    os.nice(19)


def _kill(proc) -> None:
    """Kills a page's driver and what its blocks started (its own process group)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def table(blocks: List[Block]) -> str:
    rows = [("block", "lang", "status", "s", "reason")]
    for b in blocks:
        if b.status == "not code" and b.lang in ("text",):
            continue
        reason = b.skip or (b.error.strip().splitlines()[-1][:90] if b.error.strip() else "; ".join(b.notes))
        rows.append((b.where, b.lang, b.status, f"{b.seconds:.1f}" if b.seconds else "", reason))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:>{w[3]}}  {r[4]}" for r in rows)


def main(argv: List[str]) -> int:
    if argv and argv[0] == "--drive":
        return _drive(Path(argv[1]), Path(argv[2]))
    if argv and argv[0] == "--list":
        for p in docs_files():
            print(table(blocks_of(p)))
        return 0
    t0 = time.time()
    done = run_files([Path(p) for p in (argv or [str(f) for f in docs_files()])])
    out = [b for p in sorted(done) for b in done[p]]
    print(table(out))
    print(f"{len(done)} files in {time.time() - t0:.0f} s")
    bad = [b for b in out if b.status in ("failed", "error")]
    for b in bad:
        print(f"\n--- {b.where}: {b.status}\n{b.error or '; '.join(b.notes)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
