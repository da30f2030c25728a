"""Re-judge every committed run folder with known-divergence files, using the ``parity`` package found first on
``sys.path`` (the tree under test).

One file: write ``OUT/<run>/results.csv`` (and its ``environment.json``) for ``parity diff``: how issue 33 checked
that the redesign changed no verdict (lab/runs/redesign-verdicts-2026-12-05/README.md)::

    PYTHONPATH=TREE python lab/rejudge_committed.py RUNS_DIR KNOWN_DIVERGENCES_TOML OUT

Two files (``--compare``): judge every row with both, write the rows whose verdict, ``expected_id`` or
``unconfirmed_id`` differ to ``OUT.csv`` (one line each, with the words that decided it), and print the counts by
(before -> after): how issue 48 checked matching by mechanism (lab/runs/rejudge-mechanism-2026-12-06/README.md)::

    PYTHONPATH=TREE python lab/rejudge_committed.py --compare RUNS_DIR OLD_TOML NEW_TOML OUT.csv

Two trees (``--outputs``, after one-file runs by each): compare the two OUT folders column by column and print, per
judged column (``raw_verdict`` and :data:`JUDGED`, with the row keys), how many rows differ, and each (old word -> new
word) pair of the check columns, where a rename of a check's words shows; exit 1 when a judged column differs: how
issue 51 checked its renames (lab/runs/redesign3-verdicts-2026-12-06/README.md)::

    python lab/rejudge_committed.py --outputs OLD_OUT NEW_OUT

The folders: every ``results.csv[.gz]`` under ``RUNS_DIR/h[12]00-*/`` (``lab/runs``) (the GPU runs) and ``cpu-grad-*/`` (the CPU
runs with entries of their own), as lab/tests/test_lab_runs.py re-judges them.
"""

from __future__ import annotations

import csv
import gzip
import shutil
import sys
from collections import Counter
from pathlib import Path

GLOBS = ("h[12]00-*/**/results.csv*", "cpu-grad-*/**/results.csv*")
#: what a changed row shows, beside its keys and its two judgements
SHOWN = ("raw_verdict", "reasons", "mask_check", "mask_detail", "read_check", "read_detail", "err_ratio")
JUDGED = ("verdict", "expected_id", "unconfirmed_id")


def folders(runs_root: Path) -> list[Path]:
    return sorted({p.parent for g in GLOBS for p in runs_root.glob(g)})


def judged(folder: Path, toml: str):
    from parity.expect import load
    from parity.report.runs import load_run

    return load_run(folder, load([toml]), rejudge=True).df


def write_one(runs_root: Path, toml: str, out: Path) -> None:
    for folder in folders(runs_root):
        rel = folder.relative_to(runs_root)
        df = judged(folder, toml)
        dest = out / rel
        dest.mkdir(parents=True, exist_ok=True)
        df[[c for c in df.columns if not c.endswith("_f")]].to_csv(dest / "results.csv", index=False)
        env = folder / "environment.json"
        if env.exists():
            shutil.copy(env, dest / "environment.json")
        else:
            (dest / "environment.json").write_text("{}")
        print(rel, len(df), df["verdict"].value_counts().to_dict(), file=sys.stderr)


def outcome(row: dict) -> str:
    """``expected: ID``, ``fail (no mask evidence: ID)``, or the verdict alone."""
    if row["verdict"] in ("expected", "unexpected-pass"):
        return f"{row['verdict']}: {row['expected_id']}"
    if row.get("unconfirmed_id"):
        return f"{row['verdict']} (no mask evidence: {row['unconfirmed_id']})"
    return str(row["verdict"])


def changed_rows(folder: Path, runs_root: Path, old: str, new: str) -> list[dict]:
    """The rows of ``folder`` whose judgement (:data:`JUDGED`) differs between ``old`` and ``new``: the run, the
    row's keys, both outcomes (:func:`outcome`) and the words that decided it (:data:`SHOWN`)."""
    a, b = judged(folder, old), judged(folder, new)
    out = []
    for ra, rb in zip(a.to_dict("records"), b.to_dict("records")):
        assert (ra["backend"], ra["case_id"]) == (rb["backend"], rb["case_id"])
        if all(ra.get(k, "") == rb.get(k, "") for k in JUDGED):
            continue
        keys = {"run": folder.relative_to(runs_root).as_posix(), "backend": ra["backend"], "case_id": ra["case_id"]}
        out.append({**keys, "before": outcome(ra), "after": outcome(rb), **{k: str(rb.get(k, ""))[:400] for k in SHOWN}})
    return out


def compare(runs_root: Path, old: str, new: str, out_csv: Path) -> Counter:
    """The rows whose judgement differs between ``old`` and ``new``, written to ``out_csv``; counts by change."""
    rows = [r for folder in folders(runs_root) for r in changed_rows(folder, runs_root, old, new)]
    with out_csv.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["run", "backend", "case_id", "before", "after", *SHOWN])
        w.writeheader()
        w.writerows(rows)
    changes = Counter((r["before"], r["after"]) for r in rows)
    print(f"{len(folders(runs_root))} folders; {len(rows)} rows changed", file=sys.stderr)
    for (before, after), n in sorted(changes.items()):
        print(f"{n:5d}  {before}  ->  {after}", file=sys.stderr)
    return changes


KEYS = ("backend", "case_id", "raw_verdict", *JUDGED)
CHECKS = ("mask_check", "read_check", "lse_check", "grad_check", "unwritten_check")


def _read(path: Path) -> list[dict[str, str]]:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def compare_outputs(old_root: Path, new_root: Path) -> int:
    """Two trees' one-file outputs compared (``--outputs``); 1 when a judged column (:data:`KEYS`) differs."""
    files = sorted(old_root.rglob("results.csv*"))
    rows, judged_diff, words = 0, Counter(), Counter()
    for old in files:
        a, b = _read(old), _read(new_root / old.relative_to(old_root))
        if len(a) != len(b):
            judged_diff[f"rows in {old.relative_to(old_root)}"] += abs(len(a) - len(b))
        for x, y in zip(a, b):
            rows += 1
            judged_diff.update(c for c in KEYS if x.get(c, "") != y.get(c, ""))
            words.update((c, x.get(c, ""), y.get(c, "")) for c in CHECKS if x.get(c, "") != y.get(c, ""))
    print(f"{len(files)} results files, {rows} rows")
    print("judged columns that differ:", dict(judged_diff) or "none")
    for (c, w0, w1), n in sorted(words.items()):
        print(f"  {c}: {w0!r} -> {w1!r}: {n} rows")
    return 1 if judged_diff else 0


if __name__ == "__main__":
    if sys.argv[1] == "--outputs":
        sys.exit(compare_outputs(Path(sys.argv[2]), Path(sys.argv[3])))
    import parity

    print("parity from", parity.__file__, file=sys.stderr)
    if sys.argv[1] == "--compare":
        compare(Path(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5]))
    else:
        write_one(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
