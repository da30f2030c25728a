"""A backend that kills its own process costs its own rows, never the run."""

import json
import os
import sys
import time

import pytest
import torch

from parity import Case, Window
from parity.backends.reference import ReferenceBackend
from parity.sweep import run_sweep

CASES = [Case(q_lens=(8,), k_lens=(8,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=s) for s in range(3)]


class AbortsOnSeed1(ReferenceBackend):
    name = "aborts"

    def run(self, case, inputs, out):
        if case.seed == 1:
            os.abort()
        return super().run(case, inputs, out)


class HangsOnSeed0(ReferenceBackend):
    name = "hangs"

    def run(self, case, inputs, out):
        if case.seed == 0:
            time.sleep(600)
        return super().run(case, inputs, out)


def test_crash_and_hang_are_rows_and_the_sweep_goes_on(tmp_path):
    res = run_sweep(
        ["tests.test_isolation:AbortsOnSeed1", "tests.test_isolation:HangsOnSeed0", "reference"],
        CASES,
        out_dir=tmp_path,
        timeout=8,
        progress=False,
    )
    got = {(r["backend"].split(":")[-1], r["seed"]): r["verdict"] for r in res.rows}
    assert got[("AbortsOnSeed1", 0)] == "pass"
    assert got[("AbortsOnSeed1", 1)] == "crash"
    assert got[("AbortsOnSeed1", 2)] == "pass"  # the worker was restarted
    assert got[("HangsOnSeed0", 0)] == "timeout"
    assert got[("HangsOnSeed0", 1)] == "pass"
    assert all(got[("reference", s)] == "pass" for s in range(3))
    crash = next(r for r in res.rows if r["verdict"] == "crash")
    assert "SIGABRT" in crash["detail"]
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 1 + 9
    timing = json.loads((tmp_path / "timing.json").read_text())
    assert timing["partial"] is False and 0 <= timing["harness_overhead_share"] <= 1
    ref = timing["per_backend"]["reference"]
    assert ref["cases"] == 3 and ref["cases_per_s_upto_4096"] > 0
    assert 0 < ref["median_case_s_upto_4096"] <= ref["small_s"]  # the median of three cases, within their sum


class RunsOutOfMemory(ReferenceBackend):
    name = "oom"

    def run(self, case, inputs, out):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes")


class RaisesMemoryError(ReferenceBackend):
    name = "oom2"

    def run(self, case, inputs, out):
        raise MemoryError()


def test_out_of_memory_is_labelled():
    from parity import evaluate

    for bad in (RunsOutOfMemory(), RaisesMemoryError()):
        row = evaluate(bad, CASES[0])
        assert row["verdict"] == "error" and row["detail"].startswith("out of memory"), row["detail"]


class SlowReference(ReferenceBackend):
    name = "slow"
    cost_hint = 50.0

    def run(self, case, inputs, out):
        time.sleep(0.3)
        return super().run(case, inputs, out)


def test_lanes_give_the_same_rows_and_keep_a_crash_to_its_own_rows(tmp_path):
    from parity.sweep import plan_lanes

    specs = ["tests.test_isolation:SlowReference", "tests.test_isolation:AbortsOnSeed1", "reference", "sdpa"]
    one = run_sweep(specs, CASES, out_dir=tmp_path / "one", timeout=30, progress=False)
    two = run_sweep(specs, CASES, out_dir=tmp_path / "two", timeout=30, progress=False, jobs=2)

    def table(res):
        return sorted((r["backend"], r["case_id"], r["verdict"], r["max_abs_err"]) for r in res.rows)

    assert table(one) == table(two)
    assert sum(r["verdict"] == "crash" for r in two.rows) == 1
    assert len((tmp_path / "two" / "results.csv").read_text().splitlines()) == 1 + len(specs) * len(CASES)
    timing = json.loads((tmp_path / "two" / "timing.json").read_text())
    # the slow backend gets a lane of its own; overlapping lanes have no serial overhead share
    assert timing["jobs"] == 2 and ["tests.test_isolation:SlowReference"] in timing["lanes"]
    assert timing["harness_overhead_share"] is None
    assert plan_lanes(["a", "b", "c"], 5, {"a": 9.0}) == [["a"], ["b"], ["c"]]
    assert plan_lanes(["a", "b", "c", "d"], 2, {"c": 9.0}) == [["c"], ["a", "b", "d"]]


class ThreadsSeen(ReferenceBackend):
    """The reference, reporting as its version the CPU threads its worker's torch uses."""

    name = "threads-seen"

    def version(self) -> str:
        return str(torch.get_num_threads())


def test_lanes_share_the_cpus_between_their_workers(tmp_path, monkeypatch):
    from parity.sweep import COMPILE_VARS, THREAD_VARS, lane_thread_env

    for v in (*THREAD_VARS, *COMPILE_VARS):
        monkeypatch.delenv(v, raising=False)
    assert lane_thread_env(1, 5, cpus=16) == {}
    # the compilers' pools too: 14 lanes of inductor's default pool (one process per CPU) oversubscribed 16 CPUs
    assert lane_thread_env(5, 7, cpus=16) == {v: "3" for v in (*THREAD_VARS, *COMPILE_VARS)}
    assert lane_thread_env(14, 20, cpus=16)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert lane_thread_env(4, 2, cpus=16)["OMP_NUM_THREADS"] == "8"  # two backends: two lanes at most
    assert lane_thread_env(8, 8, cpus=2)["OMP_NUM_THREADS"] == "1"
    spec = "tests.test_isolation:ThreadsSeen"
    cpus = os.cpu_count() or 1
    serial = run_sweep([spec, "reference"], CASES[:1], out_dir=tmp_path / "one", timeout=60, progress=False)
    lanes = run_sweep([spec, "reference"], CASES[:1], out_dir=tmp_path / "two", timeout=60, progress=False, jobs=2)
    assert serial.infos[spec]["version"] == str(torch.get_num_threads())  # one lane: the worker's own default
    assert lanes.infos[spec]["version"] == str(max(1, cpus // 2))
    assert json.loads((tmp_path / "two" / "timing.json").read_text())["worker_threads"] == max(1, cpus // 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's own setting wins
    monkeypatch.setenv("MAX_JOBS", "6")
    assert lane_thread_env(5, 7, cpus=16) == {"TORCHINDUCTOR_COMPILE_THREADS": "3"}


class DeclinesSeed1(ReferenceBackend):
    name = "declines-seed1"

    def unsupported_reason(self, case):
        return "not this one" if case.seed == 1 else None


def test_cases_per_second_counts_only_the_cases_a_backend_ran(tmp_path):
    spec = "tests.test_isolation:DeclinesSeed1"
    run_sweep([spec], CASES, out_dir=tmp_path, isolate=False, progress=False)
    t = json.loads((tmp_path / "timing.json").read_text())["per_backend"][spec]
    assert t["cases"] == 3 and t["small_cases"] == 2  # the declined case is a row, not a case it ran
    assert t["cases_per_s_upto_4096"] == pytest.approx(2 / t["small_s"], rel=0.02)  # small_s is rounded


def test_the_shared_baseline_is_not_charged_to_the_backend_that_meets_a_case_first(tmp_path, monkeypatch):
    import parity.judge as sweep_mod

    real = sweep_mod.make_baseline

    def slow_baseline(*a, **k):
        time.sleep(0.2)
        return real(*a, **k)

    monkeypatch.setattr(sweep_mod, "make_baseline", slow_baseline)
    second = "tests.test_isolation:DeclinesSeed1"
    run_sweep(["reference", second], CASES, out_dir=tmp_path, isolate=False, progress=False)
    t = json.loads((tmp_path / "timing.json").read_text())
    first, other = t["per_backend"]["reference"], t["per_backend"][second]
    assert first["baseline_s"] >= 0.6 and other["baseline_s"] == 0  # three cases, computed once each, by the first
    assert t["reference_s"] == pytest.approx(first["baseline_s"], abs=0.01)
    assert first["small_s"] < 0.5 and first["judge_s"] < 0.5  # the 0.6 s of baseline is in neither


# -- evaluate(worker_path=...): what pytest's --worker-path / PARITY_WORKER_PATH use ---------------

_PATH_ONLY = """
from parity.backends.reference import ReferenceBackend


class PathOnly(ReferenceBackend):
    name = "path-only"
"""


def test_evaluate_with_a_worker_path_runs_a_backend_only_that_path_can_import(tmp_path):
    from parity import evaluate
    from parity.api import close_workers, worker_info

    (tmp_path / "only_on_worker_path.py").write_text(_PATH_ONLY)
    spec = "only_on_worker_path:PathOnly"
    try:
        assert worker_info(spec, [str(tmp_path)])["unavailable"] is None
        row = evaluate(spec, CASES[0], worker_path=[str(tmp_path)])
        assert row["verdict"] == "pass", row
    finally:
        close_workers()
    with pytest.raises(Exception, match="only_on_worker_path"):  # not importable in this process
        evaluate(spec, CASES[0])


def test_evaluate_in_a_worker_turns_a_crash_into_a_row():
    from parity import evaluate
    from parity.api import close_workers

    try:
        row = evaluate("tests.test_isolation:AbortsOnSeed1", CASES[1], worker_path=[os.getcwd()])
    finally:
        close_workers()
    assert row["verdict"] == "crash" and "SIGABRT" in row["detail"], row


def test_worker_path_items_are_checked():
    from parity.execute import parse_worker_paths

    assert parse_worker_paths(["fa4-cuda=/a:/b", "fa4-cuda=/c"]) == {"fa4-cuda": ["/a", "/b", "/c"]}
    with pytest.raises(ValueError, match="BACKEND=PATH.*'fa4-cuda'"):
        parse_worker_paths(["fa2-cuda=/a", "fa4-cuda", "=/b"])


def test_worker_path_items_read_tolerantly_name_what_is_malformed():
    from parity.process import read_worker_path_items

    got = read_worker_path_items(["fa4-cuda=/a:/b", "fa4-cuda", "=/c", "fa2-cuda=", "fa2-cuda=/d"])
    assert got == ({"fa4-cuda": ["/a", "/b"], "fa2-cuda": ["/d"]}, ["fa4-cuda", "=/c", "fa2-cuda="])


_POISONED = []  # this process's "CUDA context": gone after the first sticky error


class StickyCudaErrorOnSeed1(ReferenceBackend):
    """Seed 1 raises a sticky CUDA error; every later call in the same process fails the same way
    (as after a real "misaligned address"), unless the process was replaced."""

    name = "sticky"

    def run(self, case, inputs, out):
        if case.seed == 1 or _POISONED:
            _POISONED.append(case.seed)
            raise RuntimeError("CUDA error: misaligned address")
        return super().run(case, inputs, out)


def test_a_sticky_cuda_error_costs_its_own_row_only(tmp_path):
    """On the H200 (2026-12-04) one FlashInfer decode call with head_dim 33 left the worker's CUDA
    context broken and the next 39 rows of the lane failed with the same error; the worker is now
    restarted after such an error."""
    res = run_sweep(["tests.test_isolation:StickyCudaErrorOnSeed1"], CASES, out_dir=tmp_path, timeout=60, progress=False)
    got = {r["seed"]: (r["verdict"], r["detail"]) for r in res.rows}
    assert got[0][0] == "pass"
    assert got[1][0] == "crash" and "misaligned address" in got[1][1] and "context lost" in got[1][1]  # the backend's fault
    assert got[2][0] == "pass", got[2]  # a fresh worker, not the poisoned one


#: a known divergence that explains the sticky error (so that a run cut short by it exits 3, not 1)
STICKY_TOML = """
[[divergence]]
id = "fake-sticky"
backend = "tests.test_isolation:StickyCudaErrorOnSeed1"
condition = { dtype = "float32" }
verdict = "crash"
detail = "misaligned address"
explanation = "Seed 1 breaks this process's CUDA context."
upstream = "not reported"
strict = false
"""


@pytest.mark.parametrize("known, code", [(False, 1), (True, 3)])
def test_a_sticky_cuda_error_in_process_ends_the_run_as_partial(tmp_path, capsys, monkeypatch, known, code):
    """With --no-isolate a lost CUDA context cannot be replaced: the rows after it would fail for its
    fault. The row is its backend's crash, no new row starts, the run is partial (exit 3 unless a row failed)."""
    from parity.cli import main

    monkeypatch.setattr(sys.modules[__name__], "_POISONED", [])  # this test's own "CUDA context"
    spec, out = "tests.test_isolation:StickyCudaErrorOnSeed1", tmp_path / "run"
    toml = tmp_path / "known.toml"
    toml.write_text(STICKY_TOML)
    cases = [a for c in CASES for a in ("--case", c.to_json())]
    flags = ("--no-isolate", "-q", "--shrink", "0", "--no-report", "--out", str(out), "--expect", str(toml) if known else "none")
    assert main(["run", "-b", spec, "-b", "reference", *flags, *cases]) == code
    err = capsys.readouterr().err
    rows = json.loads((out / "results.json").read_text())
    got = [(r["backend"], r["seed"], r["raw_verdict"]) for r in rows]
    assert got == [(spec, "0", "pass"), ("reference", "0", "pass"), (spec, "1", "crash")], got  # nothing after it ran
    assert _POISONED == [1], _POISONED  # the backend was not called again
    why = "the rest of this run cannot use the GPU in this process"
    how = "rerun with --resume (without --no-isolate, each backend runs in its own worker process)"
    line = f"parity: CUDA context lost in {spec} on {CASES[1].summary()}: {why}; {how}"
    assert line in err.splitlines(), err
    assert "PARTIAL: CUDA context lost" in err and "3 of 6 rows ran" in err, err
    assert json.loads((out / "environment.json").read_text())["partial"] is True


class StickyOnCuda(StickyCudaErrorOnSeed1):
    """The same, declaring a CUDA device (never run here: the test only asks what happens to it)."""

    device = "cuda"


def test_evaluate_after_a_sticky_cuda_error_runs_named_backends_in_a_worker(monkeypatch):
    """pytest runs backends in its own process: without this, a FlashInfer decode call with head dim
    33 (H200, 2026-12-04) would fail every later GPU test of that pytest process with its error."""
    from parity import api

    monkeypatch.setattr(sys.modules[__name__], "_POISONED", [])
    monkeypatch.setattr(api, "_LOST", [])
    spec = "tests.test_isolation:StickyCudaErrorOnSeed1"
    try:
        assert api.evaluate(spec, CASES[0])["verdict"] == "pass"  # in this process
        row = api.evaluate(spec, CASES[1])
        assert row["verdict"] == "crash" and "misaligned address" in row["detail"], row
        assert "later calls of named backends run in worker processes" in row["detail"], row
        assert api.evaluate(spec, CASES[2])["verdict"] == "pass"  # a worker: a fresh "context"
        assert _POISONED == [1], _POISONED  # not called in this process again
        assert len(api._LOST) == 1 and api._LOST[0].startswith(f"{spec} on {CASES[1].summary()}: "), api._LOST
        assert "misaligned address" in api._LOST[0], api._LOST
        inst = api.evaluate(StickyOnCuda(), CASES[0])  # an instance cannot move to a worker
        assert inst["verdict"] == "error" and inst["detail"].startswith("not run: this process's CUDA context was lost"), inst
        assert _POISONED == [1], _POISONED
    finally:
        api.close_workers()
