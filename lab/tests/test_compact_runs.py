"""lab/compact_runs.py on a small made-up run folder: what a later pass over a compacted folder changes (passing
rows' ``worst_where`` / plain ``lse_detail``, environment.json one line per key, the decode sidecars gzipped), what it
leaves (failing rows, the earlier record), and that a pass with nothing left to do writes nothing."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
from pathlib import Path

LAB = Path(__file__).resolve().parents[1]
FIELDS = ["backend", "case_id", "verdict", "raw_verdict", "worst_where", "worst_seq", "worst_head", "worst_row"]
FIELDS += ["max_abs_err", "lse_check", "lse_max_abs_err", "lse_budget", "lse_detail"]
PLAIN_LSE = "max |err| 2.2e-07 within budget 1.1e-05 (k x same-dtype LSE baseline 6.5e-07 + floor)"
EMPTY_ROWS_LSE = PLAIN_LSE[:-1] + "; 1 row(s) see no key: LSE -inf (the library's convention: -inf))"
ROWS = [
    ("pass", "pass", "worst |err| 1e-06 at head 0 dim 3, seq 0 row 2: got 1.0, want 1.0", "pass", PLAIN_LSE),
    ("pass", "pass", "worst |err| 1e-06 at head 0 dim 4, seq 0 row 2: got 1.0, want 1.0", "pass", EMPTY_ROWS_LSE),
    ("expected", "fail", "worst |err| 6.05 at head 1 dim 62, seq 0 row 9: got -0.12, want -6.17", "fail", "max |err| 9"),
    ("unexpected-pass", "pass", "worst |err| 1e-06 at head 0 dim 5, seq 0 row 1: got 1.0, want 1.0", "", ""),
]


def _tool():
    spec = importlib.util.spec_from_file_location("compact_runs", LAB / "compact_runs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode(), newline="")))


def _folder(tmp_path: Path, tool) -> Path:
    top = tmp_path / "h200-2099-01-01"
    (top / "run" / "decode").mkdir(parents=True)
    out = io.StringIO(newline="")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(FIELDS)
    for i, (verdict, raw, where, lse_check, lse) in enumerate(ROWS):
        w.writerow(["b", f"c{i}", verdict, raw, where, "0", "0", "2", "1e-06", lse_check, "2.2e-07", "1.1e-05", lse])
    (top / "run" / "results.csv.gz").write_bytes(gzip.compress(out.getvalue().encode()))
    env = {"torch": "2.11", "backends": {"b": {"version": "1"}}, "earlier_runs": [{"backends": {"b": {"version": "1"}}}]}
    (top / "run" / "environment.json").write_text(json.dumps(env, indent=2) + "\n")
    (top / "run" / "decode" / "decode.json").write_text(json.dumps({"models": list(range(4000))}, indent=2))
    (top / "README.md").write_text(f"# notes\n\nSee `run/decode/decode.json`.\n\n{tool.SECTION}\n\nthe first pass's table\n")
    return top


def test_a_later_pass_blanks_only_passing_rows_words_and_keeps_the_first_record(tmp_path):
    tool = _tool()
    top = _folder(tmp_path, tool)
    env_before = json.loads((top / "run" / "environment.json").read_text())
    before, after = tool.compact(top, "abc123", dry_run=False)
    assert after < before
    rows = _rows(top / "run" / "results.csv.gz")
    assert [r["worst_where"] == "" for r in rows] == [True, True, False, False]  # an unexpected pass keeps it
    assert [r["lse_detail"] for r in rows] == ["", EMPTY_ROWS_LSE, "max |err| 9", ""]
    assert [r["worst_row"] for r in rows] == ["2"] * 4 and rows[0]["lse_budget"] == "1.1e-05"
    assert json.loads((top / "run" / "environment.json").read_text()) == env_before
    assert not (top / "run" / "decode" / "decode.json").exists()
    assert json.loads(gzip.decompress((top / "run" / "decode" / "decode.json.gz").read_bytes())) == {"models": list(range(4000))}
    notes = (top / "README.md").read_text()
    assert "See `run/decode/decode.json.gz`." in notes
    assert "the first pass's table\n" in notes and notes.count(tool.SECTION) == 1
    assert tool.AGAIN in notes and "`git show abc123:lab/runs/h200-2099-01-01/PATH`" in notes
    assert "`worst_where` of 2 passing rows" in notes and "`lse_detail` of 1 passing rows" in notes
    # nothing left to do: nothing written
    again_before, again_after = tool.compact(top, "def456", dry_run=False)
    assert again_before == again_after
    assert (top / "README.md").read_text() == notes


def test_the_seed_of_the_next_loan_keeps_every_word(tmp_path):
    tool = _tool()
    top = _folder(tmp_path, tool)
    data, what = tool.compact_results(top / "run" / "results.csv.gz", next(iter(tool.KEEP_EVERY_ROW)))
    assert what == [] and [r["worst_where"] for r in _rows(top / "run" / "results.csv.gz")] == [r[2] for r in ROWS]


def test_a_gzipped_top_level_log_does_not_rename_a_subfolders_log_of_that_name():
    """12-07d: the run's own run.log was gzipped and the notes' `call4-prepass/run.log` (kept as it was) followed."""
    tool = _tool()
    notes = "see run.log, call4-prepass/run.log and lab/runs/R/run.log"
    assert tool.follow(notes, ["run.log"], "R") == "see run.log.gz, call4-prepass/run.log and lab/runs/R/run.log.gz"
    assert tool.follow("sub/x.log and x.log", ["sub/x.log", "x.log"], "R") == "sub/x.log.gz and x.log.gz"


def test_the_repro_column_leaves_where_every_row_has_the_one_the_product_writes(tmp_path):
    """A backward run's rows, each ``repro`` as the judge wrote it (:meth:`parity.Case.repro` and `` --grad``):
    the column leaves; one row with another command keeps it."""
    from parity import Case, Window

    tool = _tool()
    cases = [Case(q_lens=(8,), k_lens=(8,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=s) for s in range(2)]
    rows = [{"backend": "sdpa", "verdict": "pass", "case_json": c.to_json(), "repro": c.repro("sdpa") + " --grad"} for c in cases]
    for other, kept in ((None, False), ("python -m parity run --backend sdpa", True)):
        out = io.StringIO(newline="")
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows if other is None else [rows[0], {**rows[1], "repro": other}])
        path = tmp_path / f"{kept}.csv.gz"
        path.write_bytes(gzip.compress(out.getvalue().encode()))
        data, what = tool.compact_results(path, "run")
        path.write_bytes(data)
        assert ("repro" in _rows(path)[0]) == kept and any("column `repro`" in n for n in what) != kept
