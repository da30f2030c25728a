"""The sweep's draw of each case's inputs, made once and shared by its rows and its reference (:class:`InputStore`).

The first lane to send a case draws its inputs (:func:`parity.case.make_inputs` on the CPU) and writes them to
shared-memory files (:mod:`parity.shared_inputs`); every worker that runs the case maps them, and so does the
reference (:class:`parity.judge.BaselineCache`'s ``inputs``): each sees the bytes of that one draw. The files are
removed once every row of the case is done (judged, or written without a call), and at the end of the sweep. The
store holds at most ``max_bytes``: to make room it removes the least recently sent case no row has in flight; a
case that still does not fit is not held (its workers and reference draw it themselves, as before 2026-12-07).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from ..case import Case, Inputs, make_inputs
from ..shared_inputs import InputFiles, case_inputs, write_inputs
from ..transfer import new_tag, owner_prefix, remove_stale_once, spill_dirs

#: The most bytes of inputs a store holds: at most this, a quarter of what the machine has available, and half of
#: what its first folder has free (:func:`default_max_bytes`).
MAX_BYTES = 16 << 30


def default_max_bytes(dirs: list[str]) -> int:
    """:data:`MAX_BYTES`, less where the machine or the first spill folder has less room (0: no folder)."""
    import os

    from ..memory import host_memory

    if not dirs:
        return 0
    room = [MAX_BYTES]
    host = host_memory()
    if host is not None and host.available is not None:
        room.append(host.available // 4)
    try:
        st = os.statvfs(dirs[0])
        room.append(st.f_bavail * st.f_frsize // 2)
    except OSError:
        return 0
    return max(0, min(room))


class InputStore:
    """``rows``: case id -> the rows of the sweep that run it (every unit that takes it). Thread-safe: the lanes share
    one. ``max_bytes`` (default :func:`default_max_bytes`); ``dirs``: the spill folders (:func:`parity.transfer.spill_dirs`)."""

    def __init__(self, rows: Mapping[str, int], max_bytes: int | None = None, dirs: list[str] | None = None):
        self.dirs = spill_dirs() if dirs is None else list(dirs)
        self.max_bytes = default_max_bytes(self.dirs) if max_bytes is None else max_bytes
        self.dirs = self.dirs if self.max_bytes > 0 else []  # a store that holds nothing touches no folder
        self.prefix = owner_prefix(tag=new_tag("in"))
        self.left = dict(rows)  # case id -> rows not yet done
        self._held: OrderedDict[str, InputFiles] = OrderedDict()  # least recently sent first
        self._leases: dict[str, int] = {}  # case id -> rows sent with its files, not yet answered
        self._draw_s: dict[str, float] = {}  # case id -> the seconds its draw took (kept after its files go)
        self._lock = threading.Lock()
        self._case_locks: dict[str, threading.Lock] = {}
        self.draws = 0  # cases drawn and held
        self.not_held = 0  # draws that could not be held (no room): their rows drew their own
        self.seconds = 0.0  # drawing and writing, in all
        remove_stale_once(self.dirs)  # what a killed harness left

    def lease(self, case: Case) -> tuple[InputFiles | None, float]:
        """``case``'s files for a row about to be sent (drawn and written now unless held) and the seconds this
        took here (drawing, or waiting for another lane's draw of it; 0.0 where they were held); None where they
        cannot be held. Each lease
        is ended by :meth:`unlease` once the row's answer is in: until then its files are not removed to make room."""
        if self.max_bytes <= 0:
            return None, 0.0
        with self._lock:
            files = self._held.get(case.case_id)
            if files is not None:  # held: nothing to draw or wait for
                self._held.move_to_end(case.case_id)
                self._leases[case.case_id] = self._leases.get(case.case_id, 0) + 1
                return files, 0.0
            lock = self._case_locks.setdefault(case.case_id, threading.Lock())
        t0 = time.perf_counter()
        with lock:  # two lanes meeting a case at once draw it once
            with self._lock:
                files = self._held.get(case.case_id)
                if files is not None:
                    self._held.move_to_end(case.case_id)
            if files is None:
                files = self._draw(case)
            if files is not None:
                with self._lock:
                    self._leases[case.case_id] = self._leases.get(case.case_id, 0) + 1
        return files, time.perf_counter() - t0

    def unlease(self, case: Case) -> None:
        with self._lock:
            n = self._leases.get(case.case_id, 0) - 1
            if n > 0:
                self._leases[case.case_id] = n
            else:
                self._leases.pop(case.case_id, None)

    def _draw(self, case: Case) -> InputFiles | None:
        """``case`` drawn and written, held where it fits; None where not (a draw that fails here, out of memory
        say, fails again in the worker, where it costs the row alone)."""
        t0 = time.perf_counter()
        try:
            files = write_inputs(make_inputs(case, "cpu"), self.prefix, self.dirs)
        except Exception:  # noqa: BLE001 - the worker draws them and says what went wrong
            files = None
        spent = time.perf_counter() - t0
        with self._lock:
            self.seconds += spent
            self._draw_s[case.case_id] = spent
            if files is not None and self._make_room(files.nbytes) and self.left.get(case.case_id, 1) > 0:
                self._held[case.case_id] = files
                self.draws += 1
                return files
            self.not_held += 1
        if files is not None:
            files.remove()
        return None

    def _make_room(self, incoming: int) -> bool:
        """Remove the least recently sent cases with no row in flight until ``incoming`` bytes fit (under the lock)."""
        held = sum(f.nbytes for f in self._held.values())
        for cid in list(self._held):
            if held + incoming <= self.max_bytes:
                break
            if not self._leases.get(cid):
                victim = self._held.pop(cid)
                held -= victim.nbytes
                victim.remove()
        return held + incoming <= self.max_bytes

    def inputs(self, case: Case, device: str = "cpu") -> Inputs:
        """``make_inputs(case, device)`` for the reference: from the held files (the bytes its rows were sent),
        else drawn."""
        with self._lock:
            files = self._held.get(case.case_id)
        return case_inputs(case, device, files)

    def drawn_s(self, case_id: str) -> float:
        """The seconds the draw of ``case_id`` took here (0.0 where the store has not drawn it)."""
        with self._lock:
            return self._draw_s.get(case_id, 0.0)

    def done(self, case_id: str) -> None:
        """A row of ``case_id`` is done (judged, or written without a call): after its last, its files go."""
        with self._lock:
            if case_id not in self.left:
                return
            self.left[case_id] -= 1
            files = self._held.pop(case_id, None) if self.left[case_id] <= 0 else None
        if files is not None:
            files.remove()

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(f.nbytes for f in self._held.values())

    def close(self) -> None:
        """Remove every file held (the sweep is over)."""
        with self._lock:
            held, self._held = list(self._held.values()), OrderedDict()
        for files in held:
            files.remove()

    def summary(self) -> dict[str, float]:
        """For ``timing.json``: the cases drawn and held, those not held, and the seconds drawing and writing."""
        return {"drawn": self.draws, "not_held": self.not_held, "seconds": round(self.seconds, 4)}
