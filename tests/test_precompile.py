"""The compile pre-pass (parity.sweep.precompile): each kernel key of a compiling backend built once, many at
a time, before the lanes; the lanes then find it on disk; rows and verdicts as without it."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pytest

from parity import Case, Window, compile_cache
from parity.backends.reference import ReferenceBackend
from parity.sweep import SweepOptions, run_sweep
from parity.sweep.precompile import (
    KEY_BOUND_S,
    SHARE_WORDS,
    CpuSlots,
    PrePass,
    PrePassOptions,
    plan_precompile,
    run_precompile,
    wanted,
)

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

    build_s = BUILD_S

    def run(self, case, inputs, out):
        path = Path(os.environ[compile_cache.ENV_VAR]) / "fake" / f"d{case.head_dim}"
        if not path.exists():
            time.sleep(self.build_s)
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


class HangsOnLastKey(DiskBuild):
    """Builds its last key (head dim 32) for two minutes, in the pre-pass and in its row alike."""

    name = "hangs-on-last-key"

    def run(self, case, inputs, out):
        if case.head_dim == 32:
            time.sleep(120)
        return super().run(case, inputs, out)


def test_the_pre_pass_has_a_third_of_the_time_limit_then_the_lanes_start_and_its_keys_not_built_are_theirs(tmp_path, cache):
    # d4 of 2026-12-07: a pre-pass of 260 s in a run of --time-limit 230 ("0 of 3864 rows ran")
    t0 = time.perf_counter()
    res = run_sweep([f"{ME}:HangsOnLastKey"], CASES, out_dir=tmp_path / "out", timeout=10, progress=False, jobs=2, time_limit=24)
    assert time.perf_counter() - t0 < 24 + 10 + 15  # the run's limit, its last row's own limit: the hung build was stopped
    pre = json.loads((tmp_path / "out" / "timing.json").read_text())["precompile"]
    assert (pre["budget_s"], pre["budget"], pre["deadline_hit"]) == (8.0, SHARE_WORDS, True)
    assert pre["wall_s"] < 8 + 3  # over at its deadline, not at the run's
    mine = pre["per_backend"][f"{ME}:HangsOnLastKey"]
    assert mine["failed"] == 0 and mine["failures"] == []  # the key cut short is the lanes', not a failure
    assert mine["left_to_lanes"] >= 1 and mine["ok"] + mine["left_to_lanes"] == mine["keys"] == 4
    assert pre["left_to_lanes"] == mine["left_to_lanes"]
    ran = {r["case_id"] for r in res.rows if r["verdict"] == "pass"}
    assert {c.case_id for c in CASES if c.head_dim == 8} <= ran  # the lanes ran rows: the pre-pass left them time
    assert res.partial  # the d32 row hung in its lane too


def test_a_lane_without_a_compiling_backend_starts_while_the_pre_pass_builds(tmp_path, cache):
    first: dict[str, float] = {}

    def on_row(row):
        first.setdefault(row["backend"], time.perf_counter())

    t0 = time.perf_counter()
    run_sweep([f"{ME}:SlowBuild", "reference"], CASES, out_dir=tmp_path / "out", timeout=60, progress=False, jobs=2, on_row=on_row)
    pre = json.loads((tmp_path / "out" / "timing.json").read_text())["precompile"]
    assert pre["per_backend"][f"{ME}:SlowBuild"]["ok"] == 4 and not pre["deadline_hit"]
    assert first["reference"] - t0 < pre["wall_s"]  # its first row before the pre-pass ended
    # this lane waited for its keys: the pre-pass's wall is read by a watcher that polls every 0.05 s, so the lane
    # may start up to that much before it (a loaded 2-CPU run once saw 0.027 s)
    assert first[f"{ME}:SlowBuild"] - t0 > pre["wall_s"] - 0.1
    waits = pre["lanes_waited_s"]
    assert waits["reference"] < 1.0 < waits[f"{ME}:SlowBuild"]


class SlowBuild(DiskBuild):
    name = "slow-build"
    build_s = 5.0


class Wide(DiskBuild):
    """A build of two compile threads (FlashInfer's ninja jobs): each build notes when it ran and its ``MAX_JOBS``."""

    name = "wide"
    compile_threads = 2

    def run(self, case, inputs, out):
        t0 = time.time()
        res = super().run(case, inputs, out)
        note = Path(os.environ[compile_cache.ENV_VAR]) / "notes" / f"{type(self).__name__}-{case.case_id}.json"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(json.dumps({"t": [t0, time.time()], "jobs": os.environ.get("MAX_JOBS")}))
        return res

    def compile_key(self, case):
        return (type(self).__name__, case.head_dim)


class Wide2(Wide):
    name = "wide-2"


def test_workers_times_compile_threads_never_exceed_the_cpus(tmp_path, cache):
    # d7 of 2026-12-07: 18 pre-pass processes on 16 CPUs, each FlashInfer build with one ninja job
    plan = plan_precompile({f"{ME}:DiskBuild": CASES, f"{ME}:Wide": CASES, f"{ME}:Wide2": CASES}, SweepOptions(), cpus=12)
    assert plan.threads == {f"{ME}:DiskBuild": 1, f"{ME}:Wide": 2, f"{ME}:Wide2": 2}
    assert plan.procs == {f"{ME}:DiskBuild": 4, f"{ME}:Wide": 2, f"{ME}:Wide2": 2}  # a third of the CPUs each, in workers
    # two backends of two threads each on two CPUs: one worker at a time, its builds given MAX_JOBS=2
    plan = plan_precompile({f"{ME}:Wide": CASES, f"{ME}:Wide2": CASES}, SweepOptions(), cpus=2)
    assert plan.procs == {f"{ME}:Wide": 1, f"{ME}:Wide2": 1}
    rec = run_precompile(PrePassOptions(plan, SweepOptions(timeout=60)))
    assert rec["cpus"] == 2 and rec["cpus_peak"] == 2
    notes = [json.loads(p.read_text()) for p in (cache / "notes").iterdir()]
    assert len(notes) == 8 and {n["jobs"] for n in notes} == {"2"}
    spans = sorted(n["t"] for n in notes)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two builds at once


class FailsWithALongPath(DiskBuild):
    """Fails as FlashInfer's JIT modules do: a long path of the generated source first, the reason last."""

    name = "fails-with-a-long-path"

    def run(self, case, inputs, out):
        where = "/tmp/models-cc/flashinfer/.cache/flashinfer/0.7.2.post1/90a/generated/" + "batch_decode_with_kv_cache_" * 10
        raise RuntimeError(f"Error in function 'operator()' at {where}/batch_decode.cu:42: no kernel image is available for sm_90")


def test_a_pre_pass_failure_keeps_the_reason_at_the_end_of_a_long_message(tmp_path, cache):
    plan = plan_precompile({f"{ME}:FailsWithALongPath": CASES}, SweepOptions(), cpus=2)
    rec = run_precompile(PrePassOptions(plan, SweepOptions(timeout=60)))
    mine = rec["per_backend"][f"{ME}:FailsWithALongPath"]
    assert mine["failed"] == 4 and len(mine["failures"]) == 4
    for said in mine["failures"]:
        assert "RuntimeError at test_precompile.py" in said and said.endswith("no kernel image is available for sm_90")
        assert " ... " in said and len(said) < 340  # the path's middle cut, both ends kept


def test_an_error_s_words_keep_its_first_and_last_lines_and_both_ends():
    from parity.execute import error_words
    from parity.results import clip

    ninja = RuntimeError("Ninja build failed. Ninja output:\n[1/3] nvcc ...\nerror: no memory\nninja: build stopped: subcommand failed.")
    assert error_words(ninja) == "Ninja build failed. Ninja output: | ninja: build stopped: subcommand failed."
    assert error_words(ValueError("head_dim must be 64")) == "head_dim must be 64"
    assert clip("short") == "short" and clip("a" * 200 + "b" * 200).endswith("b" * 147) and len(clip("x" * 999)) <= 300


def test_no_pre_pass_key_waits_longer_than_its_bound(cache):
    plan = plan_precompile({f"{ME}:DiskBuild": CASES}, SweepOptions(), cpus=2)
    assert PrePass(PrePassOptions(plan, SweepOptions())).key_limit == KEY_BOUND_S  # 120 s + a grace of 900 s asked
    assert PrePass(PrePassOptions(plan, SweepOptions(timeout=30, compile_grace=0))).key_limit == 30
    assert PrePass(PrePassOptions(plan, SweepOptions())).until is None  # no --time-limit: no deadline


def test_a_pre_pass_takes_one_frozen_options_object_and_its_deadline_from_it(cache):
    """:class:`PrePassOptions`: built once, passed down unchanged (the plan, the sweep's options, logs, deadline, the
    lanes' environment) and read-only; the pre-pass's share of ``--time-limit`` is a third, its lanes' the rest."""
    plan = plan_precompile({f"{ME}:DiskBuild": CASES}, SweepOptions(), cpus=2)
    env = {"OMP_NUM_THREADS": "2"}
    setup = PrePassOptions(plan, SweepOptions(time_limit=300), deadline=1000.0, lane_env=env)
    env["OMP_NUM_THREADS"] = "8"  # the caller's dict changed afterwards: the pre-pass keeps what it was given
    assert dict(setup.lane_env) == {"OMP_NUM_THREADS": "2"}, f"lane_env follows its caller's dict: {dict(setup.lane_env)}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setup.deadline = 0.0
    with pytest.raises(TypeError):
        setup.lane_env["OMP_NUM_THREADS"] = "8"
    pre = PrePass(setup)
    got = (pre.budget, pre.until, pre.deadline)
    assert got == (100.0, 800.0, 1000.0), f"budget, until, deadline: {got}, wanted (100.0, 800.0, 1000.0)"
    assert PrePass(PrePassOptions(plan, SweepOptions(time_limit=300))).budget is None  # no deadline given: no budget


def test_the_cpu_slots_hold_a_worker_s_threads_and_a_lane_started_beside_takes_its_share():
    slots = CpuSlots(4)
    assert slots.take(3, lambda: False) == 3
    assert slots.take(2, lambda: True) == 0  # one free: a worker of two waits (here: gives up)
    assert slots.take(9, lambda: True) == 0  # wider than the machine: all of it, once free
    slots.lend(2)  # a lane of two threads started beside the pre-pass
    slots.give(3)
    assert slots.total == 2 and slots.take(3, lambda: True) == 2 and slots.peak == 3  # wider than what is left: all of it
    slots.lend(5)  # one CPU always stays the pre-pass's
    slots.give(2)
    assert slots.total == 1 and slots.take(4, lambda: True) == 1


class Grouped(DiskBuild):
    """Two variants of one library that build the same kernels into one cache (FlashInfer's split decode variants)."""

    name = "grouped"
    build_group = "one-library"


class Grouped2(Grouped):
    name = "grouped-2"


def test_a_build_group_builds_each_key_once():
    # d7 of 2026-12-07: flashinfer-decode-split2/4/max-cuda each queued workers for the same modules
    plan = plan_precompile({f"{ME}:Grouped": CASES, f"{ME}:Grouped2": CASES, f"{ME}:DiskBuild": CASES}, SweepOptions(), cpus=4)
    ids = {b: sorted(c.case_id for c in cases) for b, cases in plan.tasks.items()}
    assert ids[f"{ME}:Grouped"] and f"{ME}:Grouped2" not in ids  # the group's keys, built once
    assert ids[f"{ME}:DiskBuild"] == ids[f"{ME}:Grouped"]  # no group: its own builds


class LateKey(DiskBuild):
    """Builds head dim 8 past a pre-pass deadline, as vLLM's FA2 modules do (the driver's JIT: no lock, no sharing of a
    build under way): its build ends only once the lanes ran rows of other keys (:func:`_lane_ran_others`, at most
    :data:`LATE_CAP_S`). Each call appends what it did to ``calls.jsonl`` in the cache folder (when, which process,
    whether it built)."""

    name = "late-key"

    def run(self, case, inputs, out):
        root = Path(os.environ[compile_cache.ENV_VAR])
        t0, before = time.time(), DiskBuild.built
        if case.head_dim == 8 and not (root / "fake" / "d8").exists():
            _lane_ran_others(root / "calls.jsonl")
        res = super().run(case, inputs, out)
        call = {"d": case.head_dim, "case": case.case_id, "t": [t0, time.time()], "pid": os.getpid(), "built": DiskBuild.built > before}
        with (root / "calls.jsonl").open("a") as fh:
            fh.write(json.dumps(call) + "\n")
        return res


LATE_CAP_S = 25.0


def _lane_ran_others(calls: Path) -> None:
    """Until ``calls`` names ``$LATE_KEY_AFTER`` cases of other head dims than 8 (the pre-pass builds three: six, the
    lanes ran three; ten, the lanes ran all of them and wait at their end), or :data:`LATE_CAP_S` passed."""
    want, end = int(os.environ.get("LATE_KEY_AFTER", "6")), time.time() + LATE_CAP_S
    while time.time() < end:
        seen = set()
        for line in calls.read_text().splitlines() if calls.exists() else []:
            try:
                call = json.loads(line)
            except ValueError:  # being written
                continue
            if call["d"] != 8:
                seen.add(call["case"])
        if len(seen) >= want:
            time.sleep(1.0 if want >= 10 else 0.0)  # the lane meanwhile at its end, waiting
            return
        time.sleep(0.1)


@pytest.mark.parametrize("after", [6, 10], ids=["before-its-next-row", "after-its-last-case"])
def test_a_lane_sets_aside_a_row_whose_key_the_pre_pass_still_builds_and_sends_it_once_built(tmp_path, cache, monkeypatch, after):
    # h100-2026-12-07g: 14 of 19 vLLM FA2 keys built late, and the lanes' rows of them compiled each again (~120 s)
    monkeypatch.setenv("LATE_KEY_AFTER", str(after))
    res = run_sweep([f"{ME}:LateKey"], CASES, out_dir=tmp_path / "out", timeout=60, progress=False, jobs=1, time_limit=45)
    pre = json.loads((tmp_path / "out" / "timing.json").read_text())["precompile"]
    mine = pre["per_backend"][f"{ME}:LateKey"]
    assert pre["deadline_hit"] and mine["late"] == 1, f"d8 not built past the pre-pass deadline (15 s): {pre}"
    calls = [json.loads(line) for line in (cache / "calls.jsonl").read_text().splitlines()]
    builds = {d: sum(c["built"] for c in calls if c["d"] == d) for d in (8, 16, 24, 32, 40)}
    assert builds == dict.fromkeys((8, 16, 24, 32, 40), 1), f"builds per head dim: {builds}"
    prepass = {c["pid"] for c in calls if c["built"] and c["d"] != 40}  # the single-row key d40 is its row's
    late = next(c for c in calls if c["built"] and c["d"] == 8)
    lane = [c for c in calls if c["pid"] not in prepass]
    waited = [c["t"][0] - late["t"][1] for c in lane if c["d"] == 8]  # a row may call its backend more than once
    assert min(waited) >= 0, f"lane calls of d8 sent this long after its build ended: {waited}"
    assert len({c["case"] for c in lane if c["d"] == 8}) == 3
    meanwhile = {c["case"] for c in lane if c["d"] != 8 and c["t"][0] < late["t"][1]}
    assert len(meanwhile) >= 3, f"lane rows of other keys sent while d8 was built: {meanwhile}"
    assert pre["lanes_set_aside"] == {f"{ME}:LateKey": 3}
    end_wait = sum(pre["lanes_set_aside_waited_s"].values())
    assert (end_wait > 0.5) == (after == 10), f"the lane waited {end_wait} s after its last case for d8's build"
    assert sorted(r["case_id"] for r in res.rows) == sorted(c.case_id for c in CASES)
    assert {r["verdict"] for r in res.rows} == {"pass"} and not res.partial


def test_without_a_key_in_flight_a_lane_sets_nothing_aside(tmp_path, cache):
    run_sweep([f"{ME}:DiskBuild"], CASES, out_dir=tmp_path / "out", timeout=60, progress=False, jobs=1)
    pre = json.loads((tmp_path / "out" / "timing.json").read_text())["precompile"]
    assert pre["per_backend"][f"{ME}:DiskBuild"]["ok"] == 4 and not pre["deadline_hit"]
    assert pre["lanes_set_aside"] == {} and pre["lanes_set_aside_waited_s"] == {}
    with (tmp_path / "out" / "results.csv").open() as fh:
        assert [r["case_id"] for r in csv.DictReader(fh)] == [c.case_id for c in CASES]  # the lane's own order


def test_the_pre_pass_says_which_keys_it_builds_now_per_build_group(cache):
    plan = plan_precompile({f"{ME}:Grouped": CASES, f"{ME}:Grouped2": CASES}, SweepOptions(), cpus=2)
    pre = PrePass(PrePassOptions(plan, SweepOptions()))
    assert pre.being_built(f"{ME}:Grouped", CASES[0]) is None  # nothing started
    case = pre._next(f"{ME}:Grouped")  # a worker took its first key (head dim 8)
    same = [c for c in CASES if c.head_dim == case.head_dim]
    built = pre.being_built(f"{ME}:Grouped2", same[-1])  # the group's other backend: the same module
    assert built is not None and not built.is_set() and built is pre.being_built(f"{ME}:Grouped", same[0])
    assert pre.being_built(f"{ME}:Grouped", next(c for c in CASES if c.head_dim != case.head_dim)) is None
    assert pre.being_built(f"{ME}:DiskBuild", case) is None  # another backend's key


def test_a_lane_of_a_build_group_waits_for_the_backend_that_builds_the_group_s_keys(cache):
    # the 21st session's note: a lane of a group's other backend (no keys of its own, they were claimed) started at once,
    # and its rows of keys still queued built them beside the pre-pass (FlashInfer: blocked on the library's lock)
    plan = plan_precompile({f"{ME}:Grouped": CASES, f"{ME}:Grouped2": CASES, f"{ME}:DiskBuild": CASES}, SweepOptions(), cpus=4)
    assert f"{ME}:Grouped2" not in plan.tasks
    pre = PrePass(PrePassOptions(plan, SweepOptions()))
    stop, returned = threading.Event(), []

    def lane(backends):
        pre.wait(backends, stop)
        returned.append(backends)

    waiting = [threading.Thread(target=lane, args=({f"{ME}:Grouped2"},)), threading.Thread(target=lane, args=({f"{ME}:DiskBuild"},))]
    for t in waiting:
        t.start()
    time.sleep(0.3)
    assert returned == [], f"lanes went before their (group's) pre-pass ended: {returned}"
    pre.done[f"{ME}:DiskBuild"].set()  # not Grouped2's group: its lane still waits
    waiting[1].join(2.0)
    time.sleep(0.2)
    assert returned == [{f"{ME}:DiskBuild"}], f"after DiskBuild's pre-pass ended, these lanes went: {returned}"
    pre.done[f"{ME}:Grouped"].set()
    waiting[0].join(2.0)
    assert returned[-1] == {f"{ME}:Grouped2"}, f"Grouped2's lane still waits after its group's builds: {returned}"
    assert pre.wait({"sdpa-math"}, stop) is None  # no pre-pass of its own, no group: at once
