"""``python -m parity export-repro RUN_DIR [--row N] [--backend B] [--out DIR] [--control C]``: a
standalone script per divergence (which rows, the scripts: :mod:`parity.export_repro`).

Exit codes: 0 scripts written, or nothing to export (a line says so); 2 bad input (no such
folder, no results.csv, ``--row`` out of range, a backend with no rows in the run), one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError as UsageError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export-repro", help="write a standalone Python repro script per failing row of a run folder")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder (holding results.csv, environment.json)")
    p.add_argument("--row", type=int, metavar="N", help="export row N of results.csv (0-based), whatever its verdict")
    p.add_argument("--backend", "-b", metavar="B", help="only rows of this backend (as named in results.csv)")
    p.add_argument("--out", type=Path, metavar="DIR", help="where to write the scripts (default RUN_DIR/repros)")
    p.add_argument("--control", metavar="C", help="also write each case's script for backend C (one without the bug: it should exit 0)")
    return p


def run(args: argparse.Namespace) -> int:
    from ..export_repro import export_one, select_rows
    from ..report.runs import load_run

    run_ = load_run(args.run_dir)
    rows = select_rows(run_.df, args.run_dir, args.row, args.backend)
    if not rows:
        which = f" of {args.backend}" if args.backend else ""
        print(f"export-repro: no failing rows{which} in {args.run_dir}/results.csv; nothing to export")
        return 0
    shrunk = {  # (backend, the row's case_id) -> its shrunk case, where it still fails
        (str(e.get("backend")), str(e.get("from"))): e
        for e in run_.shrunk
        if e.get("verdict") in ("fail", "expected") and isinstance(e.get("case"), dict)
    }
    out_dir = args.out or args.run_dir / "repros"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot write there ({exc.strerror or exc})") from None
    if args.control:
        from .. import backends

        try:
            backends.get(args.control)
        except backends.BackendSpecError as exc:
            raise UsageError(f"--control {args.control}: {exc}") from None
    written = [p for i, r in rows if (p := export_one(run_, i, r, shrunk, out_dir, args.control)) is not None]
    print(f"export-repro: {len(written)} script(s) in {out_dir}" if written else "export-repro: no script written")
    return 0
