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
"""

from __future__ import annotations

from typing import Any

import pytest

from parity import ParityError
from parity.api import failure_message
from parity.case import Case


def entry_text(row: dict[str, Any], expectations) -> str:
    """``"id: explanation"`` of the entry a row names."""
    entry = expectations.get(row.get("expected_id", "")) if expectations else None
    return entry.describe() if entry else str(row.get("expected_id"))


def check(row: dict[str, Any], expectations) -> dict[str, Any]:
    """Raise :class:`ParityError` for a new failure or an unexpected pass; else return the row."""
    v = row["verdict"]
    if v in ("pass", "unsupported", "expected"):
        return row
    if v == "unexpected-pass":
        entry = expectations.get(row["expected_id"]) if expectations else None
        case = Case.from_json(row["case_json"])
        raise ParityError(
            f"{row['backend']} UNEXPECTED PASS on {case.summary()}: the strict known divergence {entry_text(row, expectations)} "
            f"({entry.source if entry else '?'}) expects {entry.verdict if entry else 'a failure'}; retire or narrow the entry\n"
            f"  repro: {row['repro']}"
        )
    raise ParityError(failure_message(row))


def xfail_if_expected(row: dict[str, Any], expectations) -> None:
    """An example-based test's known divergence: an xfail with the entry's id and explanation."""
    if row["verdict"] == "expected":
        pytest.xfail(f"{entry_text(row, expectations)} [{row.get('reasons') or row.get('raw_verdict')}]")
