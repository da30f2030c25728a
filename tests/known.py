"""Known divergences in the pytest tests (:mod:`parity.expect`): what test_backends and
test_gpu_backends do with a judged row.

=====================  ============================  ===================================
row verdict            example-based test            property test (hypothesis)
=====================  ============================  ===================================
pass / unsupported     returned                      returned
expected               ``pytest.xfail(id: words)``   an ``event()``, counted, not a failure
unexpected-pass        fails, naming the entry       fails (shrunk), naming the entry
any other failure      fails with the measured miss  fails with the measured miss
=====================  ============================  ===================================

Each takes the judged record (:func:`parity.api.evaluate_record`): the xfail and the event carry the
measured miss (:func:`parity.api.miss_lines`, what :func:`parity.api.failure_message` says of a
failure), an unexpected pass its error ratio.
"""

from __future__ import annotations

from typing import Any

import pytest

from parity import ParityError
from parity.api import failure_message, miss_lines
from parity.case import Case
from parity.results import Judged


def entry_text(row: dict[str, Any], expectations) -> str:
    """``"id: explanation"`` of the entry a row names (of each, ``; ``-joined, for a joint ``a+b``)."""
    return expectations.describe_id(row.get("expected_id", "")) if expectations else str(row.get("expected_id"))


def check(judged: Judged, expectations) -> Judged:
    """Raise :class:`ParityError` for a new failure or an unexpected pass; else return ``judged``."""
    row = judged.row
    v = row["verdict"]
    if v in ("pass", "unsupported", "expected"):
        return judged
    if v == "unexpected-pass":
        entry = expectations.get(row["expected_id"]) if expectations else None
        case = Case.from_json(row["case_json"])
        measured = "; ".join(miss_lines(judged)) or f"err ratio {row.get('err_ratio')}"
        raise ParityError(
            f"{row['backend']} UNEXPECTED PASS on {case.summary()}: the strict known divergence {entry_text(row, expectations)} "
            f"({entry.source if entry else '?'}) expects {entry.verdict if entry else 'a failure'}; retire or narrow the entry\n"
            f"  measured: {measured}\n"
            f"  repro: {row['repro']}"
        )
    raise ParityError(failure_message(judged))


def expected_text(judged: Judged, expectations) -> str:
    """A known divergence's row in one line: ``"id [reasons]: measured miss"`` (a property test's event)."""
    row = judged.row
    measured = "; ".join(miss_lines(judged))
    return f"{row.get('expected_id')} [{row.get('reasons') or row.get('raw_verdict')}]: {measured}"


def xfail_if_expected(judged: Judged, expectations) -> None:
    """An example-based test's known divergence: an xfail with the entry's id and explanation, the
    measured miss and the repro command, on one line."""
    row = judged.row
    if row["verdict"] == "expected":
        measured = "; ".join(miss_lines(judged))
        pytest.xfail(f"{entry_text(row, expectations)} [{row.get('reasons') or row.get('raw_verdict')}]: {measured}; repro: {row['repro']}")
