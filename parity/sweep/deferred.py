"""Rows held back to run last: a row that needs its card to itself by its gate's own rule
(:meth:`parity.sweep.memgate.MemoryGate.needs_card`: its estimate over what may run beside others) is not sent by
its lane; the lanes run every other row, then these run, one thread per gate (a GPU's, or the host's), a case's rows together (its
reference computed once), so each card drains once at the end of the run instead of once for each such row while
every other lane waits. A worker's out-of-memory row that did not run alone is held back the same way, to run once
more alone. A run stopped before them (``--time-limit``, a stop signal, ``--fail-fast``) does not record them:
``--resume`` runs them, as it runs any row not started."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable

from ..case import Case
from .lanes import LanePlan


@dataclasses.dataclass(frozen=True)
class Deferred:
    """One row held back: ``case`` on ``unit``; ``oom``: it ran out of memory beside others, and runs alone now
    whatever its estimate; ``spent_s`` / ``reference_s``: the lane's seconds on that first attempt and on the
    case's reference meanwhile (charged to the row when it is judged)."""

    case: Case
    unit: str
    oom: bool = False
    spent_s: float = 0.0
    reference_s: float = 0.0


class Deferrals:
    """The rows the lanes held back (:meth:`add`, from any lane's thread), run after them (:meth:`groups`);
    ``held``: how many were held back, ``left``: those not run yet."""

    def __init__(self, cases: list[Case]):
        self.order = {c.case_id: i for i, c in enumerate(cases)}
        self.rows: list[Deferred] = []
        self.done: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def add(self, row: Deferred) -> None:
        with self.lock:
            self.rows.append(row)

    def ran(self, row: Deferred) -> None:
        with self.lock:
            self.done.add((row.unit, row.case.case_id))

    @property
    def held(self) -> int:
        return len(self.rows)

    @property
    def left(self) -> int:
        with self.lock:
            return sum((r.unit, r.case.case_id) not in self.done for r in self.rows)

    def groups(self, plan: LanePlan, gate_of: Callable[[str], Hashable]) -> list[list[Deferred]]:
        """The rows not run yet, one list per gate of their units (``gate_of``: a unit's), each in the sweep's
        case order and, within a case, its lanes' unit order."""
        place = {u: (i, j) for i, lane in enumerate(plan.lanes) for j, u in enumerate(lane)}
        by_gate: dict[Hashable, list[Deferred]] = {}
        with self.lock:
            todo = [r for r in self.rows if (r.unit, r.case.case_id) not in self.done]
        for r in sorted(todo, key=lambda r: (self.order.get(r.case.case_id, 0), place.get(r.unit, (0, 0)))):
            by_gate.setdefault(gate_of(r.unit), []).append(r)
        return list(by_gate.values())
