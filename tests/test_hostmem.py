"""Host memory: a row the machine cannot hold is ``unsupported`` up front, in ``parity run``, the API and the
pytest plugin, and its reference is not computed (a CPU run of a 2M-key decode was killed by the OOM killer at
12 GB, leaving no row). The machine here is made small with PARITY_HOST_MEMORY (its workers inherit it): nothing
large is allocated, and the end-to-end tests import nothing new, so they fail, not error, without the gate."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from parity import Case, Window, evaluate
from parity import judge as judging
from parity.backends.reference import ReferenceBackend
from parity.sweep import SweepOptions
from parity.sweep import run as sweep_run

from .helpers import RecordingOnCuda

ROOT = Path(__file__).resolve().parents[1]
MIB, GIB = 2**20, 2**30
#: A decode over 20k keys at 32 / 8 heads: ~1.1 GiB of host memory by estimate with probes (its worker 0.7, the
#: reference 0.3 beside it), ~0.3 GiB really; over a machine of 1.25 GiB (0.25 for a row beside two processes).
MID = Case(q_lens=(1,), k_lens=(20000,), hq=32, hkv=8, head_dim=128, dtype="bfloat16", window=Window(4095, 0), seed=1)
#: ~2.1 GiB by estimate: a large row (over 1 GiB) for the "available now" rule.
LARGE = Case(q_lens=(1,), k_lens=(60000,), hq=32, hkv=8, head_dim=128, dtype="bfloat16", window=Window(4095, 0), seed=1)
#: ~0.6 GiB by estimate: under 1 GiB, never refused for what is available now.
MEDIUM = Case(q_lens=(100, 300), k_lens=(5000, 300), hq=4, hkv=4, head_dim=64, dtype="float16", window=Window(63, 0), seed=2)
SMALL = Case(q_lens=(9,), k_lens=(9,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=4)
SMALL_MACHINE = "1280M"


@pytest.fixture
def small_machine(monkeypatch):
    """A machine of 1.25 GiB (this process and its workers), and a spy on the reference: the cases it computed."""
    monkeypatch.setenv("PARITY_HOST_MEMORY", SMALL_MACHINE)
    computed: list[str] = []
    real = judging.compute_baseline

    def spy(case, device, stages=None, **kw):
        computed.append(case.case_id)
        return real(case, device, stages, **kw)

    monkeypatch.setattr(judging, "compute_baseline", spy)
    return computed


def test_parity_run_ends_a_case_over_the_machine_as_an_unsupported_row(tmp_path):
    """The command of the bug, scaled down: rows, exit 0, the estimate and the machine in the detail."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PARITY_HOST_MEMORY": SMALL_MACHINE}
    cmd = [sys.executable, "-m", "parity", "run", "--backend", "sdpa,reference", "--case", MID.to_json(), "--case", SMALL.to_json()]
    p = subprocess.run([*cmd, "--out", str(tmp_path), "-q", "--no-report"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    rows = {(r["backend"], r["case_id"]): r for r in csv.DictReader((tmp_path / "results.csv").open())}
    for backend in ("sdpa", "reference"):
        big, small = rows[(backend, MID.case_id)], rows[(backend, SMALL.case_id)]
        assert big["verdict"] == "unsupported", big["detail"]
        assert "GiB of host memory by estimate (its worker" in big["detail"] and "the reference" in big["detail"]
        assert "the machine has 1.2 GiB in all (PARITY_HOST_MEMORY), 0.2 GiB for a row" in big["detail"]
        assert small["verdict"] == "pass", small["detail"]


def test_a_sweep_computes_no_reference_for_a_refused_row(small_machine):
    """The sweep refuses before it sends the row: no worker call, no reference (computed beside the worker before)."""
    res = sweep_run.run_sweep(["sdpa"], [MID, SMALL], progress=False)
    rows = {r["case_id"]: r for r in res.rows}
    assert rows[MID.case_id]["verdict"] == "unsupported" and "of host memory" in rows[MID.case_id]["detail"]
    assert rows[SMALL.case_id]["verdict"] == "pass"
    assert small_machine == [SMALL.case_id]


def test_the_api_and_the_pytest_plugin_refuse_the_same_row_without_its_reference(small_machine):
    from parity.pytest_plugin import check_row

    row = evaluate("sdpa", MID)
    assert row["verdict"] == "unsupported" and "GiB of host memory by estimate" in row["detail"], row["detail"]
    assert small_machine == []
    with pytest.raises(pytest.skip.Exception, match="of host memory by estimate.*1.2 GiB in all"):
        check_row(row)
    assert evaluate("sdpa", SMALL)["verdict"] == "pass" and small_machine == [SMALL.case_id]


class OnCuda(RecordingOnCuda):
    """The reference, declaring a CUDA device (its inputs and workspace on a card): what it costs the host is the
    draw of its inputs, and the API's reference (on the CPU)."""

    name = "test-hostmem-cuda"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return 0


def test_a_gpu_rows_reference_on_the_cpu_counts_as_host_memory(small_machine):
    OnCuda.calls = []
    row = evaluate(OnCuda(), MID, probes=False)
    assert row["verdict"] == "unsupported" and "the reference" in row["detail"], row["detail"]
    assert OnCuda.calls == [] and small_machine == []


def test_a_large_row_past_what_is_available_now_is_refused_a_smaller_one_runs(monkeypatch):
    """The truth table of parity.memory.host_refusal, through the worker's execute."""
    from parity import backends
    from parity.execute import execute

    sdpa = backends.get("sdpa")
    monkeypatch.setenv("PARITY_HOST_MEMORY", "64G,1G")  # a big machine, busy now
    res = execute(sdpa, LARGE)
    assert res["status"] == "unsupported" and "GiB available now, of 64.0 GiB in all" in res["detail"], res.get("detail")
    monkeypatch.setenv("PARITY_HOST_MEMORY", "64G,100M")  # under 1 GiB: a busy machine is no reason
    assert execute(sdpa, MEDIUM)["status"] == "ok"


def test_host_refusal_truth_table():
    from parity.memory import HostMemory, HostNeed, host_refusal

    def need(n):
        return HostNeed(n, 0, True, "its worker")

    assert host_refusal(need(100 * GIB), None) is None  # no figures: runs
    host = HostMemory(16 * GIB, 2 * GIB, "physical memory")  # usable 15 GiB
    assert host_refusal(need(900 * MIB), host) is None
    assert host_refusal(need(2 * GIB), host) is None
    assert "available now" in host_refusal(need(3 * GIB), host)
    assert "16.0 GiB in all (physical memory), 15.0 GiB for a row" in host_refusal(need(15 * GIB + 1), host)
    assert host_refusal(need(15 * GIB), HostMemory(16 * GIB, None, "x")) is None  # availability unknown: the total
    assert HostNeed(3, 4, True).bytes == 7 and HostNeed(3, 4, False).bytes == 4  # a worker beside the harness, or before
    limited = HostMemory(16 * GIB, 16 * GIB, "physical memory", address_space=4 * GIB)  # ulimit -v: per process
    assert host_refusal(HostNeed(3 * GIB, 3 * GIB, True), limited) is None
    assert "may map 4.0 GiB (ulimit -v), 3.0 GiB for its tensors" in host_refusal(HostNeed(3 * GIB + 1, 0, True), limited)


def test_host_memory_reads_the_cgroup_limit_and_what_is_available(monkeypatch, tmp_path):
    from parity import memory

    monkeypatch.delenv("PARITY_HOST_MEMORY", raising=False)
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable:    3145728 kB\n")
    (tmp_path / "max").write_text(f"{2 * GIB}\n")
    (tmp_path / "current").write_text(f"{GIB + GIB // 2}\n")
    monkeypatch.setattr(memory, "MEMINFO", str(tmp_path / "meminfo"))
    monkeypatch.setattr(memory, "CGROUP_FILES", ((str(tmp_path / "max"), str(tmp_path / "current")),))
    host = memory.host_memory()
    assert host.total == 2 * GIB and host.available == GIB // 2 and "cgroup" in host.source  # the group's room
    (tmp_path / "max").write_text("max\n")  # no limit: the physical memory and MemAvailable
    host = memory.host_memory()
    assert host.total == memory._physical() and host.available == 3 * GIB and host.source == "physical memory"
    monkeypatch.setenv("PARITY_HOST_MEMORY", "8G,512M")
    host = memory.host_memory()
    assert (host.total, host.available, host.source) == (8 * GIB, 512 * MIB, "PARITY_HOST_MEMORY")


def test_a_bad_host_memory_figure_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PARITY_HOST_MEMORY": "lots"}
    cmd = [sys.executable, "-m", "parity", "run", "--backend", "reference", "--case", SMALL.to_json(), "--out", str(tmp_path), "-q"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "PARITY_HOST_MEMORY='lots': expected TOTAL[,AVAILABLE]" in p.stderr, p.stderr


def test_cpu_rows_hold_their_host_bytes_on_one_gate(monkeypatch):
    """With the backend and the reference on the CPU a row holds its host need on the host gate (shared by the
    lanes), the reference's part only while its case is not cached; a row over the machine holds nothing."""
    from parity.memory import estimate
    from parity.sweep.rowmemory import RowMemory

    monkeypatch.setenv("PARITY_HOST_MEMORY", "64G,32G")
    cache = judging.BaselineCache("cpu")
    lane_plan = types.SimpleNamespace(gpu_of={}, units={"u": ("reference", None)})
    memory = RowMemory(lane_plan, SweepOptions(), {None: cache}, {"u": {"device": "cpu"}}, threading.RLock(), threading.Event())
    memory.make_gates()
    assert memory.gate("u") is memory.host_gate and memory.host_gate.budget == int(32 * GIB * 0.85) - cache.max_bytes
    est = estimate(MEDIUM)
    with_reference = memory.need(MEDIUM, "u", memory.row_need(MEDIUM, "u", est))
    assert with_reference == memory.host_need(MEDIUM, "u", est).bytes > est.worker_bytes
    cache.get(MEDIUM)
    assert memory.need(MEDIUM, "u", memory.row_need(MEDIUM, "u", est)) == max(est.worker_bytes, est.draw) < with_reference
    monkeypatch.setenv("PARITY_HOST_MEMORY", "1030M")
    assert memory.need(MEDIUM, "u", memory.row_need(MEDIUM, "u", est)) == 0  # refused before it holds anything


def test_a_sweep_row_reads_the_host_and_its_host_need_once(monkeypatch):
    """Its gate's bytes and its host refusal read the same figures (RowMemory.reserve's RowNeed): one read of the
    machine and one host need per row (two of each before, RowMemory.need and then host_refusal)."""
    from parity.sweep import rowmemory

    monkeypatch.setenv("PARITY_HOST_MEMORY", "64G,32G")
    reads: list[str] = []
    real_memory, real_need = rowmemory.host_memory, rowmemory.host_need
    monkeypatch.setattr(rowmemory, "host_memory", lambda: reads.append("host") or real_memory())
    monkeypatch.setattr(rowmemory, "host_need", lambda *a, **k: reads.append("need") or real_need(*a, **k))
    res = sweep_run.run_sweep(["reference"], [SMALL, MEDIUM], isolate=False, probes=False, progress=False)
    assert [r["verdict"] for r in res.rows] == ["pass", "pass"]
    assert sorted(reads) == ["host", "host", "need", "need"], reads


class RaisesOnMid(ReferenceBackend):
    """The reference, whose unsupported_reason raises on MID (a case the small machine cannot hold)."""

    name = "test-raises-on-mid"

    def unsupported_reason(self, case):
        if case.case_id == MID.case_id:
            raise ValueError("planted: no reason")
        return super().unsupported_reason(case)


def test_the_api_and_the_sweep_keep_the_hosts_words_and_a_raising_backends(small_machine):
    """One rule (parity.memory.row_host_refusal) where the machine cannot hold a row whose backend's
    unsupported_reason raises: unsupported, the host's words, then the exception's. Before, the API ran the row
    (an error row, the host's words lost) and the sweep kept the host's words only (the exception's lost)."""
    row = evaluate(RaisesOnMid(), MID, probes=False)
    assert row["verdict"] == "unsupported", row["detail"]
    assert "GiB of host memory by estimate" in row["detail"] and "1.2 GiB in all (PARITY_HOST_MEMORY)" in row["detail"]
    assert row["detail"].endswith("; its unsupported_reason() raised ValueError: planted: no reason"), row["detail"]
    res = sweep_run.run_sweep([f"{__name__}:RaisesOnMid"], [MID], isolate=False, probes=False, progress=False)
    assert [(r["verdict"], r["detail"]) for r in res.rows] == [("unsupported", row["detail"])]
    assert small_machine == []  # neither computed its reference


def test_row_host_refusal_asks_the_backend_only_of_a_row_the_host_refuses():
    from parity.memory import HostMemory, HostNeed, row_host_refusal

    host, asked = HostMemory(16 * GIB, 16 * GIB, "physical memory"), []

    def own(words):
        return lambda: asked.append(words) or words

    def raises():
        raise RuntimeError("boom")

    fits, over = HostNeed(GIB, 0, True, "its worker"), HostNeed(20 * GIB, 0, True, "its worker")
    assert row_host_refusal(fits, host, own("no kernel")) is None and asked == []
    assert row_host_refusal(over, host, own("no kernel")) == "no kernel" and asked == ["no kernel"]
    words = row_host_refusal(over, host)
    assert words is not None and "16.0 GiB in all" in words and row_host_refusal(over, host, own(None)) == words
    assert row_host_refusal(over, host, raises) == f"{words}; its unsupported_reason() raised RuntimeError: boom"
