"""Every public transformer tells ``pt.inspect`` the truth, in every mode.

For each mode of each public transformer (a class in ``pyterrier_tot.__all__`` that subclasses
``pt.Transformer``, or a public function / method whose return annotation is one) this checks that:

- ``pt.inspect.transformer_inputs`` declares a column set that the tiny input of that mode satisfies;
- dropping any declared column (one no other declared mode can do without) raises
  ``pt.validate.InputValidationError``;
- ``pt.inspect.transformer_outputs`` (which runs the stage on an empty frame) gives the columns of a real call.

A new public stage fails :func:`test_every_public_transformer_has_a_case` until it has a case in
``tests/helpers/matrix.py`` (or, for a family with its own subpackage, in ``tests/helpers/cases_<family>.py``).
"""
import inspect
import typing

import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from tests.helpers.matrix import CASES, skip_unavailable

#: Public callables returning transformers whose annotation does not say so (none, or a Union with a tuple).
UNANNOTATED = {"load_biencoder", "rm3_pipeline"}


def _returns_transformer(fn) -> bool:
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:
        return False
    return inspect.isclass(ret) and issubclass(ret, pt.Transformer)


def public_transformer_names() -> set:
    names = set(UNANNOTATED)
    for name in ptt.__all__:
        obj = getattr(ptt, name)
        if inspect.isclass(obj):
            if issubclass(obj, pt.Transformer):
                names.add(name)
                continue
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(member) and _returns_transformer(member):
                    names.add(f"{name}.{attr}")
        elif inspect.isfunction(obj) and _returns_transformer(obj):
            names.add(name)
    return names


def test_every_public_transformer_has_a_case():
    missing = public_transformer_names() - {c.name for c in CASES}
    assert not missing, f"public transformers without a case in tests/helpers/matrix.py: {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_inspect_tells_the_truth(case, env):
    skip_unavailable(case.needs)
    t = case.build(env)
    inp = case.inp(env)
    cols = set(inp.columns)

    modes = pt.inspect.transformer_inputs(t)
    accepted = [m for m in modes if set(m) <= cols]
    assert accepted, f"{t!r}: declared inputs {modes} do not accept the columns {sorted(cols)}"

    # a column is required when no declared mode can do without it (the widest accepted mode is the one taken)
    required = [c for c in max(accepted, key=len) if not any(set(m) <= cols - {c} for m in modes)]
    assert required, f"{t!r}: no declared column is required ({modes})"
    for c in required:
        with pytest.raises(pt.validate.InputValidationError):
            t(inp.drop(columns=[c]))

    real = t(inp)
    declared = pt.inspect.transformer_outputs(t, list(inp.columns))
    assert set(declared) == set(real.columns), (
        f"{t!r}: inspect says {sorted(declared)}, a real call gives {sorted(real.columns)}")


REWRITERS = [c for c in CASES if c.name in ("HedgeRemover", "LLMQueryRewriter", "HyDE", "ClueConcatenator")]


@pytest.mark.parametrize("case", REWRITERS, ids=[c.id for c in REWRITERS])
def test_rewriters_keep_the_old_query(case, env):
    inp = case.inp(env)
    out = case.build(env)(inp)
    assert out["query_0"].tolist() == inp["query"].tolist()
    assert out["query"].tolist() != inp["query"].tolist()
