"""Rows set aside while the compile pre-pass builds their kernel key (parity.sweep.run.Sweep._set_aside), outside the
lanes' own pass: rows held back to run alone, timeouts' retries, and rows a --time-limit cuts before their key's
build ended (left to --resume). The pre-pass here is a :class:`PrePass` that is never started: a key goes in flight
with its ``_next`` (as a worker takes it) and its build ends with :func:`_end_build`, when the test says."""

from __future__ import annotations

import csv
import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from parity import Case, Window
from parity.backends.reference import ReferenceBackend
from parity.sweep import Sweep, SweepOptions, run_sweep
from parity.sweep import run as sweep_run
from parity.sweep.memgate import MemoryGate
from parity.sweep.precompile import PrecompilePlan, PrePass, PrePassOptions, build_id

from .helpers import RecordingOnCuda
from .test_gate_waits import one_gate

ME = "tests.test_precompile_aside"
GIB = 2**30
BASE = Case(q_lens=(5,), k_lens=(5,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=0)
#: each backend call of this module's backends: (case id, ``time.perf_counter()``) as it started
CALLS: list[tuple[str, float]] = []


def _prepass(backend: str, case: Case) -> PrePass:
    """A pre-pass over (its deadline passed: every lane starts) whose one key, ``case``'s, no worker took yet."""
    plan = PrecompilePlan({backend: [case]}, {}, {backend: 1})
    pre = PrePass(PrePassOptions(plan, SweepOptions()))
    pre.over.set()
    return pre


def _start_build(pre: PrePass, backend: str) -> None:
    """A worker of ``pre`` takes its key: it is being built now (:meth:`PrePass.being_built`)."""
    assert pre._next(backend) is not None


def _end_build(pre: PrePass, backend: str, case: Case) -> float:
    """The build of ``case``'s key ended (as :meth:`PrePass._builds` ends it): when."""
    with pre.lock:
        pre.building -= 1
        pre.in_flight.pop(build_id(backend, case)).set()
    return time.perf_counter()


def _aside(out: Path) -> tuple[dict[str, int], dict[str, float]]:
    pre = json.loads((out / "timing.json").read_text())["precompile"]
    return pre["lanes_set_aside"], pre["lanes_set_aside_waited_s"]


# -- rows held back to run alone ------------------------------------------------------------------------------


class HeldKey(RecordingOnCuda):
    """A kernel per head dim; on "CUDA", 5 GiB for a case of 9 queries (over the lanes' 2 GiB: held back to run alone
    after every other row), 1 KiB else. Its row of ``STARTS`` sets the pre-pass building the key of head dim 8 (as
    another backend of its build group can: such a lane does not wait for the group's builds), its row of ``ENDS``
    ends that build ``END_AFTER_S`` later."""

    name = "test-aside-held-key"
    calls: list[str] = []
    pre: PrePass | None = None
    ended: list[float] = []

    def compile_key(self, case):
        return (case.head_dim,)

    def workspace_bytes(self, case):
        return 5 * GIB if case.q_lens[0] == 9 else 1024

    def run(self, case, inputs, out):
        CALLS.append((case.case_id, time.perf_counter()))
        pre, name = type(self).pre, f"{ME}:HeldKey"
        if pre is not None and case == STARTS:
            _start_build(pre, name)
        if pre is not None and case == ENDS:
            end = threading.Timer(END_AFTER_S, lambda: self.ended.append(_end_build(pre, name, HELD[0])))
            end.start()
        return super().run(case, inputs, out)


#: head dims 8 and 16, a row of 5 queries and one of 9 (held back) each: the lane runs 8/5, 16/5, then 8/9, 16/9 alone
HELD = [
    dataclasses.replace(BASE, q_lens=(q,), k_lens=(q,), head_dim=d, seed=i) for i, (d, q) in enumerate([(8, 5), (8, 9), (16, 5), (16, 9)])
]
STARTS, ENDS, END_AFTER_S = HELD[2], HELD[3], 0.5


@pytest.fixture
def gate(monkeypatch) -> MemoryGate:
    """The sweep's one gate (tests/test_gate_waits.py's :func:`one_gate`)."""
    CALLS.clear()
    return one_gate(monkeypatch)


def test_a_held_back_row_whose_key_is_being_built_waits_for_the_build_while_the_other_held_back_rows_run(gate, tmp_path, monkeypatch):
    name, out = f"{ME}:HeldKey", tmp_path / "out"
    monkeypatch.setattr(HeldKey, "pre", _prepass(name, HELD[0]))
    monkeypatch.setattr(HeldKey, "ended", [])
    sweep = Sweep([name], HELD, SweepOptions(isolate=False, probes=False, progress=False, jobs=1), out)
    sweep.precompiling = HeldKey.pre  # isolate=False: the sweep starts no pre-pass of its own
    res = sweep.run()
    assert sorted(r["case_id"] for r in res.rows) == sorted(c.case_id for c in HELD) and not res.partial
    assert {r["verdict"] for r in res.rows} == {"pass"}
    assert gate.alone_rows == 2, f"rows that ran alone: {gate.alone_rows} (the 9-query rows)"
    order = [c for c, _ in CALLS]
    assert order == [HELD[i].case_id for i in (0, 2, 3, 1)], f"calls in this order (the 8/9 row set aside): {order}"
    (ended,) = HeldKey.ended
    sent = next(t for c, t in CALLS if c == HELD[1].case_id)
    assert sent >= ended, f"the held-back row of head dim 8 was sent {ended - sent:.3f} s before its key's build ended"
    counts, waits = _aside(out)
    assert counts == {name: 1} and waits["held back"] > END_AFTER_S / 2, (counts, waits)


# -- timeouts' retries ---------------------------------------------------------------------------------------


class HangsOnce(ReferenceBackend):
    """A kernel per head dim; its row of seed 1 hangs on its first call (a file in ``$PARITY_TEST_ONCE`` says it
    did: each call runs in a worker process, restarted after a timeout)."""

    name = "test-aside-hangs-once"

    def compile_key(self, case):
        return (case.head_dim,)

    def run(self, case, inputs, out):
        import os

        mark = Path(os.environ["PARITY_TEST_ONCE"]) / case.case_id
        if case.seed == 1 and not mark.exists():
            mark.touch()
            time.sleep(120)
        return super().run(case, inputs, out)


RETRIED = [dataclasses.replace(BASE, head_dim=d, seed=s) for d, s in [(8, 0), (8, 1), (16, 2)]]


def test_a_timeout_s_retry_waits_for_its_key_s_build(tmp_path, monkeypatch):
    """The row of seed 1 times out; as it was sent, the pre-pass started building its key (as another backend of its
    build group can). Its retry, after the lanes, is sent only once that build ended (1 s after the lane's end)."""
    name, out, hang = f"{ME}:HangsOnce", tmp_path / "out", RETRIED[1]
    (tmp_path / "once").mkdir()
    monkeypatch.setenv("PARITY_TEST_ONCE", str(tmp_path / "once"))
    pre, sent = _prepass(name, hang), []
    real = sweep_run.make_executor

    def recording(*args, **kwargs):  # each row sent to a worker: when; the hanging row's key goes in flight with it
        ex = real(*args, **kwargs)
        submit = ex.submit

        def send(case, inputs=None):
            sent.append((case.case_id, time.perf_counter()))
            if case == hang and not pre.in_flight and not ended:
                _start_build(pre, name)
            return submit(case, inputs)

        ex.submit = send
        return ex

    monkeypatch.setattr(sweep_run, "make_executor", recording)
    sweep = Sweep([name], RETRIED, SweepOptions(timeout=5, precompile="off", probes=False, progress=False, jobs=1), out)
    sweep.precompiling = pre
    ended: list[float] = []

    def end_after_the_lane() -> None:
        deadline = time.monotonic() + 120
        while not sweep.timing.lane_wall and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)
        ended.append(_end_build(pre, name, hang))

    ender = threading.Thread(target=end_after_the_lane, daemon=True)
    ender.start()
    res = sweep.run()
    ender.join(130)
    verdicts = {r["case_id"]: r["verdict"] for r in res.rows}
    assert verdicts == dict.fromkeys((c.case_id for c in RETRIED), "pass"), [r["detail"] for r in res.rows]
    tries = [t for c, t in sent if c == hang.case_id]
    assert len(tries) == 2 and ended, (sent, ended)
    assert tries[1] >= ended[0], f"the retry was sent {ended[0] - tries[1]:.3f} s before its key's build ended"
    counts, waits = _aside(out)
    assert counts == {name: 1} and waits["retries"] > 0.5, (counts, waits)


# -- a --time-limit cuts a set-aside row: --resume runs it --------------------------------------------------


class Keyed(ReferenceBackend):
    """A kernel per head dim; records its calls (:data:`CALLS`); its first row of head dim 16 takes ``slow_s``."""

    name = "test-aside-keyed"
    slow_s = 0.0

    def compile_key(self, case):
        return (case.head_dim,)

    def run(self, case, inputs, out):
        CALLS.append((case.case_id, time.perf_counter()))
        if case == CUT[3]:
            time.sleep(self.slow_s)
        return super().run(case, inputs, out)


CUT = [dataclasses.replace(BASE, head_dim=d, seed=s) for d in (8, 16) for s in range(3)]


def _results(out: Path) -> list[dict[str, str]]:
    with (out / "results.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("slow", [False, True], ids=["after-its-last-case", "mid-lane"])
def test_a_set_aside_row_cut_by_the_time_limit_is_not_written_and_resume_runs_it(tmp_path, monkeypatch, slow):
    """Head dim 8's key is being built the whole run: the lane sets its three rows aside and runs the others; the
    --time-limit of 2 s passes while it waits for the build after its last case, or while it runs its first row of head
    dim 16 (2.5 s). The rows set aside are not written (not a pass, not any verdict), the run is partial and says so,
    and --resume runs them, and only the rows not run."""
    name, out = f"{ME}:Keyed", tmp_path / "out"
    monkeypatch.setattr(Keyed, "slow_s", 2.5 if slow else 0.0)
    late, ran = [c.case_id for c in CUT[:3]], [c.case_id for c in CUT[3 : 4 if slow else 6]]
    CALLS.clear()
    sweep = Sweep([name], CUT, SweepOptions(isolate=False, probes=False, progress=False, jobs=1, time_limit=2.0), out)
    sweep.precompiling = _prepass(name, CUT[0])
    _start_build(sweep.precompiling, name)  # never ends in this run
    res = sweep.run()
    assert res.partial and res.stopped_by.startswith("--time-limit 2 s reached"), res.stopped_by
    assert "(3 row(s) set aside while the pre-pass built their key not run)" in res.stopped_by, res.stopped_by
    assert sorted(c for c, _ in CALLS) == sorted(ran), "the lane sent these rows"
    assert not {r["case_id"] for r in res.rows} & set(late), "a set-aside row not sent has a row"
    assert sorted(r["case_id"] for r in _results(out)) == sorted(ran), "results.csv: the rows sent, no other"
    assert res.counts() == {name: {"pass": len(ran)}}
    counts, waits = _aside(out)
    assert counts == {name: 3} and (waits.get(name, 0.0) > 0.5) == (not slow), (counts, waits)
    CALLS.clear()
    again = run_sweep([name], CUT, out, isolate=False, probes=False, progress=False, jobs=1, resume=True)
    assert sorted(c for c, _ in CALLS) == sorted(c.case_id for c in CUT if c.case_id not in ran), "--resume ran these"
    assert not again.partial and again.already == len(ran) and again.counts() == {name: {"pass": len(CUT) - len(ran)}}
    rows = _results(out)
    assert sorted(r["case_id"] for r in rows) == sorted(c.case_id for c in CUT), "each row once in results.csv"
    assert {r["verdict"] for r in rows} == {"pass"}
