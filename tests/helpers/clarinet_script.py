"""A scripted CLARINET world for the stub server: two requests over the tiny books, their judgements, and the
responder that plays the question asker, the user and the rewriter."""
import pandas as pd

TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["a boy and a big flying lizard, read it in school",
                                                       "scary night in an old tower by the sea"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b2", "b5"], "label": [1, 1]})


def responder(messages):
    system, user = messages[0]["content"], messages[-1]["content"]
    if "librarian helping" in system:
        # the third question names a book the prompt shows: it must be dropped
        return ("1. Was there a dragon in the story?\n2. Did the story take place near the sea?\n"
                "3. Is it Dragons of the Red Moon?\n4. Was the main character a teenager?")
    if "vaguely remember" in system:
        if "dragon" in user.split("Question:")[-1]:
            return "Yes, there was a dragon, maybe it was Dragons of the Red Moon?"  # leaks b2's title
        return "I believe it was a young person, somewhere far away."
    if "Combine their request" in system:
        return "A fantasy book about a young blacksmith and a dragon."
    return "?"
