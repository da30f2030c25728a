"""The compile pre-pass (parity.sweep.precompile): each kernel key of a compiling backend built once, many at
a time, before the lanes; the lanes then find it on disk; rows and verdicts as without it."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from parity import Case, Window, compile_cache
from parity.backends.reference import ReferenceBackend
from parity.sweep import SweepOptions, run_sweep
from parity.sweep.precompile import plan_precompile, wanted

ME = "tests.test_precompile"
BASE = Case(q_lens=(8,), k_lens=(8,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=0)
#: four kernel keys (head dims) of three rows each, and one key of a single row
CASES = [dataclasses.replace(BASE, head_dim=d, seed=s) for d in (8, 16, 24, 32) for s in range(3)]
CASES.append(dataclasses.replace(BASE, head_dim=40, seed=9))
BUILD_S = 1.0


class DiskBuild(ReferenceBackend):
    """Right; a kernel per head dim, built on first use into $PARITY_COMPILE_CACHE/fake (BUILD_S seconds) unless
    that file is there, as inductor's or FA4's disk caches are; ``kernels_built`` counts this process's builds."""

    name = "disk-build"
    first_use_compile = True
    built = 0

    def compile_key(self, case):
        return (case.head_dim,)

    def kernels_built(self):
        return DiskBuild.built

    def run(self, case, inputs, out):
        path = Path(os.environ[compile_cache.ENV_VAR]) / "fake" / f"d{case.head_dim}"
        if not path.exists():
            time.sleep(BUILD_S)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("kernel")
            DiskBuild.built += 1
        return super().run(case, inputs, out)


def _rows(folder: Path) -> dict[str, str]:
    with (folder / "results.csv").open() as fh:
        return {r["case_id"]: r["verdict"] for r in csv.DictReader(fh)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(compile_cache.ENV_VAR, str(root))  # as --compile-cache sets it for the run
    return root


def test_each_key_of_two_rows_or_more_is_built_once_before_the_lanes_and_the_lanes_run_warm(tmp_path, cache):
    res = run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "pre", timeout=60, progress=False, jobs=2)
    timing = json.loads((tmp_path / "pre" / "timing.json").read_text())
    pre = timing["precompile"]["per_backend"][f"{ME}:DiskBuild"]
    assert (pre["keys"], pre["ok"], pre["failed"]) == (4, 4, 0)  # the single-row key (d40) is left to its row
    assert pre["kernels_built"] == 4
    stages = timing["stages"][f"{ME}:DiskBuild"]
    assert stages["compile_keys"] == 5  # distinct keys among the rows, as the backend declares them
    assert stages["kernels_built"] == 1  # the lanes built only d40: every other key was on disk
    assert pre["kernels_built"] + stages["kernels_built"] == stages["compile_keys"]  # each key built once in the run
    assert {r["verdict"] for r in res.rows} == {"pass"}


def test_a_rerun_on_the_same_cache_builds_nothing_in_its_pre_pass(tmp_path, cache):
    run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "cold", timeout=60, progress=False, jobs=2)
    assert json.loads((cache / "precompiled.json").read_text())["keys"][f"{ME}:DiskBuild"] == [f"({d},)" for d in (16, 24, 32, 40, 8)]
    t0 = time.perf_counter()
    run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "warm", timeout=60, progress=False, jobs=2)
    assert json.loads((tmp_path / "warm" / "timing.json").read_text())["precompile"] is None  # every key recorded as built
    assert time.perf_counter() - t0 < 60
    assert _rows(tmp_path / "cold") == _rows(tmp_path / "warm")


def test_the_pre_pass_builds_keys_at_once_and_changes_no_row(tmp_path, cache, monkeypatch):
    with_pre = run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "pre", timeout=60, progress=False, jobs=2)
    timing = json.loads((tmp_path / "pre" / "timing.json").read_text())["precompile"]
    procs = timing["per_backend"][f"{ME}:DiskBuild"]["procs"]
    if procs >= 2:  # four 1 s builds on two workers or more: well under four seconds of builds one by one
        assert timing["per_backend"][f"{ME}:DiskBuild"]["worker_s"] >= 4 * BUILD_S
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "cold-again"))
    without = run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "off", timeout=60, progress=False, jobs=2, precompile="off")
    assert json.loads((tmp_path / "off" / "timing.json").read_text())["precompile"] is None
    assert _rows(tmp_path / "pre") == _rows(tmp_path / "off")
    assert len(with_pre.rows) == len(without.rows) == len(CASES)


def test_when_the_pre_pass_runs(cache):
    assert wanted(SweepOptions(), cache_on=True) and not wanted(SweepOptions(), cache_on=False)
    assert wanted(SweepOptions(precompile="on"), cache_on=False)
    assert not wanted(SweepOptions(precompile="off"), cache_on=True)
    assert not wanted(SweepOptions(isolate=False), cache_on=True)
    with pytest.raises(ValueError, match="--no-isolate"):
        SweepOptions(precompile="on", isolate=False)
    with pytest.raises(ValueError, match="auto, on or off"):
        SweepOptions(precompile="sometimes")


def test_the_plan_takes_the_smallest_case_of_each_key_and_leaves_out_backends_that_build_nothing(cache):
    big = dataclasses.replace(BASE, q_lens=(64,), k_lens=(64,), seed=7)
    pre = plan_precompile({f"{ME}:DiskBuild": [big, *CASES], "reference": CASES}, SweepOptions(), cpus=3)
    reps = pre.tasks[f"{ME}:DiskBuild"]
    assert sorted(c.head_dim for c in reps) == [8, 16, 24, 32] and big not in reps
    assert "reference" not in pre.tasks  # it compiles nothing
    assert 1 <= pre.procs[f"{ME}:DiskBuild"] <= 3


def test_precompile_on_with_no_isolate_is_a_usage_error(capsys):
    from parity import cli

    code = cli.main(["run", "--backend", "reference", "--no-isolate", "--precompile", "on", "--case", BASE.to_json()])
    assert code == 2
    assert "--precompile on" in capsys.readouterr().err


def test_each_backend_declares_what_makes_it_build_a_kernel():
    from parity import backends

    c = Case(q_lens=(100,), k_lens=(300,), hq=8, hkv=2, head_dim=64, dtype="bfloat16", window=Window(31, 0), seed=0)
    longer = dataclasses.replace(c, q_lens=(1000,), k_lens=(3000,))
    wider = dataclasses.replace(c, window=Window(255, 0))
    capped = dataclasses.replace(c, softcap=30.0)
    flex, fa4, fi, jax = (backends.get(n) for n in ("flex-cuda", "fa4-cuda", "flashinfer-decode-cuda", "jax-xla-cuda"))
    # flex: dynamic shapes, window numbers in tensors: neither lengths nor window values make a kernel
    assert flex.compile_key(c) == flex.compile_key(longer) == flex.compile_key(wider) != flex.compile_key(capped)
    # FA4: window values are run time, the softcap value and which sides are set are not (its compile_key)
    assert fa4.compile_key(c) == fa4.compile_key(wider) != fa4.compile_key(capped)
    assert fa4.compile_key(capped) != fa4.compile_key(dataclasses.replace(c, softcap=50.0))
    assert fa4.compile_key(c) != fa4.compile_key(dataclasses.replace(c, window=Window(31, None)))
    # FlashInfer: a module per (dtypes, head dim, window on/off, softcap on/off)
    unbounded = dataclasses.replace(c, window=Window(None, 0))
    assert fi.compile_key(c) == fi.compile_key(wider) == fi.compile_key(longer) != fi.compile_key(unbounded)
    # JAX: one executable per shape and static window
    assert len({jax.compile_key(x) for x in (c, longer, wider)}) == 3
    assert backends.get("sdpa-math-cuda").compile_key(c) is None  # builds nothing on first use


def test_a_split_backend_keeps_each_kernel_key_in_one_part():
    from parity.sweep import split_cases

    cases = [dataclasses.replace(BASE, head_dim=d, hq=h, hkv=1, seed=s) for d in (8, 16) for h in (1, 2, 4) for s in range(2)]
    parts = split_cases(cases, 3, key=lambda c: (c.head_dim,))
    for d in (8, 16):
        assert len({parts[c.case_id] for c in cases if c.head_dim == d}) == 1


class LongBuild(DiskBuild):
    """A build of a minute: a pre-pass a stop signal must cut short."""

    name = "long-build"

    def run(self, case, inputs, out):
        time.sleep(60)
        return super().run(case, inputs, out)


def test_a_stop_signal_in_the_pre_pass_stops_its_workers_and_ends_the_run_partial_with_the_backends_infos(tmp_path, cache):
    import threading

    from parity.sweep import Sweep

    sweep = Sweep([f"{ME}:LongBuild"], CASES, SweepOptions(timeout=300, progress=False, jobs=2), tmp_path / "out")

    def signal_once_building() -> None:  # as the SIGTERM handler would, once a pre-pass worker said what it runs
        deadline = time.monotonic() + 120
        while not sweep.prepass.infos and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # its first build is under way
        sweep.interrupt("SIGTERM")

    threading.Thread(target=signal_once_building, daemon=True).start()
    t0 = time.perf_counter()
    res = sweep.run()
    assert time.perf_counter() - t0 < 60  # not a build of a minute: its worker was stopped
    assert res.partial and res.interrupted == "SIGTERM" and res.stopped_by.startswith("interrupted by SIGTERM")
    assert res.rows == [] and _rows(tmp_path / "out") == {}  # no lane ran
    assert res.infos[f"{ME}:LongBuild"]["name"] == "long-build"  # from the pre-pass's worker
    assert json.loads((tmp_path / "out" / "timing.json").read_text())["partial"] is True
