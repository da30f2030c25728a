"""What several subcommands share: exit codes, ``--expect``, comma lists (``--worker-path``:
:func:`parity.sweep.options.read_worker_paths`).

Not a subcommand (it has no ``add_parser`` / ``run``); bad input raises :class:`parity.errors.UserError`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import UserError
from ..runfolder import LATEST, RUNS_DIR, check_out_dir, latest_run, new_run_dir, newest_runs

__all__ = ["LATEST", "RUNS_DIR", "check_out_dir", "latest_run", "new_run_dir", "newest_runs"]

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


