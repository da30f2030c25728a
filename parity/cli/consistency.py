"""``python -m parity consistency`` (also ``python -m parity.consistency``): decode vs prefill and
chunked vs one-shot prefill of each backend named (the checks: :mod:`parity.consistency`).

Prints one line per check; ``--out DIR`` appends them to ``DIR/consistency.csv``. Exit 1 when a
check failed or errored.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import runfolder
from ..results import Outcome
from .common import check_out_folder


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", "-b", action="append", required=True)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--window", type=int, default=200, help="Window.tokens(W)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--hq", type=int, default=8)
    p.add_argument("--hkv", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--out", type=Path)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "consistency",
        help="decode vs prefill and chunked vs one-shot prefill of one backend",
        description="Self-consistency of one backend: decode vs prefill, chunked vs one-shot prefill.",
    )
    _add_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    from .. import backends
    from ..case import Case
    from ..consistency import FIELDS, check
    from ..window import Window

    check_out_folder(args.out, runfolder.CONSISTENCY)
    case = Case((args.seq,), (args.seq,), args.hq, args.hkv, args.head_dim, args.dtype, Window.tokens(args.window), seed=7)
    rows: list[dict[str, Any]] = []
    for backend in args.backend:  # each backend's rows are printed and written as soon as they are in
        be = backends.get(backend)
        why = be.unavailable_reason()
        if why:
            got = [{"backend": backend, "check": "all", "verdict": Outcome.UNAVAILABLE, "detail": why, "case": case.summary()}]
        else:
            got = check(be, case)
        rows.extend(got)
        for r in got:
            print(
                f"{r['backend']:<24} {r['check']:<8} {r.get('where', ''):<10} {r['verdict']:<12} "
                f"diff={r.get('max_diff_vs_prefill', '-')} tol={r.get('tolerance', '-')} {r.get('detail', '')}",
                flush=True,
            )
        if args.out:
            runfolder.append_consistency(args.out, FIELDS, got)
    return 1 if any(r["verdict"] in (Outcome.FAIL, Outcome.ERROR) for r in rows) else 0
