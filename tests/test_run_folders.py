"""Each ``parity run`` has its own folder; an explicit --out holding a run is refused unless --resume / --force;
argparse's errors are one line (issue 19)."""

from __future__ import annotations

import csv
import datetime
import gzip
import json
import os
import sys

import pytest

from parity.cli import main
from parity.cli.common import latest_run, new_run_dir

CASE = '{"q_lens":[3],"k_lens":[5],"hq":1,"hkv":1,"head_dim":8,"dtype":"float32","window":{"left":2,"right":0}}'


def _run(*extra):
    return main(["run", "--backend", "reference", "--no-isolate", "--case", CASE, "-q", "--no-report", "--shrink", "0", *extra])


def test_runs_without_out_get_their_own_folders_and_latest_names_the_newest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _run() == 0
    assert _run() == 0
    runs = sorted((tmp_path / "reports" / "runs").iterdir())
    assert len(runs) == 2 and all((r / "results.csv").exists() for r in runs)
    latest = latest_run()
    assert latest.resolve() == max(runs, key=lambda r: r.stat().st_mtime_ns).resolve() or (latest / "results.csv").exists()
    assert main(["report"]) == 0  # no folder: the latest run
    assert (latest / "summary.md").exists()


def test_new_run_dir_suffix_and_no_symlink_fallback(tmp_path, monkeypatch):
    now = datetime.datetime(2026, 12, 4, 20, 15, 30)
    a = new_run_dir(tmp_path / "runs", tmp_path / "latest", now)
    b = new_run_dir(tmp_path / "runs", tmp_path / "latest", now)
    assert a.name == "20261204-201530" and b.name == "20261204-201530-2"
    assert (tmp_path / "latest").resolve() == b.resolve()

    def no_symlinks(*_a, **_k):
        raise OSError("symlinks not allowed here")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    c = new_run_dir(tmp_path / "runs", tmp_path / "latest", now)
    assert not (tmp_path / "latest").exists()
    assert (tmp_path / "latest.txt").read_text().strip() == str(c)
    assert latest_run(tmp_path / "latest") == c


def test_explicit_out_holding_a_run_is_refused_unless_resume_or_force(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("--out", str(out)) == 0
    (out / "shrunk.jsonl").write_text("old\n")
    capsys.readouterr()
    assert _run("--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parity: error: --out") and "--resume" in err and "--force" in err and "\n" not in err
    assert _run("--out", str(out), "--resume") == 0
    assert _run("--out", str(out), "--force") == 0
    assert "replacing the run" in capsys.readouterr().err
    assert not (out / "shrunk.jsonl").exists() and (out / "results.csv").exists()


@pytest.mark.parametrize("argv", [["run", "--dtype", "float8"], ["decode", "--model", "llama"]])
def test_argparse_errors_are_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parity: error:") and "\n" not in err and "usage:" not in err


def test_case_file_csv_gz_is_read_and_a_bad_one_is_named_in_one_line(tmp_path, capsys):
    import gzip

    out = tmp_path / "run"
    assert _run("--out", str(out)) == 0
    gz = tmp_path / "results.csv.gz"
    gz.write_bytes(gzip.compress((out / "results.csv").read_bytes()))
    capsys.readouterr()
    assert (
        main(
            ["run", "--backend", "reference", "--no-isolate", "-q", "--no-report", "--case-file", str(gz), "--out", str(tmp_path / "again")]
        )
        == 0
    )
    assert (tmp_path / "again" / "results.csv").read_text().count("\n") == 2
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"\x1f\x8b not gzip at all")
    capsys.readouterr()
    assert main(["run", "--backend", "reference", "--case-file", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parity: error:") and str(bad) in err and "\n" not in err


def test_report_and_merge_read_results_csv_gz(tmp_path, capsys):
    import gzip

    out = tmp_path / "run"
    assert _run("--out", str(out)) == 0
    csv_path = out / "results.csv"
    (out / "results.csv.gz").write_bytes(gzip.compress(csv_path.read_bytes()))
    csv_path.unlink()
    assert main(["report", str(out)]) == 0
    assert main(["merge", str(tmp_path / "merged"), str(out)]) == 0
    assert (tmp_path / "merged" / "results.csv").read_text().count("\n") == 2
    (out / "results.csv.gz").write_bytes(b"\x1f\x8b broken")
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "results.csv.gz" in err and "\n" not in err


def test_every_file_of_a_committed_run_is_read_gzipped(tmp_path):
    """masks, timing, consistency and decode results kept as NAME.gz (a committed run) are read by the report and
    by merge as the plain files are: runfolder reads either."""
    import gzip

    from parity import runfolder
    from parity.report.merge import merge
    from parity.report.runs import load_run

    out = tmp_path / "run"
    assert _run("--out", str(out)) == 0
    mask = json.dumps({"backend": "reference", "case_id": "c", "picture": "#."})
    cons = "backend,check,verdict\r\nreference,decode,pass\r\n"
    dec = "backend,model,prompt_id,step,verdict\r\nreference,m,0,1,pass\r\n"
    for name, text in (
        (runfolder.MASKS, mask + "\n"),
        (runfolder.CONSISTENCY, cons),
        ("decode/decode.csv", dec),
        ("decode/decode_steps.csv", dec),
    ):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).unlink(missing_ok=True)  # the run's empty masks.jsonl: a committed run keeps only the .gz
        (out / (name + ".gz")).write_bytes(gzip.compress(text.encode()))
    timing = json.loads((out / runfolder.TIMING).read_text())
    (out / (runfolder.TIMING + ".gz")).write_bytes(gzip.compress((out / runfolder.TIMING).read_bytes()))
    (out / runfolder.TIMING).unlink()
    run = load_run(out)
    assert run.timing == timing == runfolder.read_timing(out) and timing
    assert run.masks[0]["picture"] == "#." and run.consistency == [{"backend": "reference", "check": "decode", "verdict": "pass"}]
    assert run.decode_path == out / "decode" / "decode.csv.gz" and list(run.decode["model"]) == ["m"] and len(run.decode_steps) == 1
    assert [r.key for r in run.rows()] == [(r["backend"], r["case_id"]) for r in runfolder.read_rows(out)]
    assert all(isinstance(r, runfolder.ResultRow) for r in run.rows())
    counts = merge(tmp_path / "merged", [out], check_shards=False)
    assert counts["consistency_rows"] == 1 and counts["decode_rows"] == 1
    merged = tmp_path / "merged"
    assert (merged / runfolder.MASKS).read_text() == mask + "\n"
    assert (merged / runfolder.CONSISTENCY).read_bytes().decode() == cons
    assert (merged / "decode" / "decode.csv").read_bytes().decode() == dec == (merged / "decode" / "decode_steps.csv").read_bytes().decode()


def test_decode_and_consistency_files_are_written_as_before(tmp_path):
    """The decode and consistency writers keep their bytes: the csv module's CRLF rows, a None cell empty,
    decode.json indented; consistency.csv appended under one header."""
    from parity import runfolder, runfolder_decode

    runfolder_decode.write_decode(tmp_path, ["a", "b"], [{"a": 1, "b": None, "x": 9}], ["s"], [{"s": 2}], {"k": 1})
    assert (tmp_path / "decode.csv").read_bytes() == b"a,b\r\n1,\r\n"
    assert (tmp_path / "decode_steps.csv").read_bytes() == b"s\r\n2\r\n"
    assert (tmp_path / "decode.json").read_text() == '{\n  "k": 1\n}\n'
    for v in ("pass", "fail"):
        runfolder.append_consistency(tmp_path / "c", ["backend", "verdict"], [{"backend": "b", "verdict": v}])
    assert (tmp_path / "c" / "consistency.csv").read_bytes() == b"backend,verdict\r\nb,pass\r\nb,fail\r\n"
    assert runfolder.read_consistency(tmp_path / "c") == [{"backend": "b", "verdict": "pass"}, {"backend": "b", "verdict": "fail"}]


CASE2 = CASE.replace('"k_lens":[5]', '"k_lens":[7]')


def _interrupted(tmp_path):
    """A folder as Ctrl-C leaves it: rows, timing.json still saying partial, no environment.json."""
    import json

    out = tmp_path / "cut"
    assert _run("--out", str(out), "--case", CASE2) == 0
    (out / "environment.json").unlink()
    (out / "timing.json").write_text(json.dumps({"partial": True}))
    return out


def test_an_interrupted_run_is_reported_partial_everywhere(tmp_path, capsys):
    out = _interrupted(tmp_path)
    assert main(["report", str(out)]) == 0
    assert main(["report", str(out), "--strict"]) == 3  # not a pass
    first = (out / "summary.md").read_text().splitlines()[0]
    assert "PARTIAL" in first and f"--resume --out {out}" in first and "PASS" not in first
    summary = (out / "summary.md").read_text()
    assert "environment unknown" in summary and "torch ?" not in summary
    junit = (out / "junit.xml").read_text()
    assert 'name="parity.partial"' in junit and 'type="parity.partial"' in junit
    html = (out / "report.html").read_text()
    assert "PARTIAL" in html and "PASS:" not in html and "environment is missing" in html


def test_time_limit_run_exits_partial_and_resume_counts_the_whole_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("--out", str(out), "--time-limit", "1e-9") == 3
    assert "PARTIAL" in capsys.readouterr().err
    assert _run("--out", str(out)) == 2  # refused: it holds a run
    assert _run("--out", str(out), "--resume") == 0
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    table = capsys.readouterr().out
    line = next(x for x in table.splitlines() if x.startswith("reference"))
    assert line.split()[1] == "2"  # both rows of the folder, not only the new segment


def test_dtype_lists_fail_fast_last_failed_and_results_json(tmp_path, capsys):
    import json

    assert (
        main(
            [
                "run",
                "--backend",
                "reference",
                "--no-isolate",
                "--profile",
                "quick",
                "-q",
                "--no-report",
                "--shrink",
                "0",
                "--dtype",
                "float32,bfloat16",
                "--list-cases",
            ]
        )
        == 0
    )
    dtypes = {json.loads(line)["dtype"] for line in capsys.readouterr().out.splitlines()}
    assert dtypes == {"float32", "bfloat16"}
    bug = "parity.selftest.bugs:WindowOneWider"
    cases = ["--case", CASE, "--case", CASE2]
    fast = tmp_path / "fast"
    code = main(["run", "-b", bug, "-b", "reference", "--no-isolate", "-q", "--shrink", "0", "-x", "--out", str(fast), *cases])
    assert code == 1
    rows = json.loads((fast / "results.json").read_text())
    assert len(rows) < 4 and any(r["verdict"] == "fail" for r in rows)  # stopped after the first failure
    assert "PARTIAL" in (fast / "summary.md").read_text().splitlines()[0]
    again = tmp_path / "again"
    assert main(["run", "--no-isolate", "-q", "--shrink", "0", "--last-failed", str(fast), "--out", str(again)]) == 1
    rerun = json.loads((again / "results.json").read_text())
    assert {r["backend"] for r in rerun} == {bug} and all(r["verdict"] == "fail" for r in rerun)


def _drop_columns(path, drop):
    """``path`` (a results.csv) rewritten without the columns ``drop``, as an older version wrote it."""
    import csv

    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    keep = [c for c in rows[0] if c not in drop]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, keep, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return rows


@pytest.mark.parametrize("gz", [False, True], ids=["csv", "csv.gz"])
def test_resume_fills_a_column_added_later_and_keeps_the_old_rows(tmp_path, capsys, gz):
    import csv
    import gzip

    from parity.results import COLUMNS

    out = tmp_path / "old"
    assert _run("--out", str(out)) == 0
    old = _drop_columns(out / "results.csv", {"gpu"})  # a run written before the gpu column
    if gz:  # as a committed report keeps its rows
        (out / "results.csv.gz").write_bytes(gzip.compress((out / "results.csv").read_bytes()))
        (out / "results.csv").unlink()
        assert _run("--out", str(out)) == 2  # it holds a run, gzipped or not
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    err = capsys.readouterr().err
    assert "resuming a run written before the gpu column: its rows have no GPU recorded" in err
    with (out / "results.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames == COLUMNS
    assert len(rows) == 2 and rows[0]["gpu"] == "" and rows[0]["case_id"] == old[0]["case_id"]
    assert all(rows[0][c] == v for c, v in old[0].items() if c != "gpu")  # the old row as it was
    assert rows[1]["case_id"] != rows[0]["case_id"] and rows[1]["verdict"] == "pass"
    assert not (out / "results.csv.gz").exists()  # one results file: the reports read results.csv first


def test_resume_of_a_run_before_the_memory_columns_keeps_its_rows(tmp_path, capsys):
    import csv

    from parity.results import COLUMNS

    out = tmp_path / "old"
    assert _run("--out", str(out)) == 0
    old = _drop_columns(out / "results.csv", {"gpu", "est_mem_mb", "peak_mem_mb"})  # as written before them
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    assert "before the gpu, est_mem_mb, peak_mem_mb columns: they are left empty" in capsys.readouterr().err
    with (out / "results.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    at = COLUMNS.index("est_mem_mb")
    assert reader.fieldnames == COLUMNS and COLUMNS[at : at + 2] == ["est_mem_mb", "peak_mem_mb"]
    dropped = {"gpu", "est_mem_mb", "peak_mem_mb"}
    assert rows[0]["est_mem_mb"] == "" and all(rows[0][c] == v for c, v in old[0].items() if c not in dropped)
    assert float(rows[1]["est_mem_mb"]) > 0 and rows[1]["peak_mem_mb"] == ""  # a new row: estimated, no CUDA peak


def test_resume_refuses_a_results_csv_without_essential_columns(tmp_path, capsys):
    out = tmp_path / "old"
    assert _run("--out", str(out)) == 0
    _drop_columns(out / "results.csv", {"case_json", "verdict", "gpu"})
    before = (out / "results.csv").read_text()
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the "N cases x M backends" line
    assert err.startswith("parity: error: --resume") and "lacks the columns verdict, case_json)" in err and "gpu" not in err
    assert (out / "results.csv").read_text() == before  # left as it was


def test_resume_of_a_run_before_the_read_probe_columns_keeps_its_rows(tmp_path, capsys):
    import csv

    from parity.results import ADDED_COLUMNS, COLUMNS

    out = tmp_path / "old"
    assert _run("--out", str(out)) == 0
    old = _drop_columns(out / "results.csv", {"read_check", "read_detail"})  # as written before them
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    assert "before the read_check, read_detail columns: they are left empty" in capsys.readouterr().err
    with (out / "results.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    at, added = COLUMNS.index("read_check"), ADDED_COLUMNS.index("read_check")
    assert reader.fieldnames == COLUMNS and COLUMNS[at : at + 2] == ["read_check", "read_detail"] == list(ADDED_COLUMNS[added : added + 2])
    assert rows[0]["read_check"] == "" and all(rows[0][c] == v for c, v in old[0].items() if not c.startswith("read_"))
    assert rows[1]["read_check"] in ("ok", "n/a") and rows[1]["read_detail"]  # a new row: judged, with its words


def test_resume_of_a_run_before_the_lse_columns_keeps_its_rows(tmp_path, capsys):
    import csv

    from parity.results import ADDED_COLUMNS, COLUMNS, LSE_COLUMNS

    out = tmp_path / "old"
    assert _run("--out", str(out)) == 0
    old = _drop_columns(out / "results.csv", set(LSE_COLUMNS))  # as written before them
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    assert "before the lse_check, lse_max_abs_err, lse_budget, lse_detail columns: they are left empty" in capsys.readouterr().err
    with (out / "results.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    at, added = COLUMNS.index("lse_check"), ADDED_COLUMNS.index("lse_check")
    assert reader.fieldnames == COLUMNS and COLUMNS[at : at + 4] == list(LSE_COLUMNS) == list(ADDED_COLUMNS[added : added + 4])
    assert rows[0]["lse_check"] == "" and all(rows[0][c] == v for c, v in old[0].items() if not c.startswith("lse_"))
    assert rows[1]["lse_check"] == "ok" and float(rows[1]["lse_budget"]) > 0  # a new row: the reference returns its LSE


def _typed(monkeypatch, *args):
    """``python -m parity run ARGS`` as typed in a shell: environment.json records sys.argv, which --resume reads."""
    monkeypatch.setattr(sys, "argv", ["__main__.py", "run", *args])
    return main(["run", *args])


def test_resume_alone_continues_the_run_as_it_was_started(tmp_path, monkeypatch, capsys):
    """`parity run --resume --out DIR` (what a PARTIAL line says to run) continues the recorded run: its backends,
    cases and flags, not README's default job (H100, 2026-12-05: it ran the CPU backends' `first` profile into a
    `--grad` run of GPU backends). A flag given with --resume wins over the recorded one."""
    out = tmp_path / "r"
    flags = ["--backend", "reference", "--no-isolate", "--case", CASE, "-q", "--no-report", "--shrink", "0"]
    assert _typed(monkeypatch, *flags, "--out", str(out)) == 0
    assert _typed(monkeypatch, "--resume", "--out", str(out)) == 0
    assert "continuing `__main__.py run --backend reference" in capsys.readouterr().err
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["backend"] for r in rows] == ["reference"], [r["backend"] for r in rows]
    assert _typed(monkeypatch, "--resume", "--out", str(out), "--backend", "sdpa") == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted(r["backend"] for r in rows) == ["reference", "sdpa"]


def test_resume_of_a_folder_whose_command_cannot_be_read_uses_the_flags_given(tmp_path, monkeypatch, capsys):
    """A run recorded before environment.json kept ``argv`` (its command joined by spaces, a --case JSON split
    apart): --resume says it cannot read it and runs the flags given, rather than failing."""
    out = tmp_path / "r"
    assert _run("--out", str(out)) == 0
    env = json.loads((out / "environment.json").read_text())
    env.pop("argv")
    env["command"] = '__main__.py run --case {"q_lens": [3]} --bogus'
    (out / "environment.json").write_text(json.dumps(env))
    assert _run("--resume", "--out", str(out)) == 0
    assert "cannot read the recorded command" in capsys.readouterr().err


def test_resume_of_a_committed_compacted_folder_rebuilds_the_repro_column(tmp_path, capsys):
    """lab/compact_runs.py leaves ``repro`` out of a committed run and gzips its rows: the 12-07d loan's resume of such
    a seed was refused ("lacks the columns repro"); the rows' repro comes back from their case_json."""
    assert _run("--out", str(tmp_path)) == 0
    path = tmp_path / "results.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    want = rows[0]["repro"]
    fields = [c for c in rows[0] if c != "repro"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    (tmp_path / "results.csv.gz").write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    capsys.readouterr()
    assert _run("--resume", "--out", str(tmp_path)) == 0
    assert "repro column rebuilt" in capsys.readouterr().err
    with path.open(newline="") as fh:
        again = list(csv.DictReader(fh))
    assert [r["repro"] for r in again] == [want]  # the one row, done already, its repro as the run wrote it


def test_resume_tries_an_unavailable_row_again_and_keeps_the_others(tmp_path, capsys):
    """A library installed after a partial run: --resume runs its rows that came out unavailable, in their place
    (one row per backend and case); an unavailable row of a backend this run does not ask for stays as it was."""
    out = tmp_path / "run"
    assert _run("--out", str(out), "--case", CASE2) == 0
    with (out / "results.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    assert [r["verdict"] for r in rows] == ["pass", "pass"]
    rows[1] = {**rows[1], "verdict": "unavailable", "detail": "no module named the_library"}  # as a run without it
    other = {**rows[1], "backend": "not-asked-for"}
    with (out / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows([*rows, other])
    capsys.readouterr()
    assert _run("--out", str(out), "--resume", "--case", CASE2) == 0
    assert "1 unavailable rows are tried again (reference)" in capsys.readouterr().err
    with (out / "results.csv").open(newline="") as fh:
        got = list(csv.DictReader(fh))
    mine = sorted((r["case_id"], r["verdict"]) for r in got if r["backend"] == "reference")
    assert mine == sorted((r["case_id"], "pass") for r in rows)
    assert [r["verdict"] for r in got if r["backend"] == "not-asked-for"] == ["unavailable"]


def test_resume_refuses_a_results_csv_with_a_word_that_is_not_a_verdict(tmp_path):
    """--resume kept such a row (a hand edit, a foreign file) as a finished one the reports then count as no verdict;
    report, diff and evidence refuse it already (tests/test_report.py)."""
    from parity.errors import UserError
    from parity.results import Outcome
    from parity.runfolder import ResultsWriter
    from parity.sweep import COLUMNS

    row = dict.fromkeys(COLUMNS, "")
    with (tmp_path / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow({**row, "backend": "sdpa", "case_id": "a", "verdict": "pass"})
        w.writerow({**row, "backend": "sdpa", "case_id": "b", "verdict": "passed"})
    with pytest.raises(UserError, match=r"results.csv, row 2: verdict 'passed' is not a verdict"):
        ResultsWriter(tmp_path, resume=True)
    text = (tmp_path / "results.csv").read_text()
    (tmp_path / "results.csv").write_text(text.replace(",passed,", f",{Outcome.FAIL},"))  # the control: a verdict word
    ResultsWriter(tmp_path, resume=True).close()


def test_backend_versions_read_every_call_into_the_folder():
    """A resumed call where a backend was unavailable records no version: the folder's version is the earlier calls'
    (the reports once read it as unknown, "vllm ?"); calls of different versions read as mixed, never as one."""
    from parity.runfolder import MIXED, backend_versions, torch_version

    def call(**versions):
        return {"backends": {k.replace("_", "-"): {"version": v} for k, v in versions.items()}}

    now = {**call(a="", b="2.0", c=""), "earlier_runs": [call(a="1.0", b="1.0"), call(a="1.0", c="")]}
    assert backend_versions(now) == {"a": "1.0", "b": f"{MIXED}2.0; 1.0", "c": ""}
    assert backend_versions(call(a="1.0")) == {"a": "1.0"}
    assert backend_versions({}) == {} and backend_versions({"backends": {"a": "not an object"}}) == {"a": ""}
    assert torch_version({"torch": "2.11", "earlier_runs": [{"torch": "2.11"}, {}]}) == "2.11"
    assert torch_version({"torch": "2.13", "earlier_runs": [{"torch": "2.11"}]}) == f"{MIXED}2.13; 2.11"


def test_resume_at_another_backend_version_warns_that_the_rows_mix_versions(tmp_path, capsys):
    """The earlier call's version is kept in ``earlier_runs``; a resumed call of another version says so, loud, and
    the report and a version diff read the folder as mixed (one folder per version is what ``parity vdiff`` wants)."""
    from parity.report.runs import load_run
    from parity.report.vdiff import version_of
    from parity.runfolder import MIXED, torch_version

    out = tmp_path / "run"
    assert _run("--out", str(out), "--time-limit", "1e-9") == 3
    env = json.loads((out / "environment.json").read_text())
    env["backends"]["reference"]["version"] = "torch 1.0 (an earlier build)"
    env["torch"] = "1.0"
    (out / "environment.json").write_text(json.dumps(env))
    capsys.readouterr()
    assert _run("--out", str(out), "--resume") == 0
    err = capsys.readouterr().err
    assert "parity: warning: reference ran at " in err and "its rows mix versions" in err, err
    assert "parity: warning: torch ran at " in err, err
    assert version_of(load_run(out), "reference").startswith(MIXED)
    assert torch_version(json.loads((out / "environment.json").read_text())).startswith(MIXED)
