"""A sweep's time limit per row: its base (``--timeout``, else scaled from the reference's seconds on the
case and the backend's calls per row), the compile grace of a configuration's first row in a compiling
backend's worker, and what each worker has built so far (:class:`RowLimits`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..case import Case
from ..judge import BaselineCache, Overtaken
from ..maskcheck import mask_passes_at_most
from ..results import Outcome
from .lanes import LanePlan, unit_key
from .options import SweepOptions


class RowLimits:
    """Time limits of a sweep's rows. ``baselines_of(unit)``: the reference cache of ``unit``'s GPU;
    ``unit_infos``: each unit's backend info (filled once its worker started); ``lock``: the sweep's."""

    def __init__(
        self,
        plan: LanePlan,
        options: SweepOptions,
        baselines_of: Callable[[str], BaselineCache],
        unit_infos: dict[str, dict[str, Any]],
        lock: threading.RLock,
        deadline: float | None,
    ):
        self.plan, self.options, self.baselines_of, self.unit_infos = plan, options, baselines_of, unit_infos
        self.lock, self.deadline = lock, deadline
        self.ratios: dict[str, list[float]] = {}  # per backend: seconds waited / the reference's seconds, rows that ran
        self.built: dict[str, set[tuple[Any, ...]]] = {}  # per unit: configurations its worker answered (compiled)

    def reference_now(self, case: Case, unit: str, unless: Callable[[], bool] | None = None) -> tuple[float, float]:
        """Compute ``case``'s reference while the backend works (its time scales the row's limit); the seconds
        spent computing it (0.0 when cached, or when it cannot be computed here: the judge will say why) and the
        seconds waited for another lane's computation (the cache computes one at a time). ``unless``: ends that
        wait (:class:`parity.judge.Overtaken`, raised: nothing computed) once it says True (the worker answered)."""
        if self.options.timeout is not None:
            return 0.0, 0.0
        try:
            return self.baselines_of(unit).ensure_timed(case, unless=unless)
        except Overtaken:
            raise
        except Exception:  # noqa: BLE001 - e.g. out of memory: the judge meets it again, on its own row
            return 0.0, 0.0

    def needs_reference_now(self, case: Case, unit: str) -> bool:
        """Whether :meth:`reference_now` would compute or wait (a limit scaled by the reference, not yet cached)."""
        return self.options.timeout is None and not self.baselines_of(unit).cached(case)

    def reference_s_of(self, case: Case, unit: str) -> float:
        return self.baselines_of(unit).case_seconds.get(case.case_id, 0.0)

    def reference_seconds(self, case: Case, unit: str) -> str:
        """How long the reference took on ``case``, in words (computed now if it was not)."""
        try:
            self.baselines_of(unit).ensure(case)
        except Exception as exc:  # noqa: BLE001
            return f"? s (it could not be computed: {type(exc).__name__})"
        return f"{self.reference_s_of(case, unit):.3g} s"

    def note_ratio(self, backend: str, case: Case, unit: str, wait_s: float) -> None:
        """An answered row's seconds waited against the reference's (the base limit's median ratio)."""
        if self.options.timeout is None:
            with self.lock:
                self.ratios.setdefault(backend, []).append(wait_s / max(self.reference_s_of(case, unit), 1e-3))

    def limit(self, case: Case, backend: str, unit: str, scale: float = 1.0) -> float:
        """The row's time limit: its base (:meth:`base_limit`) ``x scale`` (a retry's), plus the compile
        grace of a first row of its configuration in a compiling backend's worker (:meth:`grace`). The grace
        ends with ``--time-limit``: a build still running then is killed at its base limit past it, and the
        row is left to ``--resume`` (not recorded), so a limited run ends soon after its limit."""
        grace = self.grace(case, unit)
        if grace and self.deadline is not None:
            grace = min(grace, max(0.0, self.deadline - time.perf_counter()))
        return self.base_limit(case, backend, unit) * scale + grace

    def grace(self, case: Case, unit: str) -> float:
        """``--compile-grace`` where ``unit``'s backend builds kernels on first use (``first_use_compile``) and
        its worker has not answered a row of ``case``'s configuration yet; else 0.

        ====================  ===========================================  ======================
        first_use_compile     the worker's earlier rows of the config       grace
        ====================  ===========================================  ======================
        False                 any                                          0
        True                  none, or only timeouts / crashes since        --compile-grace
        True                  one answered (ok) since its last restart      0
        ====================  ===========================================  ======================
        """
        if not self.options.compile_grace or not self.unit_infos.get(unit, {}).get("first_use_compile"):
            return 0.0
        with self.lock:
            return 0.0 if unit_key(self.plan.units[unit][0])(case) in self.built.get(unit, ()) else self.options.compile_grace

    def note_built(self, case: Case, unit: str, res: dict[str, Any]) -> None:
        """An answered row built its configuration in the worker; a timeout or crash restarts the worker, so
        what it built in memory is gone (its disk cache stays, but a build killed halfway is lost)."""
        with self.lock:
            if res.get("status") in (Outcome.TIMEOUT, Outcome.CRASH):
                self.built.pop(unit, None)
            elif res.get("status") == "ok":
                self.built.setdefault(unit, set()).add(unit_key(self.plan.units[unit][0])(case))

    def base_limit(self, case: Case, backend: str, unit: str) -> float:
        """``--timeout``, else ``floor + scale x`` the reference's seconds on the case ``x`` the backend's
        calls per row (1 + mask probe passes, the scaled probe's describing ones included, or the median ratio
        of its rows so far of seconds waited to the reference's seconds, the larger)."""
        o = self.options
        if o.timeout is not None:
            return o.timeout
        calls = 1 + (mask_passes_at_most(case, o.max_passes) if o.probes else 0) + (3 if o.grad else 0)  # a backward: ~3 forwards
        calls += (4 if "invariance" in o.checks else 0) + (5 if "graph" in o.checks else 0)  # sub-batches; eager, warm-ups, replays
        with self.lock:
            seen = sorted(self.ratios.get(backend, []))
        ratio = max(float(calls), seen[len(seen) // 2] if seen else 0.0)
        return o.timeout_floor + o.timeout_scale * ratio * self.reference_s_of(case, unit)
