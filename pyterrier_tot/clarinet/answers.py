"""What an answer to a clarification question says, before any posterior uses it::

    read_answer("Was there a dragon?", "I don't remember.")     # Reading('null', '')
    read_answer("Was there a dragon?", "No.")                   # Reading('negative', 'Was there a dragon?')
    read_answer("Was there a dragon?", "Yes, I think so.")      # Reading('positive', 'Was there a dragon?')
    read_answer("Where was it set?", "In London.")            # Reading('positive', 'Where was it set? In London.')

A *null* answer ("I don't remember", "not sure", an empty string) carries no evidence; a bare *negative* answer
("No.", "I don't think so") denies what the question asked about (its evidence is the question, to be read
inverted or ignored); anything else is *positive*, with the text a retriever should match: the question and the
answer, or only the question for a bare "yes", or only the content after a "No, ..." that goes on to say what it
was instead. A dense retriever matches "No, there was no dragon" to books with dragons, which is why posteriors
read answers through this function rather than scoring their raw text.
"""
from __future__ import annotations

import re
from typing import NamedTuple

_WORD = re.compile(r"[a-z0-9']+")
#: phrases that say "I do not know" (matched on the lower-cased answer, apostrophes normalised)
_NULL_PHRASES = (
    "i don't remember", "i do not remember", "don't remember", "do not remember", "can't remember", "cannot remember",
    "can not remember", "i don't recall", "i do not recall", "don't recall", "can't recall", "cannot recall",
    "i don't know", "i do not know", "don't know", "no idea", "not sure", "i'm not sure", "i am not sure", "unsure",
    "no clue", "i forget", "i forgot", "no memory", "can't say", "hard to say", "couldn't say", "not certain",
    "i have no idea", "i really don't", "i honestly don't",
)
_YES = {"yes", "yeah", "yep", "yup", "sure", "definitely", "absolutely", "correct", "right", "indeed", "true"}
_NO = {"no", "nope", "nah", "never", "not", "incorrect", "wrong", "false"}
_REPLACING = {"no", "nope", "nah"}
_NEG_PHRASES = ("i don't think so", "i do not think so", "don't think so", "not really", "not that i remember",
                "not that i recall", "i doubt it", "not at all", "none that i remember", "none")
#: words that carry no content (hedges, pronouns, auxiliaries, fillers)
_EMPTY = set("""i i'm im me my it it's its was were is are be been the a an this that there they them of to in on and
or but so just really think thought believe guess maybe perhaps probably possibly kind sort of somewhat pretty quite
some something anything about remember recall know sure certain honestly well um uh hmm oh like very much too also
again either neither nor do does did don't didn't doesn't isn't wasn't weren't aren't any all much anything""".split())
_NEGATION_WORDS = {"no", "not", "never", "none", "nothing", "nobody", "without", "neither", "nor"}


class Reading(NamedTuple):
    """``kind``: ``"null"``, ``"negative"`` or ``"positive"``; ``evidence``: the text to match (empty for null)."""
    kind: str
    evidence: str


def _norm(text: str) -> str:
    return " ".join(str(text or "").lower().replace("’", "'").replace("`", "'").split())


def _words(text: str):
    return _WORD.findall(text)


def _content(words) -> list:
    return [w for w in words if w not in _EMPTY and w not in _YES and w not in _NO and not w.endswith("n't")]


def read_answer(question: str, answer: str) -> Reading:
    """Classify ``answer`` to ``question`` (see the module doc)."""
    text = _norm(answer)
    question = " ".join(str(question or "").split())
    if not _words(text):
        return Reading("null", "")
    stripped = text
    for phrase in _NULL_PHRASES:
        stripped = stripped.replace(phrase, " ")
    had_null = stripped != text
    if had_null and not _content(_words(stripped)):
        return Reading("null", "")  # "no idea", "no, I don't remember"
    words = _words(text)
    head = words[0]
    neg_phrase = next((p for p in _NEG_PHRASES if text.startswith(p)), None)
    if head in _NO or neg_phrase:
        rest = text[len(neg_phrase):] if neg_phrase else text.split(head, 1)[1]
        rest_words = _words(rest)
        content = _content(rest_words)
        # only "no, ..." / "nope, ..." may go on to say what it was instead; "never ..." / "not ..." deny
        if (not content or neg_phrase or head not in _REPLACING
                or any(w in _NEGATION_WORDS or w.endswith("n't") for w in rest_words)):
            # a bare "no", or "no, there was no dragon": the question's content is denied
            return Reading("negative", question)
        return Reading("positive", " ".join(rest.strip(" ,.;:-!").split()))
    content = _content(_words(stripped))
    if not content:
        if had_null:
            return Reading("null", "")
        if head in _YES:
            return Reading("positive", question)
        return Reading("null", "")  # fillers only ("hmm, maybe")
    return Reading("positive", f"{question} {' '.join(str(answer).split())}".strip())


def is_null(answer: str) -> bool:
    """True when ``answer`` says nothing (the question is not needed to tell)."""
    return read_answer("", answer).kind == "null"
