"""The benchmark scripts that read run folders: a usage message and one clear line (exit 2) for a
missing or broken folder, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import compile_cache, compile_keys, shard_balance, sweep_io

RUN = Path(__file__).parent / "fixtures" / "known-runs" / "cpu-grad-2026-12-05__seed0"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A finished run folder (results.csv, environment.json) with a timing.json."""
    out = shutil.copytree(RUN, tmp_path / "run")
    (out / "timing.json").write_text(json.dumps({"stages": {}}))
    return out


def _usage(capsys, fn, argv, needle: str) -> None:
    assert fn(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle in err, err


def test_compile_keys_help_is_a_usage_message_not_a_folder(capsys):
    with pytest.raises(SystemExit) as exc:
        compile_keys.main(["--help"])
    assert exc.value.code == 0
    assert "RUN_DIR" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: shutil.rmtree(d), "no such folder"),
        (lambda d: (d / "timing.json").unlink(), "timing.json: no such file"),
        (lambda d: (d / "timing.json").write_text('{"stages": {'), "timing.json: not valid JSON"),
        (lambda d: (d / "timing.json").write_text("[1, 2]"), "timing.json: expected a JSON object, got list"),
        (lambda d: (d / "results.csv").unlink(), "no results.csv"),
    ],
)
def test_compile_keys_names_what_is_wrong_with_the_folder(run_dir, capsys, change, needle):
    change(run_dir)
    _usage(capsys, compile_keys.main, [str(run_dir)], needle)


def test_compile_keys_reads_a_good_folder(run_dir, capsys):
    assert compile_keys.main([str(run_dir)]) == 0
    assert capsys.readouterr().out.startswith("backend")


def test_compile_cache_names_a_timing_json_that_is_not_an_object(run_dir, capsys):
    (run_dir / "timing.json").write_text("[1, 2]")
    _usage(capsys, compile_cache.main, [f"cold={run_dir}", f"warm={run_dir}"], "expected a JSON object, got list")


def test_shard_balance_checks_its_folders_before_the_model(tmp_path, capsys):
    _usage(capsys, shard_balance.main, [str(tmp_path / "nope"), "--seeds", "0"], "no such folder")


def test_shard_balance_names_the_row_of_a_bad_case_json(run_dir, capsys):
    import csv

    with (run_dir / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows[0]["case_json"] = "{not json"
    with (run_dir / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _usage(capsys, shard_balance.main, [str(run_dir), "--seeds", "0"], "results.csv, row 1: case is not valid JSON")


@pytest.mark.parametrize(("argv", "needle"), [(["--profile", "nope"], "--profile: expected one of"), (["--n", "0"], "--n: expected")])
def test_shard_balance_refuses_bad_options(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        shard_balance.main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_sweep_io_refuses_an_unknown_shape(capsys):
    with pytest.raises(SystemExit) as exc:
        sweep_io.main(["--shapes", "prefill-32k,nope"])
    assert exc.value.code == 2 and "--shapes: unknown 'nope'" in capsys.readouterr().err


def test_script_main_reports_a_user_error_in_one_line(capsys):
    from parity.errors import UserError, script_main

    def main():
        raise UserError("--thing 3: expected 4")

    assert script_main(main, "bench") == 2
    assert capsys.readouterr().err == "bench: error: --thing 3: expected 4\n"
    assert script_main(lambda: None, "bench") == 0 and script_main(lambda: 1, "bench") == 1


@pytest.mark.parametrize(
    ("script", "argv", "needle"),
    [
        ("judge_cost", ["--model", "nope"], "judge_cost: error: --model 'nope': not a known model"),
        ("judge_cost", ["--device", "nope"], "--device 'nope': not a device"),
        ("reference_memory", ["--dtype", "nope"], "reference_memory: error: Case.dtype must be one of"),
        ("refused_rows", ["--out", __file__], "not a folder"),
    ],
)
def test_benchmark_scripts_end_bad_input_in_one_line(script, argv, needle):
    """From the shell, as they are run (were UserError / RuntimeError / NotADirectoryError tracebacks)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *argv], cwd=root, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr and needle in p.stderr, p.stderr
