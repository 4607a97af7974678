"""A person plays: ``interactive_search`` and ``HumanUser`` driven by scripted input, the ``pyterrier-tot ask``
command driven through a pipe and through a pseudo-terminal, and ``input()`` inside a real Jupyter kernel."""
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import ClarificationGame, Clarifier, FirstSelection, HumanUser  # noqa: E402
from pyterrier_tot.clarinet.simulator import NO_MEMORY  # noqa: E402
from tests.helpers.books import TINY_BOOKS

ROOT = Path(__file__).resolve().parents[2]
REQUEST = "a scary night somewhere old"
LIGHTHOUSE = "a ghost keeper climbs the stairs of a lighthouse"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("interactive") / "index")


def scripted(lines, prompts=None):
    it = iter(lines)

    def read(prompt=""):
        if prompts is not None:
            prompts.append(prompt)
        return next(it)
    return read


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}


def test_interactive_search_asks_shows_titles_and_stops_when_the_book_is_found(index):
    prompts, said = [], []
    session = ptt.interactive_search(index.bm25(num_results=6), index, input=scripted(
        [REQUEST, "", LIGHTHOUSE, "1"], prompts), output=said.append)
    assert session.found == "b5" and session.title == "The Haunted Lighthouse" and session.turns == 1
    tr = session.transcript
    assert tr["turn"].tolist() == [0, 1] and tr.loc[1, "answer"] == LIGHTHOUSE
    assert tr.loc[1, "question"] == prompts[2].splitlines()[0]  # the question the person was asked
    assert tr.loc[1, "shown"][0] == "b5" and tr.loc[1, "found"] == "b5"
    assert tr.loc[1, "query"].endswith(REQUEST) and LIGHTHOUSE in tr.loc[1, "query"]
    assert any("The Haunted Lighthouse (Fay Lorne, 2001)" in s for s in said) and said[-1].startswith("Found")


def test_the_person_can_stop_or_run_out_of_questions(index):
    session = ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST,
                                     input=scripted(["q"]), output=lambda s: None)
    assert session.found is None and session.turns == 0
    session = ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST, turns=2,
                                     input=scripted(["", "", "", "", ""]), output=lambda s: None)
    assert session.turns == 2 and session.found is None
    assert session.transcript["answer"].tolist()[1:] == [NO_MEMORY, NO_MEMORY]  # an empty reply is no memory
    with pytest.raises(ptt.BadInputError, match="empty"):
        ptt.interactive_search(index.bm25(), index, input=scripted(["  "]), output=lambda s: None)


def test_a_human_user_plays_a_game(index):
    qrels = pd.DataFrame({"qid": ["q"], "docno": ["b5"], "label": [1]})
    clarifier = Clarifier(None, index, pool=["Where was it set?", "Who was in it?"], selection=FirstSelection())
    game = ClarificationGame(index.bm25(num_results=6), clarifier, HumanUser(scripted([LIGHTHOUSE, ""])), qrels,
                             turns=2, k=6, verbose=False)
    game.play(pd.DataFrame({"qid": ["q"], "query": [REQUEST]}))
    tr = game.transcript
    assert tr["answer"].tolist()[1:] == [LIGHTHOUSE, NO_MEMORY] and tr["gold_rank"].tolist()[-1] == 1


def cli(index_path, *extra):
    # BM25 keeps these about the terminal (ask's default retriever: tests/clarinet/test_ask_retriever.py)
    return [sys.executable, "-m", "pyterrier_tot.submission.cli", "ask", "--index", str(index_path), "--turns", "3",
            "--retriever", "bm25", *extra]


def test_pyterrier_tot_ask_reads_a_pipe(index, tmp_path):
    out = tmp_path / "session.json"
    run = subprocess.run(cli(index.path, "--transcript", str(out)), input=f"{REQUEST}\n\n{LIGHTHOUSE}\n1\n",
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env())
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Describe the book" in run.stdout and "Turn 1: the likeliest books now" in run.stdout
    assert "Found: The Haunted Lighthouse" in run.stdout
    saved = json.loads(out.read_text())
    assert saved["found"] == "b5" and saved["transcript"][1]["answer"] == LIGHTHOUSE


def test_pyterrier_tot_ask_in_a_terminal(index, tmp_path):
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(cli(index.path, "--request", REQUEST), stdin=slave, stdout=slave, stderr=slave,
                            cwd=ROOT, env={**env(), "TERM": "dumb"}, close_fds=True)
    os.close(slave)
    seen, replies = b"", [b"\n", LIGHTHOUSE.encode() + b"\n", b"1\n"]
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                seen += chunk
                while replies and seen.count(b"> ") > 3 - len(replies):  # one reply per prompt shown
                    os.write(master, replies.pop(0))
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = seen.decode("utf8", "replace")
    assert proc.returncode == 0, text[-2000:]
    assert "Is your book here?" in text and "Found: The Haunted Lighthouse" in text


def test_input_inside_a_jupyter_kernel(index):
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(ROOT), env=env())
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        replies, prompts, printed = ["", LIGHTHOUSE, "1"], [], []

        def on_input(msg):
            prompts.append(msg["content"]["prompt"])
            kc.input(replies.pop(0))

        def on_output(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])

        code = ("import pyterrier_tot as ptt\n"
                f"index = ptt.BookIndex({str(index.path)!r})\n"
                f"session = ptt.interactive_search(index.bm25(num_results=6), index, request={REQUEST!r})\n"
                "print(session)")
        reply = kc.execute_interactive(code, allow_stdin=True, stdin_hook=on_input, output_hook=on_output,
                                       timeout=180)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert len(prompts) == 3 and prompts[1].startswith("What else do you remember")
    assert "SearchSession(1 question(s), found 'The Haunted Lighthouse')" in "".join(printed)


# -- issue 30.6: the end of the input, Ctrl-C, bad counts, what each turn shows ------------------------------------
def ending(lines, error=EOFError):
    """Scripted input that raises ``error`` once its lines run out (Ctrl-D gives EOFError, Ctrl-C
    KeyboardInterrupt)."""
    it = iter(lines)

    def read(prompt=""):
        for line in it:
            return line
        raise error
    return read


@pytest.mark.parametrize("error,ended", [(EOFError, "eof"), (KeyboardInterrupt, "interrupted")])
def test_the_search_ends_cleanly_when_the_input_stops(index, error, ended):
    said = []
    session = ptt.interactive_search(index.bm25(num_results=6), index,
                                     input=ending([REQUEST, "", LIGHTHOUSE], error), output=said.append)
    assert session.ended == ended and session.found is None and session.turns == 1
    assert [r["answer"] for r in session.rows] == [None, LIGHTHOUSE]  # the answer given is kept
    assert said[-1].strip().startswith("End of input" if error is EOFError else "Interrupted")
    nothing = ptt.interactive_search(index.bm25(), index, input=ending([], error), output=said.append)
    assert nothing.ended == ended and nothing.request == "" and nothing.rows == []


def test_each_turn_shows_author_year_and_description_and_the_persons_words_lead_the_query(index):
    said = []
    session = ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST,
                                     input=scripted(["", LIGHTHOUSE, "q"]), output=said.append, describe=60)
    query = session.transcript.loc[1, "query"]
    question = session.transcript.loc[1, "question"]
    assert query.startswith(LIGHTHOUSE) and question in query and query.endswith(REQUEST)
    assert any(s.startswith("\nSearching for: " + LIGHTHOUSE) for s in said)
    shown = [s for s in said if s.startswith("  1. ")]
    assert shown[-1] == "  1. The Haunted Lighthouse (Fay Lorne, 2001)"
    description = said[said.index(shown[-1]) + 1]
    assert description == "     Teenagers spend a night in an abandoned lighthouse where..."  # cut at a word, <= 60
    from pyterrier_tot.clarinet.interactive import _line

    assert _line(index.books_of(["b6"]).iloc[0]) == "Summer of Horses (Gil Arden)"  # no year: none shown


def test_answer_first_changes_the_order_not_the_bm25_ranking(index):
    from pyterrier_tot.clarinet import LanguagePosterior

    history = [("What else do you remember about the story?", LIGHTHOUSE), ("Was it scary?", "Yes."),
               ("Was there a dragon?", "No.")]
    frame = pd.DataFrame({"qid": ["q"], "query": [REQUEST], "history": [history]})
    measured, person = LanguagePosterior()(frame), LanguagePosterior(answer_first=True)(frame)
    assert measured.loc[0, "query"].startswith("What else do you remember")
    assert person.loc[0, "query"] == f"{LIGHTHOUSE} What else do you remember about the story? Was it scary? {REQUEST}"
    assert sorted(measured.loc[0, "query"].split()) == sorted(person.loc[0, "query"].split())
    bm25 = index.bm25(num_results=6)
    a, b = bm25(measured[["qid", "query"]]), bm25(person[["qid", "query"]])
    assert a["docno"].tolist() == b["docno"].tolist()
    assert a["score"].to_numpy() == pytest.approx(b["score"].to_numpy())


def test_bad_turns_and_show_are_refused(index, capsys):
    from pyterrier_tot.submission.cli import main

    for option, value, why in [("--turns", "-3", "must be at least 0, not -3"), ("--show", "0", "must be at least 1"),
                               ("--turns", "two", "'two' is not a whole number")]:
        with pytest.raises(SystemExit) as exit_:
            main(["ask", "--index", str(index.path), option, value])
        assert exit_.value.code == 2
        assert f"argument {option}: {why}" in capsys.readouterr().err
    for kwargs in ({"turns": -3}, {"show": 0}, {"turns": 2.5}):
        with pytest.raises(ptt.BadInputError, match=next(iter(kwargs))):
            ptt.interactive_search(index.bm25(), index, request=REQUEST, input=scripted([]), **kwargs)


def test_pyterrier_tot_ask_when_the_pipe_ends_early(index, tmp_path):
    out = tmp_path / "session.json"
    run = subprocess.run(cli(index.path, "--transcript", str(out)), input=f"{REQUEST}\n\n{LIGHTHOUSE}\n",
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env())
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "End of input: the search stopped after 1 question(s)." in run.stdout
    saved = json.loads(out.read_text())
    assert saved["ended"] == "eof" and saved["transcript"][1]["answer"] == LIGHTHOUSE
    empty = subprocess.run(cli(index.path, "--transcript", str(out)), input="", capture_output=True, text=True,
                           timeout=120, cwd=ROOT, env=env())
    assert empty.returncode == 2 and "Traceback" not in empty.stderr and "nothing searched" in empty.stdout


def test_pyterrier_tot_ask_stopped_by_ctrl_c(index, tmp_path):
    import signal

    out = tmp_path / "session.json"
    # Ctrl-C's default action, also when the test run was started as a background job (`cmd &` in a script), where
    # every process inherits SIGINT ignored and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen(cli(index.path, "--request", REQUEST, "--transcript", str(out)), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen, deadline = b"", time.monotonic() + 120
    try:
        while b"Is your book here?" not in seen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                seen += os.read(proc.stdout.fileno(), 4096)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends, while the prompt waits
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and b"Traceback" not in err, err.decode()[-2000:]
    assert b"Interrupted" in seen + rest
    saved = json.loads(out.read_text())
    assert saved["ended"] == "interrupted" and saved["transcript"][0]["turn"] == 0


def test_the_prompt_of_the_last_turn_says_enter_ends_the_search(index):
    """With --turns 0 (and on the last turn) the prompt said "Enter asks another question", and Enter ended it."""
    prompts = []
    session = ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST, turns=0,
                                     input=scripted([""], prompts), output=lambda s: None)
    assert session.ended == "turns" and session.turns == 0
    assert "another question" not in prompts[0] and "Enter or q ends it (no questions left)" in prompts[0]
    prompts = []
    ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST, turns=1,
                           input=scripted(["", LIGHTHOUSE, ""], prompts), output=lambda s: None)
    shown = [p for p in prompts if p.startswith("Is your book here?")]
    assert "Enter asks another question" in shown[0] and "no questions left" in shown[1]


def test_the_whole_query_is_shown_wrapped(index):
    """"Searching for: ..." was cut at about 100 characters, hiding most of what the person said."""
    long = " ".join(["a lighthouse keeper's ghost climbs the stairs every night"] * 5) + " THE-END"
    said = []
    session = ptt.interactive_search(index.bm25(num_results=6), index, request=REQUEST,
                                     input=scripted(["", long, "q"]), output=said.append)
    shown = next(s for s in said if s.startswith("\nSearching for: "))
    lines = shown.strip("\n").splitlines()
    assert len(lines) > 2 and all(len(line) <= 100 for line in lines) and "..." not in shown
    query = session.transcript.loc[1, "query"]
    assert len(query) > 300 and " ".join(shown.split()[2:]) == " ".join(query.split())  # all of it, in order
