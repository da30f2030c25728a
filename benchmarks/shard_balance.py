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
import csv
import gzip
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


def measured(run: Path, ns: list[int]) -> None:
    from parity import shard
    from parity.case import Case

    path = run / "results.csv"
    fh = path.open(newline="") if path.exists() else gzip.open(run / "results.csv.gz", "rt", newline="")
    with fh:
        rows = list(csv.DictReader(fh))
    seconds: dict[str, float] = collections.defaultdict(float)
    cases: dict[str, Case] = {}
    for r in rows:
        try:
            seconds[r["case_id"]] += float(r.get("time_ms") or 0) / 1000
        except ValueError:
            pass
        cases.setdefault(r["case_id"], Case.from_json(r["case_json"]))
    specs = sorted({r["backend"] for r in rows})
    costs = shard.cost_hints(specs)
    total = sum(seconds.values())
    print(f"measured {run}: {len(cases)} cases, {len(specs)} backends, {total:.0f} s of backend calls")
    for n in ns:
        where = shard.assign(list(cases.values()), specs, n, costs)
        per = [0.0] * n
        for cid, i in where.items():
            per[i] += seconds[cid]
        print(f"  N={n}: max/mean {max(per) / (total / n):.3f}, shards (s): " + " ".join(f"{t:.0f}" for t in per))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", type=Path, metavar="RUN_DIR")
    p.add_argument("--profile", default="default")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 7])
    p.add_argument("--n", type=int, nargs="+", default=[2, 3, 4, 5, 8])
    args = p.parse_args(argv)
    model(args.profile, args.seeds, args.n)
    for run in args.runs:
        measured(run, args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
