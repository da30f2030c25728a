"""Peak memory and time of the banded float64 reference on the CPU.

Default: S = 32768, W = 512 (Window.tokens(512)), 8 query heads, 8 kv heads, d = 128, bf16 inputs,
float64 reference. Prints the peak resident memory of this process (ru_maxrss) next to
the size of inputs + output, so the claim "memory grows with Sq x window, not Sq x Sk"
can be checked: a dense fp64 score matrix alone would need 8 * 32768^2 * 8 B = 64 GiB.

    python benchmarks/reference_memory.py [--seq 32768] [--window 512] [--heads 8] [--kv-heads 8] [--dim 128]
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time

import torch

from parity import Case, Window, attention_reference, make_inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=32768)
    p.add_argument("--window", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16")
    a = p.parse_args()
    case = Case(
        q_lens=(a.seq,), k_lens=(a.seq,), hq=a.heads, hkv=a.kv_heads, head_dim=a.dim, dtype=a.dtype, window=Window.tokens(a.window), seed=0
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    inputs = make_inputs(case)
    t0 = time.perf_counter()
    out = attention_reference(inputs, torch.float64)  # (S, hq, d)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    io = sum(t.numel() * t.element_size() for t in (inputs.q, inputs.k, inputs.v)) + out.numel() * out.element_size()
    dense = case.hq * a.seq * a.seq * 8
    print(f"machine: {platform.machine()} {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"case: {case.summary()}")
    print(f"{'reference time':<34}{secs:10.2f} s")
    print(f"{'peak RSS (whole process)':<34}{peak / 2**30:10.2f} GiB")
    print(f"{'RSS before the inputs':<34}{before / 2**30:10.2f} GiB")
    print(f"{'inputs + fp64 output':<34}{io / 2**30:10.2f} GiB")
    print(f"{'dense fp64 score matrix would be':<34}{dense / 2**30:10.2f} GiB")
    print(f"{'under 4 GiB':<34}{'yes' if peak < 4 * 2**30 else 'NO':>10}")


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "reference_memory"))
