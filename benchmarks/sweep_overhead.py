"""How much of a sweep's wall time is the harness, and how many cases per second each backend gets.

Runs ``python -m parity run`` (any arguments after ``--`` go to it), then prints the figures
of its ``OUT/timing.json`` (see :class:`parity.sweep.SweepTiming` for the definitions):

    python benchmarks/sweep_overhead.py --out /tmp/so -- --backend all-gpu --profile default

``--profile-workers`` also profiles every worker with cProfile and prints each one's top
functions by own time (where the harness spends it). ``--json FILE`` appends the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import pstats
import subprocess
import sys
from pathlib import Path


def machine() -> str:
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
        return f"{gpu}, torch {torch.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs"
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def table(timing: dict) -> str:
    per = timing["per_backend"]
    head = (
        f"{'backend':<26}{'rows':>6}{'cases/s':>9}{'wait s':>8}{'judge s':>8}{'calls s':>8}{'probe calls s':>14}{'probe s':>8}{'gen s':>7}"
    )
    lines = [head, "-" * len(head)]
    for spec, t in per.items():
        rate = t.get("cases_per_s_upto_4096")
        lines.append(
            f"{spec:<26}{int(t['cases']):>6}{'-' if rate is None else f'{rate:.1f}':>9}{t['exec_s']:>8.2f}{t['judge_s']:>8.2f}"
            f"{t['call_s']:>8.2f}{t.get('probe_call_s', 0.0):>14.2f}{t['probe_s']:>8.2f}{t['gen_s']:>7.2f}"
        )
    return "\n".join(lines)


def pct(share: float | None) -> str:
    """A share as a percentage; ``-`` where timing.json has none (runs with several lanes)."""
    return "-" if share is None else f"{100 * share:.1f}%"


def top_functions(prof_dir: Path, n: int = 8) -> str:
    out = []
    for f in sorted(prof_dir.glob("*.pstats")):
        st = pstats.Stats(str(f))
        total = st.total_tt  # type: ignore[attr-defined]
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:n]  # type: ignore[attr-defined]
        out.append(f"{f.stem} (profiled {total:.1f} s):")
        for (file, line, func), (_, ncalls, tt, ct, _) in rows:
            out.append(f"   {tt:7.2f} s own {ct:7.2f} s cum {ncalls:>8} calls  {Path(file).name}:{line} {func}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, run_args = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the sweep's output folder")
    ap.add_argument("--profile-workers", action="store_true", help="cProfile every worker (slows it a little)")
    ap.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    prof_dir = args.out / "pstats"
    if args.profile_workers:
        env["PARITY_WORKER_PROFILE"] = str(prof_dir)
    cmd = [sys.executable, "-m", "parity", "run", "--out", str(args.out), "-q", *run_args]
    started = datetime.datetime.now(datetime.timezone.utc)
    rc = subprocess.call(cmd, env=env)
    timing_path = args.out / "timing.json"
    if not timing_path.exists():
        print(f"sweep exited {rc} without {timing_path}", file=sys.stderr)
        return 2
    timing = json.loads(timing_path.read_text())
    print(f"\nsweep_overhead: {started:%Y-%m-%d %H:%M} UTC on {machine()}")
    print(f"command: {' '.join(cmd[1:])} (exit {rc})")
    if args.profile_workers and prof_dir.exists():
        print(top_functions(prof_dir))
    print(table(timing))
    print(
        f"wall {timing['wall_s']:.1f} s (start-up {timing['startup_s']:.1f} s), backend calls {timing['backend_calls_s']:.1f} s, "
        f"reference {timing['reference_s']:.1f} s; harness overhead {pct(timing.get('harness_overhead_share'))} of wall "
        f"({pct(timing.get('harness_overhead_share_after_startup'))} after start-up; lanes: see lane_overhead_share); "
        f"{timing.get('rows_per_s_after_startup')} rows/s after start-up" + (" [PARTIAL]" if timing.get("partial") else "")
    )
    if args.json:
        with args.json.open("a") as fh:
            fh.write(json.dumps({"when": started.isoformat(), "machine": machine(), "args": run_args, "rc": rc, **timing}) + "\n")
    return 0 if rc in (0, 1) else rc


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "sweep_overhead"))
