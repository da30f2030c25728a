"""Throughput of a sweep, cold then warm: rows per second per backend and where the time went.

Runs ``python -m parity run`` twice on the same cases, into one fresh compile cache
(``--compile-cache``): first ``cold`` (the cache empty), then ``warm`` (what the first run
compiled and measured is on disk: kernels, and each backend's seconds per row, which the
second run plans its lanes by). Prints, per run and backend, rows/s (rows / the lane's seconds
on them: waiting on the worker, judging, its share of the reference) and the per-stage
breakdown of ``timing.json`` (``stages``: inputs, the backend's call, first-use compilation,
each probe, IPC, judging, the reference); then whether any verdict differs between the runs
(none may: a cache changes how long a row takes, never what it computes). Writes it all to
``OUT/throughput.json``; the runs' folders stay in ``OUT/cold`` and ``OUT/warm``.

    # the CPU, in a few minutes on 2 cores
    python benchmarks/throughput.py --out /tmp/tp --profile quick --backend reference,sdpa,sdpa-causal
    # one GPU, bounded to about 8 minutes (both runs), every GPU backend
    python benchmarks/throughput.py --out /tmp/tp --profile default --backend all-gpu --jobs 8 \\
        --max-rows 2500 --time-limit 200 -- --worker-path ...

``--max-rows N``: at most N rows per run (cases evenly spaced over the profile's list, x the
backends); ``--time-limit S``: each run starts no row after S seconds (partial runs are said so).
``--summarize``: run nothing; read the runs already in ``OUT`` (say, from a benchmark killed
during its warm run) and print and write the same figures. Where a later run is partial, the
per-backend rates of the two runs are over different rows (a partial cold run compiled fewer
shapes than the warm one meets); the table "on the rows both runs ran" compares like with like:
per backend, the lane seconds (waiting on the worker and judging, from ``stages.jsonl``) and
first-use compilation of each run on the same (backend, case) pairs.
Arguments after ``--`` go to both ``parity run`` calls. Nothing of ``parity`` is imported here:
``PYTHONPATH`` picks the checkout measured, so the same script times an older commit.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

#: ``parity run`` exit codes a measured run may end with: rows all passing, some failing, partial
OK_EXITS = (0, 1, 3)
STAGE_COLS = (
    ("inputs", "inputs"),
    ("call", "call"),
    ("compile", None),
    ("mask", "mask_probe"),
    ("gqa", "gqa_probe"),
    ("read", "read_probe"),
    ("ipc", "ipc"),
    ("judge", "judge"),
    ("jwait", "judge_wait"),
    ("ref", "reference"),
)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the runs and throughput.json (new or empty)")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--backend", action="append", help="as parity run's --backend (default: all-gpu)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--max-rows", type=int, default=None, help="at most this many rows per run")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per run after which no row starts")
    ap.add_argument("--runs", default="cold,warm", help="which runs, in order (default cold,warm)")
    ap.add_argument("--cache", type=Path, default=None, help="compile cache folder (default OUT/compile-cache, new)")
    ap.add_argument("--summarize", action="store_true", help="run nothing: the figures of the runs already in OUT")
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or len(set(runs)) != len(runs):
        ap.error(f"--runs {args.runs}: give distinct run names, e.g. cold,warm")
    if args.max_rows is not None and args.max_rows < 1:
        ap.error("--max-rows must be >= 1")
    args.runs = runs
    return args, extra


def parity(*args: str, capture: bool = False, log: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m parity ARGS``: its output captured, or into ``log`` (stderr too), or shown."""
    if log is not None:
        with log.open("w") as fh:
            return subprocess.run([sys.executable, "-m", "parity", *args], stdout=fh, stderr=subprocess.STDOUT, text=True)
    return subprocess.run([sys.executable, "-m", "parity", *args], capture_output=capture, text=True)


def backends_of(selectors: list[str]) -> list[str]:
    """The backends the selectors expand to, as the checkout on PYTHONPATH expands them."""
    code = (
        "import json,sys\nfrom parity import backends\n"
        "print(json.dumps([s for a in sys.argv[1:] for p in a.split(',') if p for s in backends.expand(p)]))"
    )
    done = subprocess.run([sys.executable, "-c", code, *selectors], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"throughput: cannot expand --backend {selectors}: {done.stderr.strip()[-300:]}")
    return list(dict.fromkeys(json.loads(done.stdout)))


def case_list(args: argparse.Namespace, specs: list[str], extra: list[str]) -> list[str]:
    """The runs' cases (JSON lines): the profile's for these backends, evenly thinned to ``--max-rows``."""
    done = parity("run", "--profile", args.profile, "--backend", ",".join(specs), "--list-cases", *extra, capture=True)
    if done.returncode != 0:
        sys.exit(f"throughput: parity run --list-cases failed: {done.stderr.strip()[-500:]}")
    cases = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("{")]
    if args.max_rows is not None:
        keep = max(1, args.max_rows // max(1, len(specs)))
        if keep < len(cases):
            step = len(cases) / keep
            cases = [cases[int(i * step)] for i in range(keep)]
    return cases


def run_once(name: str, args: argparse.Namespace, specs: list[str], case_file: Path, cache: Path, extra: list[str]) -> dict[str, Any]:
    out = args.out / name
    cmd = ["run", "--backend", ",".join(specs), "--case-file", str(case_file), "--out", str(out), "--force"]
    cmd += ["--compile-cache", str(cache), "--jobs", str(args.jobs), "--quiet", "--no-report", "--shrink", "0"]
    if args.time_limit is not None:
        cmd += ["--time-limit", f"{args.time_limit:g}"]
    cmd += extra
    print(f"throughput: {name}: python -m parity {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    log = args.out / f"{name}.log"
    done = parity(*cmd, log=log)
    wall = time.perf_counter() - t0
    if done.returncode not in OK_EXITS:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        sys.exit(f"throughput: {name} run exited {done.returncode}; the end of {log}:\n{tail}")
    return read_run(name, out, done.returncode, round(wall, 3))


def read_run(name: str, out: Path, exit_code: int | None = None, wall: float | None = None) -> dict[str, Any]:
    """A run's record from its folder (``timing.json``, ``environment.json``); ``exit`` / ``process_wall_s``
    None where the run was not started here (``--summarize``)."""
    if not (out / "timing.json").exists():
        sys.exit(f"throughput: {out} has no timing.json (the run wrote nothing yet)")
    timing = json.loads((out / "timing.json").read_text())
    env = json.loads((out / "environment.json").read_text()) if (out / "environment.json").exists() else {}
    return {"name": name, "exit": exit_code, "process_wall_s": wall, "timing": timing, "env": env, "folder": str(out)}


def per_backend(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per backend: rows, rows/s (rows / its lanes' seconds on them) and its stages (when recorded). A run
    continued with ``--resume``: every call's, from the summed stages (``all_calls``; call_s not kept per call)."""
    t = run["timing"]
    if (t.get("all_calls") or {}).get("stages"):
        return _per_backend_all_calls(t["all_calls"]["stages"])
    stages = t.get("stages") or {}
    out = {}
    for spec, p in (t.get("per_backend") or {}).items():
        busy = p.get("exec_s", 0.0) + p.get("judge_s", 0.0) + p.get("baseline_s", 0.0)
        st = stages.get(spec) or {}
        out[spec] = {
            "rows": int(p.get("cases", 0)),
            "rows_per_s": round(p["cases"] / busy, 2) if busy else None,
            "busy_s": round(busy, 3),
            "call_s": p.get("call_s"),
            "probe_call_s": p.get("probe_call_s"),
            "compile_s": st.get("compile_s"),
            "first_config_rows": st.get("first_config_rows"),
            "stages_s": st.get("stages_s"),
        }
    return out


def _per_backend_all_calls(stages: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`per_backend` from ``all_calls.stages``; busy = waited + judged + the reference, as the sweep's
    own rows/s counts it (parity.sweep.timing, not imported here: see the module docstring)."""
    out = {}
    for spec, st in stages.items():
        s = st.get("stages_s") or {}
        out[spec] = {
            "rows": int(st.get("rows", 0)),
            "rows_per_s": st.get("rows_per_s"),
            "busy_s": round(sum(s.get(k, 0.0) for k in ("wait", "judge", "judge_wait", "reference")), 3),
            "call_s": None,
            "probe_call_s": None,
            "compile_s": st.get("compile_s"),
            "first_config_rows": st.get("first_config_rows"),
            "stages_s": s,
        }
    return out


def open_run_file(folder: str, name: str) -> IO[str] | None:
    """``folder/name`` opened as text, or ``folder/name.gz`` (a committed run keeps it gzipped); None if neither."""
    path = Path(folder) / name
    if path.exists():
        return path.open(newline="")
    packed = path.with_name(name + ".gz")
    return gzip.open(packed, "rt", newline="") if packed.exists() else None


def verdicts(folder: str) -> dict[tuple[str, str], str]:
    fh = open_run_file(folder, "results.csv")
    if fh is None:
        return {}
    with fh:
        return {(r["backend"], r["case_id"]): r["verdict"] for r in csv.DictReader(fh) if r.get("verdict")}


def compare_verdicts(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = verdicts(runs[0]["folder"])
    out: dict[str, Any] = {}
    for r in runs[1:]:
        other = verdicts(r["folder"])
        shared = sorted(set(first) & set(other))
        differ = [f"{b} {c}: {first[(b, c)]} -> {other[(b, c)]}" for b, c in shared if first[(b, c)] != other[(b, c)]]
        out[r["name"]] = {"shared": len(shared), "differ": len(differ), "examples": differ[:10]}
    return out


def lane_seconds(folder: str) -> dict[tuple[str, str], tuple[float, float]]:
    """(backend, case) -> (lane seconds: waiting on the worker + judging, first-use compilation), from
    ``stages.jsonl`` (``.gz`` too); empty where the checkout wrote none."""
    fh = open_run_file(folder, "stages.jsonl")
    if fh is None:
        return {}
    out = {}
    with fh:
        for line in fh:
            r = json.loads(line)
            ms = r.get("stage_ms") or {}
            out[(r["backend"], r["case_id"])] = (
                (ms.get("wait", 0.0) + ms.get("judge", 0.0) + ms.get("judge_wait", 0.0)) / 1e3,
                ms.get("compile", 0.0) / 1e3,
            )
    return out


def shared_rows(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per later run, per backend: the rows both it and the first run ran, and each run's lane seconds and
    first-use compilation on exactly those rows (like with like where a run is partial)."""
    first = lane_seconds(runs[0]["folder"])
    out: dict[str, Any] = {}
    for r in runs[1:]:
        other = lane_seconds(r["folder"])
        per: dict[str, dict[str, float]] = {}
        for key in sorted(set(first) & set(other)):
            f = per.setdefault(key[0], {"rows": 0, "first_s": 0.0, "later_s": 0.0, "first_compile_s": 0.0, "later_compile_s": 0.0})
            f["rows"] += 1
            f["first_s"] += first[key][0]
            f["later_s"] += other[key][0]
            f["first_compile_s"] += first[key][1]
            f["later_compile_s"] += other[key][1]
        out[r["name"]] = {b: {k: round(v, 3) for k, v in f.items()} for b, f in per.items()}
    return out


def shared_table(first: str, name: str, per: dict[str, dict[str, float]]) -> str:
    head = f"{'on the rows both ran':<26}{'rows':>7}{first + ' s':>12}{name + ' s':>12}{'ratio':>8}"
    head += f"{first + ' compile':>16}{name + ' compile':>16}"
    lines = [head, "-" * len(head)]
    keys = ("rows", "first_s", "later_s", "first_compile_s", "later_compile_s")
    total = {k: sum(f[k] for f in per.values()) for k in keys}
    for b, f in [*per.items(), ("all", total)]:
        ratio = f"{f['first_s'] / f['later_s']:.1f}x" if f["later_s"] > 0 else "-"
        lines.append(
            f"{b:<26}{int(f['rows']):>7}{f['first_s']:>12.1f}{f['later_s']:>12.1f}{ratio:>8}"
            f"{f['first_compile_s']:>16.1f}{f['later_compile_s']:>16.1f}"
        )
    return "\n".join(lines)


def summary_line(run: dict[str, Any]) -> str:
    t = run["timing"]
    rows, loop = t.get("rows_run", 0), t.get("wall_s", 0.0) - t.get("startup_s", 0.0)
    cc = (run["env"].get("compile_cache") or {}).get("state", "?")
    part = " PARTIAL" if t.get("partial") else ""
    total = t.get("all_calls")  # a run continued with --resume: this call's figures, then every call's
    every = f"; {total['calls']} calls in all: {total['rows_run']} rows in {total['wall_s']:.1f} s" if total else ""
    return (
        f"{run['name']}: {rows} rows in {t.get('wall_s', 0):.1f} s{_process_wall(run)}, "
        f"{rows / loop if loop > 0 else 0:.2f} rows/s after start-up, cache {cc}, {len(t.get('lanes') or [])} lane(s){part}{every}"
    )


def _process_wall(run: dict[str, Any]) -> str:
    w = run.get("process_wall_s")
    return "" if w is None else f" ({w:.1f} s with start-up and writing)"


def rate_table(runs: list[dict[str, Any]]) -> str:
    names = [r["name"] for r in runs]
    figs = {r["name"]: per_backend(r) for r in runs}
    specs = list(dict.fromkeys(s for f in figs.values() for s in f))
    head = f"{'backend':<26}" + "".join(f"{n + ' rows':>12}{n + ' rows/s':>14}{n + ' compile s':>16}" for n in names)
    lines = [head, "-" * len(head)]
    for s in specs:
        line = f"{s:<26}"
        for n in names:
            f = figs[n].get(s) or {}
            rate, comp = f.get("rows_per_s"), f.get("compile_s")
            line += f"{f.get('rows', 0):>12}{'-' if rate is None else f'{rate:g}':>14}{'-' if comp is None else f'{comp:.2f}':>16}"
        lines.append(line)
    return "\n".join(lines)


def stage_table(run: dict[str, Any]) -> str:
    """Seconds per stage summed over each backend's rows (``-`` where the checkout records no stages)."""
    figs = per_backend(run)
    head = f"{run['name'] + ': seconds':<26}" + "".join(f"{c:>9}" for c, _ in STAGE_COLS) + f"{'calls':>7}"
    lines = [head, "-" * len(head)]
    for s, f in figs.items():
        st = f.get("stages_s")
        if not st:
            lines.append(f"{s:<26}" + f"{'-':>9}" * len(STAGE_COLS) + f"{'-':>7}")
            continue
        cells = [f.get("compile_s") or 0.0 if key is None else st.get(key, 0.0) for _, key in STAGE_COLS]
        lines.append(f"{s:<26}" + "".join(f"{v:>9.2f}" for v in cells) + f"{int(st.get('mask_calls', 0)):>7}")
    t = run["timing"]
    ref = t.get("reference_stages_s")
    if ref:
        lines.append(
            f"reference cache: inputs {ref.get('inputs', 0):.2f} s, float64 reference {ref.get('reference', 0):.2f} s, "
            f"same-dtype baseline {ref.get('baseline', 0):.2f} s; recomputed {t.get('reference_recomputed', 0)} time(s)"
        )
    return "\n".join(lines)


def run_record(run: dict[str, Any]) -> dict[str, Any]:
    keep = ("process_wall_s", "exit", "timing", "folder")
    return {**{k: run[k] for k in keep}, "compile_cache": run["env"].get("compile_cache"), "per_backend": per_backend(run)}


def machine() -> str:
    code = (
        "import torch,os;print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU', torch.__version__, os.cpu_count())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return f"{done.stdout.strip() or '?'} (GPU, torch, CPUs); python {platform.python_version()}"


def machine_of(env: dict[str, Any]) -> str:
    """The machine a recorded run ran on, from its ``environment.json``."""
    gpu = env.get("gpu") or {}
    name = gpu.get("name") if gpu.get("available") else "no GPU"
    return f"{name or '?'} {env.get('torch', '?')} {env.get('cpu_count', '?')} (GPU, torch, CPUs); python {env.get('python', '?')}"


def write_report(args: argparse.Namespace, argv: list[str], specs: list[str], cases: int, runs: list[dict[str, Any]]) -> dict:
    """``OUT/throughput.json`` for the runs so far (written after each run: a killed later run keeps the earlier)."""
    env: dict[str, Any] = next((r["env"] for r in runs if r["env"]), {})
    report = {
        "date_utc": env.get("date_utc") if args.summarize else datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_of(env) if args.summarize else machine(),
        "argv": argv,
        "backends": specs,
        "cases": cases,
        "runs": {r["name"]: run_record(r) for r in runs},
        "verdicts": compare_verdicts(runs) if len(runs) > 1 else {},
        "shared_rows": shared_rows(runs) if len(runs) > 1 else {},
    }
    (args.out / "throughput.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def print_report(report: dict, runs: list[dict[str, Any]], out: Path) -> None:
    print(report["machine"])
    for r in runs:
        print(summary_line(r))
    print()
    print(rate_table(runs))
    for r in runs:
        print()
        print(stage_table(r))
    for name, per in report["shared_rows"].items():
        print()
        print(shared_table(runs[0]["name"], name, per))
    for name, v in report["verdicts"].items():
        print(f"\nverdicts {runs[0]['name']} vs {name}: {v['shared']} shared rows, {v['differ']} differ")
        print("".join(f"  {e}\n" for e in v["examples"]), end="")
    print(f"\nthroughput: wrote {out / 'throughput.json'}")


def recorded(args: argparse.Namespace) -> tuple[list[str], int, list[dict[str, Any]]]:
    """``--summarize``: the runs already in OUT (those with a ``timing.json``), their backends and cases."""
    runs = [read_run(n, args.out / n) for n in args.runs if (args.out / n / "timing.json").exists()]
    if not runs:
        sys.exit(f"throughput: --summarize: no run of {', '.join(args.runs)} in {args.out} has a timing.json")
    specs = list(dict.fromkeys(s for r in runs for s in (r["timing"].get("per_backend") or {})))
    case_file = args.out / "cases.jsonl"
    if case_file.exists():
        return specs, sum(1 for ln in case_file.read_text().splitlines() if ln.strip()), runs
    return specs, int(next((r["env"]["cases"] for r in runs if isinstance(r["env"].get("cases"), int)), 0)), runs


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parse(argv)
    if args.summarize:
        specs, n_cases, runs = recorded(args)
        report = write_report(args, argv, specs, n_cases, runs)
    else:
        if args.out.exists() and any(args.out.iterdir()):
            sys.exit(f"throughput: --out {args.out} is not empty (the cold run needs an empty compile cache): give a new folder")
        args.out.mkdir(parents=True, exist_ok=True)
        cache = (args.cache or args.out / "compile-cache").resolve()
        if cache.exists() and any(cache.iterdir()) and args.runs[0] == "cold":
            print(f"throughput: note: {cache} already holds files, so the 'cold' run is not cold", file=sys.stderr)
        specs = backends_of(args.backend or ["all-gpu"])
        cases = case_list(args, specs, extra)
        case_file = args.out / "cases.jsonl"
        case_file.write_text("".join(c + "\n" for c in cases))
        n_cases = len(cases)
        print(f"throughput: {n_cases} cases x {len(specs)} backends = {n_cases * len(specs)} rows per run", file=sys.stderr)
        runs = []
        for name in args.runs:
            runs.append(run_once(name, args, specs, case_file, cache, extra))
            report = write_report(args, argv, specs, n_cases, runs)
    print_report(report, runs, args.out)
    differ = any(v["differ"] for v in report["verdicts"].values())
    return 1 if differ else 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "throughput"))
