"""A row whose worker answers before its lane needs the case's reference (a refusal in milliseconds, an error or crash
without output) is collected then, and gets no reference, computed or waited for (h100-2026-12-07g-models: 1463 of
2852 rows refused, ~2400 s of lanes waiting for other lanes' 32k references, ~3 s a refused row); a row with an output
is judged against the reference as before, with the same verdicts and numbers."""

from __future__ import annotations

import csv
import json
import threading
import time

import pytest

from parity import Case, Window
from parity import judge as judging
from parity.backends.base import Unsupported
from parity.backends.reference import ReferenceBackend
from parity.process import ProcessExecutor
from parity.sweep import SweepOptions
from parity.sweep import run as sweep_run
from parity.sweep.writers import STAGES_FILE

CASES = [
    Case(q_lens=(40,), k_lens=(70,), hq=4, hkv=2, head_dim=16, dtype="float32", window=Window(8, 0), seed=1),
    Case(q_lens=(5, 9), k_lens=(33, 20), hq=6, hkv=3, head_dim=8, dtype="bfloat16", window=Window(4, 2, "top_left"), seed=2),
    Case(q_lens=(1, 1), k_lens=(50, 17), hq=4, hkv=1, head_dim=16, dtype="float16", window=Window(6, 0), seed=3),
]
REFUSES = "tests.test_early_answers:Refuses"
REFUSES_LATE = "tests.test_early_answers:RefusesLate"
REFUSES_BATCHES = "tests.test_early_answers:RefusesBatches"
RAISES = "tests.report_fixtures:Raises"
RAISES_LATE = "tests.test_early_answers:RaisesLate"
SLOW_S = 1.0  # a slow reference's seconds (a 32k case's, scaled down)


class Refuses(ReferenceBackend):
    """Refuses every case at once, as a backend without softcap refuses a softcap case."""

    name = "test-refuses"

    def unsupported_reason(self, case: Case) -> str | None:
        return "refuses every case (test)"


class RefusesLate(ReferenceBackend):
    """Refuses every case in its call, after 0.15 s (past the lane's :data:`EARLY_ANSWER_S`): a library that says so
    only once it builds its kernel (FlashInfer's "Unsupported group_size")."""

    name = "test-refuses-late"

    def run(self, case, inputs, out):
        time.sleep(0.15)
        raise Unsupported("refuses every case (test)")


class RaisesLate(ReferenceBackend):
    """Fails after 0.15 s: an error without output (a kernel launch that failed)."""

    name = "test-raises-late"

    def run(self, case, inputs, out):
        time.sleep(0.15)
        raise RuntimeError("kernel launch failed: invalid configuration argument")


class RefusesBatches(ReferenceBackend):
    """The reference on one sequence; refuses a batch (two or more sequences) at once."""

    name = "test-refuses-batches"

    def unsupported_reason(self, case: Case) -> str | None:
        return "one sequence only (test)" if case.batch > 1 else None


@pytest.fixture
def slow_reference(monkeypatch) -> list[str]:
    """Every reference takes :data:`SLOW_S` more; the case ids computed, in order."""
    computed: list[str] = []
    real = judging.compute_baseline

    def slow(case, device, **kw):
        computed.append(case.case_id)
        time.sleep(SLOW_S)
        return real(case, device, **kw)

    monkeypatch.setattr(judging, "compute_baseline", slow)
    return computed


def _stages(out) -> list[dict]:
    return [json.loads(ln) for ln in (out / STAGES_FILE).read_text().splitlines()]


def _sweep(specs, cases, out, **options):
    return sweep_run.run_sweep(specs, cases, out, SweepOptions(progress=False, probes=False, **options))


def test_a_wait_for_another_lanes_reference_ends_when_its_unless_says_so(monkeypatch):
    """The cache computes one reference at a time: a caller waiting for another's computation with ``unless`` stops
    once it says True (:class:`parity.judge.Overtaken`, nothing computed); a free cache computes whatever it says."""
    busy, other, free = CASES
    started, release = threading.Event(), threading.Event()
    real = judging.compute_baseline

    def compute(case, device, **kw):
        if case is busy:
            started.set()
            assert release.wait(30), "never released"
        return real(case, device, **kw)

    monkeypatch.setattr(judging, "compute_baseline", compute)
    cache = judging.BaselineCache("cpu")
    holder = threading.Thread(target=cache.get, args=(busy,))
    holder.start()
    try:
        assert started.wait(30)
        t0, answer_at = time.perf_counter(), time.perf_counter() + 0.2
        with pytest.raises(judging.Overtaken) as stopped:
            cache.ensure_timed(other, unless=lambda: time.perf_counter() > answer_at)
        waited = time.perf_counter() - t0
        assert 0.2 <= stopped.value.waited <= waited < 0.2 + 2.0, (stopped.value.waited, waited)  # not the 30 s it holds
        assert other.case_id not in cache.computed and not cache.cached(other)
    finally:
        release.set()
        holder.join(30)
    assert cache.ensure_timed(free, unless=lambda: True)[0] > 0 and cache.cached(free)  # free: computed, unless or not
    assert cache.computed == {busy.case_id: 1, free.case_id: 1}


def test_an_answer_is_in_once_sent_and_says_so_before_it_is_read():
    ex = ProcessExecutor(REFUSES, probes=False)
    try:
        assert not ex.answered()  # nothing submitted
        assert ex.submit(CASES[0]) is None
        assert ex.answered(30.0)
        assert ex.answered()  # still there: answered() reads nothing
        assert ex.collect(timeout=5)["status"] == "unsupported"
        assert not ex.answered()
    finally:
        ex.close()


def test_a_refused_row_gets_no_reference(tmp_path, slow_reference):
    """One lane, a backend that refuses every case at once, a reference of :data:`SLOW_S` a case: its rows are written
    without one being computed (before: each row computed its case's, ~SLOW_S a row, charged to ``reference``)."""
    out = tmp_path / "out"
    t0 = time.perf_counter()
    res = _sweep([REFUSES], CASES, out)
    assert {r["verdict"] for r in res.rows} == {"unsupported"} and len(res.rows) == 3
    assert slow_reference == [], f"references computed for refused rows: {slow_reference}"
    ms = [ln["stage_ms"] for ln in _stages(out)]
    assert all(m["reference"] == 0 and m["judge_wait"] < 50 and m["wait"] < 500 for m in ms), ms
    assert time.perf_counter() - t0 < 30  # the worker's start-up, not SLOW_S a row (a loose bound: a loaded CPU)


def test_answers_that_come_while_another_lane_computes_its_reference_are_not_kept_waiting(tmp_path, monkeypatch):
    """The cache busy with another lane's reference for 8 s, workers that refuse or fail after 0.15 s (past the lane's
    grace): the lane stops waiting for the cache once the answer is in and writes the row (before: 8 s of ``judge_wait``
    on the first row, then the reference of each case computed for rows that need none)."""
    started, release = threading.Event(), threading.Event()
    real = judging.compute_baseline
    held = Case(q_lens=(7,), k_lens=(9,), hq=2, hkv=2, head_dim=8, dtype="float32", seed=9)  # another lane's case

    def compute(case, device, **kw):
        if case is held:
            started.set()
            release.wait(8.0)
        return real(case, device, **kw)

    monkeypatch.setattr(judging, "compute_baseline", compute)
    out = tmp_path / "out"
    sweep = sweep_run.Sweep([REFUSES_LATE, RAISES_LATE], CASES, SweepOptions(progress=False, probes=False), out)
    other_lane = threading.Thread(target=sweep.baselines[None].get, args=(held,))
    sweep.on_started = lambda _: (other_lane.start(), started.wait(30))  # the cache busy before the first row
    try:
        res = sweep.run()
        still_busy = other_lane.is_alive()
    finally:
        release.set()
        other_lane.join(30)
    assert still_busy, "the other lane's reference ended before the rows: nothing was measured"
    verdicts = {(r["backend"], r["verdict"]) for r in res.rows}
    assert len(res.rows) == 6 and verdicts == {(REFUSES_LATE, "unsupported"), (RAISES_LATE, "error")}
    ms = [ln["stage_ms"] for ln in _stages(out)]
    # reference: the shared draw of the inputs their calls needed (the first row of each case), not a reference
    assert all(m["judge_wait"] < 50 and m["reference"] < 100 and 100 <= m["wait"] < 2000 for m in ms), ms
    assert set(sweep.baselines[None].computed) == {held.case_id}  # the refused rows' cases: never computed


def test_rows_with_an_output_are_judged_against_the_reference_beside_refused_ones(tmp_path, slow_reference):
    """A backend that refuses batches and runs the rest, the reference, an error without output: each case's reference
    computed once, by the first row with an output to judge; the rows without one charge none of it, nor the case's
    shared draw of inputs (a row refused up front draws none: its worker reads none)."""
    out = tmp_path / "out"
    res = _sweep([REFUSES_BATCHES, "reference", RAISES], CASES, out)
    by = {(r["backend"], r["case_id"]): r for r in res.rows}
    single, batch, decode = (c.case_id for c in CASES)
    judged = by[(REFUSES_BATCHES, single)]  # the reference's own float32 arithmetic against the float64 reference
    assert judged["verdict"] == "pass" and 0.0 < float(judged["max_abs_err"]) < 1e-5 and judged["threshold_max"] != ""
    assert by[(REFUSES_BATCHES, batch)]["verdict"] == by[(REFUSES_BATCHES, decode)]["verdict"] == "unsupported"
    assert {by[(RAISES, c.case_id)]["verdict"] for c in CASES} == {"error"}
    assert {by[("reference", c.case_id)]["verdict"] for c in CASES} == {"pass"}
    assert sorted(slow_reference) == sorted(c.case_id for c in CASES)  # once a case: the cache keeps it for the next lane
    lines = _stages(out)
    idle = [ln["stage_ms"] for ln in lines if ln["status"] != "ok"]
    assert len(idle) == 5 and all(m["reference"] == 0 and m["judge_wait"] < 50 for m in idle), idle
    charged = {ln["case_id"]: ln["backend"] for ln in lines if ln["stage_ms"]["reference"] >= SLOW_S * 1000}
    assert charged == {single: REFUSES_BATCHES, batch: "reference", decode: "reference"}


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k != "time_ms"} for r in csv.DictReader(f)]


def test_results_are_those_of_a_lane_that_waits_for_the_reference(tmp_path, monkeypatch):
    """A small mixed sweep (refusals, an error, passes, a failure, two lanes): results.csv the same, apart from
    ``time_ms``, as where the lane never sees an answer before its reference and every row is sent the case's shared
    draw (the code before this change)."""
    specs = [REFUSES_BATCHES, RAISES, "reference", "sdpa", "parity.selftest.bugs:WindowOneWider", REFUSES]
    _sweep(specs, CASES, tmp_path / "early", jobs=2)
    monkeypatch.setattr(sweep_run, "EARLY_ANSWER_S", 0.0)
    monkeypatch.setattr(ProcessExecutor, "answered", lambda self, timeout=0.0: False)
    monkeypatch.setattr(sweep_run.Sweep, "_refused_up_front", lambda self, unit, case: False)  # every row draws
    _sweep(specs, CASES, tmp_path / "late", jobs=2)
    early, late = _rows(tmp_path / "early" / "results.csv"), _rows(tmp_path / "late" / "results.csv")
    key = lambda r: (r["backend"], r["case_id"])  # noqa: E731
    assert len(early) == len(specs) * len(CASES) and sorted(early, key=key) == sorted(late, key=key)
    assert {r["verdict"] for r in early} >= {"pass", "fail", "unsupported", "error"}
