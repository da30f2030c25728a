"""Cold vs warm compile caches: what ``--compile-cache`` buys each backend, run by run.

Reads finished run folders (``timing.json``, ``environment.json``, ``results.csv`` or
``results.csv.gz``) and prints,
per backend, cases/s (cases it ran, up to S = 4096, first-use compiles included; their count
in brackets), the median case's
seconds, and each run's ratio to the first run; then whether the verdicts agree between
runs on the rows they share (a cache may change how long a case takes, never its result):

    python benchmarks/compile_cache.py cold=/tmp/ccrun/cold warm=/tmp/ccrun/warm [--json FILE]

Produce the folders with ``lab/loan/compile_cache_run.sh`` on the GPU machine (a cold run
into an empty cache, then the same sweep again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing it

from parity.errors import UserError  # noqa: E402
from parity.report.runs import load_run  # noqa: E402
from parity.runfolder import TIMING, TIMING_FIELDS, read_object  # noqa: E402


def load(folder: Path) -> dict:
    run = load_run(folder)  # results.csv (torn last rows dropped) and environment.json
    timing = read_object(folder / TIMING, TIMING_FIELDS)
    verdicts = dict(zip(zip(run.df["backend"], run.df["case_id"]), run.df["verdict"]))
    return {"timing": timing, "env": run.env, "verdicts": verdicts}


def describe(name: str, run: dict) -> str:
    t, e = run["timing"], run["env"]
    cc = e.get("compile_cache") or {}
    state = f"cache {cc.get('state')} ({cc.get('files_before')} files before, {cc.get('files_added')} added)" if cc else "no cache"
    return (
        f"{name}: {e.get('date_utc')} seed {e.get('seed')} profile {e.get('profile')}, {t['rows_run']} rows, wall "
        f"{t['wall_s']:.0f} s, {t.get('jobs')} lanes, {state}" + (" [PARTIAL]" if t.get("partial") else "")
    )


def compare(runs: dict[str, dict]) -> tuple[str, dict]:
    names = list(runs)
    first = names[0]
    specs = list(dict.fromkeys(s for r in runs.values() for s in r["timing"]["per_backend"]))
    head = f"{'backend':<24}" + "".join(f"{n + ' cases/s':>18}{'median s':>10}" for n in names)
    head += "".join(f"{n + '/' + first:>14}" for n in names[1:])
    lines = [head, "-" * len(head)]
    figures: dict = {}
    for spec in specs:
        row = f"{spec:<24}"
        rates = {}
        for n in names:
            p = runs[n]["timing"]["per_backend"].get(spec)
            rate = p.get("cases_per_s_upto_4096") if p else None
            med = p.get("median_case_s_upto_4096") if p else None
            rates[n] = rate
            figures.setdefault(spec, {})[n] = {"cases": p["cases"] if p else 0, "cases_per_s": rate, "median_case_s": med}
            shown = "-" if rate is None or p is None else f"{rate:.{2 if rate < 10 else 1}f} ({int(p.get('small_cases', p['cases']))})"
            row += f"{shown:>18}{'-' if med is None else f'{med:.4f}':>10}"
        for n in names[1:]:
            a, b = rates[first], rates[n]
            row += f"{(f'{b / a:.1f}x' if a and b else '-'):>14}"
        lines.append(row)
    lines.append("")
    for n in names[1:]:
        a, b = runs[first]["verdicts"], runs[n]["verdicts"]
        shared = set(a) & set(b)
        differ = sorted(k for k in shared if a[k] != b[k])
        lines.append(
            f"verdicts {first} vs {n}: {len(shared)} shared rows, {len(differ)} differ"
            + "".join(f"\n  {k[0]} {k[1]}: {a[k]} -> {b[k]}" for k in differ[:10])
        )
        figures.setdefault("_verdicts", {})[n] = {"shared": len(shared), "differ": len(differ)}
    return "\n".join(lines), figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="NAME=FOLDER", help="run folders, the first is the baseline (cold)")
    ap.add_argument("--json", type=Path, help="append the figures to this JSON-lines file")
    args = ap.parse_args(argv)
    runs = {}
    for item in args.runs:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            ap.error(f"expected NAME=FOLDER, got {item!r}")
        try:
            runs[name] = load(Path(folder))
        except (OSError, ValueError, KeyError, UserError) as exc:
            print(f"compile_cache: {folder}: not a finished run folder ({exc})", file=sys.stderr)
            return 2
    for n, r in runs.items():
        print(describe(n, r))
    text, figures = compare(runs)
    print(text)
    if args.json:
        with args.json.open("a") as fh:
            fh.write(json.dumps({"runs": {n: describe(n, r) for n, r in runs.items()}, "figures": figures}) + "\n")
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "compile_cache"))
