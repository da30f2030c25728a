"""Speed of the GPU backends on a fixed sliding-window grid, against the measured bf16 ceiling.

Grid: bf16, d = 128, one sequence, S in {8192, 32768}, window W in {1024, 4096} tokens
(``Window.tokens(W)`` = causal, W keys including the current one), GQA 32:8.

FLOPs are counted on the windowed work only: ``4 * d * hq * visible_pairs`` (QK^T and PV,
2 FLOPs per multiply-add), ``visible_pairs`` = the exact number of (query, key) pairs the
window allows. The ceiling is a bf16 ``8192^3`` matmul on random data, timed the same way.

Timing: CUDA events around ``backend.run`` (the backend's file as the sweep calls it, so
per-call mask construction in sdpa/flex is included), 3 warm-up calls, median of 10.
Each backend runs in this process; run the script once per sys.path group (flash-attn-4 and
xformers cannot share one). ``--json PATH`` appends one JSON line per measurement.

    python3 benchmarks/gpu_bench.py --backend torch-fa2-cuda --backend sdpa-cudnn-cuda --json out.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity import backends  # noqa: E402
from parity.case import Case, make_inputs  # noqa: E402
from parity.verdict import POISON  # noqa: E402
from parity.window import Window  # noqa: E402

GRID_S = (8192, 32768)
GRID_W = (1024, 4096)


def cuda_median_ms(fn, warmup: int = 3, reps: int = 10) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), times


def matmul_ceiling() -> float:
    n = 8192
    mats = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(4)]  # (n, n) x4, rotated
    i = [0]

    def mm():
        i[0] = (i[0] + 1) % 2
        return mats[2 * i[0]] @ mats[2 * i[0] + 1]

    ms, _ = cuda_median_ms(mm, warmup=5, reps=30)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def bench_one(be, case: Case, ceiling: float) -> dict:
    inputs = make_inputs(case, "cuda")
    out = torch.full(inputs.q.shape, POISON, dtype=torch.bfloat16, device="cuda")  # (S, hq, d)
    t0 = time.perf_counter()
    be.run(case, inputs, out)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ms, times = cuda_median_ms(lambda: be.run(case, inputs, out))
    flops = 4 * case.head_dim * case.hq * sum(case.band_counts())
    tf = flops / (ms * 1e-3) / 1e12
    return {
        "status": "ok",
        "median_ms": round(ms, 4),
        "min_ms": round(min(times), 4),
        "max_ms": round(max(times), 4),
        "first_call_s": round(first, 3),
        "tflops": round(tf, 2),
        "frac_of_ceiling": round(tf / ceiling, 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", "-b", action="append", required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ceiling", type=float, help="bf16 TFLOP/s ceiling (measured here when omitted)")
    ap.add_argument("--seq", type=int, action="append")
    ap.add_argument("--skip", action="append", default=[], help="BACKEND@S pairs to skip (e.g. jax-xla-cuda@32768)")
    args = ap.parse_args()
    ceiling = args.ceiling or matmul_ceiling()
    print(f"bf16 matmul ceiling (8192^3, random, median of 30): {ceiling:.1f} TFLOP/s on {torch.cuda.get_device_name()}")
    lines = []
    for spec in args.backend:
        be = backends.get(spec)
        why = be.unavailable_reason()
        if why:
            lines.append({"backend": spec, "status": "unavailable", "detail": why})
            continue
        for s in args.seq or GRID_S:
            for w in GRID_W:
                if f"{spec}@{s}" in args.skip:
                    lines.append({"backend": spec, "S": s, "W": w, "status": "skipped", "detail": "--skip"})
                    continue
                case = Case((s,), (s,), 32, 8, 128, "bfloat16", Window.tokens(w), seed=1)
                rec = {"backend": spec, "S": s, "W": w, "hq": 32, "hkv": 8, "d": 128}
                why = be.unsupported_reason(case)
                if why:
                    lines.append({**rec, "status": "unsupported", "detail": why})
                    continue
                try:
                    lines.append({**rec, **bench_one(be, case, ceiling)})
                except Exception as exc:  # noqa: BLE001
                    msg = str(exc).splitlines()[0][:200] if str(exc) else ""
                    lines.append({**rec, "status": "error", "detail": f"{type(exc).__name__}: {msg}"})
                torch.cuda.empty_cache()
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "ceiling_tflops": round(ceiling, 1),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"{'backend':<24}{'S':>7}{'W':>6}  {'median ms':>10}{'TFLOP/s':>9}{'of ceil':>9}  status")
    for r in lines:
        if r["status"] == "ok":
            print(f"{r['backend']:<24}{r['S']:>7}{r['W']:>6}  {r['median_ms']:>10.3f}{r['tflops']:>9.1f}{r['frac_of_ceiling']:>9.1%}  ok")
        else:
            where = f"{r['backend']:<24}{r.get('S', ''):>7}{r.get('W', ''):>6}"
            print(f"{where}  {'':>28}  {r['status']}: {r.get('detail', '')[:90]}")
    if args.json:
        with args.json.open("a") as fh:
            for r in lines:
                fh.write(json.dumps({**meta, **r}) + "\n")
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "gpu_bench"))
