"""What several subcommands share: exit codes, ``--expect``, comma lists (``--worker-path``:
:func:`parity.sweep.options.read_worker_paths`).

Not a subcommand (it has no ``add_parser`` / ``run``); bad input raises :class:`parity.errors.UserError`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..runfolder import LATEST, RUNS_DIR, check_out_dir, latest_run, new_run_dir, newest_runs
from ..runner import split_list

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "LATEST",
    "RUNS_DIR",
    "check_out_dir",
    "latest_run",
    "new_run_dir",
    "newest_runs",
    "split_list",
]

from ..errors import EXIT_FAIL, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE


def add_expect_argument(p: argparse.ArgumentParser) -> None:
    """``--expect FILE`` (repeatable), shared by run, report and diff."""
    p.add_argument(
        "--expect",
        action="append",
        metavar="FILE",
        help="known divergences (TOML, see parity/expect.py); repeatable; replaces the default file "
        "('default' names it, 'none' disables); default: $PARITY_EXPECT, else parity/known_divergences.toml",
    )


def load_expectations(values: Sequence[str] | None):
    """``--expect`` values as :class:`parity.expect.Expectations`; a bad file is a :class:`UserError`."""
    from ..expect import load_checked

    return load_checked(values)
