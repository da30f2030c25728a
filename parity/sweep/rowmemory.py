"""A sweep's device and host memory, row by row (:class:`RowMemory`): one gate per GPU of the lanes, one for
the host (:mod:`.memgate`), what each row asks it (its estimate, :func:`parity.memory.estimate`), the holds
until the row is judged, the row the machine cannot hold refused before it is sent or its reference computed
(:meth:`RowMemory.host_refusal`; its host figures read once, :class:`RowNeed`), and the out-of-memory row run once
more alone."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from .. import shard
from ..case import Case
from ..judge import BaselineCache
from ..memory import (
    HostMemory,
    HostNeed,
    MemoryEstimate,
    card_bytes,
    card_refusal,
    estimate,
    host_memory,
    host_need,
    row_host_refusal,
)
from .lanes import LanePlan
from .memgate import Admission, MemoryGate, device_budget, host_budget
from .options import SweepOptions


@dataclasses.dataclass(frozen=True)
class RowNeed:
    """What a row needs, found once when it is reserved (:meth:`RowMemory.row_need`): its estimate, its host bytes
    (:meth:`RowMemory.host_need`) and the machine's memory then (:func:`parity.memory.host_memory`); its gate's
    bytes (:meth:`RowMemory.need`) and its host refusal (:meth:`RowMemory.host_refusal`) both read them."""

    est: MemoryEstimate
    host_need: HostNeed
    host: HostMemory | None


@dataclasses.dataclass(frozen=True)
class RowAsk:
    """What a row asks its gate now (:meth:`RowMemory.ask`): its :class:`RowNeed`, its bytes and whether it needs
    the card to itself by the gate's own rule (:meth:`parity.sweep.memgate.MemoryGate.needs_card`)."""

    row: RowNeed
    need: int
    alone: bool


class RowMemory:
    """The memory holds of a sweep's rows. ``caches``: the reference caches per GPU (None: shared);
    ``unit_infos``: each unit's backend info; ``lock`` and ``stop``: the sweep's."""

    def __init__(
        self,
        plan: LanePlan,
        options: SweepOptions,
        caches: dict[str | None, BaselineCache],
        unit_infos: dict[str, dict[str, Any]],
        lock: threading.RLock,
        stop: threading.Event,
    ):
        self.plan, self.options, self.caches, self.unit_infos, self.lock, self.stop = plan, options, caches, unit_infos, lock, stop
        self.gates: dict[str | None, MemoryGate] = {}  # per GPU of the lanes (None: no --gpus)
        self.held: dict[tuple[str, str], tuple[MemoryGate, int]] = {}  # (unit, case id) -> the bytes it holds
        self.cards: dict[str | None, int | None] = {}  # per GPU: what one row can use there (None: no limit)
        self.backend_objs: dict[str, Any] = {}  # for their workspace hints
        self.host_gate = MemoryGate(None)  # the rows held in host memory (:meth:`hosted`)
        self.admitted: dict[tuple[str, str], Admission] = {}  # (unit, case id) -> its waits at the gate, until timed

    def make_gates(self) -> None:
        """One gate per GPU the lanes use, with a budget where a backend runs on CUDA; what a row can use on that
        card (:func:`parity.memory.card_bytes`), as its worker will judge it."""
        cuda = any(i.get("device") == "cuda" for i in self.unit_infos.values())
        visible = shard.visible_gpus()
        for g in {self.plan.gpu_of.get(u) for u in self.plan.units}:
            index = visible.index(g) if g is not None and g in visible else None
            reserved = self.cache(g).max_bytes if self.cache(g).device.startswith("cuda") else 0
            self.gates[g] = MemoryGate(device_budget(index, reserved) if cuda else None)
            self.cards[g] = card_bytes(index) if cuda else None
        if any(self.hosted(u) for u in self.plan.units):
            self.host_gate = MemoryGate(host_budget(self.cache(None).max_bytes))

    def hosted(self, unit: str) -> bool:
        """Whether ``unit``'s rows hold host memory on the host gate: its backend and its reference run on the CPU
        (a CUDA row's reference on the CPU is refused where it cannot fit, :meth:`host_refusal`, but not held)."""
        on_cpu = self.cache(self.plan.gpu_of.get(unit)).device.startswith("cpu")
        return on_cpu and self.unit_infos.get(unit, {}).get("device", "cpu") != "cuda"

    def cache(self, gpu: str | None) -> BaselineCache:
        return self.caches.get(gpu) or next(iter(self.caches.values()))

    def gate(self, unit: str) -> MemoryGate:
        if self.hosted(unit):
            return self.host_gate
        return self.gates.get(self.plan.gpu_of.get(unit)) or self.gates.setdefault(None, MemoryGate(None))

    def estimate(self, case: Case, unit: str) -> MemoryEstimate:
        backend_name = self.plan.units[unit][0]
        if backend_name not in self.backend_objs:
            from .. import backends

            try:
                self.backend_objs[backend_name] = backends.get(backend_name)
            except Exception:  # noqa: BLE001 - a plugin only its worker can import: no hint
                self.backend_objs[backend_name] = None
        on_device = self.cache(self.plan.gpu_of.get(unit)).device.startswith("cuda")
        return estimate(
            case, self.options.probes, self.options.max_passes, harness_on_device=on_device, backend=self.backend_objs[backend_name]
        )

    def row_need(self, case: Case, unit: str, est: MemoryEstimate) -> RowNeed:
        """``case``'s :class:`RowNeed` on ``unit`` now: its host bytes and the machine's figures, read once."""
        return RowNeed(est, self.host_need(case, unit, est), host_memory())

    def need(self, case: Case, unit: str, row: RowNeed) -> int:
        """The bytes ``case`` holds on its gate (:mod:`.memgate`'s table): none for a row its worker refuses for
        its card (:func:`parity.memory.card_refusal`: nothing runs, so nothing drains) or by its backend's own check
        (:meth:`refuses_itself`: answered before the card is touched, never held back); the worker's estimate on
        a CUDA backend; the harness's where the reference runs on the device and the case's is not cached yet
        (once per case and GPU, not once per backend). A plugin only its worker can import has no hints here:
        its row asks the estimate without them, and its worker (which has them) may still refuse it."""
        cuda, est = self.unit_infos[unit].get("device") == "cuda", row.est
        if self.refused(est, unit) or self.refuses_itself(case, unit):
            return 0
        if self.hosted(unit):  # its worker's and the harness's host bytes; none where the machine cannot hold it at all
            need = row.host_need.bytes
            return 0 if row.host is not None and need > row.host.usable else need
        harness = est.harness_bytes if est.harness_on_device and not self.cache(self.plan.gpu_of.get(unit)).cached(case) else 0
        return (est.worker_bytes if cuda else 0) + harness

    def refuses_itself(self, case: Case, unit: str) -> bool:
        """Whether ``unit``'s backend refuses ``case`` by its own check (:func:`parity.backends.base.refusal_reason`),
        asked in this process: its worker answers so before it reads inputs or touches the card. Such a row holds
        nothing on its gate, so it neither waits there nor is held back to run alone (h100-2026-12-07g-models: 586
        of the refused rows' 604 lane-s after the early answers were gate waits, lab/runs/cpu-models-cost-2026-12-07b).
        False where the backend is not importable here or its check raises: its worker's answer says."""
        from ..backends.base import refusal_reason

        backend = self.backend_objs.get(self.plan.units[unit][0])
        if backend is None:
            return False
        try:
            return refusal_reason(backend, case) is not None
        except Exception:  # noqa: BLE001 - a check that raises here: the worker's answer says what it makes of it
            return False

    def refused(self, est: MemoryEstimate, unit: str) -> bool:
        """Whether ``unit``'s worker will refuse the row for its card (:func:`parity.memory.card_refusal`)."""
        cuda = self.unit_infos[unit].get("device") == "cuda"
        return cuda and card_refusal(est, self.cards.get(self.plan.gpu_of.get(unit))) is not None

    def host_need(self, case: Case, unit: str, est: MemoryEstimate) -> HostNeed:
        """``case``'s host bytes on ``unit`` (:func:`parity.memory.host_need`): its worker's, and the harness's
        while the case's reference is not cached, at once where a worker computes beside the harness."""
        cache = self.cache(self.plan.gpu_of.get(unit))
        reference = None if cache.cached(case) else cache.device
        on_host = self.unit_infos[unit].get("device", "cpu") != "cuda"
        return host_need(est, on_host, reference, concurrent=self.options.isolate)

    def host_refusal(self, case: Case, unit: str, row: RowNeed) -> str | None:
        """Why the machine cannot hold ``case`` on ``unit`` with its reference, from the figures the row was
        reserved with (:func:`parity.memory.row_host_refusal`, the API's rule too: the backend's own refusal first),
        asked once the row holds its gate and before it is sent: such a row is not sent and its reference is not
        computed."""
        from ..backends.base import refusal_reason

        backend = self.backend_objs.get(self.plan.units[unit][0])
        own = None if backend is None else (lambda: refusal_reason(backend, case))
        return row_host_refusal(row.host_need, row.host, own)

    def ask(self, case: Case, unit: str) -> RowAsk:
        """What ``case`` on ``unit`` asks its gate now: its figures read once, its bytes (:meth:`need`) and whether
        it needs the card to itself (the gate's rule: the sweep runs such rows last, :mod:`.deferred`)."""
        row = self.row_need(case, unit, self.estimate(case, unit))
        need = self.need(case, unit, row)
        return RowAsk(row, need, self.gate(unit).needs_card(need))

    def reserve(self, case: Case, unit: str, finish: Callable[[], None], ask: RowAsk | None = None, alone: bool = False) -> RowNeed | None:
        """Hold ``case``'s need (``ask``, else :meth:`ask` now) on its lane's gate before it is sent (``alone``: the
        whole gate, once nothing else holds it); where it does not fit now, ``finish`` the lane's pending row first
        (judging it frees what it holds) and wait. The row's :class:`RowNeed` (for :meth:`host_refusal`), read
        again only after a wait: what is available now, and the case's reference perhaps cached since. None: the
        run was stopped. Its wait at the gate is kept for its timing (:meth:`take_admission`)."""
        ask, gate = ask or self.ask(case, unit), self.gate(unit)
        row = ask.row
        admitted = None if alone else gate.try_admit(ask.need)
        if admitted is None:
            finish()
            admitted = gate.admit(ask.need, self.stop, alone)
            if admitted is None:
                return None
            row = self.row_need(case, unit, row.est)
        self._hold(unit, case, gate, admitted)
        return row

    def _hold(self, unit: str, case: Case, gate: MemoryGate, admitted: Admission) -> None:
        key = (unit, case.case_id)
        with self.lock:
            self.held[key] = (gate, admitted.held)
            earlier = self.admitted.get(key)
            self.admitted[key] = admitted if earlier is None else earlier.then(admitted)

    def take_admission(self, unit: str, case: Case) -> Admission:
        """``case``'s waits at its gate on ``unit`` (every admission of the row, summed), forgotten now: for its
        ``gate`` stage once it is judged. A row that held nothing here: none."""
        with self.lock:
            return self.admitted.pop((unit, case.case_id), Admission(0))

    def release(self, unit: str, case: Case) -> None:
        with self.lock:
            gate, held = self.held.pop((unit, case.case_id), (None, 0))
        if gate is not None:
            gate.release(held)

    def ran_alone(self, case: Case, unit: str) -> bool:
        """Whether ``case`` held its whole gate (an estimate over the budget runs alone): a retry alone would repeat it."""
        with self.lock:
            gate, held = self.held.get((unit, case.case_id), (None, 0))
        return gate is not None and gate.budget is not None and held >= gate.budget

    def after_oom(self, case: Case, unit: str, executor: Any, finish: Callable[[], None], res: dict[str, Any]) -> dict[str, Any]:
        """A worker's out-of-memory row: run once more alone on its GPU (nothing else holds memory there),
        unless it already ran alone (its estimate exceeds what the lanes may hold: a retry would repeat it).
        The sweep's lanes hold such a row back to run last instead (:mod:`.deferred`); this runs it now."""
        if self.ran_alone(case, unit):
            res["detail"] = f"{res.get('detail', '')} (ran alone: its estimate exceeds what the lanes may hold; not retried)"
            return res
        finish()
        self.release(unit, case)
        gate = self.gate(unit)
        admitted = gate.admit(0, self.stop, alone=True)
        if admitted is None:
            return res
        self._hold(unit, case, gate, admitted)
        failed = executor.submit(case)
        again = failed if failed is not None else executor.collect()
        return retried_alone(again)


def retried_alone(res: dict[str, Any]) -> dict[str, Any]:
    """An out-of-memory row's answer once run again alone: its detail says so where it ran out again."""
    if res.get("oom"):
        res["detail"] = f"{res.get('detail', '')} (retried alone: out of memory again)"
    return res
