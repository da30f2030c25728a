"""Which references a sweep still needs: per reference cache (a GPU's lanes share one), each case's units
that have yet to judge it and where each lane is, so the cache (:class:`parity.judge.BaselineCache`) drops a
reference no unit will judge again and, to make room, evicts the one needed latest before one a lane is about
to use (h100-2026-12-07d-models: eviction by age recomputed 149 references over 14 drifting lanes, 321 s of a
476 s wall)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..case import Case


class CaseDemand:
    """``users``: case id -> the units that will judge it (on one cache), in the order ``cases`` runs.

    A unit's next use of a case at index ``i`` while its lane is at case ``p``: ``i - p`` cases ahead, or after the
    lanes (a row held back, a timeout retried alone) where its lane is past it. :meth:`rank`: lower is evicted first."""

    def __init__(self, cases: Sequence[Case], users: Mapping[str, Iterable[str]]):
        self.index: dict[str, int] = {}
        for i, c in enumerate(cases):
            self.index.setdefault(c.case_id, i)
        self.users = {cid: list(units) for cid, units in users.items()}  # a unit once per row it will judge
        self.position: dict[str, int] = {}  # unit -> index of the case its lane is at (0 before it starts)
        self._lock = threading.Lock()

    def at(self, units: Iterable[str], index: int) -> None:
        """The lane of ``units`` is at case ``index`` (``len(cases)``: its lane is done)."""
        with self._lock:
            self.position.update({u: index for u in units})

    def release(self, unit: str, case_id: str) -> bool:
        """``unit`` judged ``case_id`` (or needs it no more: written without a call); True where no unit needs it now."""
        with self._lock:
            left = self.users.get(case_id)
            if left is None:
                return False  # a case this sweep does not track: kept as the cache keeps any
            if unit in left:
                left.remove(unit)
            return not left

    def rank(self, case_id: str) -> tuple[int, int, int]:
        """Eviction order, lowest first: no unit needs it; then the furthest next use; then the fewest units."""
        n = len(self.index)
        with self._lock:
            left = self.users.get(case_id)
            if left is None:  # not the sweep's: after the ones no unit needs, before the rest
                return (1, -3 * n, 0)
            if not left:
                return (0, 0, 0)
            i = self.index[case_id]
            ahead = [i - p if i >= p else n + i for p in (self.position.get(u, 0) for u in set(left))]
            return (2, -min(ahead), len(set(left)))


def demands(
    cases: Sequence[Case], cache_units: Mapping[str | None, Sequence[str]], runs: Callable[[str, Case], bool]
) -> dict[str | None, CaseDemand]:
    """One :class:`CaseDemand` per cache (``cache_units``: cache key -> its units); ``runs(unit, case)``: whether the
    unit takes the case (:meth:`parity.sweep.lanes.LanePlan.runs`)."""
    out = {}
    for key, units in cache_units.items():
        users: dict[str, list[str]] = {}
        for c in cases:
            users.setdefault(c.case_id, []).extend(u for u in units if runs(u, c))
        out[key] = CaseDemand(cases, users)
    return out
