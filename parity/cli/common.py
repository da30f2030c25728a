"""What several subcommands share: exit codes, ``--expect``, comma lists (``--worker-path``:
:func:`parity.sweep.options.read_worker_paths`).

Not a subcommand (it has no ``add_parser`` / ``run``); bad input raises :class:`parity.errors.UserError`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import UserError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_PARTIAL = 3  # a run cut short (--time-limit, --fail-fast, Ctrl-C) with no failing row: not a pass


def split_list(values: Sequence[str] | None) -> list[str]:
    """Repeatable, comma-separated option values (``-b a,b -b c``) as one list."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def add_expect_argument(p: argparse.ArgumentParser) -> None:
    """``--expect FILE`` (repeatable), shared by run, report and diff."""
    p.add_argument("--expect", action="append", metavar="FILE",
                   help="known divergences (TOML, see parity/expect.py); repeatable; replaces the default file "
                        "('default' names it, 'none' disables); default: $PARITY_EXPECT, else parity/known_divergences.toml")


def load_expectations(values: Sequence[str] | None):
    """``--expect`` values as :class:`parity.expect.Expectations`; a bad file is a :class:`UserError`."""
    from ..expect import ExpectationError, load

    try:
        return load(values)
    except ExpectationError as exc:
        raise UserError(str(exc)) from None


#: Where ``parity run`` puts a run without ``--out``: a new folder per run, ``reports/latest`` names the newest.
RUNS_DIR, LATEST = Path("reports/runs"), Path("reports/latest")


def latest_run(latest: Path = LATEST) -> Path:
    """The newest run folder: ``reports/latest`` (a symlink, or a folder of an older layout), else the
    folder ``reports/latest.txt`` names (platforms without symlinks)."""
    note = latest.with_name(latest.name + ".txt")
    if not latest.exists() and note.exists():
        return Path(note.read_text().strip())
    return latest


def newest_runs(n: int, runs: Path = RUNS_DIR) -> list[Path]:
    """The ``n`` newest run folders under ``runs`` (those holding results.csv or .csv.gz), oldest first:
    newest by name, ``DATE-TIME`` then its ``-2``, ``-3``, ... suffix (:func:`new_run_dir`)."""

    def order(p: Path) -> tuple[str, int]:
        m = re.fullmatch(r"(\d{8}-\d{6})-(\d+)", p.name)
        return (m.group(1), int(m.group(2))) if m else (p.name, 1)

    found = [p for p in runs.iterdir() if (p / "results.csv").exists() or (p / "results.csv.gz").exists()] if runs.is_dir() else []
    return sorted(found, key=order)[-n:]


def new_run_dir(runs: Path = RUNS_DIR, latest: Path = LATEST, now: datetime.datetime | None = None) -> Path:
    """A new, empty run folder ``runs/YYYYMMDD-HHMMSS`` (``-2``, ``-3``, ... when taken), and ``latest``
    pointed at it: a symlink where the platform allows, else ``latest.txt`` naming it."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    runs.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        out = runs / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            out.mkdir()
            break
        except FileExistsError:
            continue
    note = latest.with_name(latest.name + ".txt")
    try:
        if latest.is_symlink():
            latest.unlink()
        if latest.exists():  # a real folder (an older layout): leave it, say it in latest.txt
            raise OSError("reports/latest is a folder")
        latest.symlink_to(os.path.relpath(out, latest.parent), target_is_directory=True)
        note.unlink(missing_ok=True)
    except (OSError, NotImplementedError):
        note.write_text(f"{out}\n")
    return out


def check_out_dir(out: Path, resume: bool, force: bool) -> None:
    """An explicit ``--out`` that already holds a run is refused unless ``--resume`` (continue it) or
    ``--force`` (replace it: its run files are removed, and stderr says so)."""
    held = [name for name in ("results.csv", "results.csv.gz") if (out / name).exists()]
    if not held or resume:
        return
    if not force:
        raise UserError(
            f"--out {out} already holds a run ({held[0]}); add --resume to continue it, "
            "--force to replace it, or leave --out out for a new folder under reports/runs/"
        )
    import shutil

    print(f"parity: --force: replacing the run in {out}", file=sys.stderr)
    for p in out.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
