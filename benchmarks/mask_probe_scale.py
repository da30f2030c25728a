"""The mask probe's cost per row: the full probe (one-hot, ``Sk / d`` passes) against the scaled one (signed residues).

    python benchmarks/mask_probe_scale.py                    # CPU reference backend, the rows below, 3 repeats
    python benchmarks/mask_probe_scale.py --only decode --repeats 1
    python benchmarks/mask_probe_scale.py --backend sdpa-cuda  # any backend, on its device

Rows (bfloat16, d 128, window (4095, 0) as Mistral-7B's local layers): decode (one query) over 4096, 8192, 32768 and
131072 keys at 32 query heads on 8; an 8k prefill (8192 queries on 8192 keys) at ``--prefill-heads`` (default 4 on 1:
the CPU reference's full probe there is 64 calls of a full prefill each). Per row and probe: the backend calls and
passes it made, its seconds (median over ``--repeats``, one run where it takes over ``--long``; the probe alone:
inputs made once, as a sweep does), and its peak memory (one more run: on CUDA ``max_memory_allocated`` above the
start, on the CPU the peak of live bytes of the tensors torch ops return, the approximation of
``benchmarks/memory_estimate.py``). ``1 call`` is one forward of the backend on the row's own case, for scale.
``--bug`` adds each row's scaled probe on a planted backend whose window is one key wider on the left (the reference on
a wider window): its cost where it finds a mismatch and describes it (``--bug-full``: the full probe too, whose passes
are the same as on the honest row).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_estimate import MIB, LiveBytes  # noqa: E402

from parity import Case, Window, backends  # noqa: E402
from parity.backends.reference import ReferenceBackend  # noqa: E402
from parity.case import make_inputs  # noqa: E402
from parity.execute import probe_runner  # noqa: E402
from parity.maskcheck import mask_passes, mask_plan, run_mask_probe  # noqa: E402


class ReferenceOneWider(ReferenceBackend):
    """The float64 reference on the case's window one key wider on the left: a planted mask bug."""

    name = "reference-one-wider"

    def run(self, case, inputs, out):
        w = case.window
        wider = dataclasses.replace(case, window=Window(None if w.left is None else w.left + 1, w.right, w.align))
        return super().run(wider, dataclasses.replace(inputs, case=wider), out)


def rows(prefill_heads: tuple[int, int]) -> list[tuple[str, Case]]:
    def case(q: int, k: int, hq: int = 32, hkv: int = 8) -> Case:
        return Case(q_lens=(q,), k_lens=(k,), hq=hq, hkv=hkv, head_dim=128, dtype="bfloat16", window=Window(4095, 0), seed=0)

    out = [(f"decode-{k // 1024}k" if k < 131072 else "decode-131072", case(1, k)) for k in (4096, 8192, 32768, 131072)]
    return [*out, ("prefill-8k", case(8192, 8192, *prefill_heads))]


def peak_mib(device: str, fn) -> float:
    """Peak MiB ``fn()`` allocates on ``device`` above what was allocated before (see the module docstring)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / MIB
    with LiveBytes() as live:
        fn()
    return live.peak / MIB


def probe_once(backend, case: Case, max_passes: int, base) -> tuple[float, int, str, str]:
    """One mask probe: seconds, backend calls, status, probe kind."""
    run, _ = probe_runner(backend, case)
    calls = [0]

    def counted(inp):
        calls[0] += 1
        return run(inp)

    t0 = time.perf_counter()
    r = run_mask_probe(case, counted, backend.device, max_passes, base=base)
    if backend.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, calls[0], r.status, r.probe


def measure(backend, case: Case, kind: str, repeats: int, long_s: float) -> str:
    """The figures of one probe (``full`` or ``scaled``) on ``case``, as one line; a run over ``long_s`` seconds is not repeated."""
    max_passes = mask_passes(case) if kind == "full" else 0
    base = make_inputs(case, backend.device)
    times, calls, status, probe = [], 0, "", ""
    while len(times) < repeats and not (times and times[0] > long_s):
        s, calls, status, probe = probe_once(backend, case, max_passes, base)
        times.append(s)
    mem = peak_mib(backend.device, lambda: probe_once(backend, case, max_passes, base))
    passes = mask_plan(case, max_passes)[1]
    spread = f" ({min(times):.2f}-{max(times):.2f})" if len(times) > 1 else " (1 run)"
    return f"  {probe:<7} {status:<9} {passes:>6} {calls:>6} {statistics.median(times):>9.2f}{spread:<16} {mem:>9.0f}"


def one_call(backend, case: Case) -> float:
    inputs = make_inputs(case, backend.device)
    out = torch.empty_like(inputs.q)
    t0 = time.perf_counter()
    backend.run(case, inputs, out)
    if backend.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def revision() -> str:
    """The checkout's commit (``+`` where files differ from it), or ``unknown``."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long", type=float, default=60.0, help="a probe whose first run takes longer is not repeated (default 60 s)")
    ap.add_argument("--only", default="", help="substring of the row names to run")
    ap.add_argument("--prefill-heads", default="4,1", help="query and kv heads of the 8k prefill row (default 4,1)")
    ap.add_argument("--no-full", action="store_true", help="the scaled probe alone")
    ap.add_argument("--bug", action="store_true", help="each row's scaled probe on the planted one-key-wider backend too")
    ap.add_argument("--bug-full", action="store_true", help="with --bug, the full probe on it too (as costly as on the row)")
    a = ap.parse_args()
    backend = backends.get(a.backend)
    hq, hkv = (int(x) for x in a.prefill_heads.split(","))
    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"# {now:%Y-%m-%dT%H:%MZ}; command: python benchmarks/mask_probe_scale.py {' '.join(sys.argv[1:])}; code {revision()}")
    print(f"# machine: {platform.machine()} {torch.get_num_threads()} threads, torch {torch.__version__}; {a.backend} on {backend.device}")
    print(f"# seconds: the probe alone, median (min-max) of {a.repeats} runs (1 where the first took over {a.long:.0f} s)")
    print("# peak MiB: one more run")
    print(f"{'row / probe':<9} {'status':<9} {'passes':>6} {'calls':>6} {'seconds':>9}{'':<16} {'peak MiB':>9}")
    for name, case in rows((hq, hkv)):
        if a.only not in name:
            continue
        print(f"{name}: {case.summary()}; 1 call {one_call(backend, case):.2f} s")
        for b, label in [(backend, ""), *([(ReferenceOneWider(), " (one key wider)")] if a.bug else [])]:
            for kind in ("full", "scaled"):
                if kind == "full" and (a.no_full or (label and not a.bug_full)):
                    continue
                print(measure(b, case, kind, a.repeats, a.long) + label, flush=True)
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "mask_probe_scale"))
