"""Two trees' judgements of the committed runs, compared column by column (issue 51: "every committed run
re-judged byte-equal in verdicts before and after").

    PYTHONPATH=OLD_TREE python lab/rejudge_committed.py lab/runs parity/known_divergences.toml /tmp/rj-old
    PYTHONPATH=NEW_TREE python lab/rejudge_committed.py lab/runs parity/known_divergences.toml /tmp/rj-new
    python lab/compare_rejudged.py /tmp/rj-old /tmp/rj-new

Prints the folders and rows compared, and per column how many rows differ: the judged columns (verdict,
raw_verdict, expected_id, unconfirmed_id, keyed by backend and case_id in file order) and, separately, each
(old word -> new word) pair of the check columns, where a rename of a check's words shows. Exit 1 when a judged
column differs.
"""

from __future__ import annotations

import csv
import gzip
import sys
from collections import Counter
from pathlib import Path

JUDGED = ("backend", "case_id", "verdict", "raw_verdict", "expected_id", "unconfirmed_id")
CHECKS = ("mask_check", "read_check", "lse_check", "grad_check", "unwritten_check")


def _rows(path: Path) -> list[dict[str, str]]:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    old_root, new_root = Path(argv[0]), Path(argv[1])
    files = sorted(p for p in old_root.rglob("results.csv*"))
    rows, judged, words = 0, Counter(), Counter()
    for old in files:
        new = new_root / old.relative_to(old_root)
        a, b = _rows(old), _rows(new)
        if len(a) != len(b):
            judged[f"rows in {old.relative_to(old_root)}"] += abs(len(a) - len(b))
        for x, y in zip(a, b):
            rows += 1
            judged.update(c for c in JUDGED if x.get(c, "") != y.get(c, ""))
            words.update((c, x.get(c, ""), y.get(c, "")) for c in CHECKS if x.get(c, "") != y.get(c, ""))
    print(f"{len(files)} results files, {rows} rows")
    print("judged columns that differ:", dict(judged) or "none")
    for (c, w0, w1), n in sorted(words.items()):
        print(f"  {c}: {w0!r} -> {w1!r}: {n} rows")
    return 1 if judged else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
