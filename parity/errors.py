"""The project's own error for bad user input; the lowest layer (imports nothing from parity).

:class:`UserError` is what a command raises for input the user can fix (a bad argument, an
invalid case, an unknown backend, a folder that is not a run). ``python -m parity`` reports it
in one line with exit code 2; every other exception is a bug in the harness (or a backend) and
keeps its traceback. It is a :class:`ValueError`, so library callers that catch ValueError still do.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: reported in one line, exit code 2."""


#: Exit codes of the commands (parity.cli): 0 ok, 1 a failure, 2 a usage error, 3 a partial run.
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_PARTIAL = 3  # a run cut short (--time-limit, --fail-fast, Ctrl-C) with no failing row: not a pass
