"""Issue 47's question on one GPU: does a backend build more kernels than its compile keys, and why?

    python lab/loan/compile_probe.py OUT.jsonl --cache DIR [--backend flex-cuda,jax-xla-cuda] [--profile default]
        [--seconds 120]

One process, no lanes: each case of the profile that a backend accepts runs once (``_call`` with its LSE, as a
row's own call does), in profile order, and a JSON line records its compile key, whether that key was met
before in this process, and what the call built: ``kernels_built`` (the backend's own count), and for the
torch backends Dynamo's new graphs and inductor's FX-graph cache hits / misses / bypasses. Run it twice on one
``--cache``: the first says whether a key is too coarse (``built`` on a key met before), the second whether the
disk cache serves another process (hits, not misses). The last lines are a table per backend. Lab only: it
runs the backend in this process (a crash ends the probe), which a product run never does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from parity import backends, compile_cache, strategies
from parity.case import make_inputs
from parity.execute import _call


def _counters() -> dict[str, int]:
    try:
        from torch._dynamo.utils import counters
    except Exception:  # noqa: BLE001 - a torch without dynamo
        return {}
    ind = counters["inductor"]
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "fx_hit": int(ind["fxgraph_cache_hit"]),
        "fx_miss": int(ind["fxgraph_cache_miss"]),
        "fx_bypass": int(ind["fxgraph_cache_bypass"]),
    }


def _features(case) -> dict:
    return {
        "q": list(case.q_lens[:4]),
        "k": list(case.k_lens[:4]),
        "b": len(case.q_lens),
        "window": [case.window.left, case.window.right, case.window.align],
        "page": case.page_size,
        "kv_dtype": case.kv_dtype,
    }


def probe(name: str, cases: list, seconds: float, out) -> dict:
    b = backends.get(name)
    why = b.unavailable_reason()
    if why:
        return {"backend": name, "unavailable": why}
    seen: dict[str, int] = {}
    kernels: set = set()  # Backend.compile_kernels: JAX builds one executable per sequence signature of a key
    tot = {"rows": 0, "built": 0, "built_on_seen": 0, "errors": 0}
    t_end = time.monotonic() + seconds
    for i, case in enumerate(cases):
        if time.monotonic() > t_end:
            tot["stopped_at_case"] = i
            break
        if b.unsupported_reason(case):
            continue
        key = repr(b.compile_key(case))
        k0, c0, t0 = b.kernels_built(), _counters(), time.perf_counter()
        rec: dict = {"backend": name, "case": i, "key": key, "seen": key in seen, **_features(case)}
        try:
            _call(b, case, make_inputs(case, b.device), count_unwritten=False, with_lse=True)
        except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            tot["errors"] += 1
        if b.device == "cuda":
            torch.cuda.synchronize()
        k1, c1 = b.kernels_built(), _counters()
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["built"] = None if k0 is None or k1 is None else k1 - k0
        rec.update({f"d_{n}": c1[n] - c0[n] for n in c1})
        tot["rows"] += 1
        tot["built"] += rec["built"] or 0
        if rec["seen"] and rec["built"]:
            tot["built_on_seen"] += rec["built"]
            rec["first_case_of_key"] = seen[key]
        seen.setdefault(key, i)
        kernels.update(b.compile_kernels(case))
        out.write(json.dumps(rec) + "\n")
        out.flush()
    return {"backend": name, "keys": len(seen), "kernels": len(kernels), **tot, **_counters()}


def _candidates(a) -> None:
    """Lab-only experiments on the process's torch and flex module (nothing in the product changes)."""
    if a.legacy:
        from parity.backends import flex

        flex.FlexCudaBackend.min_bucket = 128
        flex._without_duck_shapes = lambda fn: fn


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--backend", default="flex-cuda,jax-xla-cuda")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--seconds", default="120", help="seconds per backend, one number or one per backend (a,b)")
    ap.add_argument("--legacy", action="store_true", help="flex-cuda as before 2026-12-06 22:30: duck shaping, 128-row buckets")
    a = ap.parse_args(argv)
    _candidates(a)
    compile_cache.enable(Path(a.cache))
    cases = strategies.generate(strategies.profile(a.profile))
    names = a.backend.split(",")
    with open(a.out, "w") as out:
        secs = [float(x) for x in a.seconds.split(",")]
        sums = [probe(n, cases, secs[min(i, len(secs) - 1)], out) for i, n in enumerate(names)]
    for s in sums:
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
