"""vllm-fa2-cuda's compile key against the lab's cold runs (issue 47): vLLM's FA2 build holds PTX only for Hopper, so
the first row of each key JIT-compiles (seconds to minutes) and every other row is fast (well under a second). Keys
too coarse show as two slow rows of one key, keys too fine as keys with no slow row."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from parity import backends
from parity.case import Case
from parity.runfolder import read_rows

RUNS = Path(__file__).resolve().parents[2] / "lab" / "runs"
#: runs whose driver JIT cache was cold for vLLM 0.26.0's FA2 (the H200 default sweep; the H100 versions loan)
COLD = ("h200-2026-12-05/default-sweep", "h100-2026-12-07-versions/vllm-0.26.0")
SLOW_S = 1.0  # their slow rows took 6-138 s, the rest at most 0.08 s


@pytest.mark.parametrize("run", COLD)
def test_one_slow_row_per_vllm_fa2_compile_key(run):
    be = backends.get("vllm-fa2-cuda")
    slow: dict[tuple, int] = defaultdict(int)
    for row in read_rows(RUNS / run):
        if row["backend"] == be.name and row["verdict"] not in ("unsupported", "unavailable"):
            key = be.compile_key(Case.from_json(row["case_json"]))
            slow[key] += float(row["time_ms"] or 0) / 1000 > SLOW_S
    assert len(slow) >= 10 and None not in slow
    assert {k: n for k, n in slow.items() if n != 1} == {}, "keys with no slow row (too fine) or several (too coarse)"
