"""Issue 51's limit on the tracked tree: at most 8 MB (8,000,000 bytes), the lab's committed runs included. A new
run that does not fit retires superseded rows (their README names the ``git show`` that brings them back), as
lab/runs/h200-2026-12-06d-coldwarm/README.md did, or the limit moves here with its reason.

8.25 MB since the 20th session (2026-12-07): its two loan runs, lab/runs/h100-2026-12-07g-models (issue 48, 0.21 MB:
the first models rows at 32k-128k keys on every staged backend) and -07g-versions (issue 50, 0.17 MB: both vLLM builds),
after retiring the rows they re-ran (h100-2026-12-07-versions' vLLM FA3 rows, 79 KB).

8.40 MB since the 21st session (2026-12-07): no run data; code and its tests for issue 47's lane overheads (answers and
case inputs through shared-memory files, refused rows without a reference, keys in flight for held-back rows and
retries: parity/transfer.py, parity/shared_inputs.py, parity/sweep/inputstore.py, their tests and benchmarks, 0.17 MB).
8.46 MB since the 22nd session (2026-12-07): no run data; 0.05 MB of code and tests from its audits of bad input and of
shapes a user can name (27 tracebacks made one-line errors, int64 window sides, torn results rows, a reference that
a stop signal did not stop: tests/test_bad_input.py, tests/test_bench_args.py and the tests beside each fix)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 8_460_000


def test_the_tracked_tree_is_at_most_its_limit():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    files = [ROOT / n.decode() for n in names if n]
    sizes = {f: f.stat().st_size for f in files if f.is_file()}  # a file deleted but not yet staged is not counted
    total = sum(sizes.values())
    biggest = ", ".join(f"{p.relative_to(ROOT)} {n // 1000} KB" for p, n in sorted(sizes.items(), key=lambda x: -x[1])[:5])
    assert total <= LIMIT, f"tracked tree {total / 1e6:.2f} MB > {LIMIT / 1e6:.0f} MB; largest: {biggest}"
