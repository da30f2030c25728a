"""Seconds a refused row costs its lane when the case's reference is slow, on the CPU (h100-2026-12-07g-models: 1463
of 2852 rows refused, ~2400 s of lanes waiting for other lanes' 32k references, ~3 s a refused row).

The harness's reference is made slow (``parity.judge.compute_baseline`` sleeps ``--slow`` seconds more a case, as a
32k case's float64 reference takes seconds on a GPU); the backends are the ``reference`` (its rows are judged, so it
needs every case's reference) and two that refuse every case: :class:`Refuses` up front (its own check, as a backend
without softcap refuses a softcap case) and :class:`RefusesInCall` in its call (the library's words, as FlashInfer's
"Unsupported group_size"). Two runs of :func:`parity.sweep.run.run_sweep` over ``--cases`` small cases, probes off:

``one lane``: the two refusers alone (``--jobs 1``): no row needs a reference;
``three lanes``: the three backends, one lane each (``--jobs 3``): the refusers' lanes beside the reference's.

Per backend, from ``OUT/stages.jsonl``: its rows, and per row the lane's seconds (``wait + reference + judge_wait``:
what the lane spent on it apart from judging), mean and max; the run's wall (workers' start-up included).

    PYTHONPATH=. python -m benchmarks.refused_rows [--cases 6] [--slow 1.0] [--out /tmp/refused_rows]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from parity import Case, Window
from parity import judge as judging
from parity.backends.base import Unsupported
from parity.backends.reference import ReferenceBackend
from parity.sweep.run import run_sweep

REFUSES = "benchmarks.refused_rows:Refuses"
REFUSES_IN_CALL = "benchmarks.refused_rows:RefusesInCall"
RUNS = {"one lane": ((REFUSES, REFUSES_IN_CALL), 1), "three lanes": (("reference", REFUSES, REFUSES_IN_CALL), 3)}


class Refuses(ReferenceBackend):
    """Refuses every case by its own check, before its worker reads any inputs."""

    name = "bench-refuses"

    def unsupported_reason(self, case: Case) -> str | None:
        return "refuses every case (benchmark)"


class RefusesInCall(ReferenceBackend):
    """Refuses every case in its call, with its inputs read: a library's own refusal."""

    name = "bench-refuses-in-call"

    def run(self, case, inputs, out):
        raise Unsupported("refuses every case in its call (benchmark)")


def bench_cases(n: int) -> list[Case]:
    return [Case(q_lens=(64,), k_lens=(96,), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(16, 0), seed=s) for s in range(n)]


def slow_reference(seconds: float) -> None:
    real = judging.compute_baseline

    def slow(case, device, **kw):
        time.sleep(seconds)
        return real(case, device, **kw)

    judging.compute_baseline = slow  # the harness's references (this process); the workers compute none


def measure(backends: tuple[str, ...], jobs: int, cases: list[Case], out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    run_sweep(list(backends), cases, out, jobs=jobs, probes=False, progress=False)
    wall = time.perf_counter() - t0
    rows = [json.loads(ln) for ln in (out / "stages.jsonl").read_text().splitlines() if ln.strip()]
    per: dict[str, Any] = {}
    for b in backends:
        lane = [(r["stage_ms"]["wait"] + r["stage_ms"]["reference"] + r["stage_ms"]["judge_wait"]) / 1e3 for r in rows if r["backend"] == b]
        ref = [r["stage_ms"]["reference"] / 1e3 for r in rows if r["backend"] == b]
        verdicts = sorted({r["status"] for r in rows if r["backend"] == b})
        per[b] = {"rows": len(lane), "status": verdicts, "mean_s": round(statistics.mean(lane), 4), "max_s": round(max(lane), 4)}
        per[b]["reference_s"] = round(sum(ref), 3)
    return {"wall_s": round(wall, 2), "backends": per}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=6)
    ap.add_argument("--slow", type=float, default=1.0, help="seconds added to each case's reference")
    ap.add_argument("--out", type=Path, default=Path("/tmp/refused_rows"))
    a = ap.parse_args(argv)
    if a.out.exists() and not a.out.is_dir():
        ap.error(f"--out {a.out}: not a folder (the sweeps' folders go under it)")
    if a.cases < 1:
        ap.error(f"--cases must be >= 1, got {a.cases}")
    import torch

    slow_reference(a.slow)
    cases = bench_cases(a.cases)
    started = datetime.datetime.now()
    print(
        f"refused_rows: {started.isoformat(timespec='minutes')}, {platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"parity from {Path(judging.__file__).parent}; {a.cases} cases, reference +{a.slow:g} s a case"
    )
    head = f"{'run':<13}{'backend':<38}{'rows':>5}  {'status':<13}{'lane s/row':>11}{'max s':>8}{'reference s':>13}{'wall s':>8}"
    print(head + "\n" + "-" * len(head))
    for name, (backends, jobs) in RUNS.items():
        r = measure(backends, jobs, cases, a.out / name.replace(" ", "-"))
        for b, s in r["backends"].items():
            cells = f"{s['rows']:>5}  {','.join(s['status']):<13}{s['mean_s']:>11}{s['max_s']:>8}{s['reference_s']:>13}{r['wall_s']:>8}"
            print(f"{name:<13}{b:<38}{cells}")
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "refused_rows"))
