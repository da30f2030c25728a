"""``python -m parity export-repro RUN_DIR [--row N] [--backend B] [--out DIR] [--control C]``: a
standalone script per divergence (which rows, the scripts: :mod:`parity.export_repro`).

``python -m parity export-repro --known --runs DIR ... [--index FILE] [--repick] --out DIR``: one script
and its control per entry of the known-divergence file, from the smallest row each entry explains in the
run folders named (each DIR a run folder or a folder of them, e.g. a checkout's ``lab/runs``); an entry named
in ``--index`` (default :data:`parity.export_repro.INDEX`, the package's record of which case each entry uses)
keeps that case unless ``--repick``. Writes ``DIR/index.tsv`` (entry, backend, script, control). An engine-check
entry (batch invariance, graph replay: the scripts check values and masks only) gets a line saying so, not a script.

Exit codes: 0 scripts written, or nothing to export (a line says so); 2 bad input (no such
folder, no results.csv, ``--row`` out of range, a backend with no rows in the run, ``--known`` without
``--runs``), one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import runfolder
from ..errors import UserError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export-repro", help="write a standalone Python repro script per failing row of a run folder")
    p.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR", help="a run folder (holding results.csv, environment.json)")
    p.add_argument("--row", type=int, metavar="N", help="export row N of results.csv (0-based), whatever its verdict")
    p.add_argument("--backend", "-b", metavar="B", help="only rows of this backend (as named in results.csv)")
    p.add_argument("--out", type=Path, metavar="DIR", help="where to write the scripts (default RUN_DIR/repros)")
    p.add_argument("--control", metavar="C", help="also write each case's script for backend C (one without the bug: it should exit 0)")
    known = p.add_argument_group("one script per known divergence")
    known.add_argument("--known", action="store_true", help="one script and its control per entry of the known-divergence file")
    known.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="the run folders --known picks rows from: each a run folder or a folder of them (e.g. lab/runs of a checkout)",
    )
    known.add_argument("--index", type=Path, metavar="FILE", help="entries named here keep their case (default: the package's record)")
    known.add_argument("--repick", action="store_true", help="--known: ignore --index and take each entry's smallest row again")
    return p


def run(args: argparse.Namespace) -> int:
    from ..export_repro import export_one, select_rows, shrunk_cases
    from ..report.runs import load_run

    if args.known:
        return _known(args)
    if args.run_dir is None:
        raise UserError("export-repro: name a RUN_DIR, or --known for one script per known divergence")
    if args.runs or args.index or args.repick:
        raise UserError("export-repro: --runs, --index and --repick go with --known")
    run_ = load_run(args.run_dir)
    rows = select_rows(run_.df, args.run_dir, args.row, args.backend)
    if not rows:
        which = f" of {args.backend}" if args.backend else ""
        print(f"export-repro: no failing rows{which} in {args.run_dir}/results.csv; nothing to export")
        return 0
    shrunk = shrunk_cases(run_)  # (backend, the row's case_id) -> its shrunk case, where it still fails
    out_dir = _out_dir(args.out or args.run_dir / "repros")
    if args.control:
        from .. import backends

        try:
            backends.get(args.control)
        except backends.BackendSpecError as exc:
            raise UserError(f"--control {args.control}: {exc}") from None
    written = [p for i, r in rows if (p := export_one(run_, i, r, shrunk, out_dir, args.control)) is not None]
    print(f"export-repro: {len(written)} script(s) in {out_dir}" if written else "export-repro: no script written")
    return 0


def _out_dir(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out_dir}: cannot write there ({exc.strerror or exc})") from None
    return out_dir


def _run_folders(dirs: list[Path]) -> list[Path]:
    """The run folders of ``--runs``: each DIR itself when it holds a results.csv[.gz], else every one under it
    (``latest``, a link to one of them, left out); a UserError for a DIR that is missing or holds none."""
    found: set[Path] = set()
    for d in dirs:
        if not d.is_dir():
            raise UserError(f"--runs {d}: no such folder")
        runs = {r for r in runfolder.run_folders_under(d) if "latest" not in r.relative_to(d).parts}
        if not runs:
            raise UserError(f"--runs {d}: no run folder (results.csv or results.csv.gz) in it")
        found |= runs
    return sorted(found)


def _known(args: argparse.Namespace) -> int:
    from ..expect import load
    from ..export_repro import INDEX, export_known, read_index
    from ..report.runs import load_run

    if args.run_dir is not None or args.row is not None or args.backend or args.control:
        raise UserError("export-repro --known: takes --runs DIR ..., not RUN_DIR, --row, --backend or --control")
    if args.out is None:
        raise UserError("export-repro --known: name the folder for the scripts with --out DIR")
    if args.index is not None and not args.index.is_file():
        raise UserError(f"--index {args.index}: no such file")
    if not args.runs:
        raise UserError("export-repro --known: name the run folders to pick rows from with --runs DIR ... (e.g. lab/runs of a checkout)")
    folders = _run_folders(args.runs)
    expectations = load()
    runs = [load_run(d, expectations, rejudge=True) for d in folders]
    keep = {} if args.repick else read_index(args.index if args.index is not None else INDEX)
    out_dir = _out_dir(args.out)
    entries = [e.id for e in expectations.entries if not e.checks]
    for e in expectations.entries:
        if e.checks:  # a script checks values and masks; the engine checks run in the harness only
            print(f"export-repro: {e.id}: an engine-check entry ({', '.join(e.checks)}): no script; its rows' repro line reruns it")
    lines = export_known(runs, entries, out_dir, keep)
    print(f"export-repro: {len(lines)} of {len(entries)} known divergences exported to {out_dir} (index.tsv)")
    return 0
