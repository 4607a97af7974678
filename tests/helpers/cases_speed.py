"""Cases for ``tests/conventions/test_inspect.py`` / ``tests/conventions/test_bad_inputs.py``: the bf16 dense
stages (issue 17, encoding speed). Their bad-input rows are those of BookIndex.dense / BookIndex.dense_scorer
(``stage_key`` falls back to the name without the mode). The length-sorted document encoder takes document frames,
outside the query / result-frame matrix: tests/index/test_encoding_speed_options.py covers it."""
from tests.helpers.matrix_inputs import Case, queries, results

CASES = [
    Case("BookIndex.dense", "retrieve-bf16", lambda e: e.index.dense(num_results=3, precision="bf16"), queries),
    Case("BookIndex.dense_scorer", "score-bf16", lambda e: e.index.dense_scorer(precision="bf16"), results),
]

STAGES: dict = {}
