"""The one judge (:mod:`parity.judge`) and its typed verdict record (:class:`parity.results.Verdict`):
results.csv byte-identical to what the code wrote before the record existed, numbers formatted
only where they are written, a row read back parsed once into the same record."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from parity import cli

FIXTURE = Path(__file__).parent / "fixtures" / "judge-sweep"
#: every verdict but timeout / error / crash: pass, fail, expected, unexpected-pass, unsupported, unavailable
BACKENDS = ("reference", "sdpa", "reference-cuda", "parity.selftest.bugs:WindowOneWider",
            "parity.selftest.bugs:NanOnEmptyRows", "parity.selftest.bugs:GqaRepeatNotInterleave")


def _read(path: Path) -> str:
    with path.open(newline="") as fh:
        return fh.read()


def blank_time(text: str) -> str:
    """results.csv with its time_ms column emptied (the one column a rerun changes)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    i = rows[0].index("time_ms")
    for r in rows[1:]:
        r[i] = ""
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def test_a_small_sweep_writes_the_same_results_csv_as_before(tmp_path, capsys):
    """tests/fixtures/judge-sweep/results.csv was written by the code before the typed verdict record
    (main at 536a1a8), time_ms blanked: the same cases, backends and known divergences give the same bytes."""
    argv = ["run", "--case-file", str(FIXTURE / "cases.jsonl"), "--no-isolate", "--no-report", "--no-siblings",
            "--expect", str(FIXTURE / "known.toml"), "--out", str(tmp_path / "run")]
    for b in BACKENDS:
        argv += ["--backend", b]
    assert cli.main(argv) == 1  # planted bugs fail
    capsys.readouterr()
    got = blank_time(_read(tmp_path / "run" / "results.csv"))
    want = _read(FIXTURE / "results.csv")
    assert got == want
    verdicts = {r["verdict"] for r in csv.DictReader(io.StringIO(want, newline=""))}
    assert verdicts == {"pass", "fail", "expected", "unexpected-pass", "unsupported", "unavailable"}
