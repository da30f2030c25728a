"""Every backend against the float64 reference: property-based and on the curated edge cases.

Test ids carry the backend name (``pytest -k flex``); each backend has its marker (``-m sdpa``).
"""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from parity import ParityError, evaluate
from parity.api import failure_message
from parity.strategies import cases, edge_cases

SMALL = dict(max_len=48, max_batch=2)
STRATEGY = st.one_of(cases(**SMALL), cases(window_kinds=("causal",), **SMALL))


def _check(backend_spec, case):
    row = evaluate(backend_spec, case)
    if row["verdict"] == "unsupported":
        return row
    if row["verdict"] != "pass":
        raise ParityError(failure_message(row))
    return row


@given(case=STRATEGY)
def test_matches_reference(backend_spec, case):
    row = _check(backend_spec, case)
    assume(row["verdict"] != "unsupported")


@pytest.mark.parametrize("case", edge_cases(("bfloat16",)), ids=lambda c: c.summary().replace(" ", "_"))
def test_edge_cases(backend_spec, case):
    row = _check(backend_spec, case)
    if row["verdict"] == "unsupported":
        pytest.skip(f"unsupported: {row['detail']}")
