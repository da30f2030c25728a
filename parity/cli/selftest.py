"""``python -m parity selftest``: every planted bug must be flagged, every honest variant must pass.

Prints the detection table and the honest variants' figures (:mod:`parity.selftest.run`);
exit 1 if a bug escapes or an honest variant does not pass every case it supports, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` or ``"0,3,7"`` (or a mix) -> seeds."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            if dash:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UserError(f"--seeds wants N, A-B or a comma-separated list of them, got {text!r}") from None
    if any(s < 0 for s in out) or not out:
        raise UserError(f"--seeds must be non-negative, got {text!r}")
    return list(dict.fromkeys(out))


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    s = subparsers.add_parser("selftest", help="planted bugs must be caught, honest variants must pass")
    s.add_argument(
        "--profile", choices=["quick", "default", "thorough"], default="quick", help="the sweep bugs must not escape (default quick)"
    )
    s.add_argument("--seed", type=int, default=0, help="seed of the drawn cases the bugs run on (default 0)")
    s.add_argument("--honest-seeds", default="0-2", metavar="SEEDS", help="seeds for the honest variants, e.g. 0-9 or 0,4 (default 0-2)")
    s.add_argument("--bug", action="append", metavar="NAME", help="only these planted bugs (repeatable)")
    s.add_argument("--honest", action="append", metavar="NAME", help="only these honest variants (repeatable)")
    s.add_argument("--no-bugs", action="store_true", help="skip the planted bugs")
    s.add_argument("--no-honest", action="store_true", help="skip the honest variants")
    s.add_argument("--exhaustive", action="store_true", help="run every bug on every case (counts failing cases)")
    s.add_argument(
        "--grad",
        action="store_true",
        help="the backward: the planted backward bugs (their forwards are honest) must be caught, the honest "
        "variants' gradients must pass (docs/grad.md)",
    )
    s.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    s.add_argument("--out", type=Path, help="also write detection.csv and honest.csv here")
    return s


def _select(names: list[str] | None, items: Sequence[Any], what: str) -> list[Any]:
    if not names:
        return list(items)
    by_name = {i.name: i for i in items}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UserError(f"unknown {what} {', '.join(map(repr, unknown))}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def run(args: argparse.Namespace) -> int:
    from ..selftest.bugs import BUGS, GRAD_BUGS
    from ..selftest.honest import HONEST
    from ..selftest.run import write_csvs

    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    bugs = [] if args.no_bugs else _select(args.bug, GRAD_BUGS if args.grad else BUGS, "planted bug")
    variants = [] if args.no_honest else _select(args.honest, HONEST, "honest variant")
    seeds = parse_seeds(args.honest_seeds)
    t0 = time.perf_counter()
    dets, bugs_ok = _run_bugs(args, bugs) if bugs else ([], True)
    results, honest_ok = _run_honest(args, variants, seeds) if variants else ([], True)
    ok = bugs_ok and honest_ok
    if args.out:
        write_csvs(args.out, dets, results)
    print(f"\nselftest: {'OK' if ok else 'FAILED'} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0 if ok else 1


def _run_bugs(args: argparse.Namespace, bugs: list) -> tuple[list, bool]:
    """Every planted bug on the profile's sweep, the detection table; (detections, none escaped)."""
    from ..judge import BaselineCache
    from ..selftest.run import detect, detection_table, profile_cases

    ok = True
    cases = profile_cases(args.profile, args.seed)
    print(f"selftest: {len(bugs)} planted bugs on the '{args.profile}' sweep, seed {args.seed} ({len(cases)} cases)", file=sys.stderr)
    baselines = BaselineCache("cpu", keep=len(cases) + 1)
    dets = [detect(bug, cases, baselines, exhaustive=args.exhaustive, grad=args.grad) for bug in bugs]
    print(detection_table(dets, args.markdown))
    for d in dets:
        if not d.caught:
            ok = False
            print(f"selftest: ESCAPED: {d.bug.name} ({d.bug.klass}) passed all {d.cases_run} cases", file=sys.stderr)
        for p in d.problems:
            ok = False
            print(f"selftest: planted bug {d.bug.name} is broken (it should compute, not raise): {p}", file=sys.stderr)
    print()
    return dets, ok


def _run_honest(args: argparse.Namespace, variants: list, seeds: list[int]) -> tuple[list, bool]:
    """Every honest variant on the profile's sweep over ``seeds``; (results, every case passed)."""
    from ..case import Case
    from ..selftest.run import check_honest, honest_table, seeds_cases

    ok = True
    hcases = seeds_cases(args.profile, seeds)
    print(
        f"selftest: {len(variants)} honest variants on the '{args.profile}' sweep, seeds {args.honest_seeds} "
        f"({len(hcases)} distinct cases)",
        file=sys.stderr,
    )
    results = check_honest(variants, hcases, grad=args.grad)
    print(honest_table(results, args.markdown))
    for r in results:
        for row in r.failed[:5]:
            print(
                f"selftest: FALSE ALARM: {r.variant.name} {row['verdict']} [{row['reasons'] or row['detail']}] "
                f"{Case.from_json(row['case_json']).summary()}\n  {row.get('worst_where', '')} {row.get('grad_detail', '')}\n"
                f"  repro: {row['repro']}",
                file=sys.stderr,
            )
        if r.failed:
            ok = False
    return results, ok
