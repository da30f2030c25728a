"""The one judge (:mod:`parity.judge`) and its typed verdict record (:class:`parity.results.Verdict`):
results.csv byte-identical to what the code wrote before the record existed, numbers formatted
only where they are written, a row read back parsed once into the same record."""

from __future__ import annotations

import csv
import gzip
import io
import re
from pathlib import Path

from parity import cli

FIXTURE = Path(__file__).parent / "fixtures" / "judge-sweep"
#: every verdict but timeout / error / crash: pass, fail, expected, unexpected-pass, unsupported, unavailable
BACKENDS = (
    "reference",
    "sdpa",
    "reference-cuda",
    "parity.selftest.bugs:WindowOneWider",
    "parity.selftest.bugs:NanOnEmptyRows",
    "parity.selftest.bugs:GqaRepeatNotInterleave",
)


def _read(path: Path) -> str:
    """A text file's exact characters; a ``.gz`` one decompressed (the fixture is stored gzipped)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as fh:
        return fh.read()


def blank_time(text: str) -> str:
    """results.csv with its time_ms column emptied (a rerun changes it) and est_mem_mb (the memory estimate
    grows as backends declare their workspace: SDPA's mask since 2026-12-06; an estimate is not a verdict)."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    blank = [rows[0].index(c) for c in ("time_ms", "est_mem_mb")]
    for r in rows[1:]:
        for i in blank:
            r[i] = ""
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


#: Columns of measured floats: a CPU of another make sums float32 in another order (AMD EPYC against the
#: fixture's machine: max_abs_err 5.24e-07 -> 6.44e-07 on a passing row; an Intel Xeon on 2026-12-06: the LSE
#: budget, scaled from the same-dtype baseline's LSE error, 1.06e-05 -> 1.08e-05), so they are compared within noise.
FLOAT_COLUMNS = (
    "max_abs_err",
    "max_rel_err",
    "mean_abs_err",
    "err_ratio",
    "budget_frac",
    "baseline_max",
    "baseline_mean",
    "lse_max_abs_err",
    "lse_budget",
    "grad_budget_frac",
)
WORST_COLUMNS = ("worst_seq", "worst_head", "worst_row", "worst_left_edge", "worst_where")
FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?|-?\d+e[-+]\d+")


def same_but_float_noise(got: str, want: str) -> bool:
    """The two results.csv texts agree: every column byte for byte, except measured floats (within 25% or 1e-6,
    :data:`FLOAT_COLUMNS`), the floats quoted in ``worst_where`` and the ``*detail`` texts, and where the worst error sits on a row within
    its budget (:data:`WORST_COLUMNS`); raises with the first difference."""
    g_rows = list(csv.DictReader(io.StringIO(got, newline="")))
    w_rows = list(csv.DictReader(io.StringIO(want, newline="")))
    assert [list(r) for r in g_rows[:1]] == [list(r) for r in w_rows[:1]] and len(g_rows) == len(w_rows)
    for g, w in zip(g_rows, w_rows):
        for col, want_text in w.items():
            got_text = g[col]
            if col in FLOAT_COLUMNS and got_text and want_text:
                a, b = float(got_text), float(want_text)
                assert abs(a - b) <= 0.25 * max(abs(a), abs(b)) + 1e-6, f"{w['backend']} {w['case_id']} {col}: {a} vs {b}"
            elif col in WORST_COLUMNS and not float(w["err_ratio"] or 0) >= 1:
                continue  # within the budget: where the largest error of noise falls is noise too
            elif col == "worst_where" or col.endswith("detail"):  # their words exact, their measured floats noise
                assert FLOAT.sub("#", got_text) == FLOAT.sub("#", want_text), f"{w['backend']} {w['case_id']}: {got_text!r}"
            else:
                assert got_text == want_text, f"{w['backend']} {w['case_id']} {col}: {got_text!r} vs {want_text!r}"
    return True


def test_a_small_sweep_writes_the_same_results_csv_as_before(tmp_path, capsys):
    """tests/fixtures/judge-sweep/results.csv.gz was written by the code before the typed verdict record
    (main at 536a1a8), time_ms and est_mem_mb blanked, its lse_check ``pass`` since written ``ok`` (the word every check
    says, 2026-12-07): the same cases, backends and known divergences give the same bytes."""
    argv = [
        "run",
        "--case-file",
        str(FIXTURE / "cases.jsonl"),
        "--no-isolate",
        "--no-report",
        "--no-siblings",
        "--expect",
        str(FIXTURE / "known.toml"),
        "--out",
        str(tmp_path / "run"),
    ]
    for b in BACKENDS:
        argv += ["--backend", b]
    assert cli.main(argv) == 1  # planted bugs fail
    capsys.readouterr()
    got = blank_time(_read(tmp_path / "run" / "results.csv"))
    want = blank_time(_read(FIXTURE / "results.csv.gz"))
    assert same_but_float_noise(got, want)
    verdicts = {r["verdict"] for r in csv.DictReader(io.StringIO(want, newline=""))}
    assert verdicts == {"pass", "fail", "expected", "unexpected-pass", "unsupported", "unavailable"}


def test_a_row_read_back_parses_once_into_the_record_that_writes_it_again():
    """Verdict.from_row(row).columns() gives back the row's verdict columns, text for text, on every
    verdict of the fixture; the numbers are numbers."""
    from parity.results import Verdict

    rows = list(csv.DictReader(io.StringIO(_read(FIXTURE / "results.csv.gz"), newline="")))
    for row in rows:
        v = Verdict.from_row(row)
        cols = v.columns()
        assert {k: str(x) for k, x in cols.items() if k != "time_ms"} == {k: row[k] for k in cols if k != "time_ms"}, row
        assert v.measured == (row["max_abs_err"] != "")
        if v.measured:
            assert isinstance(v.max_abs_err, float) and isinstance(v.nan_count, int) and isinstance(v.reasons, tuple)
    failing = [Verdict.from_row(r) for r in rows if r["verdict"] == "fail"]
    assert failing and all(v.reasons and v.budget_frac is not None for v in failing)
