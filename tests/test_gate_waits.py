"""The memory gate's waits recorded, and the rows that need the card alone run last (issues 47/48): on the H100
models run 74% of the lanes' time was idle, each row over the lanes' budget draining the card while every other lane
waited, once per such row; no record showed it. Here a card of 10 GiB with 2 GiB for the lanes (a fake memory
source: the gate's budget and the card's size are set, the rows run on the CPU)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from parity import Case, Window
from parity.runfolder import STAGES
from parity.sweep import rowmemory
from parity.sweep import run as sweep_run
from parity.sweep.memgate import MemoryGate
from parity.sweep.rowmemory import RowMemory
from parity.sweep.timing import gate_line
from parity.sweep.writers import summary_table

from .helpers import RecordingOnCuda

GIB = 2**30
#: (backend name, queries) of each row run, in the order the backends were called, over the backends of a test.
ORDER: list[tuple[str, int]] = []


class Sized(RecordingOnCuda):
    """On "CUDA": 5 GiB for a case of 9 queries (over the lanes' 2 GiB, within the card's 10: runs alone), 1 KiB else."""

    name = "test-gate-sized"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return 5 * GIB if case.q_lens[0] == 9 else 1024

    def run(self, case, inputs, out):
        ORDER.append((self.name, case.q_lens[0]))
        return super().run(case, inputs, out)


class Small(Sized):
    """Every row 1 KiB: never alone."""

    name = "test-gate-small"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return 1024


class SlowLast(Small):
    """As :class:`Small`, its last case (seed 5) taking 3 s: the lanes run past a 2 s --time-limit."""

    name = "test-gate-slow-last"
    calls: list[str] = []

    def run(self, case, inputs, out):
        if case.seed == 5:
            time.sleep(3.0)
        return super().run(case, inputs, out)


class Holding(Small):
    """1.5 GiB a row, 0.2 s each: beside it a row of another lane does not fit the 2 GiB and waits at the gate."""

    name = "test-gate-holding"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return 3 * GIB // 2

    def run(self, case, inputs, out):
        time.sleep(0.2)
        return super().run(case, inputs, out)


class Beside(Small):
    """1 GiB a row: fits the gate alone, not beside a :class:`Holding` row."""

    name = "test-gate-beside"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return GIB


class OomOnce(Small):
    """Out of memory on its first call of the case of seed 1 only (as when other lanes held the card)."""

    name = "test-gate-oom-once"
    calls: list[str] = []
    failed = False

    def run(self, case, inputs, out):
        if case.seed == 1 and not type(self).failed:
            type(self).failed = True
            ORDER.append((self.name, -1))
            raise torch.OutOfMemoryError("CUDA out of memory")
        if case.seed == 1:
            ORDER.append((self.name, -2))  # its retry
        return super().run(case, inputs, out)


class RefusesBig(Sized):
    """As :class:`Sized` (5 GiB for 9 queries: over the lanes' budget), but it refuses those cases by its own check."""

    name = "test-gate-refuses-big"
    calls: list[str] = []

    def unsupported_reason(self, case):
        return "9 queries: not taken by this kernel" if case.q_lens[0] == 9 else None


#: Six cases, the alone ones (9 queries) spread through them: 5, 9, 5, 9, 5, 9.
CASES = [
    Case(q_lens=(q,), k_lens=(q,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=i)
    for i, q in enumerate([5, 9, 5, 9, 5, 9])
]


def one_gate(monkeypatch) -> MemoryGate:
    """The sweep's one gate: 2 GiB for the lanes on a card of 10 GiB (a row's inputs made on the CPU); tests/
    test_precompile_aside.py's too."""
    from parity import execute as ex
    from parity.case import make_inputs

    gate = MemoryGate(2 * GIB)
    monkeypatch.setattr(ex, "card_bytes", lambda device=None: 10 * GIB)
    monkeypatch.setattr(ex, "total_bytes", lambda device=None: 12 * GIB)
    monkeypatch.setattr(rowmemory, "card_bytes", lambda device=None: 10 * GIB)
    monkeypatch.setattr(ex, "make_inputs", lambda case, device: make_inputs(case, "cpu"))
    monkeypatch.setattr(RowMemory, "make_gates", lambda self: (self.gates.update({None: gate}), self.cards.update({None: 10 * GIB})))
    return gate


@pytest.fixture
def gate(monkeypatch) -> MemoryGate:
    ORDER.clear()
    return one_gate(monkeypatch)


def _sweep(backends, out, **options):
    names = [f"{__name__}:{b.__name__}" for b in backends]
    return sweep_run.run_sweep(names, CASES, out, isolate=False, probes=False, progress=False, jobs=2, **options)


def test_the_gate_says_how_long_a_row_waited_and_whether_it_drained_the_card():
    gate, stop = MemoryGate(100), threading.Event()
    first = gate.try_admit(60)
    assert first is not None and (first.held, first.wait_s, first.alone, first.drained) == (60, 0.0, False, False)
    got = []
    big = threading.Thread(target=lambda: got.append(gate.admit(500, stop)), daemon=True)
    big.start()
    time.sleep(0.3)
    gate.release(60)
    big.join(5)
    (admitted,) = got
    assert admitted.alone and admitted.drained and admitted.wait_s >= 0.25 and admitted.held == 500
    gate.release(500)
    empty = gate.try_admit(500)  # over the budget on an empty card: alone, nothing drained
    assert empty is not None and empty.alone and not empty.drained
    assert (gate.alone_rows, gate.drains) == (2, 1)
    assert not MemoryGate(None).needs_card(1 << 60) and MemoryGate(100).needs_card(101) and not MemoryGate(100).needs_card(100)


def test_rows_that_need_the_card_alone_run_after_every_other_row(gate, tmp_path):
    """Three rows over the lanes' budget, spread through one lane's work beside another lane: they run after every
    other row of the run (before, each drained the card in the middle of the lanes' work), each has its row, and the
    card drained at most once."""
    res = _sweep([Sized, Small], tmp_path / "out")
    assert len(res.rows) == 12 and all(r["verdict"] == "pass" for r in res.rows), [r["detail"] for r in res.rows]
    alone = [i for i, (name, q) in enumerate(ORDER) if name == Sized.name and q == 9]
    assert len(alone) == 3 and min(alone) > max(i for i in range(len(ORDER)) if i not in alone), ORDER
    assert gate.alone_rows == 3 and gate.drains <= 1
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert timing["gate"]["alone_rows"] == 3 and timing["gate"]["held_back"] == 3 and timing["gate"]["drains"] == gate.drains
    assert timing["stages"][f"{__name__}:Sized"]["gate_alone_rows"] == 3
    lines = [json.loads(x) for x in (tmp_path / "out" / STAGES).read_text().splitlines()]
    assert sorted(ln["case_id"] for ln in lines if ln["ran_alone"]) == sorted(c.case_id for c in CASES if c.q_lens == (9,))
    assert all("gate" in ln["stage_ms"] for ln in lines)
    assert res.gate.startswith("gate: 3 rows ran alone (3 held back to run last") and res.gate in summary_table(res)


def test_the_gate_waits_are_a_stage_of_each_row_summed_per_backend_and_in_the_summary(gate, tmp_path):
    """A row that does not fit beside another lane's waits at the gate: its wait is its ``gate`` stage
    (stages.jsonl), summed per backend and for the run in timing.json, and one line of the summary and summary.md."""
    from parity.report.write import write_all

    out = tmp_path / "out"
    res = _sweep([Holding, Beside], out)
    assert len(res.rows) == 12 and all(r["verdict"] == "pass" for r in res.rows)
    lines = [json.loads(x) for x in (out / STAGES).read_text().splitlines()]
    timing = json.loads((out / "timing.json").read_text())
    waited = sum(ln["stage_ms"]["gate"] for ln in lines) / 1e3
    per_backend = sum(st["stages_s"]["gate"] for st in timing["stages"].values())
    assert waited > 0.1 and per_backend == pytest.approx(waited, abs=1e-2) and timing["gate"]["wait_s"] == pytest.approx(waited, abs=1e-2)
    assert timing["gate"]["alone_rows"] == 0 and not any(ln["ran_alone"] or ln["drained"] for ln in lines)
    assert res.gate == f"gate: 0 rows ran alone (0 drains of a card), lanes waited {timing['gate']['wait_s']:.1f} s in all"
    write_all(out)
    assert res.gate in (out / "summary.md").read_text()
    assert gate_line({"gate": {"wait_s": 0.0, "alone_rows": 0}}) == "" and gate_line({}) == ""


def test_a_time_limited_run_leaves_the_held_back_rows_to_resume(gate, tmp_path):
    """The lanes run past --time-limit: the rows held back to run alone are not run, the run is partial and says so,
    and --resume runs them (and only them): no row lost, none run twice."""
    out = tmp_path / "out"
    res = _sweep([Sized, SlowLast], out, time_limit=2.0)
    assert res.partial and "held back to run alone after the others not run" in res.stopped_by, res.stopped_by
    ran = {(r["backend"], r["case_id"]) for r in res.rows}
    assert not any(b.endswith(":Sized") and c in {x.case_id for x in CASES if x.q_lens == (9,)} for b, c in ran)
    ORDER.clear()
    again = _sweep([Sized, SlowLast], out, resume=True)
    assert not again.partial and {(r["backend"], r["case_id"]) for r in again.rows}.isdisjoint(ran)
    assert len(ran) + len(again.rows) == 12 and (Sized.name, 9) in ORDER


def test_an_out_of_memory_row_runs_again_alone_after_every_other_row(gate, tmp_path):
    """A row out of memory beside others is held back like a row over the budget: run once more alone after every
    other row (not at once, draining the card while the other lanes wait), and recorded once, with that answer."""
    OomOnce.failed = False
    res = _sweep([OomOnce, Small], tmp_path / "out")
    assert len(res.rows) == 12 and all(r["verdict"] == "pass" for r in res.rows), [r["detail"] for r in res.rows]
    retry = ORDER.index((OomOnce.name, -2))
    assert ORDER.index((OomOnce.name, -1)) < retry == len(ORDER) - 2, ORDER  # the retry: the last call of the run
    assert gate.drains == 0 and gate.alone_rows == 1
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert timing["gate"]["held_back"] == 1 and timing["stages"][f"{__name__}:OomOnce"]["gate_alone_rows"] == 1


def test_a_row_its_backend_refuses_holds_nothing_on_the_gate(gate, tmp_path):
    """A row its backend refuses by its own check is answered before the card is touched: it asks nothing of the gate,
    so it is neither held back to run alone nor drains the card (before: each of the three over-budget rows was held
    back, then ran alone, only for its worker to refuse it), and it is `unsupported` in the backend's words."""
    res = _sweep([RefusesBig, Small], tmp_path / "out")
    verdicts = sorted((r["backend"], r["verdict"]) for r in res.rows)
    assert verdicts.count((f"{__name__}:RefusesBig", "unsupported")) == 3, verdicts
    assert all("not taken by this kernel" in r["detail"] for r in res.rows if r["verdict"] == "unsupported")
    assert sum(v == "pass" for _, v in verdicts) == 9, verdicts
    assert gate.alone_rows == 0 and gate.drains == 0
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert timing["gate"]["held_back"] == 0 and timing["gate"]["alone_rows"] == 0, timing["gate"]
