"""Memory-safe execution (issue 27, part 1): the harness's own judging scales like the banded
reference (row chunks, the mask probe decoded pass by pass), an out-of-memory error in the harness
or in a worker costs at most its row, rows are placed on memory gates, and each row records its
estimate (and, on CUDA, its peak)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import parity.maskcheck as maskcheck
import parity.verdict as verdict
from parity import Backend, Case, Window, check_mask, evaluate
from parity import judge as judging
from parity.backends.reference import ReferenceBackend
from parity.memory import estimate, is_oom, oom_detail
from parity.selftest.bugs import NanOnEmptyRows, TopLeftAlignment, WindowOneNarrower, WindowOneWider
from parity.sweep import SweepOptions, rowmemory
from parity.sweep import run as sweep_run
from parity.sweep.memgate import MemoryGate
from parity.sweep.rowmemory import RowMemory

from .helpers import Noisy, RecordingOnCuda, SkipsLastRow


class Biggest(TorchDispatchMode):
    """Records the element count of the largest tensor any torch op returns while active."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


CASES = [
    Case(q_lens=(40, 7), k_lens=(40, 30), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(6, 0), seed=5),
    Case(q_lens=(12,), k_lens=(5,), hq=2, hkv=2, head_dim=8, dtype="float16", window=Window(2, 0), seed=1),
    Case(q_lens=(1, 9), k_lens=(50, 40), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(4, 1), seed=2),
]
BACKENDS = [ReferenceBackend, Noisy, SkipsLastRow, NanOnEmptyRows, WindowOneWider, WindowOneNarrower, TopLeftAlignment]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.summary())
@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_chunked_comparison_and_streamed_mask_probe_equal_the_whole(monkeypatch, case, backend):
    whole = evaluate(backend(), case)
    monkeypatch.setattr(verdict, "CHUNK_ELEMENTS", 1)  # one row per chunk
    monkeypatch.setattr(maskcheck, "STREAM_ELEMENTS", 0)  # every probe decoded pass by pass
    chunked = evaluate(backend(), case)
    drop = {"time_ms", "est_mem_mb", "peak_mem_mb"}
    assert {k: v for k, v in chunked.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}


def test_streamed_mask_probe_describes_many_rows_like_the_whole(monkeypatch):
    case = Case(q_lens=(70,), k_lens=(300,), hq=3, hkv=1, head_dim=8, dtype="float32", window=Window(9, 0), seed=3)
    monkeypatch.setattr(maskcheck, "MAX_DESCRIBED_ROWS", 50)  # the cap on described pairs holds in both
    whole = check_mask(WindowOneWider(), case)
    monkeypatch.setattr(maskcheck, "STREAM_ELEMENTS", 0)
    streamed = check_mask(WindowOneWider(), case)
    assert whole.status == "mismatch" and streamed.to_dict() == whole.to_dict()


class MeanOfBand(Backend):
    """Answers the mask probe (q = 0: the mean of V over the visible keys) with prefix sums: fast at any length."""

    name = "test-mean-of-band"

    def run(self, case, inputs, out):
        for _, q, _, v, qs in inputs.sequences():
            lo, hi = case.window.band(q.shape[0], v.shape[0])  # (Sq,), (Sq,)
            cs = torch.cat([torch.zeros_like(v[:1]), v.cumsum(0)]).float()  # (Sk + 1, hkv, d)
            n = (hi - lo + 1).clamp(min=1)[:, None, None]  # (Sq, 1, 1)
            mean = (cs[hi + 1] - cs[lo]) / n  # (Sq, hkv, d)
            out[qs] = mean.repeat_interleave(case.group, dim=1).to(out.dtype)  # (Sq, hq, d)
        return out


def test_long_case_is_judged_without_an_sq_by_sk_tensor():
    """Sq = Sk = 16384: reference, baseline and comparison stay banded / chunked (the largest tensor
    any op builds is far below Sq x Sk), and the mask probe of 4k queries on 8k keys is decoded pass by pass."""
    s = 16384
    case = Case(q_lens=(s,), k_lens=(s,), hq=1, hkv=1, head_dim=64, dtype="bfloat16", window=Window(31, 0), seed=0)
    with Biggest() as big:
        row = evaluate("reference", case, probes=False)
    assert row["verdict"] == "pass", row["detail"]
    assert big.numel <= s * s // 16, big.numel  # an (Sq, Sk) tensor would be s * s
    long_keys = Case(q_lens=(4096,), k_lens=(8192,), hq=1, hkv=1, head_dim=256, dtype="bfloat16", window=Window(40, 0), seed=0)
    with Biggest() as big:
        probe = check_mask(MeanOfBand(), long_keys)
    assert probe.status == "ok", probe.detail
    assert big.numel <= 4096 * 8192 // 4, big.numel  # the whole probe decoded at once: hq x Sq x Sk weights


def test_probe_estimate_follows_the_probe_that_runs():
    """A decode over 131072 keys (1024 full-probe passes): the estimate holds the scaled probe's batched call (3 copies
    of the keys), not only the GQA probe's as when the mask probe was not run, and not the full probe's 16 copies."""
    case = Case(q_lens=(1,), k_lens=(131072,), hq=32, hkv=8, head_dim=128, dtype="bfloat16", window=Window(4095, 0), seed=0)
    kv = 131072 * 8 * 128 * 2  # bytes of k (or v)
    scaled, full = estimate(case).parts["probes"], estimate(case, max_passes=1024).parts["probes"]
    assert 3 * 2 * kv <= scaled < 16 * 2 * kv <= full
    assert estimate(case, probes=False).parts["probes"] == 0


# -- out of memory: the harness's own judging ---------------------------------------------------


def _oom(*_a, **_k):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


SWEEP_CASES = [Case(q_lens=(5,), k_lens=(5 + i,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=i) for i in range(3)]


def test_oom_in_the_harness_judging_costs_that_row_only(monkeypatch, tmp_path):
    bad = SWEEP_CASES[1].case_id
    real = judging.compare

    def compare(case, *a, **k):
        return _oom() if case.case_id == bad else real(case, *a, **k)

    monkeypatch.setattr(judging, "compare", compare)
    res = sweep_run.run_sweep(["reference"], SWEEP_CASES, tmp_path / "out", isolate=False, progress=False)
    verdicts = {r["case_id"]: r["verdict"] for r in res.rows}
    assert len(res.rows) == 3 and verdicts.pop(bad) == "error" and set(verdicts.values()) == {"pass"}
    row = next(r for r in res.rows if r["case_id"] == bad)
    assert row["detail"].startswith("out of memory in the harness") and "20.00 GiB" in row["detail"]
    assert res.failed and not res.partial  # exit 1, every row written
    assert (tmp_path / "out" / "results.csv").read_text().count("\n") == 4


def test_oom_computing_the_baseline_on_the_device_falls_back_to_the_cpu(monkeypatch):
    real = judging.compute_baseline
    monkeypatch.setattr(judging, "compute_baseline", lambda case, device, **_: _oom() if device != "cpu" else real(case, device))
    cache = judging.BaselineCache("elsewhere")  # a device that runs out of memory
    base = cache.get(SWEEP_CASES[0])
    assert cache.cpu_fallbacks == 1 and base.ref.device.type == "cpu"
    cpu = judging.BaselineCache("cpu")
    monkeypatch.setattr(judging, "compute_baseline", _oom)
    with pytest.raises(torch.OutOfMemoryError):  # nowhere to fall back to: the sweep makes it the row's error
        cpu.get(SWEEP_CASES[0])


def test_oom_computing_the_gradient_baseline_on_the_device_falls_back_to_the_cpu(monkeypatch):
    real_inputs, real = judging.make_inputs, judging.make_grad_baseline
    asked: list[str] = []
    monkeypatch.setattr(judging, "make_inputs", lambda case, device: asked.append(device) or real_inputs(case, "cpu"))
    monkeypatch.setattr(judging, "make_grad_baseline", lambda case, inputs, **k: _oom() if asked[-1] != "cpu" else real(case, inputs, **k))
    cache = judging.BaselineCache("elsewhere")  # a device that runs out of memory
    base = cache.grad(SWEEP_CASES[0])
    assert cache.cpu_fallbacks == 1 and base.ref["dq"].device.type == "cpu"
    assert cache.grad(SWEEP_CASES[0]) is base and cache.cpu_fallbacks == 1 and asked == ["elsewhere", "cpu"]  # kept


def test_baseline_cache_keeps_to_its_byte_budget():
    cache = judging.BaselineCache("cpu", keep=64, max_bytes=2 * 5 * 2 * 8 * 8)  # two cases' references
    for c in SWEEP_CASES:
        cache.get(c)
    assert cache.bytes <= cache.max_bytes and len(cache._cache) == 2


def test_a_cached_baseline_is_answered_while_another_case_is_computed(monkeypatch):
    """Lanes share the cache: a held baseline comes back at once while another lane computes another case's
    (before 2026-12-07 one lock covered both: a lane judging a two-row decode case waited 17 s behind another lane's
    32k reference on the H100, counted as judging); a case not held waits for that computation (one at a time), and
    ``ensure_timed`` says how long, apart from its own; a case two lanes ask for is computed once."""
    held, slow, other = CASES
    release, started = threading.Event(), threading.Event()
    real = judging.compute_baseline

    def compute(case, device, **kw):
        if case is slow:
            started.set()
            assert release.wait(30), "never released"
        return real(case, device, **kw)

    monkeypatch.setattr(judging, "compute_baseline", compute)
    cache = judging.BaselineCache("cpu")
    base = cache.get(held)
    computing = [threading.Thread(target=cache.get, args=(slow,)) for _ in range(2)]  # two lanes, the same case
    for t in computing:
        t.start()
    assert started.wait(30)
    got: list = []
    hit = threading.Thread(target=lambda: got.append(cache.ensure_timed(held)))
    hit.start()
    hit.join(5)
    assert got == [(0.0, 0.0)] and cache.get(held) is base  # answered while ``slow`` is still being computed
    waits: list = []
    miss = threading.Thread(target=lambda: waits.append(cache.ensure_timed(other)))
    miss.start()
    time.sleep(0.3)
    assert not waits  # one computation at a time
    release.set()
    for t in [*computing, miss]:
        t.join(30)
    spent, waited = waits[0]
    assert waited >= 0.25 and 0.0 < spent < waited + 30
    assert cache.computed == {held.case_id: 1, slow.case_id: 1, other.case_id: 1}


# -- out of memory: in a worker ------------------------------------------------------------------


class OomOnSecondCase(ReferenceBackend):
    """The reference, but ``run`` raises CUDA's out-of-memory error on the case with Sk = 6."""

    name = "test-oom"

    def run(self, case, inputs, out):
        if case.k_lens == (6,) and inputs.q.abs().sum() > 0:  # the case's own call, not a probe
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return super().run(case, inputs, out)

    def workspace_bytes(self, case):
        return 3 << 20


def test_oom_in_a_worker_costs_that_row_only_and_says_what_was_estimated(tmp_path):
    res = sweep_run.run_sweep([f"{__name__}:OomOnSecondCase"], SWEEP_CASES, tmp_path / "out", progress=False, timeout=120)
    rows = {r["case_id"]: r for r in res.rows}
    bad = rows.pop(SWEEP_CASES[1].case_id)
    assert bad["verdict"] == "error" and [r["verdict"] for r in rows.values()] == ["pass", "pass"]
    assert bad["detail"].startswith("out of memory: CUDA out of memory. Tried to allocate 9.00 GiB; estimated ")
    assert "workspace 3" in bad["detail"] and "free device memory unknown" in bad["detail"]  # no CUDA here
    assert float(bad["est_mem_mb"]) >= 3 and bad["peak_mem_mb"] == ""
    assert res.failed and len(res.rows) == 3


class OomOnce(ReferenceBackend):
    """Out of memory on its first call of the case with Sk = 6 only (as when other lanes held the card)."""

    name = "test-oom-once"

    def __init__(self):
        self.failed = False

    def run(self, case, inputs, out):
        if case.k_lens == (6,) and not self.failed:
            self.failed = True
            raise torch.OutOfMemoryError("CUDA out of memory")
        return super().run(case, inputs, out)


class OomAlways(OomOnSecondCase):
    name = "test-oom-always"


@pytest.mark.parametrize("backend,verdict", [(OomOnce, "pass"), (OomAlways, "error")])
def test_worker_oom_is_retried_once_alone(monkeypatch, backend, verdict):
    monkeypatch.setattr(RowMemory, "make_gates", lambda self: setattr(self, "host_gate", MemoryGate(1 << 40)))  # CPU rows: the host's
    res = sweep_run.run_sweep([f"{__name__}:{backend.__name__}"], SWEEP_CASES, isolate=False, progress=False)
    row = next(r for r in res.rows if r["case_id"] == SWEEP_CASES[1].case_id)
    assert row["verdict"] == verdict and len(res.rows) == 3
    if verdict == "error":
        assert row["detail"].endswith("(retried alone: out of memory again)")


# -- gates, estimates, columns --------------------------------------------------------------------


def test_gate_admits_rows_that_fit_and_runs_a_too_big_row_alone():
    gate, stop = MemoryGate(100), threading.Event()
    assert gate.try_acquire(60) and not gate.try_acquire(50) and gate.try_acquire(40)
    gate.release(60)
    gate.release(40)
    assert gate.try_acquire(500)  # too big to share: admitted when nothing else holds memory
    assert not gate.try_acquire(1)  # and nothing joins it
    gate.release(500)
    held = gate.acquire(0, stop, alone=True)
    assert held == 100 and not gate.try_acquire(1)
    stop.set()
    assert gate.acquire(1, stop) is None  # a stopped run does not wait for memory
    assert MemoryGate(None).try_acquire(1 << 60)


def test_estimate_grows_with_the_case_and_names_its_parts():
    small = SWEEP_CASES[0]
    big = dataclasses.replace(small, q_lens=(4096,), k_lens=(4096,), hq=32, hkv=8, head_dim=128, dtype="bfloat16")
    e_small, e_big = estimate(small), estimate(big, workspace=1 << 30)
    assert e_big.device_bytes > 100 * e_small.device_bytes
    assert e_big.parts["workspace"] == 1 << 30 and e_big.parts["inputs"] == (4096 * 32 + 2 * 4096 * 8) * 128 * 2  # q, k, v
    assert e_big.parts["margin"] > 0 and e_big.stage in ("call", "mask")
    assert estimate(big, harness_on_device=True).device_bytes > estimate(big).device_bytes
    assert estimate(big, probes=False).device_bytes < estimate(big).device_bytes
    assert "workspace 1024" in oom_detail(RuntimeError("CUDA out of memory"), e_big, 5 << 30)


def test_is_oom_knows_the_spellings():
    assert is_oom(torch.OutOfMemoryError("x")) and is_oom(MemoryError())
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"))
    assert is_oom(RuntimeError("CUDA error: out of memory")) and not is_oom(RuntimeError("head_dim must be 64"))
    assert not is_oom(ValueError("out of memory"))


def test_rows_record_their_estimate_and_no_peak_on_the_cpu():
    row = sweep_run.run_sweep(["reference"], SWEEP_CASES[:1], isolate=False, progress=False).rows[0]
    assert float(row["est_mem_mb"]) > 0 and row["peak_mem_mb"] == ""


def test_dense_backends_tell_the_gate_what_their_scores_take():
    """SDPA's MATH kernel and JAX's XLA path materialize (hq, Sq, Sk) scores: at a 32k prefill of 32 heads
    that is far beyond any card, and the memory gate must know it (to refuse such a row for its card); the
    memory-efficient kernel holds only its (Sq, Sk) mask and bias, and the float64 reference one band block.
    JAX allocates outside torch: its dense part is ``foreign`` (counted, not in ``peak_mem_mb``)."""
    from parity.backends.jax_attn import JaxXla
    from parity.backends.sdpa import SdpaCudaEfficient, SdpaCudaMath
    from parity.execute import workspace_hint

    big = Case(q_lens=(32768,), k_lens=(32768,), hq=32, hkv=8, head_dim=128, dtype="bfloat16", window=Window.tokens(4096))
    gib = 2**30
    assert SdpaCudaMath().workspace_bytes(big) >= 2 * 32 * 32768 * 32768 * 4  # 256 GiB of float32 scores and weights
    assert JaxXla().foreign_bytes(big) >= 2 * 32 * 32768 * 32768 * 4 and JaxXla().workspace_bytes(big) == 0  # no padding
    # a bottom-right decode row is padded to Sk queries (jax_window): as dense as the prefill
    decode = dataclasses.replace(big, q_lens=(1, 5), k_lens=(32768, 20000))
    assert JaxXla().foreign_bytes(decode) >= 2 * 32 * 32768 * 32768 * 4
    assert JaxXla().workspace_bytes(decode) >= 2 * 32768 * 32 * 128 * 2  # torch's side: the padded queries
    assert JaxXla().foreign_bytes(dataclasses.replace(decode, window=Window.tokens(4096, align="top_left"))) < gib
    efficient = SdpaCudaEfficient().workspace_bytes(big)
    assert 4 * gib <= efficient < 8 * gib  # the mask and its bias, kv heads repeated: no (hq, Sq, Sk)
    assert workspace_hint(ReferenceBackend(), big) < 3 * gib  # banded: its output, a sequence's copy, one block
    # and the estimate the gate reads carries the hints
    assert estimate(big, workspace=SdpaCudaMath().workspace_bytes(big)).device_bytes > 300 * gib
    assert estimate(big, backend=SdpaCudaMath()).words == "dense float32 scores 32768 x 32768 x 32 heads"
    xla = estimate(decode, backend=JaxXla())
    assert xla.parts["foreign"] >= 256 * gib and xla.measured_bytes < 4 * gib


class OomAlwaysCounted(OomAlways):
    calls = 0

    def run(self, case, inputs, out):
        if case.case_id == SWEEP_CASES[1].case_id:
            type(self).calls += 1
        return super().run(case, inputs, out)


def test_worker_oom_of_a_row_that_already_ran_alone_is_not_run_again(monkeypatch):
    """A row whose estimate exceeds the gate's budget runs alone the first time: its OOM is final (a retry
    alone would repeat the same attempt, and hold every lane of its GPU once more)."""
    monkeypatch.setattr(RowMemory, "make_gates", lambda self: setattr(self, "host_gate", MemoryGate(0)))  # CPU rows: the host's
    res = sweep_run.run_sweep([f"{__name__}:OomAlwaysCounted"], SWEEP_CASES, isolate=False, progress=False)
    row = next(r for r in res.rows if r["case_id"] == SWEEP_CASES[1].case_id)
    assert row["verdict"] == "error" and "ran alone" in row["detail"] and "retried alone" not in row["detail"]
    assert OomAlwaysCounted.calls == 1


def test_memory_benchmark_reads_a_run_folder(tmp_path):
    """``benchmarks/memory_estimate.py --run DIR``: per backend and model, est/peak and the rows whose
    worker took more than the gate held (here one of gpu-b's two)."""
    import csv
    import gzip
    import subprocess
    import sys
    from pathlib import Path

    rows = [
        {"backend": "gpu-a", "model": "m1", "est_mem_mb": "1000", "peak_mem_mb": "500"},
        {"backend": "gpu-b", "model": "m1", "est_mem_mb": "1000", "peak_mem_mb": "1250"},
        {"backend": "gpu-b", "model": "m2", "est_mem_mb": "4000", "peak_mem_mb": "1000"},
        {"backend": "cpu", "model": "m2", "est_mem_mb": "10", "peak_mem_mb": ""},  # no peak on the CPU: not counted
        {"backend": "gpu-a", "model": "m1", "est_mem_mb": "10", "peak_mem_mb": "0"},  # a refusal allocated nothing: not counted
    ]
    with gzip.open(tmp_path / "results.csv.gz", "wt", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_estimate.py"
    out = subprocess.run([sys.executable, str(script), "--run", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert "3 rows with a measured peak" in out
    lines = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.startswith(("gpu-", "m1", "m2"))}
    assert lines["gpu-a"] == ["1", "500", "2.00", "2.00", "0"]
    assert lines["gpu-b"] == ["2", "1250", "2.40", "0.80", "1"]
    assert lines["m2"] == ["1", "1000", "4.00", "4.00", "0"]


MODELS_RUNS = [("h100-2026-12-06-models", 130), ("h100-2026-12-06b-models", 300)]
#: The models runs of today's probes (the scaled probe, the streamed full probe as it allocates now): the constants of
#: the worker's estimate were fitted on the first (STREAM_BYTES, DESCRIBE_BYTES, WORKER_MARGIN), the second is held out.
#: Each: the rows it has at least, and the most of them whose estimate may exceed 1.5x their peak (JAX's aside): those
#: of the two causes the estimate cannot see before the row runs (:func:`_over_for_want_of_state`).
TODAYS_RUNS = [("h100-2026-12-07d-models", 400, 36), ("h100-2026-12-07c-models-gate", 55, 0)]
#: Backends whose worker allocates outside torch's allocator (JAX): ``peak_mem_mb`` sees only the torch side of
#: their rows, so their estimate (kept safe) is not held to the median bound.
UNSEEN_BY_PEAK = ("jax-xla-cuda", "jax-cudnn-cuda", "jax-cudnn-causal-cuda")


def _measured_rows(run: str) -> list[tuple[dict, Case, object]]:
    """The rows of a lab models run (lab/runs/RUN/run) with a measured worker peak: (row, case, backend), from
    tests/fixtures/lab-rows/models-peaks.csv.gz (tests/fixtures/make_lab_rows.py: those rows, the columns read here)."""
    import csv
    import gzip
    import io
    from pathlib import Path

    from parity import backends

    path = Path(__file__).resolve().parent / "fixtures" / "lab-rows" / "models-peaks.csv.gz"
    rows = [r for r in csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())) if r["run"] == run]
    measured = [r for r in rows if r["peak_mem_mb"] and float(r["peak_mem_mb"]) > 0]
    return [(r, Case.from_json(r["case_json"]), backends.get(r["backend"])) for r in measured]


@pytest.mark.parametrize("run,at_least", MODELS_RUNS)
def test_every_measured_gpu_peak_of_the_models_run_is_within_its_estimate(run, at_least):
    """The runs of ``--profile models`` at real lengths (H100; the second with every staged backend). Each row
    with a measured worker peak: today's estimate of what torch's allocator holds in the worker (the estimate
    less JAX's own buffers, which ``peak_mem_mb`` does not see) covers it. Before the K/V block copies of the
    reference, SDPA MATH's upcast kv heads and flex's dense mask_mod evaluation were counted, 9 rows of the first
    run exceeded theirs (a decode row over 128k keys: 7.0 GiB measured, 3.1 GiB estimated); before the worker
    was estimated stage by stage, its own part was under the peak on 120 of the 452 rows (the harness's parts,
    counted per row, hid it)."""
    measured = _measured_rows(run)
    assert len(measured) >= at_least
    short = []
    for r, case, be in measured:
        est = estimate(case, True, 64, backend=be, harness_on_device=True)
        mib = (est.measured_bytes + _old_read_probe_bytes(case, be)) / 2**20
        if mib < float(r["peak_mem_mb"]):
            short.append(f"{r['backend']} {case.summary()}: estimated {mib:.0f} MiB, measured {r['peak_mem_mb']} MiB")
    assert not short, "\n".join(short)


def _old_read_probe_bytes(case: Case, backend: object) -> int:
    """What the read probe of the 2026-12-06 runs (main at 845f4c8) held beyond today's on a paged case: its
    ``poison_pages`` concatenated the unreferenced pages onto the poisoned copies, two more caches at once (6 where
    today's makes 4, since 54cc4d4): their 1+1+1k-query paged rows peaked at 686.7 MiB, inputs, outputs and 6 x 83."""
    from parity.memory import paged_bytes

    return 2 * paged_bytes(case) if case.page_size is not None and getattr(backend, "supports_paged", False) else 0


@pytest.mark.parametrize("run,at_least", MODELS_RUNS)
def test_every_measured_gpu_peak_of_the_models_run_is_at_least_two_thirds_of_its_estimate(run, at_least):
    """The upper bound (issue 47): the estimate is at most 1.5x the measured peak on every row that ran (so the
    lanes do not wait for memory a row never takes). Left out: a refused row (it allocated nothing: its peak is
    what its worker already held, FlashInfer's 128 MiB buffer) and an out-of-memory row (its peak is where the
    attempt stopped). Before, the estimate the gate held (the harness's parts counted on every row) was 1.5-19x
    the peak in the median per backend, up to 26.7x, and its worker part alone up to 126x (JAX XLA's dense
    scores, which torch does not see, counted as torch's). A row whose mask probe did not run then (more than 64
    one-hot passes, before the scaled probe) is set against the estimate of a row without probes: the scaled probe
    that runs there today is not in its measured peak (a GPU run of today's code gives those peaks). So is a row
    whose full probe was streamed: that code took less then than it takes today (the runs of 2026-12-07, below)."""
    from parity.maskcheck import STREAM_ELEMENTS

    ran = lambda r: r["verdict"] != "unsupported" and not r["detail"].startswith("out of memory")  # noqa: E731
    measured = [(r, c, b) for r, c, b in _measured_rows(run) if ran(r)]
    assert len(measured) >= at_least - 40
    over = []
    for r, case, be in measured:
        if r["mask_check"] != "not_run" and case.hq * sum(q * k for q, k in zip(case.q_lens, case.k_lens)) > STREAM_ELEMENTS:
            continue  # the streamed probe: 13.2 bytes per output element then, 20.0 in the runs of 2026-12-07 (below)
        probes = r["mask_check"] != "not_run"
        est = estimate(case, probes, 64, backend=be).measured_bytes / 2**20
        if est > 1.5 * float(r["peak_mem_mb"]):
            over.append(f"{r['backend']} {case.summary()}: estimated {est:.0f} MiB, measured {r['peak_mem_mb']} MiB")
    assert not over, "\n".join(over)


def _todays_ratios(run: str) -> dict[str, list[tuple[float, str, Case]]]:
    """Per backend, each row of ``run`` that ran: its estimate of the worker's torch allocations / its peak, its
    words and its case."""
    from parity.maskcheck import mask_plan

    ratios: dict[str, list[tuple[float, str, Case]]] = {}
    for r, case, be in _measured_rows(run):
        if r["verdict"] == "unsupported" or r["detail"].startswith("out of memory"):
            continue
        assert r["mask_probe"] == mask_plan(case, 64)[0], "the probe that ran then is the one that runs today"
        est, peak = estimate(case, True, 64, backend=be).measured_bytes / 2**20, float(r["peak_mem_mb"])
        words = f"{r['backend']} {case.summary()}: {est:.0f} MiB for {peak} MiB ({est / peak:.2f}x)"
        ratios.setdefault(r["backend"], []).append((est / peak, words, case))
    return ratios


def _over_for_want_of_state(backend: str, case: Case) -> bool:
    """Whether a row's estimate may exceed 1.5x its peak for what it cannot know before the row runs: a full mask
    probe streamed pass by pass (:class:`parity.maskcheck.MaskStream`), whose mismatch description needs the visible
    keys of up to 4096 pairs a sequence and torch's int64 sum of them (at 2k x 12k keys, 4 heads: JAX cuDNN's
    mismatch peaked at 508 MiB, JAX XLA's pass of the same case at 82), or flex, whose worker builds a
    block mask once for its lengths and window (a later row of the same needs none: Gemma's 32k prefills after
    Mistral's, 1148 MiB measured, 10880 where it was built)."""
    from parity.maskcheck import STREAM_ELEMENTS, mask_plan

    weights = case.hq * sum(q * k for q, k in zip(case.q_lens, case.k_lens))
    return backend == "flex-cuda" or (mask_plan(case, 64)[0] == "full" and weights > STREAM_ELEMENTS)


@pytest.mark.parametrize("run,at_least,most_over", TODAYS_RUNS)
def test_the_estimate_covers_every_peak_of_todays_probes_by_a_tenth_and_stays_within_1_5x_per_backend(run, at_least, most_over):
    """Issue 47 item 3, on the models runs of today's probes (the first fitted, the second held out): every row's
    estimate of the worker's torch allocations is at least 1.1x its measured peak (room for the allocator's
    fragmentation), and per backend the median is at most 1.5x (JAX's backends aside: their own buffers, which the
    peak does not see, are estimated apart). Before (2026-12-07, the same rows): 50 of 441 rows of the first run
    under their peak (0.38-0.98x: the streamed full probe counted 11 bytes per output element of its 20, a mismatch's
    description its bool keys and not torch's int64 sum of them), and the scaled probe's comparison chunks counted
    at their largest (384 MiB) for a decode of one row (up to 4.3x).

    At most ``most_over`` rows (JAX's aside) over 1.5x, each for a cause :func:`_over_for_want_of_state` names.
    Before: 81 of the first run's (37 of them, up to 2.05x, for neither cause) and 6 of the second's (3): the scaled
    probe's calls, their ``W`` and its comparison chunks counted at once, where the chunks come after the calls, and
    the read probe's paged caches counted 6 times, where today's poisoning holds 4."""
    ratios = _todays_ratios(run)
    assert sum(map(len, ratios.values())) >= at_least
    short = [words for pairs in ratios.values() for ratio, words, _ in pairs if ratio < 1.1]
    assert not short, "\n".join(short)
    wide = {name: statistics.median(x for x, _, _ in pairs) for name, pairs in ratios.items() if name not in UNSEEN_BY_PEAK}
    assert len(wide) >= 5 and max(wide.values()) <= 1.5, wide
    over = [(name, words, case) for name, pairs in ratios.items() if name not in UNSEEN_BY_PEAK for x, words, case in pairs if x > 1.5]
    assert len(over) <= most_over, f"{len(over)} rows over 1.5x their peak, at most {most_over}:\n" + "\n".join(w for _, w, _ in over)
    unexplained = [words for name, words, case in over if not _over_for_want_of_state(name, case)]
    assert not unexplained, "\n".join(unexplained)


def test_the_harness_releases_its_cached_blocks_after_a_large_baseline(monkeypatch):
    """A baseline whose harness estimate reaches LARGE_ROW_BYTES gives the caching allocator's blocks back to the
    card afterwards (as a worker does after a large row); a smaller one does not pay for it."""
    small, large = sorted(SWEEP_CASES[:3], key=lambda c: estimate(c, probes=False).harness_bytes)[::2]
    assert estimate(small, probes=False).harness_bytes < estimate(large, probes=False).harness_bytes
    released = []
    real = judging.compute_baseline
    monkeypatch.setattr(judging, "_release", lambda device: released.append(device))
    monkeypatch.setattr(judging, "compute_baseline", lambda case, device, **_: real(case, "cpu"))
    monkeypatch.setattr(judging, "LARGE_ROW_BYTES", estimate(large, probes=False).harness_bytes)
    cache = judging.BaselineCache("cuda:0")
    cache.get(small)
    assert released == []
    cache.get(large)
    assert released == ["cuda:0"]


def test_a_row_that_needs_the_card_drains_it_instead_of_waiting_for_the_end():
    """While a row over the budget (or a retry alone) waits for the card to empty, rows that would still
    fit are not admitted: otherwise the lanes keep refilling the card and the big row waits until they
    run out of rows."""
    gate, stop = MemoryGate(100), threading.Event()
    assert gate.try_acquire(60)
    admitted: list[int | None] = []
    big = threading.Thread(target=lambda: admitted.append(gate.acquire(500, stop)), daemon=True)
    big.start()
    try:
        time.sleep(0.3)  # the big row is waiting now
        assert not gate.try_acquire(10)  # fits beside the 60, but the big row is waiting
        gate.release(60)
        big.join(5)
        assert admitted == [500]
        assert not gate.try_acquire(10)  # the big row holds the card
        gate.release(500)
        assert gate.try_acquire(10)
    finally:
        stop.set()


def test_jax_workers_give_memory_back_unless_the_user_chose_otherwise(monkeypatch):
    """JAX's default BFC pool keeps all it grew to: a lane that ran one dense row would hold that memory for
    the rest of the run, unseen by the memory gate. The backend asks for the platform allocator and no
    pre-allocation before JAX is imported, without overriding a user's own setting."""
    from parity.backends import jax_attn

    monkeypatch.delenv("XLA_PYTHON_CLIENT_ALLOCATOR", raising=False)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    jax_attn._prepare_jax()
    assert os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] == "platform"
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"  # the user's


def test_the_summary_says_how_many_new_failures_are_out_of_memory():
    """A row too large for its card is an ``error`` (issue 27): the summary counts it among the new failures,
    and says how many of those are out of memory, so a reader tells the card's limit from a divergence."""
    from parity.sweep import known_vs_new

    rows = [
        {"verdict": "error", "detail": "out of memory: CUDA out of memory. Tried to allocate 128.00 GiB; estimated 400064 MiB"},
        {"verdict": "error", "detail": "RuntimeError: head_dim must be 64"},
        {"verdict": "fail", "detail": ""},
        {"verdict": "pass", "detail": "out of memory"},
    ]
    lines = known_vs_new(rows)
    assert any(line.startswith("new failures: 3 rows") and "1 of them out of memory" in line for line in lines), lines
    assert not any("out of memory" in line for line in known_vs_new(rows[1:]))


# -- rows the card cannot hold: refused up front (issues 47 and 48) ------------------------------

GIB = 2**30
BIG = Case(q_lens=(64,), k_lens=(64,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(8, 0), seed=3)
SMALL = Case(q_lens=(9,), k_lens=(9,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=4)


class DenseOnCuda(RecordingOnCuda):
    """The reference, declaring a CUDA device and a dense workspace of 50 GiB for a case of 64 queries (a
    card of 10 GiB here: too big), 5 GiB for 9 (fits the card alone, not beside others), 1 KiB otherwise."""

    name = "test-dense-cuda"
    calls: list[str] = []

    def workspace_bytes(self, case):
        return {64: 50 * GIB, 9: 5 * GIB}.get(case.q_lens[0], 1024)

    def workspace_words(self, case):
        return f"dense float32 scores {case.q_lens[0]} x {case.k_lens[0]} x {case.hq} heads" if case.q_lens[0] == 64 else ""


@pytest.fixture
def card_of_10_gib(monkeypatch):
    """A CUDA card of 12 GiB (10 for a row beside two contexts) for the worker's check and the sweep's; inputs on the CPU."""
    from parity import execute as ex
    from parity.case import make_inputs

    monkeypatch.setattr(ex, "card_bytes", lambda device=None: 10 * GIB)
    monkeypatch.setattr(ex, "total_bytes", lambda device=None: 12 * GIB)
    monkeypatch.setattr(rowmemory, "card_bytes", lambda device=None: 10 * GIB)
    monkeypatch.setattr(ex, "make_inputs", lambda case, device: make_inputs(case, "cpu"))
    DenseOnCuda.calls = []


def test_a_row_its_card_cannot_hold_is_unsupported_before_anything_runs(card_of_10_gib):
    """Refused up front with its estimate and the card's size (SDPA MATH at 32k asked for 391 GiB on the H100,
    drained the card, ran alone and failed with an OOM counted as a new failure); never called, no inputs made."""
    from parity import execute as ex
    from parity.memory import card_bytes, card_refusal, estimate

    res = ex.execute(DenseOnCuda(), BIG, probes=False)
    assert res["status"] == "unsupported" and DenseOnCuda.calls == []
    assert res["detail"].startswith("needs ~"), res["detail"]
    assert "GiB by estimate (dense float32 scores 64 x 64 x 2 heads); the card has 12.0 GiB, 10.0 GiB for a row" in res["detail"]
    assert ex.execute(DenseOnCuda(), SMALL, probes=False)["status"] == "ok"  # 5 GiB: runs (the gate places it)
    # the words: the estimate's parts where the backend names nothing; no card (the CPU here): no refusal
    plain = estimate(BIG, workspace=50 * GIB)
    assert "workspace 50.0 GiB" in card_refusal(plain, 10 * GIB) and card_refusal(plain, None) is None
    assert card_bytes() is None  # no CUDA on this machine


def test_the_api_and_the_pytest_plugin_refuse_the_same_row(card_of_10_gib):
    """One place decides (the worker's execute): evaluate returns the unsupported row, assert_parity skips with it."""
    from parity.pytest_plugin import check_row

    row = evaluate(DenseOnCuda(), BIG, probes=False)
    assert row["verdict"] == "unsupported" and row["detail"].startswith("needs ~") and DenseOnCuda.calls == []
    with pytest.raises(pytest.skip.Exception, match="needs ~.* the card has 12.0 GiB"):
        check_row(row)


def test_the_backends_own_refusal_comes_before_the_cards(card_of_10_gib):
    class Refuses(DenseOnCuda):
        def unsupported_reason(self, case):
            return "no such kernel"

    from parity import execute as ex

    assert ex.execute(Refuses(), BIG, probes=False)["detail"] == "no such kernel"


def _gate_spy(monkeypatch, budget: int) -> list[int]:
    """The sweep's gate with ``budget``; the bytes each row asked it for, in order."""
    asked: list[int] = []
    gate = MemoryGate(budget)
    real = gate.try_admit
    monkeypatch.setattr(gate, "try_admit", lambda need: asked.append(need) or real(need))
    monkeypatch.setattr(RowMemory, "make_gates", lambda self: (self.gates.update({None: gate}), self.cards.update({None: 10 * GIB})))
    return asked


def test_a_sweep_refuses_a_row_too_big_for_its_card_without_draining_it(card_of_10_gib, monkeypatch):
    """In the sweep the refused row asks the gate nothing (need 0: never a drain, never a wait), its worker is
    not called, and its row is unsupported with the words; a row over the lanes' budget that fits the card
    asks more than the budget (the gate drains the card for it: test_a_row_that_needs_the_card_drains_it...), after
    every other row (test_rows_that_need_the_card_alone_run_after_every_other_row);
    a row that fits beside others asks its estimate, within the budget (never a drain)."""
    asked = _gate_spy(monkeypatch, 2 * GIB)
    tiny = dataclasses.replace(SMALL, q_lens=(5,), k_lens=(5,))
    res = sweep_run.run_sweep([f"{__name__}:DenseOnCuda"], [BIG, SMALL, tiny], isolate=False, probes=False, progress=False)
    rows = {r["case_id"]: r for r in res.rows}
    assert rows[BIG.case_id]["verdict"] == "unsupported" and rows[BIG.case_id]["detail"].startswith("needs ~")
    assert rows[SMALL.case_id]["verdict"] == "pass" and rows[tiny.case_id]["verdict"] == "pass"
    assert DenseOnCuda.calls == [tiny.case_id, SMALL.case_id]  # the refused row was never run; the one alone ran last
    assert asked[0] == 0 and 0 < asked[1] < 2 * GIB and 2 * GIB < asked[2] <= 10 * GIB, asked
    assert float(rows[BIG.case_id]["est_mem_mb"]) > 50 * 1024  # its estimate is still recorded
    assert not res.failed


def test_a_row_that_holds_nothing_never_waits_for_a_drain():
    """A refused row or a CPU backend's row (need 0) is admitted while a big row waits for the card to drain."""
    gate, stop = MemoryGate(100), threading.Event()
    assert gate.try_acquire(60)
    waiting = threading.Thread(target=lambda: gate.acquire(500, stop), daemon=True)
    waiting.start()
    try:
        time.sleep(0.3)
        assert gate.draining == 1 and not gate.try_acquire(10) and gate.try_acquire(0)
    finally:
        stop.set()


def test_a_case_holds_the_harness_memory_once_per_gpu_not_once_per_backend():
    """With the reference on the device, the case's reference and baseline take memory once (the first backend's
    row computes them, later rows find them cached): only a row whose case is not cached yet holds them. Before,
    every row held them, which made the gate hold 2-14x the peaks of the H100 models runs."""
    import types

    est = estimate(SMALL, workspace=1024, harness_on_device=True)
    cache = judging.BaselineCache("cpu")
    infos = {"u": {"device": "cuda"}}
    lane_plan = types.SimpleNamespace(gpu_of={}, units={"u": ("u", None)})
    memory = RowMemory(lane_plan, SweepOptions(), {None: cache}, infos, threading.RLock(), threading.Event())
    memory.cards = {None: 10 * GIB}
    assert memory.need(SMALL, "u", memory.row_need(SMALL, "u", est)) == est.worker_bytes + est.harness_bytes
    cache.get(SMALL)
    assert memory.need(SMALL, "u", memory.row_need(SMALL, "u", est)) == est.worker_bytes
    infos["u"] = {"device": "cpu"}  # a CPU backend beside a CPU reference: its host bytes, on the host gate
    row = memory.row_need(SMALL, "u", est)
    assert memory.gate("u") is memory.host_gate and memory.need(SMALL, "u", row) == memory.host_need(SMALL, "u", est).bytes
