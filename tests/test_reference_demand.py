"""The reference cache evicts by need (h100-2026-12-07d-models: by age, 14 drifting lanes recomputed 149
references, 321 s of a 476 s wall): a reference no unit will judge again goes first (at once), then the one
needed latest; never, while such a one is held, one a lane is about to use. The byte bound stays the cache's."""

from __future__ import annotations

import json
import threading

import pytest

import parity.judge as judging
from parity import Case, Window
from parity.backends.reference import ReferenceBackend
from parity.sweep.demand import CaseDemand
from parity.sweep.run import run_sweep

CASES = [Case(q_lens=(16,), k_lens=(16,), hq=2, hkv=2, head_dim=8, dtype="float32", window=Window(4, 0), seed=s) for s in range(6)]
REF_BYTES = 16 * 2 * 8 * 8  # one case's float64 reference: (total_q, hq, d)
GO = threading.Event()  # the lagging lane starts once the other lane has judged every case


class Laggard(ReferenceBackend):
    """The reference, in a lane that waits for the other lane to finish before its first case: lanes drift apart."""

    name = "laggard"

    def run(self, case, inputs, out):
        assert GO.wait(60), "the other lane never finished"
        return super().run(case, inputs, out)


def _sweep(tmp_path, name, monkeypatch, bound):
    monkeypatch.setattr(judging, "CACHE_BYTES", bound)
    GO.clear()
    seen = {"n": 0}

    def on_row(row):
        seen["n"] += row["backend"] == "reference"
        if seen["n"] == len(CASES):
            GO.set()

    res = run_sweep(
        ["reference", "tests.test_reference_demand:Laggard"], CASES, tmp_path / name, jobs=2, isolate=False, progress=False, on_row=on_row
    )
    view = {(r["backend"], r["case_id"]): (r["verdict"], r["reasons"], r["max_abs_err"]) for r in res.rows}
    return json.loads((tmp_path / name / "timing.json").read_text())["reference_recomputed"], view


def test_drifting_lanes_recompute_fewer_references_with_the_same_rows(tmp_path, monkeypatch):
    """Three references fit; one lane judges all six cases before the other starts. By age the cache held the last
    three the first lane met and evicted each the second lane was about to use: all six computed again. By need it
    keeps those the second lane meets first (0, 1) beside the newest: three computed again, the rows the same."""
    recomputed, view = _sweep(tmp_path, "small", monkeypatch, 3 * REF_BYTES)
    none, ample = _sweep(tmp_path, "ample", monkeypatch, 64 * REF_BYTES)
    assert view == ample and len(view) == 2 * len(CASES)
    assert recomputed == 3 and none == 0


def test_a_reference_still_needed_is_kept_while_one_no_unit_needs_is_evicted():
    a, x, b, c = CASES[:4]
    demand = CaseDemand(CASES, {a.case_id: ["slow"], x.case_id: [], b.case_id: ["slow"], c.case_id: ["fast", "slow"]})
    demand.at(["slow"], 0)
    demand.at(["fast"], 2)
    cache = judging.BaselineCache("cpu", max_bytes=2 * REF_BYTES, demand=demand)
    cache.get(a)  # the slow lane's next case: the oldest held
    cache.get(x)  # no unit judges it (e.g. asked for outside the lanes)
    cache.get(b)
    assert cache.cached(a) and cache.cached(b) and not cache.cached(x)  # by age, ``a`` went
    cache.get(c)  # now ``b`` (next used two cases ahead by the slow lane) goes before ``a`` (about to be used)
    assert cache.cached(a) and cache.cached(c) and not cache.cached(b)
    assert cache.bytes <= cache.max_bytes
    assert not demand.release("fast", c.case_id)  # the slow lane still will judge ``c``
    assert demand.release("slow", a.case_id) and demand.rank(a.case_id) < demand.rank(c.case_id)  # none needs ``a`` now
    assert demand.release("slow", c.case_id)  # the slow lane was the last of ``c``'s units


def test_the_byte_bound_is_the_gates_and_ranks_say_latest_first():
    demand = CaseDemand(CASES, {c.case_id: ["u"] for c in CASES})
    demand.at(["u"], 2)
    ranks = sorted(CASES, key=lambda c: demand.rank(c.case_id))
    # furthest ahead first; those the lane passed (held back, retried after the lanes) before the nearest ahead
    assert [CASES.index(c) for c in ranks] == [1, 0, 5, 4, 3, 2]
    assert judging.BaselineCache("cpu").max_bytes == judging.CACHE_BYTES


@pytest.fixture(autouse=True)
def _go():
    yield
    GO.set()  # never leave a lane waiting
