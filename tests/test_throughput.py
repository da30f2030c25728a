"""Throughput (issue 31): the per-stage time breakdown, lanes planned by measured cost, the compile
caches, and that none of it changes a verdict (a fixture sweep against a snapshot of the verdicts the
code gave before these changes, and the same sweep under another lane plan)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parity import Case, Window, compile_cache
from parity.backends.reference import ReferenceBackend
from parity.execute import execute
from parity.judge import BaselineCache
from parity.sweep import SweepOptions
from parity.sweep.lanes import lane_costs, measured_costs, plan, save_costs
from parity.sweep.run import run_sweep
from parity.sweep.timing import STAGES, stage_table
from parity.sweep.writers import STAGES_FILE

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = Path(__file__).parent / "fixtures" / "throughput_verdicts.json"

#: Cases that reach every stage: multi-pass mask probes (batched), GQA, an MQA, a paged read probe, empty rows.
FIXTURE_CASES = [
    Case(q_lens=(40,), k_lens=(70,), hq=4, hkv=2, head_dim=16, dtype="float32", window=Window(8, 0), seed=1),
    Case(q_lens=(5, 9), k_lens=(33, 20), hq=6, hkv=3, head_dim=8, dtype="bfloat16", window=Window(4, 2, "top_left"), seed=2),
    Case(q_lens=(1, 1), k_lens=(50, 17), hq=4, hkv=1, head_dim=16, dtype="float16", window=Window(6, 0), seed=3),
    Case(q_lens=(12,), k_lens=(48,), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(5, 0), page_size=8, seed=4),
    Case(q_lens=(20,), k_lens=(10,), hq=2, hkv=2, head_dim=8, dtype="float32", window=Window(3, 0, "top_left"), seed=5),
]
FIXTURE_SPECS = [
    "reference",
    "sdpa",
    "parity.selftest.bugs:GqaRepeatNotInterleave",
    "parity.selftest.bugs:WindowOneWider",
    "parity.selftest.bugs:PagedReadsEveryPage",
]
#: what a row's verdict is made of (numbers aside): its verdict, reasons and the probes' results
VERDICT_FIELDS = ("verdict", "reasons", "mask_check", "mask_detail", "gqa_check", "gqa_detail", "read_check", "read_detail")


def verdict_view(rows: list[dict]) -> dict[str, dict[str, str]]:
    return {f"{r['backend']} {r['case_id']}": {k: str(r.get(k, "")) for k in VERDICT_FIELDS} for r in rows}


def test_verdicts_are_those_of_the_code_before_the_throughput_changes(tmp_path):
    """The snapshot was written by the code at 0bc91b4 (before issue 31's changes), by the same sweep:
    regenerate it only for a deliberate verdict change (tests/fixtures/throughput_verdicts.json; regenerated once since:
    the read probe reached the planted bugs' padded decode path, n/a -> ok on the decode case; its read words
    since 2026-12-06 name the padding slots' null page where they named an unreferenced page, verdicts unchanged)."""
    res = run_sweep(FIXTURE_SPECS, FIXTURE_CASES, tmp_path / "out", isolate=False, progress=False)
    want = json.loads(SNAPSHOT.read_text())
    got = verdict_view(res.rows)
    assert got == want
    assert {v["verdict"] for v in got.values()} >= {"pass", "fail"}  # the fixture has failing rows to keep


def test_verdicts_do_not_depend_on_the_lane_plan(tmp_path):
    """The same sweep in two lanes planned by a measured cost file (which puts the reference alone; the cost
    hints alone would pair it with the third backend) gives the same rows."""
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"seconds_per_row": {"reference": 9.0, "sdpa": 0.1}}))
    options = SweepOptions(jobs=2, isolate=False, progress=False, cost_file=str(costs))
    specs = FIXTURE_SPECS[:3]
    assert sorted(plan(specs, FIXTURE_CASES, options).lanes) == [["reference"], ["sdpa", specs[2]]]
    two = run_sweep(specs, FIXTURE_CASES, tmp_path / "two", options)
    one = run_sweep(specs, FIXTURE_CASES, tmp_path / "one", jobs=1, isolate=False, progress=False)
    assert verdict_view(two.rows) == verdict_view(one.rows)
    assert set(measured_costs(costs)) == set(specs)  # the run recorded what it measured, for the next plan


def test_every_row_says_where_its_time_went(tmp_path):
    out = tmp_path / "out"
    cases = [*FIXTURE_CASES[:4], dataclasses.replace(FIXTURE_CASES[0], seed=9)]  # the last: the first's configuration
    res = run_sweep(["reference", "sdpa"], cases, out, isolate=False, progress=False)
    lines = [json.loads(ln) for ln in (out / STAGES_FILE).read_text().splitlines()]
    assert len(lines) == len(res.rows) == 10
    assert all(set(ln["stage_ms"]) == set(STAGES) for ln in lines)
    ran = [ln for ln in lines if ln["status"] == "ok"]
    assert ran and all(ln["stage_ms"]["call"] > 0 and ln["stage_ms"]["mask_calls"] >= 1 and ln["stage_ms"]["worker"] > 0 for ln in ran)
    paged = [ln for ln in ran if ln["case_id"] == FIXTURE_CASES[3].case_id]
    assert paged and all(ln["stage_ms"]["read_backend"] > 0 for ln in paged)  # the read probe ran a call
    assert [ln["first_config"] for ln in lines if ln["backend"] == "reference"] == [True, True, True, True, False]
    timing = json.loads((out / "timing.json").read_text())
    st = timing["stages"]["reference"]
    assert st["rows"] == 5 and st["first_config_rows"] == 4 and st["rows_per_s"] > 0
    assert st["stages_s"]["mask_calls"] == sum(ln["stage_ms"]["mask_calls"] for ln in lines if ln["backend"] == "reference")
    # the reference is computed once per case, whichever backend meets it first, and never again
    assert timing["reference_recomputed"] == 0 and timing["reference_stages_s"]["reference"] > 0
    assert sum(ln["stage_ms"]["reference"] > 0 for ln in lines) == 5
    head, rows = stage_table(timing)
    assert head[:3] == ["backend", "rows", "rows/s"] and [r[0] for r in rows] == ["reference", "sdpa"]


def test_judging_is_not_charged_what_it_waited_for_other_lanes(tmp_path, monkeypatch):
    """A row's reference computed by another lane (the cache computes one at a time) is waited for in ``judge_wait``,
    not in ``judge`` (the H100's models run: 17 s of "judge" on a two-row decode case, waiting for a 32k reference)."""
    real = BaselineCache.ensure_timed

    def slow(self, case, grad=False, unless=None):
        spent, _ = real(self, case, grad)
        time.sleep(0.3)  # as if another lane's reference held the cache this long
        return spent, 0.3

    monkeypatch.setattr(BaselineCache, "ensure_timed", slow)
    out = tmp_path / "out"
    run_sweep(["reference"], FIXTURE_CASES[:2], out, isolate=False, progress=False)
    ms = [json.loads(ln)["stage_ms"] for ln in (out / STAGES_FILE).read_text().splitlines()]
    assert len(ms) == 2 and all(m["judge_wait"] >= 300 and m["judge"] < 300 for m in ms), ms
    stages = json.loads((out / "timing.json").read_text())["stages"]["reference"]
    assert stages["stages_s"]["judge_wait"] >= 0.6
    head, rows = stage_table({"stages": {"reference": stages}})
    assert float(rows[0][head.index("judge wait")]) >= 0.6


def test_a_workers_row_is_not_charged_what_its_lane_waited_for_another_lanes_reference(tmp_path, monkeypatch):
    """The reference computed beside the worker (for the row's time limit) may wait for another lane's: that wait is
    the row's ``judge_wait``, not its ``wait`` on the worker nor its ``ipc`` (the H100's models run: a worker that
    answered in a second, its lane seconds behind another lane's 32k reference, all of it counted as ipc)."""
    real = BaselineCache.ensure_timed

    def slow(self, case, grad=False, unless=None):
        spent, _ = real(self, case, grad)
        time.sleep(1.0)  # as if another lane's reference held the cache this long
        return spent, 1.0

    monkeypatch.setattr(BaselineCache, "ensure_timed", slow)
    out = tmp_path / "out"
    run_sweep(["reference"], FIXTURE_CASES[:2], out, progress=False)  # in a worker: the reference beside it
    ms = [json.loads(ln)["stage_ms"] for ln in (out / STAGES_FILE).read_text().splitlines()]
    assert len(ms) == 2 and all(m["worker"] > 0 for m in ms), ms
    assert all(m["judge_wait"] >= 2000 for m in ms), [m["judge_wait"] for m in ms]  # beside the worker, then judging
    assert all(m["ipc"] < 500 and m["wait"] < m["worker"] + 500 for m in ms), [(m["wait"], m["worker"], m["ipc"]) for m in ms]


def test_a_grad_run_says_where_the_backward_and_its_reference_went(tmp_path):
    """--grad: the backend's backward is its own stage (it was in no stage), and the float64 gradients and their
    same-dtype baseline are charged to the reference (once per case), not to judging."""
    out = tmp_path / "g"
    run_sweep(["reference", "sdpa"], FIXTURE_CASES[:3], out, isolate=False, progress=False, grad=True)
    lines = [json.loads(ln) for ln in (out / STAGES_FILE).read_text().splitlines()]
    ran = [ln for ln in lines if ln["status"] == "ok"]
    assert ran and all(ln["stage_ms"]["backward"] > 0 for ln in ran), [ln["stage_ms"]["backward"] for ln in ran]
    timing = json.loads((out / "timing.json").read_text())
    assert timing["reference_stages_s"]["grad_reference"] > 0
    assert timing["stages"]["sdpa"]["stages_s"]["backward"] > 0
    head, rows = stage_table(timing)
    col = head.index("backward")
    assert [r[col] for r in rows] == [f"{timing['stages'][r[0]]['stages_s']['backward']:.2f}" for r in rows]


class SlowFirstCall(ReferenceBackend):
    """Compiles on its first call (sleeps), like a JIT backend; cost hint > 1 marks it a compiling one."""

    name = "slow-first-call"
    cost_hint = 5.0

    def __init__(self) -> None:
        self.calls = 0

    def run(self, case, inputs, out):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.3)
        return super().run(case, inputs, out)


def test_first_use_compilation_is_measured_on_the_first_row_of_a_configuration():
    be = SlowFirstCall()
    first = execute(be, FIXTURE_CASES[0], probes=False)["timing"]
    again = execute(be, FIXTURE_CASES[0], probes=False)["timing"]
    assert first["first_config"] and first["compile_s"] > 0.2
    assert not again["first_config"] and "compile_s" not in again


def test_lane_costs_use_measured_seconds_and_scale_the_hints(tmp_path):
    hints = {"flex": 10.0, "sdpa": 1.0, "other": 2.0}
    assert lane_costs(hints, {}) == hints
    costs = lane_costs(hints, {"flex": 5.0, "sdpa": 1.0})  # ratios 0.5 and 1.0: median 0.75
    assert costs == {"flex": 5.0, "sdpa": 1.0, "other": 1.5}
    path = tmp_path / "c" / "lane_costs.json"
    save_costs(path, {"sdpa": {"cases": 4, "exec_s": 1.0, "judge_s": 1.0}, "none": {"cases": 0}})
    save_costs(path, {"flex": {"cases": 2, "exec_s": 3.0, "judge_s": 1.0}})
    assert measured_costs(path) == {"sdpa": 0.5, "flex": 2.0}
    path.write_text("not json")
    assert measured_costs(path) == {} and measured_costs("") == {}


def test_the_compile_cache_keeps_what_the_libraries_build_underneath(tmp_path):
    env = compile_cache.environment(tmp_path)
    for var, sub in (("CUTE_DSL_CACHE_DIR", "cute-dsl"), ("TORCH_EXTENSIONS_DIR", "torch-extensions"), ("TVM_FFI_CACHE_DIR", "tvm-ffi")):
        assert env[var] == str(tmp_path / sub) and sub in compile_cache.SUBDIRS
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / "flashinfer")


@pytest.mark.slow
def test_the_throughput_benchmark_runs_cold_then_warm(tmp_path):
    out = tmp_path / "tp"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--out", str(out), "--profile", "quick"]
    done = subprocess.run([*cmd, "--backend", "sdpa-causal", "--max-rows", "3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "throughput.json").read_text())
    assert list(report["runs"]) == ["cold", "warm"] and report["cases"] == 3
    assert report["verdicts"]["warm"] == {"shared": 3, "differ": 0, "examples": []}
    assert report["runs"]["warm"]["per_backend"]["sdpa-causal"]["rows"] == 3
    assert "rows/s" in done.stdout and "verdicts cold vs warm: 3 shared rows, 0 differ" in done.stdout


def _recorded_run(folder: Path, stage_s: dict[tuple[str, str], tuple[float, float]], verdicts: dict, gz: bool) -> None:
    """A run folder as a sweep leaves it: timing.json, stages.jsonl (gzipped as committed, or not), results.csv."""
    import gzip

    folder.mkdir(parents=True)
    lines = [
        json.dumps({"backend": b, "case_id": c, "stage_ms": {"wait": 1e3 * s, "judge": 0.0, "compile": 1e3 * comp}})
        for (b, c), (s, comp) in stage_s.items()
    ]
    text = "".join(ln + "\n" for ln in lines)
    if gz:
        with gzip.open(folder / "stages.jsonl.gz", "wt") as fh:
            fh.write(text)
    else:
        (folder / "stages.jsonl").write_text(text)
    per = {
        b: {"cases": sum(1 for k in stage_s if k[0] == b), "exec_s": sum(s for (x, _), (s, _) in stage_s.items() if x == b)}
        for b, _ in stage_s
    }
    timing = {"wall_s": 10.0, "startup_s": 1.0, "rows_run": len(stage_s), "partial": True, "per_backend": per, "lanes": [[*per]]}
    (folder / "timing.json").write_text(json.dumps(timing))
    rows = "".join(f"{b},{c},{v}\n" for (b, c), v in verdicts.items())
    (folder / "results.csv").write_text("backend,case_id,verdict\n" + rows)


def test_the_benchmark_summarizes_a_killed_run_on_the_rows_both_ran(tmp_path):
    """``--summarize`` reads runs already written (the H100's warm run was killed before throughput.json):
    the like-for-like table sums each run's seconds over the (backend, case) pairs both ran, and only those,
    and a verdict that differs between the runs is counted and fails the benchmark."""
    out = tmp_path / "tp"
    cold = {("a", "c1"): (10.0, 8.0), ("a", "c2"): (6.0, 5.0), ("b", "c1"): (1.0, 0.0), ("b", "c3"): (99.0, 0.0)}
    warm = {("a", "c1"): (0.5, 0.0), ("a", "c2"): (0.5, 0.1), ("b", "c1"): (1.0, 0.0), ("a", "c4"): (50.0, 40.0)}
    _recorded_run(out / "cold", cold, {k: "pass" for k in cold}, gz=True)
    _recorded_run(out / "warm", warm, {**{k: "pass" for k in warm}, ("b", "c1"): "fail"}, gz=False)
    (out / "cold" / "environment.json").write_text(json.dumps({"gpu": {"available": True, "name": "H100"}, "torch": "2.11"}))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--out", str(out), "--summarize"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr[-2000:]  # b c1 went pass -> fail
    report = json.loads((out / "throughput.json").read_text())
    shared = report["shared_rows"]["warm"]
    assert shared["a"] == {"rows": 2, "first_s": 16.0, "later_s": 1.0, "first_compile_s": 13.0, "later_compile_s": 0.1}
    assert shared["b"]["rows"] == 1 and shared["b"]["first_s"] == 1.0  # c3 (cold only) and c4 (warm only) left out
    assert report["verdicts"]["warm"]["differ"] == 1 and report["machine"].startswith("H100 2.11")
    assert "all                             3        17.0         2.0    8.5x" in done.stdout, done.stdout


class _VariantCounter(ReferenceBackend):
    """The reference, counting which variant each call takes (a compiling backend builds one per variant)."""

    name = "variant-counter"

    def __init__(self) -> None:
        super().__init__()
        self.calls = {"run": 0, "run_lse": 0}

    def run(self, case, inputs, out):
        self.calls["run"] += 1
        return super().run(case, inputs, out)

    def run_lse(self, case, inputs, out):
        self.calls["run_lse"] += 1
        return super().run_lse(case, inputs, out)


def test_the_probes_call_the_variant_the_row_was_judged_on():
    """A backend that returns its LSE is called through ``run_lse`` for the row; its mask, GQA and read probes
    take the same variant, so a compiling backend builds one kernel per shape, not two (flex on the CPU: 153
    dynamo compiles for 195 cases with the probes on ``run``, 76 on ``run_lse``), and the probes check the
    kernel whose output is judged."""
    case = FIXTURE_CASES[3]  # paged: the mask, GQA and read probes all run
    backend = _VariantCounter()
    result = execute(backend, case)
    assert result["status"] == "ok" and result["mask"]["status"] == "ok" and result["reads"]["status"] == "ok"
    assert backend.calls["run"] == 0 and backend.calls["run_lse"] >= 3, backend.calls


def test_the_benchmark_line_of_a_resumed_run_says_what_every_call_cost():
    """A cold run spread over several device calls (--time-limit, then --resume): the benchmark's line gives this
    call's figures and then every call's (timing.json's ``all_calls``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("throughput_bench", ROOT / "benchmarks" / "throughput.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    timing = {"rows_run": 40, "wall_s": 50.0, "startup_s": 10.0, "lanes": [["a"]]}
    run = {"name": "cold", "timing": timing, "env": {}, "process_wall_s": None}
    assert "in all" not in bench.summary_line(run)  # one call
    timing["all_calls"] = {"calls": 3, "rows_run": 900, "wall_s": 1234.5}
    line = bench.summary_line(run)
    assert line.startswith("cold: 40 rows in 50.0 s") and line.endswith("; 3 calls in all: 900 rows in 1234.5 s"), line
    timing["per_backend"] = {"a": {"cases": 40, "exec_s": 20.0, "judge_s": 0.0, "baseline_s": 0.0}}
    assert bench.per_backend(run)["a"]["rows"] == 40  # no summed stages: this call's figures
    stages = {"stages_s": {"wait": 900.0, "judge": 0.0, "reference": 0.0, "call": 700.0}, "compile_s": 600.0, "rows": 900}
    timing["all_calls"]["stages"] = {"a": {**stages, "first_config_rows": 30, "rows_per_s": 1.0}}
    every = bench.per_backend(run)["a"]
    assert every["rows"] == 900 and every["busy_s"] == 900.0 and every["compile_s"] == 600.0, every
