"""A 20-book toy corpus and tiny models for the generative retriever tests."""
import pandas as pd
import pytest
import torch

NOUNS = ("dragon moon kitten ghost lighthouse river castle pirate robot garden forest wizard queen island train "
         "winter summer horse school storm").split()
PLACES = ("harbour desert valley mountain city village swamp meadow canyon glacier jungle prairie lagoon cavern "
          "orchard tundra marsh plateau fjord savanna").split()


def toy_books(n: int = 20) -> pd.DataFrame:
    rows = []
    for i in range(n):
        a, b, place = NOUNS[i % 20], NOUNS[(i * 3 + 1) % 20], PLACES[(i * 7 + 2) % 20]
        title = f"The {a.title()} of the {PLACES[i % 20].title()}"
        rows.append({"docno": f"t{i:02d}", "title": title, "author": f"Author {chr(65 + i)}",
                     "text": f"A story about a {a} and a {b}. It all happens near the {place}. "
                             f"In the end the {a} finds a home in the {PLACES[i % 20]}."})
    return pd.DataFrame(rows)


def toy_tokenizer(books: pd.DataFrame, extra=()):
    from pyterrier_tot.generative import book_ids, word_tokenizer

    return word_tokenizer(list(books["text"]) + list(book_ids(books).values()) + list(extra))


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, and on a shared machine two OpenMP threads spin against each
    other; the previous setting is restored for the rest of the suite."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
