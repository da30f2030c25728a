"""``python -m parity merge OUT DIR [DIR ...]``: one run folder from several (shards, resumed parts).

What is merged and how: :mod:`parity.report.merge`. Then ``report.html``, ``summary.md`` and
``junit.xml`` are written for OUT (not with ``--no-report``); ``--expect FILE`` (or ``default``)
judges every merged row again with those known divergences in the reports, as ``parity report
--expect`` does (rows of runs made before an entry existed otherwise keep their own verdicts). Exit 0; 2 on bad input (a folder
without results.csv, mismatched columns, conflicting rows, an incomplete shard set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .common import add_expect_argument, load_expectations


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("merge", help="merge several run folders (shards, resumed parts) into one, with its reports")
    p.add_argument("out", type=Path, metavar="OUT", help="the merged folder (created; must not be one of the inputs)")
    p.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="run folders, each with results.csv")
    p.add_argument("--prefer-last", action="store_true", help="on a (backend, case) pair in two folders keep the later one")
    p.add_argument(
        "--extra",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a folder with only consistency.csv and/or decode results to fold in (repeatable)",
    )
    p.add_argument("--no-report", action="store_true", help="merge the data only")
    add_expect_argument(p)
    p.add_argument(
        "--no-shard-check",
        action="store_true",
        help="merge shard runs (parity run --shard) even when the set is incomplete or mixed with other runs",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from ..report.merge import merge

    expectations = load_expectations(args.expect) if args.expect else None  # a bad file fails before the merge
    try:
        counts = merge(args.out, args.dirs, args.prefer_last, args.extra, check_shards=not args.no_shard_check)
    except (ValueError, OSError) as exc:
        raise UserError(f"merge: {exc}") from None
    print(
        f"parity merge: {counts['rows']} rows from {counts['folders']} folders, {counts['consistency_rows']} consistency rows, "
        f"{counts['decode_rows']} decode rows -> {args.out}",
        file=sys.stderr,
    )
    if not args.no_report:
        from ..report.write import write_all

        written = write_all(args.out, expectations=expectations, rejudge=expectations is not None)
        print("parity: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0
