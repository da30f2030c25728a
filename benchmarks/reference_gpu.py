"""The banded float64 reference on the GPU at long context: time and peak memory.

Default: S = 131072, W = 4096 tokens (``Window.tokens``), 8 query heads over 2 kv heads,
d = 128, bf16 inputs, float64 reference (and the same-dtype bf16 baseline the budget needs).
Peak GPU memory (``torch.cuda.max_memory_allocated``) is compared with
inputs + output + one band block (``reference.DEFAULT_BLOCK_BYTES`` of scores). A few
rows are recomputed directly (dense over their visible keys, float64) as a check.

    python3 benchmarks/reference_gpu.py [--seq 131072 --window 4096]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parity.case import Case, make_inputs  # noqa: E402
from parity.reference import DEFAULT_BLOCK_BYTES, attention_reference  # noqa: E402
from parity.window import Window  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=131072)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    case = Case((a.seq,), (a.seq,), 8, 2, 128, "bfloat16", Window.tokens(a.window), seed=3)
    inputs = make_inputs(case, "cuda")
    torch.cuda.synchronize()
    in_bytes = sum(t.numel() * t.element_size() for t in (inputs.q, inputs.k, inputs.v))
    res = {
        "S": a.seq,
        "W": a.window,
        "hq": 8,
        "hkv": 2,
        "d": 128,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for name, dt in (("float64 reference", torch.float64), ("bf16 baseline", torch.bfloat16)):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        ref = attention_reference(inputs, dt)  # (S, hq, d)
        torch.cuda.synchronize()
        sec = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() - base
        o_bytes = ref.numel() * ref.element_size()
        budget = in_bytes + o_bytes + DEFAULT_BLOCK_BYTES
        key = "ref" if dt == torch.float64 else "baseline"
        res.update(
            {
                f"{key}_seconds": round(sec, 3),
                f"{key}_peak_gib": round(peak / 2**30, 3),
                f"{key}_peak_over_in_out_band": round((peak + in_bytes) / budget, 2),
            }
        )
        print(
            f"{name}: {sec:.2f} s, peak {peak / 2**30:.2f} GiB above the inputs "
            f"(inputs {in_bytes / 2**30:.2f} GiB, output {o_bytes / 2**30:.2f} GiB, band block {DEFAULT_BLOCK_BYTES / 2**20:.0f} MiB; "
            f"(peak + inputs) / (inputs + output + band) = {(peak + in_bytes) / budget:.2f})"
        )
        if dt == torch.float64:
            worst = 0.0
            for i in (0, 5, a.window - 1, a.window, a.seq // 2, a.seq - 1):
                lo, hi = max(0, i - a.window + 1), i
                q = inputs.q[i].double()  # (hq, d)
                k = inputs.k[lo : hi + 1].double().repeat_interleave(4, dim=1)  # (n, hq, d)
                v = inputs.v[lo : hi + 1].double().repeat_interleave(4, dim=1)  # (n, hq, d)
                p = torch.softmax(torch.einsum("hd,nhd->hn", q, k) * case.softmax_scale, dim=-1)  # (hq, n)
                worst = max(worst, float((torch.einsum("hn,nhd->hd", p, v) - ref[i]).abs().max()))
            res["spot_check_max_abs_diff"] = worst
            print(f"spot check of 6 rows against a direct float64 computation: max |diff| = {worst:.3g}")
        del ref
    print(json.dumps(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "reference_gpu"))
