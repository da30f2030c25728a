"""The project's own error for bad user input; the lowest layer (imports nothing from parity).

:class:`UserError` is what a command raises for input the user can fix (a bad argument, an
invalid case, an unknown backend, a folder that is not a run). ``python -m parity`` reports it
in one line with exit code 2; every other exception is a bug in the harness (or a backend) and
keeps its traceback. It is a :class:`ValueError`, so library callers that catch ValueError still do.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: reported in one line, exit code 2."""
