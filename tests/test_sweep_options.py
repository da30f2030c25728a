"""The sweep's options built once and passed down (SweepOptions), the judged record, the one
profile table, the planted bugs in one place, and lanes pinned to GPUs (--gpus), faked on the CPU."""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import os

import pytest

from parity import Case, Window, cli, runner, shard
from parity.backends.reference import ReferenceBackend
from parity.execute import InlineExecutor
from parity.judge import BaselineCache, judge
from parity.results import COLUMNS, Judged
from parity.runner import sweep_options
from parity.sweep import SweepOptions, make_executor, run_sweep
from parity.verdict import BUDGETS

CASES = [Case((n,), (n + 4,), 2, 1, 8, "float32", Window(3, 0), seed=n) for n in (5, 9, 12)]


def run_args(*argv: str):
    return cli.build_parser().parse_args(["run", *argv])


def test_options_are_built_once_from_the_command_line_and_frozen():
    args = run_args("--no-probes", "--jobs", "3", "--repeats", "2", "--timeout", "9", "--max-mask-passes", "7", "--shrink", "5")
    opts = sweep_options(cli.run.request(args), budgets=BUDGETS, splits={}, expectations=None, reference_device="cpu", gpus=())
    assert (opts.probes, opts.jobs, opts.repeats, opts.timeout, opts.max_passes, opts.shrink_calls) == (False, 3, 2, 9.0, 7, 5)
    assert opts.isolate and opts.gpus == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.jobs = 1  # type: ignore[misc]


def test_executors_take_the_options_unchanged():
    ex = make_executor("reference", SweepOptions(isolate=False, probes=False, max_passes=5, repeats=3))
    assert isinstance(ex, InlineExecutor) and (ex.probes, ex.max_passes, ex.repeats) == (False, 5, 3)
    assert "options" in inspect.signature(make_executor).parameters
    cmd_src = inspect.getsource(runner._shrink_failures)
    assert "args" not in inspect.signature(runner._shrink_failures).parameters and "make_executor" not in cmd_src


def test_judge_returns_a_record_and_the_row_holds_the_columns_only():
    case = CASES[0]
    ex = InlineExecutor("reference")
    judged = judge(case, "reference", ex.info, ex.run(case), BaselineCache(), dict(BUDGETS))
    assert isinstance(judged, Judged) and judged.row["verdict"] == "pass"
    assert set(judged.row) == set(COLUMNS)  # no private keys
    assert judged.comparison is not None and judged.summary == case.summary()


def test_one_profile_table_for_the_sweep_and_the_property_tests():
    from hypothesis import settings

    from parity import pytest_plugin
    from parity.strategies import PROFILES

    assert not hasattr(pytest_plugin, "PROFILES")
    for name, prof in PROFILES.items():
        assert settings.get_profile(f"parity-{name}").max_examples == prof.test_examples
    assert [p.test_examples for p in PROFILES.values()] == [12, 12, 40, 300]


def test_tests_reuse_the_planted_bugs_of_selftest():
    from parity.selftest import bugs
    from tests import helpers

    planted = {n for n, v in vars(bugs).items() if isinstance(v, type)}
    planted_names = {getattr(v, "name", None) for v in vars(bugs).values() if isinstance(v, type)}
    mine = {n: v for n, v in vars(helpers).items() if isinstance(v, type) and v.__module__ == helpers.__name__}
    assert not set(mine) & planted
    assert not ({getattr(v, "name", None) for v in mine.values()} & planted_names) - {"unnamed"}


# -- --gpus, faked on the CPU: the ids reach the workers, no GPU is touched -------------------------


class GpuSeen(ReferenceBackend):
    """The reference, reporting as its version the CUDA_VISIBLE_DEVICES its worker was given."""

    name = "gpu-seen"
    cost_hint = 5.0

    def version(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "-")


class GpuSeenToo(GpuSeen):
    name = "gpu-seen-too"


SPECS = ["tests.test_sweep_options:GpuSeen", "tests.test_sweep_options:GpuSeenToo", "reference"]


def _table(rows):
    return sorted((r["backend"], r["case_id"], r["verdict"], r["max_abs_err"]) for r in rows)


def test_each_lane_worker_gets_its_gpu_and_rows_record_it(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one = run_sweep(SPECS, CASES, tmp_path / "one", timeout=60, progress=False)
    two = run_sweep(SPECS, CASES, tmp_path / "two", timeout=60, progress=False, jobs=2, gpus=("0", "1"))
    assert _table(one.rows) == _table(two.rows)  # the same rows, whatever the lanes and GPUs
    assert {r["gpu"] for r in one.rows} == {""} and one.infos[SPECS[0]]["version"] == "-"
    seen = {spec: two.infos[spec]["version"] for spec in SPECS[:2]}
    assert sorted(seen.values()) == ["0", "1"]  # the two heavy backends on two GPUs
    for r in two.rows:
        if r["backend"] in seen:
            assert r["gpu"] == seen[r["backend"]]
    with open(tmp_path / "two" / "results.csv", newline="") as fh:
        assert {r["gpu"] for r in csv.DictReader(fh)} == {"0", "1"}
    timing = json.loads((tmp_path / "two" / "timing.json").read_text())
    assert timing["gpus"] == ["0", "1"] and sum(g["rows"] for g in timing["per_gpu"].values()) == len(two.rows)
    assert "2 GPU(s)" in two.split and "2 lane(s)" in two.split


def test_the_cli_pins_lanes_and_refuses_several_gpus_in_one_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shard, "visible_gpus", lambda *a, **k: ["0", "1"])
    case = CASES[1].to_json()
    base = [
        "run",
        "-b",
        "reference",
        "-b",
        "tests.test_sweep_options:GpuSeen",
        "--case",
        case,
        "--no-report",
        "-q",
        "--shrink",
        "0",
        "--reference-device",
        "cpu",
    ]
    assert cli.main([*base, "--gpus", "0,1", "--no-isolate", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-isolate" in err[0] and err[0].startswith("parity: error:")
    assert cli.main([*base, "--gpus", "7", "--out", str(tmp_path / "y")]) == 2
    assert "not visible" in capsys.readouterr().err
    assert cli.main([*base, "-j", "2", "--out", str(tmp_path / "z")]) == 0  # default: every visible GPU
    out = capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "z" / "results.csv").open()))
    assert sorted(r["gpu"] for r in rows) == ["0", "1"] and "work split: 2 lane(s) on 2 GPU(s)" in out
    assert json.loads((tmp_path / "z" / "environment.json").read_text())["gpus"] == ["0", "1"]
