"""``python -m parity`` / ``attn-parity``: the command line, one module per subcommand.

As asv's ``commands/``: each module of :data:`COMMANDS` exposes ``add_parser(subparsers)`` (its
options; it returns the parser) and ``run(args) -> int`` (the exit code); :func:`main` builds the
parser from them and runs the one named. Shared helpers are in :mod:`parity.cli.common`.

Exit codes: 0 ok, 1 a failure the command reports (see each module), 2 a usage error: the
project's own :class:`parity.errors.UserError` (a bad argument, an invalid case, an unknown
backend, a folder that is not a run), reported in one line. Any other exception is a bug in the
harness (or a backend) and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..errors import EXIT_INTERRUPTED, UserError
from . import backends, consistency, decode, decode_train, diff, evidence, export_repro, merge, report, run, selftest, vdiff
from .common import EXIT_OK, EXIT_USAGE

#: The subcommands, in the order ``--help`` lists them.
COMMANDS = (run, report, diff, vdiff, decode, decode_train, selftest, merge, export_repro, evidence, consistency, backends)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: one line (parity: error: ...), exit 2
        raise UserError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m parity", description="Do attention backends with sliding windows compute the same function?")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    for module in COMMANDS:
        module.add_parser(sub).set_defaults(_module=module)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args._module.run(args))
    except UserError as exc:  # the user's own bad input (SpecError, BackendSpecError, ... are UserErrors)
        print(f"parity: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parity: interrupted; finished rows are in results.csv (use --resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `parity run --list-cases | head`: the reader left; no traceback
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so the interpreter's final flush cannot fail again
        except OSError:
            pass
        return EXIT_OK
