"""Memory gates: the lanes' rows on one GPU admitted so that their estimated device memory
(:func:`parity.memory.estimate`) fits what was free when the sweep started. A row holds its
estimate from the moment it is sent to its worker until it is judged; a row larger than the
whole budget, but not than its card (:func:`parity.memory.card_bytes`), runs alone (it waits until
nothing else holds memory, and holds the gate meanwhile). While such a row waits, no other row is
admitted: the card drains for it, instead of the lanes refilling it while the big row waits for the
end of the run. A row its card cannot hold at all is refused by its worker before anything runs
(:func:`parity.memory.card_refusal`): the sweep asks it no memory (need 0), so it never drains the
card, and a row that holds nothing never waits. Rows whose backend and reference both run on the CPU share one
gate of host memory the same way (:func:`host_budget`: a share of what the machine had available; a row over the
machine's usable total is refused before it holds anything, :func:`parity.memory.host_refusal`). A sweep asks the
gate which rows need the card (:meth:`MemoryGate.needs_card`) and runs them after every other row
(:mod:`parity.sweep.deferred`), so the card drains once at the end of the run rather than once per such row; each
admission says how long its row waited and whether it ran alone or drained the card (:class:`Admission`: the
row's ``gate`` stage). Where the memory cannot be read there is no budget and the gate admits everything. What a row asks
(:meth:`parity.sweep.rowmemory.RowMemory.need`), then what the gate does:

================================  ===========  =================================  ====================
request (``b``: the budget)       held now     a row that needs the card waits    admitted
================================  ===========  =================================  ====================
over its card / host (refused)    any          any                                yes, holding 0
need 0 (nothing held here)        any          any                                yes, holding 0
fits (used + need <= b)           any          no                                 yes
fits                              any          yes                                no (waits)
over the budget / alone           0            (itself)                           yes (holds the card)
over the budget / alone           > 0          (itself)                           no (waits; drains)
================================  ===========  =================================  ===================="""

from __future__ import annotations

import dataclasses
import threading
import time

from ..memory import free_bytes, host_memory

#: Share of the free memory the lanes' estimates may fill (the rest: CUDA contexts, fragmentation).
FREE_SHARE = 0.85


def device_budget(device: int | None, reserved: int = 0) -> int | None:
    """Bytes the rows on CUDA device ``device`` (an index of this process) may hold at once: a share
    of its free memory less ``reserved`` (the harness's own cached references there); None without CUDA."""
    free = free_bytes(device)
    return None if free is None else max(0, int(free * FREE_SHARE) - reserved)


def host_budget(reserved: int = 0) -> int | None:
    """Bytes the rows whose memory is the host's (:meth:`parity.sweep.rowmemory.RowMemory.hosted`) may hold at
    once: a share of what the machine had available (at most what a row can use) less ``reserved`` (the harness's
    own cached references there); None where the machine's memory cannot be read."""
    host = host_memory()
    if host is None:
        return None
    free = host.usable if host.available is None else min(host.available, host.usable)
    return max(0, int(free * FREE_SHARE) - reserved)


@dataclasses.dataclass(frozen=True)
class Admission:
    """One row let through a gate: the bytes it holds, the seconds it waited there, whether it needed the card
    to itself (``alone``: over the budget, or asked alone) and whether the card drained for it (``drained``:
    others held memory when it asked, and the lanes stopped being admitted until they let go)."""

    held: int
    wait_s: float = 0.0
    alone: bool = False
    drained: bool = False

    def then(self, later: Admission) -> Admission:
        """One row's two admissions (an out-of-memory row run once more alone): the later's bytes, both waits."""
        return Admission(later.held, self.wait_s + later.wait_s, self.alone or later.alone, self.drained or later.drained)


class MemoryGate:
    """Admits rows while the sum of their estimates fits ``budget`` bytes (None: no limit); counts the rows
    that ran alone (``alone_rows``) and the drains of the card for them (``drains``)."""

    def __init__(self, budget: int | None):
        self.budget = budget
        self.used = 0
        self.draining = 0  # requests waiting for the card to empty (alone, or over the budget)
        self.alone_rows = 0
        self.drains = 0
        self._cond = threading.Condition()

    def _fits(self, need: int) -> bool:
        if self.budget is None or need == 0:  # no limit, or nothing to hold: never waits
            return True
        return not self.draining and (self.used == 0 or self.used + need <= self.budget)

    def needs_card(self, need: int, alone: bool = False) -> bool:
        """Whether a request of ``need`` bytes has the card to itself (the gate's one rule, the table above):
        a budget, and over it or asked alone. The sweep runs such rows after every other (:mod:`.deferred`)."""
        return self.budget is not None and (alone or need > self.budget)

    def try_admit(self, need: int) -> Admission | None:
        """``need`` held now where it fits (a row over the budget: only on an empty card, alone); else None."""
        with self._cond:
            if not self._fits(need):
                return None
            self.used += need
            alone = self.needs_card(need)
            self.alone_rows += alone
            return Admission(need, 0.0, alone)

    def try_acquire(self, need: int) -> bool:
        return self.try_admit(need) is not None

    def admit(self, need: int, stop: threading.Event, alone: bool = False) -> Admission | None:
        """Wait until ``need`` fits (``alone``: until nothing else holds memory, then hold the whole
        budget); what it holds, to :meth:`release`, and how long it waited; None when ``stop`` was set meanwhile."""
        t0 = time.perf_counter()
        with self._cond:
            drain = self.needs_card(need, alone)
            drained = drain and self.used > 0
            self.draining += drain
            try:
                while not (self.used == 0 if drain else self._fits(need)):
                    if stop.is_set():
                        return None
                    self._cond.wait(0.2)
            finally:
                self.draining -= drain
            held = max(need, self.budget or 0) if alone else need
            self.used += held
            self.alone_rows += drain
            self.drains += drained
            return Admission(held, time.perf_counter() - t0, drain, drained)

    def acquire(self, need: int, stop: threading.Event, alone: bool = False) -> int | None:
        """:meth:`admit`'s bytes held (None: stopped)."""
        admitted = self.admit(need, stop, alone)
        return None if admitted is None else admitted.held

    def release(self, held: int) -> None:
        with self._cond:
            self.used = max(0, self.used - held)
            self._cond.notify_all()
