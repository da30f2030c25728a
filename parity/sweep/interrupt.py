"""Stop signals during a run: SIGTERM (``timeout``, a CI job's time limit), SIGINT (Ctrl-C) and SIGHUP.

:class:`StopSignals` holds them while ``parity run`` sweeps and writes its folder. The first one calls
``on_first`` (:meth:`parity.sweep.Sweep.interrupt`: no new row starts, the workers of the rows in flight
are stopped and those rows are not recorded), and the run ends as a partial one, the way ``--time-limit``
ends it: environment.json, timing.json, the reports, the PARTIAL line. A second one raises
:class:`Interrupted` where the run is (its caller writes environment.json and exits); a third meets the
signal's own action. A signal the process was started ignoring (``nohup``, a background job) stays ignored.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

#: The signals that end a run partial, by name (SIGHUP does not exist everywhere).
NAMES = ("SIGTERM", "SIGINT", "SIGHUP")


class Interrupted(KeyboardInterrupt):
    """A second stop signal: the run ends now (a KeyboardInterrupt, so every Ctrl-C path meets it)."""


class StopSignals:
    """A context: while in it, the stop signals go to :meth:`_handle`; ``received``: their names, in order."""

    def __init__(self, on_first: Callable[[str], None]):
        self.on_first = on_first
        self.received: list[str] = []
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers (a run from a library's thread keeps Python's)
        for name in NAMES:
            sig = getattr(signal, name, None)
            if sig is None or signal.getsignal(sig) is signal.SIG_IGN:
                continue
            self._old[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        old, self._old = self._old, {}
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if len(self.received) > 1:
            self._restore()  # a third signal: its own action
            raise Interrupted(name)
        _say(f"parity: {name}: ending the run as a partial one (rows in flight dropped; --resume runs them); a second signal ends it now")
        self.on_first(name)

    @property
    def first(self) -> str:
        """The first signal's name ("" when none came)."""
        return self.received[0] if self.received else ""


def _say(line: str) -> None:
    """One line on stderr, written past Python's buffers: a handler may run while the progress bar is mid-write."""
    try:
        os.write(2, (("\n" if os.isatty(2) else "") + line + "\n").encode())
    except OSError:
        pass
