"""Per-row ``inputs`` and ``ipc`` seconds of a sweep at model shapes, on the CPU (issues 47 and 48).

Two measurements of the same shapes (mistral-7b-v0.1's calls of the models profile: 32 query heads, 8 kv heads,
head dim 128, bfloat16):

``sweep``: ``python -m parity run --case-file ... --no-probes`` (the real sweep path: lanes, workers, judge), its
``OUT/stages.jsonl`` read back: per shape the medians over its rows of the worker's ``inputs`` stage and the
sweep's ``ipc`` (:data:`parity.sweep.timing.STAGES`), and the harness's own draws (``timing.json``'s
``reference_stages_s``). The 32k prefill runs on the ``reference`` backend alone (a CPU backend that computes only
the band; SDPA on the CPU would compute every one of its 32768 x 32768 scores), its window cut to 255 keys as in
``benchmarks/judge_cost.py`` (its inputs and output are the real call's; only the band's work is less), over
``--rows`` seeds; the decodes on ``reference``, ``sdpa`` and ``sdpa-math`` (three rows of one case, as the lanes
of a GPU run meet each case once per backend).

The sweep's ``ipc`` is its wait on the worker less the worker's own seconds, clamped at 0: on the CPU the lane
judges the previous row and computes the case's reference while the worker runs, so a transfer that happens
meanwhile is hidden there. ``worker``: the same rows through :class:`parity.process.ProcessExecutor` (what the
lanes use) with nothing overlapped, ``--rows`` rows per shape on one worker: ``inputs`` its draw (the worker's
own, no sweep to share one), ``ipc`` the wall time of ``submit`` + ``collect`` less the worker's seconds.

    python -m benchmarks.sweep_io [--rows 3] [--out /tmp/sweep_io] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from parity import Window, models
from parity.case import Case
from parity.process import ProcessExecutor

MODEL = "mistral-7b-v0.1"
#: shape name -> (the models profile's call, the backends the sweep runs it on, window override)
SHAPES = {
    "prefill-32k": ("prefill-32k", ("reference",), 255),
    "decode-128k": ("decode-128k", ("reference", "sdpa", "sdpa-math"), None),
    "decode-1k-32k": ("decode-1k-32k", ("reference", "sdpa", "sdpa-math"), None),
}


def shape_cases(rows: int) -> dict[str, list[Case]]:
    """Each shape's cases: the prefill over ``rows`` seeds (one backend), each decode once (three backends)."""
    m = models.table_model(MODEL)
    calls = {c.name: c for c in models.CALLS}
    out: dict[str, list[Case]] = {}
    for name, (call, _, window) in SHAPES.items():
        case = models.model_cases(m, calls=[calls[call]])[0]
        if window is not None:
            case = dataclasses.replace(case, window=Window.tokens(window + 1))
        seeds = range(rows) if window is not None else range(1)
        out[name] = [dataclasses.replace(case, seed=case.seed + s) for s in seeds]
    return out


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def run_sweep(name: str, cases: list[Case], backends: tuple[str, ...], out: Path) -> dict[str, Any]:
    """One ``parity run`` over ``cases`` x ``backends``: medians of its ok rows' stages, the harness's draws."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    case_file = folder / "cases.jsonl"
    case_file.write_text("".join(c.to_json() + "\n" for c in cases))
    cmd = [sys.executable, "-m", "parity", "run", "--backend", ",".join(backends), "--case-file", str(case_file)]
    cmd += ["--no-probes", "--out", str(folder / "run"), "--force", "-q", "--no-report", "--no-siblings", "--shrink", "0"]
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (folder / "run" / "stages.jsonl").read_text().splitlines() if line.strip()]
    ok = [r["stage_ms"] for r in rows if r["status"] == "ok"]
    shared = sum(bool(r.get("inputs_shared")) for r in rows if r["status"] == "ok")  # mapped the sweep's one draw
    timing = json.loads((folder / "run" / "timing.json").read_text())
    return {
        "rc": rc,
        "wall_s": round(wall, 1),
        "rows": len(ok),
        "shared_rows": shared,
        **{f"{k}_s": _median([r[k] / 1e3 for r in ok]) for k in ("inputs", "ipc", "worker", "wait", "reference")},
        "harness_draws_s": timing.get("reference_stages_s", {}),
    }


def run_worker(cases: list[Case], backend: str, rows: int) -> dict[str, Any]:
    """``rows`` rows of ``cases`` (in turn) through one :class:`ProcessExecutor`, nothing overlapped."""
    ex = ProcessExecutor(backend, probes=False, timeout=1800.0)
    gen, ipc, worker = [], [], []
    try:
        if ex.info.get("unavailable"):
            raise SystemExit(f"{backend}: {ex.info['unavailable']}")
        for i in range(rows):
            t0 = time.perf_counter()
            failed = ex.submit(cases[i % len(cases)])
            res = failed if failed is not None else ex.collect()
            wall = time.perf_counter() - t0
            if res.get("status") != "ok":
                raise SystemExit(f"{backend}: {res.get('status')}: {res.get('detail')}")
            t = res["timing"]
            gen.append(t["gen_s"])
            worker.append(t["worker_s"])
            ipc.append(wall - t["worker_s"])
    finally:
        ex.close()
    return {"rows": rows, "inputs_s": _median(gen), "ipc_s": _median(ipc), "worker_s": _median(worker)}


def table(results: dict[str, dict[str, Any]]) -> str:
    head = f"{'shape':<15}{'sweep rows':>11}{'inputs s':>10}{'ipc s':>8}{'worker s':>10}{'wait s':>8}"
    head += f"{'worker rows':>13}{'inputs s':>10}{'ipc s':>8}{'worker s':>10}"
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        s, w = r["sweep"], r["worker"]
        cells = [s["rows"], s["inputs_s"], s["ipc_s"], s["worker_s"], s["wait_s"], w["rows"], w["inputs_s"], w["ipc_s"], w["worker_s"]]
        widths = (11, 10, 8, 10, 8, 13, 10, 8, 10)
        lines.append(f"{name:<15}" + "".join(f"{'-' if c is None else c:>{n}}" for c, n in zip(cells, widths)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=3, help="rows per shape (the prefill's seeds, the worker's rows)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/sweep_io"), help="the sweeps' folders")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    a = ap.parse_args(argv)
    unknown = [name for name in a.shapes.split(",") if name not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(map(repr, unknown))}; expected a comma-separated list of {', '.join(SHAPES)}")
    import torch

    started = datetime.datetime.now()
    cases = shape_cases(a.rows)
    results: dict[str, dict[str, Any]] = {}
    for name in a.shapes.split(","):
        _, backends, _ = SHAPES[name]
        results[name] = {
            "case": cases[name][0].summary(),
            "sweep": run_sweep(name, cases[name], backends, a.out),
            "worker": run_worker(cases[name], "reference" if name.startswith("prefill") else "sdpa", a.rows),
        }
    print(
        f"sweep_io: {started.isoformat(timespec='minutes')}, {platform.machine()} {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, parity from {Path(__import__('parity').__file__).parent}; medians, seconds"
    )
    for name, r in results.items():
        s = r["sweep"]
        print(f"  {name}: {r['case']}; sweep exit {s['rc']} in {s['wall_s']} s, {s['shared_rows']} of its {s['rows']} rows")
        print(f"    on the shared draw; the harness's inputs stages {s['harness_draws_s']}")
    print(table(results))
    if a.json:
        with a.json.open("a") as fh:
            fh.write(json.dumps({"when": started.isoformat(), "rows": a.rows, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "sweep_io"))
