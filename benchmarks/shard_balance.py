"""How even ``parity run --shard K/N`` shards are (:mod:`parity.shard`), on the cost model and on measured times.

    python benchmarks/shard_balance.py [--profile default] [--seeds 0 1 7] [--n 2 3 4 5 8] [RUN_DIR ...]

For the run command's cases (``strategies.generate`` + ``design.place``, as ``parity run`` builds
them) with the CPU backends and with ``all-gpu``: per seed and N, the most and least loaded
shard's model cost over the mean. For each RUN_DIR (a finished run folder with ``results.csv``
or ``results.csv.gz``): its cases split with its backends, and each shard's measured seconds
(``time_ms`` summed over the backends' rows of its cases) over the mean.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def _cases(name: str, seed: int, specs: list[str]) -> list:
    from parity import backends
    from parity.design import place
    from parity.results import DTYPES
    from parity.strategies import CPU_LONG_CAP, generate, profile

    prof = profile(name)
    inst = {s: backends.get(s) for s in specs}
    gpu = any(getattr(b, "device", "cpu") == "cuda" for b in inst.values())
    long_len = prof.long_len if gpu else min(prof.long_len, CPU_LONG_CAP)
    return place(generate(prof, seed, DTYPES, long_len), inst)[0]


def model(name: str, seeds: list[int], ns: list[int]) -> None:
    from parity import backends, shard

    for label, specs in (("cpu", list(backends.DEFAULT_CPU)), ("all-gpu", backends.expand("all-gpu"))):
        costs = shard.cost_hints(specs)
        for seed in seeds:
            cases = _cases(name, seed, specs)
            groups = len(shard.config_costs(cases, specs, costs))
            figs = []
            for n in ns:
                loads = shard.shard_loads(cases, specs, n, costs)
                mean = sum(loads) / n
                figs.append(f"N={n} {max(loads) / mean:.3f}/{min(loads) / mean:.3f}")
            print(f"model {name} {label:7} seed {seed}: {len(cases)} cases, {groups} configurations; max/min over mean: " + ", ".join(figs))


def read_run(run: Path) -> tuple[Path, dict[str, float], dict]:
    """A run folder's measured seconds and case per case id; a UserError naming the folder or the row
    when it is not a run folder."""
    from parity.case import Case
    from parity.errors import UserError
    from parity.runfolder import read_results

    if not run.is_dir():
        raise UserError(f"{run}: {'not a folder' if run.exists() else 'no such folder'} (give a run folder)")
    results = read_results(run)
    if results is None:
        raise UserError(f"{run}: no results.csv or results.csv.gz (is this a parity run folder?)")
    seconds: dict[str, float] = collections.defaultdict(float)
    cases: dict[str, Case] = {}
    for i, r in enumerate(results.rows, start=1):
        try:
            seconds[r["case_id"]] += float(r.get("time_ms") or 0) / 1000
        except ValueError:
            pass
        try:
            cases.setdefault(r["case_id"], Case.from_json(r["case_json"]))
        except UserError as exc:
            raise UserError(f"{results.path}, row {i}: {exc}") from None
    return run, seconds, {"cases": cases, "specs": sorted({r["backend"] for r in results.rows})}


def measured(read: tuple[Path, dict[str, float], dict], ns: list[int]) -> None:
    from parity import shard

    run, seconds, found = read
    cases, specs = found["cases"], found["specs"]
    costs = shard.cost_hints(specs)
    total = sum(seconds.values())
    print(f"measured {run}: {len(cases)} cases, {len(specs)} backends, {total:.0f} s of backend calls")
    for n in ns:
        try:
            where = shard.assign(list(cases.values()), specs, n, costs)
        except ValueError as exc:  # more shards than the run's configurations
            print(f"  N={n}: {exc}")
            continue
        per = [0.0] * n
        for cid, i in where.items():
            per[i] += seconds[cid]
        share = f"{max(per) / (total / n):.3f}" if total else "- (no time_ms)"
        print(f"  N={n}: max/mean {share}, shards (s): " + " ".join(f"{t:.0f}" for t in per))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR")
    p.add_argument("--profile", default="default")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 7])
    p.add_argument("--n", type=int, nargs="+", default=[2, 3, 4, 5, 8])
    args = p.parse_args(argv)
    from parity.errors import UserError
    from parity.strategies import PROFILES

    if args.profile not in PROFILES:
        p.error(f"--profile: expected one of {', '.join(sorted(PROFILES))}, got {args.profile!r}")
    if min(args.n) < 1:
        p.error(f"--n: expected shard counts >= 1, got {min(args.n)}")
    try:
        runs = [read_run(run) for run in args.runs]  # before the model's minutes: a bad folder fails at once
    except UserError as exc:  # a folder that is not a run folder
        print(f"shard_balance: {exc}", file=sys.stderr)
        return 2
    model(args.profile, args.seeds, args.n)
    for read in runs:
        measured(read, args.n)
    return 0


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "shard_balance"))
