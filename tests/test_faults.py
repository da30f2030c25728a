"""Fault containment: a backend that misbehaves costs its own row, with the reason, and the sweep goes on.

Also: rows are on disk as they are produced, so a sweep killed mid-run (SIGINT, SIGKILL)
keeps every finished row, and ``--resume`` runs only the rest.
"""

from __future__ import annotations

import csv
import ctypes
import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from parity import Backend, Case, Window
from parity.backends.reference import ReferenceBackend
from parity.sweep import COLUMNS, run_sweep, split_line
from parity.sweep.timing import stage_table

ROOT = Path(__file__).resolve().parents[1]
ME = "tests.test_faults"
CASES = [
    Case(q_lens=(8,), k_lens=(8,), hq=2, hkv=1, head_dim=8, dtype="bfloat16", window=Window(2, 0), seed=0),
    Case(q_lens=(1, 1), k_lens=(9, 5), hq=2, hkv=2, head_dim=8, dtype="float16", window=Window.tokens(3), seed=1),
]


# -- backends that break the interface or compute garbage (contained in-process) --------------------------


class Raises(Backend):
    name = "fault-raises"

    def run(self, case, inputs, out):
        raise RuntimeError("kernel launch failed: invalid configuration argument")


class WrongShape(ReferenceBackend):
    name = "fault-shape"

    def run(self, case, inputs, out):
        return super().run(case, inputs, out)[:, :, :-1]


class WrongDtype(ReferenceBackend):
    name = "fault-dtype"

    def run(self, case, inputs, out):
        return super().run(case, inputs, out).float()


class WrongDevice(Backend):
    name = "fault-device"

    def run(self, case, inputs, out):
        return torch.empty(out.shape, dtype=out.dtype, device="meta")


class ReturnsNone(ReferenceBackend):
    name = "fault-returns-none"

    def run(self, case, inputs, out):
        super().run(case, inputs, out)


class WritesNaN(ReferenceBackend):
    name = "fault-nan"

    def run(self, case, inputs, out):
        super().run(case, inputs, out)
        out[0, 0, 0] = float("nan")
        return out


class LeavesBufferUnwritten(Backend):
    name = "fault-unwritten"

    def run(self, case, inputs, out):
        return out  # the poison is still there


# -- backends that take their process down (contained by the worker) ---------------------------------------


class ProcessKiller(ReferenceBackend):
    """One fault per case seed; seeds 1, 3, 5, 7, 9 compute honestly (the sweep must go on)."""

    name = "fault-process"

    def run(self, case, inputs, out):
        if case.seed == 0:
            time.sleep(600)  # hang
        elif case.seed == 2:
            os.abort()
        elif case.seed == 4:
            ctypes.string_at(0)  # segfault: read address 0
        elif case.seed == 6:  # a real allocation failure: address space capped for this call only
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            mapped = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), hard))  # 1 GiB more than now
            try:
                torch.empty(4 << 30, dtype=torch.uint8)
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        elif case.seed == 8:
            os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
        return super().run(case, inputs, out)


def _by(rows):
    return {(r["backend"].split(":")[-1], int(r["seed"])): r for r in rows}


def test_interface_faults_and_garbage_are_rows_with_reasons(tmp_path):
    names = ["Raises", "WrongShape", "WrongDtype", "WrongDevice", "ReturnsNone", "WritesNaN", "LeavesBufferUnwritten"]
    res = run_sweep([f"{ME}:{n}" for n in names] + ["reference"], CASES, out_dir=tmp_path, isolate=False, progress=False)
    got = _by(res.rows)
    for seed in (0, 1):
        assert got[("Raises", seed)]["verdict"] == "error"
        assert "RuntimeError at test_faults.py:" in got[("Raises", seed)]["detail"]
        assert "invalid configuration argument" in got[("Raises", seed)]["detail"]
        assert got[("WrongShape", seed)]["verdict"] == "error" and "interface: run() returned shape" in got[("WrongShape", seed)]["detail"]
        assert got[("WrongDtype", seed)]["verdict"] == "error" and "dtype torch.float32" in got[("WrongDtype", seed)]["detail"]
        assert got[("WrongDevice", seed)]["verdict"] == "error" and "on meta" in got[("WrongDevice", seed)]["detail"]
        assert got[("ReturnsNone", seed)]["verdict"] == "error" and "returned NoneType" in got[("ReturnsNone", seed)]["detail"]
        assert got[("WritesNaN", seed)]["verdict"] == "fail" and "nan" in got[("WritesNaN", seed)]["reasons"].split()
        assert got[("WritesNaN", seed)]["nan_count"] == 1
        assert got[("LeavesBufferUnwritten", seed)]["verdict"] == "fail" and "unwritten" in got[("LeavesBufferUnwritten", seed)]["reasons"]
        assert got[("reference", seed)]["verdict"] == "pass"  # the faults cost nobody else anything
    on_disk = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert len(on_disk) == len(CASES) * (len(names) + 1) and [r["verdict"] for r in on_disk] == [r["verdict"] for r in res.rows]


def test_process_faults_are_rows_and_the_worker_restarts(tmp_path):
    cases = [dataclasses.replace(CASES[s % 2], seed=s) for s in range(10)]
    res = run_sweep([f"{ME}:ProcessKiller"], cases, out_dir=tmp_path, isolate=True, timeout=6, progress=False)
    got = {int(r["seed"]): r for r in res.rows}
    assert got[0]["verdict"] == "timeout" and "no answer within 6 s, nor within 6 s when retried alone; worker killed" in got[0]["detail"]
    assert got[2]["verdict"] == "crash" and "killed by SIGABRT" in got[2]["detail"]
    assert got[4]["verdict"] == "crash" and "killed by SIGSEGV" in got[4]["detail"]
    assert got[6]["verdict"] == "error" and "can't allocate memory" in got[6]["detail"]
    assert got[8]["verdict"] == "crash" and "killed by SIGKILL" in got[8]["detail"]
    for s in (1, 3, 5, 7, 9):  # after each fault a fresh worker (the same one after the OOM error) passes
        assert got[s]["verdict"] == "pass", (s, got[s]["detail"])
    assert got[6]["detail"].endswith("(retried alone: out of memory again)")
    # the row out of memory is run again alone after the others (parity.sweep.deferred); the row that timed out is
    # written last, once retried alone
    assert [int(r["seed"]) for r in csv.DictReader((tmp_path / "results.csv").open())] == [1, 2, 3, 4, 5, 7, 8, 9, 6, 0]


# -- interrupted runs -------------------------------------------------------------------------------------


class Slow(ReferenceBackend):
    name = "slow"

    def run(self, case, inputs, out):
        time.sleep(0.3)
        return super().run(case, inputs, out)


N = 10
SLOW_CASES = [Case(q_lens=(6,), k_lens=(6,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(1, 0), seed=s) for s in range(N)]


class HangsWhileMarked(Slow):
    """Slow; on seed 3 it hangs while the file ``$PARITY_TEST_HANG`` is there (and says so in ``$PARITY_TEST_HANG.in``):
    a row in flight when a run is stopped."""

    name = "hangs-while-marked"

    def run(self, case, inputs, out):
        marker, t0 = os.environ.get("PARITY_TEST_HANG"), time.monotonic()
        if case.seed == 3 and marker and os.path.exists(marker):
            Path(marker + ".in").touch()
        while case.seed == 3 and marker and os.path.exists(marker) and time.monotonic() - t0 < 600:
            time.sleep(0.05)
        return super().run(case, inputs, out)


def _start(tmp_path: Path, *extra: str, backend: str = f"{ME}:Slow", marker: Path | None = None, report: bool = False) -> subprocess.Popen:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(c.to_json() + "\n" for c in SLOW_CASES))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"PARITY_TEST_HANG": str(marker)} if marker else {})}
    cmd = [sys.executable, "-m", "parity", "run", "--backend", backend, "--case-file", str(cases)]
    cmd += ["--out", str(tmp_path / "out"), "--no-probes", *([] if report else ["--no-report"]), "-q", *extra]
    # A process started with SIGINT ignored (a background job of a non-interactive shell: `pytest &`
    # in a CI script) passes SIG_IGN on, and Python then installs no KeyboardInterrupt handler:
    # the sweep would shrug off the test's Ctrl-C. Give the sweep the disposition a terminal gives it.
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _rows(tmp_path: Path) -> list[dict]:
    path = tmp_path / "out" / "results.csv"
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _wait_for_rows(proc: subprocess.Popen, tmp_path: Path, n: int) -> None:
    """Until results.csv holds ``n`` rows (generous: a loaded machine starts workers slowly)."""
    deadline = time.monotonic() + 120
    while len(_rows(tmp_path)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no rows written"
        time.sleep(0.05)


def _environment(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "environment.json").read_text())


def _interrupt_and_resume(tmp_path: Path, sig: signal.Signals, *extra: str) -> None:
    proc = _start(tmp_path, *extra)
    try:
        _wait_for_rows(proc, tmp_path, 3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    env = _environment(tmp_path)  # the backend's version, whatever ended the run
    assert env["partial"] is True and env["backends"][f"{ME}:Slow"]["version"] == torch.__version__, env
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted by SIGINT" in err and "Traceback" not in err, err
        assert f"parity run --resume --out {tmp_path / 'out'}" in err, err
        assert "in_progress" not in env and "SIGINT" in env["partial_why"], env
    else:  # killed: the environment.json written before the first row
        assert proc.returncode == -signal.SIGKILL
        assert env["in_progress"] is True and env["rows_run"] == 0, env
    before = _rows(tmp_path)
    assert 3 <= len(before) < N, len(before)
    assert all(set(r) == set(COLUMNS) and r["verdict"] == "pass" and Case.from_json(r["case_json"]) for r in before)
    text_before = (tmp_path / "out" / "results.csv").read_text()

    if sig == signal.SIGINT:  # through the command line
        resumed = _start(tmp_path, "--resume", *extra)
        out, err = resumed.communicate(timeout=180)
        assert resumed.returncode == 0, err
        summary = next(line for line in out.splitlines() if line.startswith(f"{ME}:Slow"))
        assert int(summary.split()[1]) == N  # the summary after --resume counts every row of the folder
        ran = json.loads((tmp_path / "out" / "environment.json").read_text())["rows_run"]  # this segment's rows
    else:  # in this process (saves a start-up): the recorded command, --no-isolate
        from parity.cli import main

        assert main(["run", "--resume", "--out", str(tmp_path / "out")]) == 0
        ran = _environment(tmp_path)["rows_run"]
    env = _environment(tmp_path)
    assert env["partial"] is False and "in_progress" not in env and "partial_why" not in env, env
    assert [e["partial"] for e in env["earlier_runs"]] == [True], env  # the cut-short run, once (not the resume's own)
    assert env["earlier_runs"][0]["in_progress"] is (True if sig == signal.SIGKILL else None), env
    after = _rows(tmp_path)
    assert (tmp_path / "out" / "results.csv").read_text().startswith(text_before)  # finished rows kept as they were
    assert sorted(int(r["seed"]) for r in after) == list(range(N))  # every case exactly once
    assert ran == N - len(before)  # the resumed run ran only the rest


def test_sigint_mid_sweep_keeps_finished_rows_and_resume_runs_the_rest(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGINT)


def test_sigkill_mid_sweep_keeps_finished_rows_and_resume_runs_the_rest(tmp_path):
    # inline, so SIGKILL takes the backend down with the sweep (no orphaned worker)
    _interrupt_and_resume(tmp_path, signal.SIGKILL, "--no-isolate")


def _stop_hanging_run(tmp_path: Path, signals: int, *extra: str) -> tuple[subprocess.Popen, str, str, float]:
    """Start a run whose seed-3 row hangs (a marker file), wait until rows 0-2 are in results.csv and seed 3 hangs,
    send SIGTERM ``signals`` times (0.5 s apart); its exit, stdout, stderr and seconds after the last."""
    marker = tmp_path / "hang"
    marker.touch()
    proc = _start(tmp_path, "--timeout", "300", *extra, backend=f"{ME}:HangsWhileMarked", marker=marker, report=True)
    try:
        _wait_for_rows(proc, tmp_path, 3)
        deadline = time.monotonic() + 60
        while not (tmp_path / "hang.in").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "seed 3 never ran"
            time.sleep(0.05)
        for i in range(signals):
            time.sleep(0.5 * bool(i))
            proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=120)
        return proc, out, err, time.monotonic() - t0
    finally:
        marker.unlink()  # a worker left hanging (a harness without the handler) ends its row
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_ends_the_run_as_a_partial_one_with_its_environment_and_resume_runs_the_rest(tmp_path):
    """`timeout` / a CI job's time limit: the hanging row's worker is stopped (not recorded), and the folder is
    what --time-limit leaves: environment.json (partial, the backend's version), timing.json, the reports."""
    proc, out, err, took = _stop_hanging_run(tmp_path, 1)
    folder = tmp_path / "out"
    assert proc.returncode == 143 and "Traceback" not in err, err  # 128 + SIGTERM, as the README lists
    assert took < 60, took  # not the row's 300 s limit: its worker was stopped
    assert "PARTIAL: interrupted by SIGTERM" in err and f"parity run --resume --out {folder} runs the rest (exit 143)" in err, err
    assert [int(r["seed"]) for r in _rows(tmp_path)] == [0, 1, 2]  # the row in flight is not recorded
    env = _environment(tmp_path)
    assert env["partial"] is True and "in_progress" not in env and env["partial_why"].startswith("interrupted by SIGTERM"), env
    assert env["backends"][f"{ME}:HangsWhileMarked"]["version"] == torch.__version__ and env["rows_run"] == 3, env
    assert json.loads((folder / "timing.json").read_text())["partial"] is True
    assert "PARTIAL: interrupted by SIGTERM" in (folder / "summary.md").read_text().splitlines()[0]
    assert next(x for x in out.splitlines() if x.startswith(f"{ME}:HangsWhileMarked")).split()[1] == "3"  # the summary table

    from parity.cli import main  # the rest, in this process (saves a start-up); no marker here: seed 3 answers

    assert main(["run", "--resume", "--out", str(folder), "--no-isolate", "--no-report"]) == 0
    assert sorted(int(r["seed"]) for r in _rows(tmp_path)) == list(range(N))
    env = _environment(tmp_path)
    assert env["partial"] is False and env["rows_run"] == N - 3 and env["earlier_runs"][0]["partial_why"].startswith("interrupted"), env


def test_a_second_sigterm_ends_the_run_at_once_with_its_environment(tmp_path):
    """In this process (--no-isolate) the first signal cannot stop the hanging row; the second ends the run where
    it is: environment.json (partial, the backend's version) written, no reports, exit 143."""
    proc, _, err, took = _stop_hanging_run(tmp_path, 2, "--no-isolate")
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert took < 60, took
    assert "interrupted by SIGTERM: a PARTIAL run" in err and f"--resume --out {tmp_path / 'out'}" in err, err
    assert [int(r["seed"]) for r in _rows(tmp_path)] == [0, 1, 2]
    env = _environment(tmp_path)
    assert env["partial"] is True and "in_progress" not in env and env["rows_run"] == 3, env
    assert env["backends"][f"{ME}:HangsWhileMarked"]["version"] == torch.__version__, env
    assert not (tmp_path / "out" / "summary.md").exists()  # the second signal: environment.json only


def test_resume_drops_a_row_torn_by_a_kill_mid_write(tmp_path):
    out = tmp_path / "out"
    run_sweep(["reference"], SLOW_CASES[:3], out_dir=out, isolate=False, progress=False)
    path = out / "results.csv"
    text = path.read_text()
    torn = text[: text.rindex("\n", 0, len(text) - 1) + 1] + text.splitlines(keepends=True)[-1][:40]  # last row cut
    path.write_text(torn)
    res = run_sweep(["reference"], SLOW_CASES[:3], out_dir=out, isolate=False, resume=True, progress=False)
    assert [int(r["seed"]) for r in res.rows] == [2]  # only the torn row ran again
    rows = list(csv.DictReader(path.open(newline="")))
    assert [int(r["seed"]) for r in rows] == [0, 1, 2] and all(r["verdict"] == "pass" for r in rows)


def test_resume_keeps_the_earlier_calls_timing(tmp_path):
    """A run spread over calls (--time-limit, then --resume) says what it cost in all: timing.json keeps each
    earlier call's headline and sums every call, the current one included."""
    out = tmp_path / "out"
    run_sweep(["reference"], SLOW_CASES[:2], out_dir=out, isolate=False, progress=False)
    first = json.loads((out / "timing.json").read_text())
    assert "earlier_calls" not in first and first["rows_run"] == 2  # a fresh run has one call
    run_sweep(["reference"], SLOW_CASES[:3], out_dir=out, isolate=False, resume=True, progress=False)
    run_sweep(["reference"], SLOW_CASES[:3], out_dir=out, isolate=False, resume=True, progress=False)  # nothing left
    timing = json.loads((out / "timing.json").read_text())
    calls = timing["earlier_calls"]
    assert [c["rows_run"] for c in calls] == [2, 1] and timing["rows_run"] == 0, calls
    assert calls[0]["wall_s"] == first["wall_s"]
    total = timing["all_calls"]
    assert total["calls"] == 3 and total["rows_run"] == 3, total
    assert total["wall_s"] == pytest.approx(sum(c["wall_s"] for c in calls) + timing["wall_s"], abs=0.01), total
    assert "3 calls (--resume)" in split_line(timing) and "3 rows in all" in split_line(timing)
    stages = total["stages"]["reference"]  # the stage table of the whole run: each call's rows, summed
    assert stages["rows"] == 3 and stages["stages_s"]["call"] > 0, stages
    assert stage_table(timing)[1][0][:2] == ["reference", "3"]


def _stopped_during_second_case(monkeypatch, module, out, **options):
    """Two cases on the ``reference`` backend, ``module._row_blocks`` slowed to 0.1 s a block of one query row on the
    second (64 rows: 6.4 s a pass) while ``slow[0]``; a SIGTERM 0.3 s into that case, as the handler sends it. Returns
    ``(sweep, result, signalled_at, cases, slow)``."""
    import threading

    from parity.sweep import Sweep, SweepOptions

    real = module._row_blocks
    started, slow, signalled = threading.Event(), [True], [0.0]

    def slow_blocks(lo, hi, hq, elem, block_bytes):
        for block in real(lo, hi, hq, elem, 1):  # one query row a block
            if lo.numel() == 64 and slow[0]:  # the second case only
                started.set()
                time.sleep(0.1)
            yield block

    monkeypatch.setattr(module, "_row_blocks", slow_blocks)
    cases = [dataclasses.replace(SLOW_CASES[0], seed=0), Case(q_lens=(64,), k_lens=(64,), hq=1, hkv=1, head_dim=8, dtype="float32", seed=1)]
    sweep = Sweep(["reference"], cases, SweepOptions(progress=False, probes=False, **options), out)

    def stop_once_computing() -> None:  # as the SIGTERM handler does
        started.wait(120)
        time.sleep(0.3)
        signalled[0] = time.perf_counter()
        sweep.interrupt("SIGTERM")

    threading.Thread(target=stop_once_computing, daemon=True).start()
    res = sweep.run()
    assert started.is_set() and res.partial and res.interrupted == "SIGTERM", (res.partial, res.interrupted)
    return sweep, res, signalled[0], cases, slow


def test_a_stop_signal_ends_a_long_reference_within_a_block_and_drops_its_row(tmp_path, monkeypatch):
    """The sweep's own reference of a case (in this process, beside the worker) asks the stop signal before each block
    of rows: the 22nd session's probe (Sq = Sk = 1e8, d 1 on the CPU) went on computing for 5.5 minutes after the first
    SIGTERM. Here each block of one query row takes 0.1 s (64 rows: 6.4 s a pass, two passes), and the stop comes
    during the second case's reference: the run ends within a second or so, the first case's row kept, the second's
    dropped (``--resume`` runs it)."""
    import parity.reference as reference

    sweep, _, _, _, _ = _stopped_during_second_case(monkeypatch, reference, tmp_path / "out")
    took = time.perf_counter() - sweep.t_rows
    assert took < 4.0, f"the run went on {took:.1f} s after the second case's reference started (two passes take 12.8 s)"
    assert [int(r["seed"]) for r in _rows(tmp_path)] == [0], _rows(tmp_path)  # the row in flight is not recorded


def test_a_stop_signal_ends_the_reference_backend_in_this_process_within_a_block_and_drops_its_row(tmp_path, monkeypatch):
    """The same with ``--no-isolate``: the ``reference`` backend computes in the sweep's own process, and only a second
    SIGTERM ended its reference (the first set the sweep's stop, which the backend did not ask). The in-process
    executor's ``halt`` is the backend's ``stop``, asked before each block of rows: the run ends within a second or so
    of the signal, during the backend's own call (before the sweep's reference of the case), the first case's row kept,
    the second's dropped; ``--resume`` runs it."""
    import parity.reference as reference
    from parity.sweep import Sweep, SweepOptions

    sweep, _, _, cases, slow = _stopped_during_second_case(monkeypatch, reference, tmp_path / "out", isolate=False)
    took = time.perf_counter() - sweep.t_rows
    assert took < 4.0, f"the run went on {took:.1f} s after the second case's reference started (its call alone takes 6.4 s)"
    assert [int(r["seed"]) for r in _rows(tmp_path)] == [0], _rows(tmp_path)  # the row in flight is not recorded
    slow[0] = False
    again = Sweep(["reference"], cases, SweepOptions(progress=False, probes=False, isolate=False, resume=True), tmp_path / "out")
    assert not again.run().partial
    rows = _rows(tmp_path)
    assert sorted(int(r["seed"]) for r in rows) == [0, 1] and rows[-1]["verdict"] == "pass", rows


@pytest.mark.parametrize("isolate", [True, False], ids=["judge", "no-isolate"])
def test_a_stop_signal_ends_a_long_gradient_reference_within_a_block_and_drops_its_row(tmp_path, monkeypatch, isolate):
    """The same with ``--grad``: the float64 backward (:func:`parity.grad.grad_reference`) asks the stop signal before
    each block of rows, as the forward does. Isolated, it is the sweep's own gradient reference of the case, computed
    when the row is judged (the worker, another process, is not slowed); with ``--no-isolate`` it is first the
    ``reference`` backend's backward in the sweep's process. Each block of one query row takes 0.1 s on the second
    case (64 rows: 6.4 s a pass; the judge's baseline takes two passes, the backend's backward one): the run ends
    within a second or so of the signal, the first case's row kept, the second's dropped; ``--resume`` runs it."""
    import parity.grad as grad
    from parity.sweep import Sweep, SweepOptions

    options = {"progress": False, "probes": False, "grad": True, "isolate": isolate}
    _, _, signalled, cases, slow = _stopped_during_second_case(monkeypatch, grad, tmp_path / "out", grad=True, isolate=isolate)
    took = time.perf_counter() - signalled
    assert took < 2.5, f"the run went on {took:.1f} s after the signal (the rest of the slowed backward: 6.1 s or more)"
    assert [int(r["seed"]) for r in _rows(tmp_path)] == [0], _rows(tmp_path)  # the row in flight is not recorded
    slow[0] = False
    again = Sweep(["reference"], cases, SweepOptions(**options, resume=True), tmp_path / "out")
    assert not again.run().partial
    rows = _rows(tmp_path)
    assert sorted(int(r["seed"]) for r in rows) == [0, 1] and rows[-1]["verdict"] == "pass", rows
    assert rows[-1]["grad_check"] == "ok", rows[-1]  # the resumed row's backward judged, not an error
