"""What several subcommands share: exit codes, ``--expect``, comma lists (``--worker-path``:
:func:`parity.sweep.options.read_worker_paths`).

Not a subcommand (it has no ``add_parser`` / ``run``); bad input raises :class:`parity.errors.UserError`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import runfolder
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
    "write_pages",
]

from ..errors import EXIT_FAIL, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, UserError


def write_pages(out: Path, pages: dict[str, str]) -> None:
    """Write each page (file name: text) into ``out``, created if missing; a
    :class:`~parity.errors.UserError` naming the pages when the folder or a file cannot be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in pages.items():
            (out / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {' / '.join(sorted(pages))}: {exc}") from None


def check_out_folder(out: Path | None, holds: str) -> None:
    """A :class:`~parity.errors.UserError` when ``--out`` names something that is not a folder (checked
    before the work, not when its files are written); ``holds``: what the folder gets, for the message."""
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: not a folder (give the folder for {holds})")


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


#: Flags that choose a run's cases: given on --resume with another value than recorded, a note says so.
CASE_SET = ("profile", "model", "length_scale", "seed", "case", "case_file", "dtype", "shard", "no_siblings", "last_failed")

#: Flags a resumed run never takes from the recorded command: where it writes, and how it was asked to resume.
NOT_RESTORED = ("out", "resume", "force", "list_cases", "command", "_module")


def _recorded_args(folder: Path, add_parser: Callable[[Any], argparse.ArgumentParser]) -> tuple[argparse.Namespace, str] | None:
    """The ``parity run`` flags the run in ``folder`` was started with (environment.json; after earlier resumes,
    its first entry of ``earlier_runs``), parsed as this command parses them; None when the folder records
    none (a run from the API or the pytest plugin)."""
    env = runfolder.read_environment(folder) or {}
    first = (env.get("earlier_runs") or [env])[0]
    argv = first.get("argv")
    if argv is None and first.get("command"):  # a run recorded before argv was: its command, split again
        try:
            argv = shlex.split(str(first["command"]))
        except ValueError:
            return None
    if not isinstance(argv, list) or len(argv) < 2 or argv[1] != "run":
        return None
    try:
        return _run_parser(add_parser).parse_args([str(a) for a in argv[1:]]), " ".join(str(a) for a in argv)
    except SystemExit:  # argparse's own error: flags this version no longer has, or an old unquoted command
        print(f"parity: --resume: cannot read the recorded command ({first.get('command')}); using the flags given", file=sys.stderr)
        return None


def _run_parser(add_parser: Callable[[Any], argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_parser(parser.add_subparsers(dest="command"))
    return parser


def resumed(args: argparse.Namespace, add_parser: Callable[[Any], argparse.ArgumentParser]) -> argparse.Namespace:
    """``parity run --resume`` continues the run in the folder as it was started: every flag the user left at its
    default takes the recorded command's value (backends, profile, cases, --grad, ...); flags given now win.
    ``add_parser``: :func:`parity.cli.run.add_parser` (passed in: this module sits below it)."""
    folder = Path(args.out) if args.out is not None else runfolder.latest_run()
    found = _recorded_args(folder, add_parser)
    if found is None:
        return args
    recorded, command = found
    defaults = _run_parser(add_parser).parse_args(["run"])
    out = argparse.Namespace(**vars(args))
    restored, changed = [], []
    for key, value in vars(recorded).items():
        if key in NOT_RESTORED or not hasattr(args, key):
            continue
        given, default = getattr(args, key), getattr(defaults, key)
        if given == default and value != default:
            setattr(out, key, value)
            restored.append("--" + key.replace("_", "-"))
        elif key in CASE_SET and given != default and given != value:
            changed.append("--" + key.replace("_", "-"))
    if restored:
        print(f"parity: --resume: continuing `{command}` ({', '.join(restored)} as recorded)", file=sys.stderr)
    if changed:  # flags given win, but the folder then holds the rows of two case sets
        flags = ", ".join(changed)
        print(f"parity: --resume: {flags} given now differ from `{command}`: its rows stay beside the new ones", file=sys.stderr)
    return out
