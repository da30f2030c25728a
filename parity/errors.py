"""The project's own error for bad user input; the lowest layer (imports nothing from parity).

:class:`UserError` is what a command raises for input the user can fix (a bad argument, an
invalid case, an unknown backend, a folder that is not a run). ``python -m parity`` reports it
in one line with exit code 2; every other exception is a bug in the harness (or a backend) and
keeps its traceback. It is a :class:`ValueError`, so library callers that catch ValueError still do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(ValueError):
    """Bad input from the user: reported in one line, exit code 2."""


#: Exit codes of the commands (parity.cli).
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_PARTIAL = 3  # a run cut short (--time-limit, --fail-fast, a lost CUDA context) with no failing row: not a pass
#: A run ended by a signal: 128 + the signal's number, as a shell reports a command the signal killed.
EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED = 129, 130, 143  # SIGHUP, SIGINT (Ctrl-C), SIGTERM
EXIT_SIGNALLED = {"SIGHUP": EXIT_HANGUP, "SIGINT": EXIT_INTERRUPTED, "SIGTERM": EXIT_TERMINATED}

#: The one table of exit codes: what each means for ``parity run`` (``run --help``'s epilog and the
#: README's list are made from / checked against it; the other subcommands use the same numbers).
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "every case that ran passed, or failed as a known divergence describes (expected)",
    EXIT_FAIL: "a case failed, errored, crashed or timed out with no known divergence explaining it, a strict known "
    "divergence passed (unexpected-pass), or a backend named with --backend is unavailable",
    EXIT_USAGE: "a usage error (bad argument, invalid case, unknown backend, a bad expectations file): one line, no traceback",
    EXIT_PARTIAL: "a partial run (--time-limit, --fail-fast, a CUDA context lost under --no-isolate) with no failing row",
    EXIT_HANGUP: "ended by SIGHUP (the terminal closed): a partial run, as for SIGTERM",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C (SIGINT): a partial run, as for SIGTERM",
    EXIT_TERMINATED: "ended by SIGTERM (timeout, a CI job's time limit): a partial run whatever its rows; the rows in flight are "
    "dropped, environment.json, timing.json and the reports are written (--resume runs the rest); a second signal ends it "
    "at once, environment.json written",
}


def exit_codes_text() -> str:
    """:data:`EXIT_CODES` as the lines of a help epilog."""
    return "exit codes:\n" + "\n".join(f"  {code:<4} {words}" for code, words in EXIT_CODES.items())


def script_main(main: Callable[[], int | None], prog: str) -> int:
    """A script's ``main()`` run as ``python -m parity`` runs a command (the benchmarks' ``__main__``): a
    :class:`UserError` is one line on stderr, ``prog: error: ...``, and :data:`EXIT_USAGE`; else main's code."""
    try:
        return int(main() or 0)
    except UserError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
