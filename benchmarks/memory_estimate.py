"""Estimated vs measured memory per row (parity.memory.estimate against a measured peak).

    python benchmarks/memory_estimate.py                       # CPU: the reference backend, lengths / 16
    python benchmarks/memory_estimate.py --backend sdpa-cuda --scale 1   # on a GPU: real peaks
    python benchmarks/memory_estimate.py --run lab/runs/RUN             # a run's rows: peak vs estimate
    python benchmarks/memory_estimate.py --run lab/runs/RUN --now       # the same rows, today's estimate
    python benchmarks/memory_estimate.py --bench lab/runs/RUN/mem-benchmark.txt   # a committed GPU benchmark, today's

``--run`` reads a run folder's ``results.csv`` (or ``.csv.gz``): each row's estimate (``est_mem_mb``, what
the memory gate held for it) against the worker's measured peak (``peak_mem_mb``), per backend and per
model (``parity run --profile models`` on a GPU gives the real-scale figures). A ratio under 1 is a row
whose worker took more than the gate reserved. ``--now`` sets today's estimate of the worker's torch
allocations (``MemoryEstimate.measured_bytes``: the peak's own measure) beside the same peaks, for the rows
that ran (a refusal's peak is what its worker held before it; an out-of-memory row's, where it stopped).
``--bench FILE`` re-estimates the rows of this script's own committed GPU output (worker and harness).

Cases: the attention calls of real sliding-window models (Mistral-7B-like 32/8 heads d128 window 4096,
Gemma-2-like 16/8 d256 window 4096 softcap 50, Phi-3-mini-like 32/32 d96 window 2047) at 8k-32k keys,
lengths divided by ``--scale``.

Two measurements per row, each against its part of the estimate:

* worker: one :func:`parity.execute.execute` (the call and the probes) on the backend's device;
* harness: the float64 reference, the same-dtype baseline and the comparison (``--reference-device``).

On CUDA the peak is ``torch.cuda.max_memory_allocated`` above what was allocated before. On the CPU
it is the peak of live bytes of the tensors torch ops return (a dispatch mode with finalizers: views
are counted once, memory outside torch tensors is not), an approximation.
"""

from __future__ import annotations

import argparse
import sys
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import Case, Window, backends  # noqa: E402
from parity.execute import execute  # noqa: E402
from parity.judge import compare_safely, compute_baseline  # noqa: E402
from parity.memory import MIB, estimate  # noqa: E402
from parity.verdict import BUDGETS  # noqa: E402

MODELS = {  # name: (hq, hkv, d, window left, softcap, scale)
    "mistral-7b": (32, 8, 128, 4095, None, None),
    "gemma-2-9b": (16, 8, 256, 4095, 50.0, 1 / 16),
    "phi-3-mini": (32, 32, 96, 2046, None, None),
}
CALLS = {  # name: (q_lens, k_lens)
    "prefill-8k": ((8192,), (8192,)),
    "chunk-2k-of-10k": ((2048,), (10240,)),
    "decode-32k": ((1,), (32768,)),
    "spec-5-at-32k": ((5,), (32768,)),
}


def cases(scale: int, dtype: str) -> list[tuple[str, Case]]:
    out = []
    for model, (hq, hkv, d, left, softcap, sc) in MODELS.items():
        for call, (ql, kl) in CALLS.items():
            q = tuple(max(1, n // scale) if n > 8 else n for n in ql)
            k = tuple(max(q[0], n // scale) for n in kl)
            win = Window(max(1, left // scale), 0)
            out.append(
                (
                    f"{model} {call}",
                    Case(q_lens=q, k_lens=k, hq=hq, hkv=hkv, head_dim=d, dtype=dtype, window=win, softcap=softcap, scale=sc, seed=0),
                )
            )
    return out


class LiveBytes(TorchDispatchMode):
    """Peak bytes of live tensors returned by torch ops (CPU stand-in for max_memory_allocated)."""

    def __init__(self):
        super().__init__()
        self.live, self.peak, self.seen = 0, 0, set()

    def _gone(self, key: int, n: int) -> None:
        self.seen.discard(key)
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                key = t.untyped_storage().data_ptr()
                if key and key not in self.seen:
                    n = t.untyped_storage().nbytes()
                    self.seen.add(key)
                    self.live += n
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(t, self._gone, key, n)
        return out


def measure(device: str, fn) -> float:
    """Peak MiB that ``fn()`` allocates on ``device`` above what was allocated before."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / MIB
    with LiveBytes() as live:
        fn()
    return live.peak / MIB


def row(name: str, case: Case, backend, probes: bool, ref_dev: str) -> str:
    """One line: the worker's and the harness's estimate and measured peak for ``case``."""
    est = estimate(case, probes, harness_on_device=True, backend=backend)
    res: dict = {}
    w_peak = measure(backend.device, lambda: res.update(execute(backend, case, probes)))
    if res.get("status") != "ok":
        return f"{name:<34} {res.get('status')}: {str(res.get('detail'))[:80]}"

    def judge() -> None:
        base = compute_baseline(case, ref_dev)
        compare_safely(case, res["output"], base, BUDGETS[case.dtype], res.get("unwritten"))

    h_peak = measure(ref_dev, judge)
    w_est, h_est = est.measured_bytes / MIB, est.harness_bytes / MIB
    return (
        f"{name:<34} {case.q_lens[0]:>6} {case.k_lens[0]:>6} | {w_est:>10.1f} {w_peak:>8.1f} {w_est / max(w_peak, 1e-9):>6.2f}"
        f" | {h_est:>11.1f} {h_peak:>8.1f} {h_est / max(h_peak, 1e-9):>6.2f}"
    )


def _run_rows(folder: Path) -> list[dict[str, str]]:
    import csv
    import gzip
    import io

    plain, packed = folder / "results.csv", folder / "results.csv.gz"
    text = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    return list(csv.DictReader(io.StringIO(text)))


def summarize_run(folder: Path) -> None:
    """Per backend, then per model: rows measured, the largest peak, est/peak (median, lowest), rows over."""
    import statistics

    rows = [r for r in _run_rows(folder) if r.get("est_mem_mb") and float(r.get("peak_mem_mb") or 0) > 0]
    print(f"{folder}: {len(rows)} rows with a measured peak (the worker's torch allocations; JAX's are not seen;")
    print("a row that allocated nothing, such as a refusal, is left out). est_mem_mb is what the gate held: the worker's")
    print("parts and, with the reference on the GPU, the harness's (another process: not in the peak); --now sets the")
    print("worker's torch part alone beside the peak")
    for key in ("backend", "model"):
        groups: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            groups.setdefault(r.get(key) or "-", []).append((float(r["est_mem_mb"]), float(r["peak_mem_mb"])))
        print(f"\n{key:<26} {'rows':>5} {'max peak MiB':>13} {'est/peak med':>13} {'lowest':>8} {'peak>est':>9}")
        for name, pairs in sorted(groups.items()):
            ratios = [e / p for e, p in pairs if p > 0]
            over = sum(p > e for e, p in pairs)
            med = f"{statistics.median(ratios):.2f}" if ratios else "-"
            low = f"{min(ratios):.2f}" if ratios else "-"
            print(f"{name:<26} {len(pairs):>5} {max(p for _, p in pairs):>13.0f} {med:>13} {low:>8} {over:>9}")


def summarize_now(folder: Path) -> None:
    """Per backend: today's estimate of each row that ran against its measured peak (min, median, max of
    est/peak), the rows under their peak and those over 1.5x."""
    import statistics

    rows = [r for r in _run_rows(folder) if float(r.get("peak_mem_mb") or 0) > 0]
    ran = [r for r in rows if r.get("verdict") != "unsupported" and not str(r.get("detail", "")).startswith("out of memory")]
    print(f"{folder}: {len(ran)} rows that ran with a measured peak, today's estimate of the worker's torch allocations")
    print("(JAX's own buffers are estimated apart: peak_mem_mb does not see them)")
    print("(a row whose mask probe did not run then, before the scaled probe, is estimated without probes)")
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in ran:
        case, be = Case.from_json(r["case_json"]), backends.get(r["backend"])
        est = estimate(case, r.get("mask_check") != "not_run", backend=be).measured_bytes / MIB
        groups.setdefault(r["backend"], []).append((est, float(r["peak_mem_mb"])))
    head = f"{'backend':<26} {'rows':>5} {'max peak MiB':>13} {'est/peak min':>13} {'median':>7} {'max':>6}"
    print(f"\n{head} {'peak>est':>9} {'<1.1x':>6} {'est>1.5x':>9}")
    for name, pairs in sorted(groups.items()):
        ratios = [e / p for e, p in pairs]
        under, over, tight = sum(e < p for e, p in pairs), sum(e > 1.5 * p for e, p in pairs), sum(e < 1.1 * p for e, p in pairs)
        top = max(p for _, p in pairs)
        med = statistics.median(ratios)
        print(
            f"{name:<26} {len(pairs):>5} {top:>13.0f} {min(ratios):>13.2f} {med:>7.2f} {max(ratios):>6.2f} {under:>9} {tight:>6} {over:>9}"
        )


def summarize_bench(path: Path) -> None:
    """This script's committed GPU output (``== BACKEND`` blocks of rows), each row's measured worker and harness
    peaks against today's estimates."""
    import re

    line_re = re.compile(r"(\S+ \S+)\s+\d+\s+\d+ \|\s+[\d.]+\s+([\d.]+)\s+[\d.]+ \|\s+[\d.]+\s+([\d.]+)\s+[\d.]+")
    named = dict(cases(1, "bfloat16"))
    print(f"{path}: measured peaks, today's estimates (worker: its torch allocations; harness: reference and baseline)")
    print(f"{'backend':<22} {'row':<28} {'worker peak':>11} {'est':>8} {'ratio':>6} | {'harness peak':>12} {'est':>8} {'ratio':>6}")
    backend = None
    for text in path.read_text().splitlines():
        if text.startswith("== "):
            backend = text[3:].strip()
            continue
        m = line_re.match(text)
        if not m or backend is None:
            continue
        est = estimate(named[m.group(1)], backend=backends.get(backend))
        w, h = float(m.group(2)), float(m.group(3))
        w_est, h_est = est.measured_bytes / MIB, est.harness_bytes / MIB
        print(f"{backend:<22} {m.group(1):<28} {w:>11.1f} {w_est:>8.1f} {w_est / w:>6.2f} | {h:>12.1f} {h_est:>8.1f} {h_est / h:>6.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a run folder: its rows' estimate against their measured peak, nothing run")
    ap.add_argument("--now", action="store_true", help="with --run: today's estimate of each row instead of the one it recorded")
    ap.add_argument("--bench", type=Path, help="this script's committed GPU output: its rows against today's estimates")
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--scale", type=int, default=None, help="divide lengths and windows by this (default: 1 on CUDA, 16 on the CPU)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--reference-device", default=None, help="where the reference runs (default: the backend's device)")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--only", default="", help="substring of the row names to run")
    a = ap.parse_args()
    if a.run is not None:
        (summarize_now if a.now else summarize_run)(a.run)
        return 0
    if a.bench is not None:
        summarize_bench(a.bench)
        return 0
    backend = backends.get(a.backend)
    dev = backend.device
    ref_dev = a.reference_device or dev
    scale = a.scale or (1 if dev == "cuda" else 16)
    probes = not a.no_probes
    print(f"backend {a.backend} on {dev}; reference on {ref_dev}; lengths / {scale}; probes {'on' if probes else 'off'}")
    print(f"{'row':<34} {'Sq':>6} {'Sk':>6} | {'worker est':>10} {'peak':>8} {'ratio':>6} | {'harness est':>11} {'peak':>8} {'ratio':>6}")
    for name, case in cases(scale, a.dtype):
        if a.only not in name:
            continue
        print(row(name, case, backend, probes, ref_dev))
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "memory_estimate"))
