"""Running a sweep: :class:`Sweep` starts one executor per unit (:mod:`.lanes`), runs the lanes,
judges each result (:mod:`parity.judge`) while the next backend computes, and writes rows, masks and
timing as it goes (:mod:`.writers`, :mod:`.timing`)."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import runfolder, shard
from ..case import Case
from ..execute import context_lost
from ..judge import BaselineCache, Overtaken, apply_expectations, harness_oom_row, judge, unavailable
from ..memory import is_oom
from ..reference import ReferenceStopped
from ..results import Judged, Outcome
from ..runfolder import read_timing
from . import precompile
from .deferred import Deferrals, Deferred
from .demand import CaseDemand, demands
from .ending import SweepEnd, SweepResult
from .eta import Eta, case_cost
from .inputstore import InputStore
from .lanes import LanePlan, make_executor, plan, run_lanes
from .limits import RowLimits
from .options import SweepOptions
from .rowmemory import RowMemory, retried_alone
from .timing import SweepTiming, earlier_calls, write_timing
from .writers import Progress, RowSink

#: One backend's answer waiting to be judged: (case, unit, backend info, result, seconds waited on the worker,
#: seconds spent on the case's reference meanwhile, the row's time limit in seconds, seconds waited meanwhile for
#: another lane's reference: the row's judge_wait, not its wait).
Pending = tuple[Case, str, dict[str, Any], dict[str, Any], float, float, float, float]
#: Seconds a lane waits for its worker's answer before it computes the case's reference beside it: a refusal comes in
#: well under this (0.3-0.5 ms a row on the 2-core CPU dev machine, 2026-12-07), then needs no reference at all.
EARLY_ANSWER_S = 0.01
#: A row set aside while the pre-pass builds its kernel key: (case, unit, set once that build ended, the held-back row
#: it is where the rows held back to run alone set it aside, else None).
Aside = tuple[Case, str, threading.Event, Deferred | None]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def reference_caches(lane_plan: LanePlan, options: SweepOptions) -> dict[str | None, BaselineCache]:
    """The baseline caches: one per GPU the lanes are pinned to (the reference of a lane's cases
    runs on its GPU: this process's device of the same id), else one shared by every lane."""
    keep = 64 if options.jobs <= 1 else 512
    gpus = sorted(set(lane_plan.gpu_of.values()))
    if options.reference_device == "cpu" or not gpus:
        return {None: BaselineCache(options.reference_device, keep)}
    visible = shard.visible_gpus()
    return {g: BaselineCache(f"cuda:{visible.index(g)}" if g in visible else options.reference_device, keep) for g in gpus}


def _demand_of(cache: BaselineCache) -> CaseDemand:
    """The sweep's demand of ``cache`` (:meth:`Sweep._give_demands` gave every cache of the sweep one)."""
    demand = cache.demand
    assert isinstance(demand, CaseDemand), "a sweep's reference cache has its demand"
    return demand


class Sweep(SweepEnd):
    """One run of ``cases`` x ``backend_names`` with ``options``; :meth:`run` once. Its parts: the lanes and their
    executors (:mod:`.lanes`), time limits per row (:class:`.limits.RowLimits`), device memory per row
    (:class:`.rowmemory.RowMemory`), where rows go (:class:`.writers.RowSink`), timing (:mod:`.timing`)."""

    def __init__(
        self,
        backend_names: Iterable[str],
        cases: list[Case],
        options: SweepOptions,
        out_dir: Path | None = None,
        on_row: Callable[[dict[str, Any]], None] | None = None,
        on_started: Callable[[SweepResult], None] | None = None,
    ):
        """``on_started``: called with :meth:`snapshot` once every worker said what it runs, before the first row
        (``parity run`` writes environment.json then, so a run killed later still names its backends' versions)."""
        self.backend_names, self.cases, self.options, self.out_dir = list(dict.fromkeys(backend_names)), cases, options, out_dir
        self.on_started = on_started
        self.plan = plan(self.backend_names, cases, options)
        self.baselines = reference_caches(self.plan, options)
        # each case's inputs drawn once: its rows' workers and its reference map them (the bytes of one draw); in this
        # process (--no-isolate) each row draws its own, as before 2026-12-07 (budget 0: the store holds nothing)
        rows = {c.case_id: sum(self.plan.runs(u, c) for u in self.plan.units) for c in cases}
        self.shared_inputs = InputStore(rows, max_bytes=None if options.isolate else 0)
        self.stop, self.timed_out = threading.Event(), threading.Event()
        for cache in self.baselines.values():
            cache.inputs = self.shared_inputs if options.isolate else None
            cache.stop = self.stop.is_set  # a stop signal ends a reference within a block of rows (its row dropped)
        self._give_demands()  # which references the units still need: what each cache evicts first (its demand)
        self.infos: dict[str, dict[str, Any]] = {}
        self.executors: dict[str, Any] = {}  # per unit
        self.unit_infos: dict[str, dict[str, Any]] = {}
        self.timing = _timing(self.plan, options, out_dir)
        self.lock = threading.RLock()  # rows, writer, progress bar, timing
        bar = Progress(len(self.backend_names) * len(cases), enabled=options.progress)
        eta = Eta(_planned(self.backend_names, cases)) if options.progress else None
        # with --resume, this run's rows: an unavailable one in the folder is tried again
        retry = {(b, c.case_id) for b in self.backend_names for c in cases} if options.resume else set()
        self.sink = RowSink(out_dir, options.resume, options.fail_fast, bar, eta, on_row, self.lock, retry)
        self.retries: list[Pending] = []  # rows that timed out once: retried alone after the lanes
        self.lost_context = ""  # --no-isolate: "BACKEND on CASE" that left this process's CUDA context unusable
        self.interrupted = ""  # the stop signal that ended the run (:meth:`interrupt`)
        self.prepass = precompile.Halt(self.stop)  # the compile pre-pass's live executors (:meth:`interrupt` stops them)
        self.precompiling: precompile.PrePass | None = None  # the pre-pass under way beside the lanes (:meth:`_precompile`)
        self.prepass_waits: dict[str, float] = {}  # each lane's wait for its backends' pre-pass (seconds)
        self.set_aside: dict[str, int] = {}  # per backend: rows set aside while the pre-pass built their key (:meth:`_set_aside`)
        # each lane's wait, after its last case, for the keys of its set-aside rows; those of the rows held back to run
        # alone and of the timeouts' retries (``held back``, ``retries``)
        self.aside_waits: dict[str, float] = {}
        self.aside_unsent = 0  # rows the lanes set aside and had not sent when they stopped (not written: --resume runs them)
        self.t0 = time.perf_counter()
        self.deadline = None if options.time_limit is None else self.t0 + options.time_limit
        self.limits = RowLimits(self.plan, options, self._baselines, self.unit_infos, self.lock, self.deadline)
        self.memory = RowMemory(self.plan, options, self.baselines, self.unit_infos, self.lock, self.stop)
        self.deferred = Deferrals(cases)  # rows that need their card alone: run after every other (:mod:`.deferred`)

    def run(self) -> SweepResult:
        for line in (self.plan.note, self.plan.auto_line()):
            if line and self.options.progress:
                print(f"parity: {line}", file=sys.stderr)
        try:
            self._precompile()
            if not self.interrupted:
                self._run_lanes()
        finally:
            self._end_precompile()
            self._close_executors()
            self.shared_inputs.close()
            self.sink.close()
        return self._result(time.perf_counter() - self.t0)

    def _run_lanes(self) -> None:
        """Start the units' workers (``on_started`` then), run the lanes, then the rows they held back to run alone
        (:meth:`_run_deferred`), then retry alone the rows that timed out."""
        self._start_executors()
        self.plan = self.plan.rebalanced({u for u, info in self.unit_infos.items() if info.get("unavailable")})
        self.timing.lanes = self.plan.lanes  # timing.json's lanes: as they ran
        if self.on_started:
            self.on_started(self.snapshot())
        self.t_rows = time.perf_counter()
        self.memory.make_gates()
        run_lanes(self.plan.lanes, self._lane, self.stop, self._close_executors)
        self._run_deferred()
        self._retry_timeouts()

    def _run_deferred(self) -> None:
        """The rows the lanes held back (:mod:`.deferred`), now that every other row ran: one thread per gate."""
        groups = self.deferred.groups(self.plan, lambda unit: id(self.memory.gate(unit)))
        if not groups or self._should_stop():
            return
        t0 = time.perf_counter()
        try:
            run_lanes(groups, self._deferred_lane, self.stop, self._close_executors)
        finally:
            with self.lock:
                self.timing.held_back_s += time.perf_counter() - t0

    def _deferred_lane(self, rows: list[Deferred]) -> None:
        """One gate's held-back rows, in order; each row's answer judged while the next waits for the card. A row whose
        kernel key the pre-pass is building now is set aside as in a lane (:meth:`_set_aside`): the gate's other rows
        go first, it once that build ended, or after the last of them (their waits: ``held back``)."""
        pending: list[Pending] = []
        aside: list[Aside] = []
        try:
            for row in rows:
                if not self._run_aside(aside, pending) or self._should_stop():
                    return
                if not self._set_aside(row.case, row.unit, aside, row) and not self._send(row.case, row.unit, pending, row):
                    return
            self._run_aside(aside, pending, "held back")
        finally:
            self._finish(pending)
            if self.out_dir:
                with self.lock:
                    write_timing(self.out_dir, self._timing_summary(partial=True))

    def _precompile(self) -> None:
        """Start the compile pre-pass (:mod:`parity.sweep.precompile`) over the rows still to run, where it is wanted;
        it runs beside the lanes, each of which waits for its own backends' keys (:meth:`_lane`)."""
        from ..compile_cache import ENV_VAR

        if not precompile.wanted(self.options, bool(os.environ.get(ENV_VAR))):
            return
        todo = {s: [c for c in self.cases if not self.sink.done(s, c.case_id)] for s in self.backend_names}
        pre = precompile.plan_precompile(todo, self.options, built=precompile.recorded(precompile.cache_root()))
        if not pre.keys:
            return
        logs = runfolder.logs_dir(self.out_dir) if self.out_dir else None
        setup = precompile.PrePassOptions(pre, self.options, logs, self.deadline, self.plan.thread_env)
        self.precompiling = precompile.PrePass(setup, self.prepass, self._precompiled).start()
        if self.options.progress:
            print(f"parity: {precompile.start_line(pre, self.precompiling.budget, self.precompiling.key_limit)}", file=sys.stderr)

    def _precompiled(self, record: dict[str, Any]) -> None:
        """The pre-pass is over (every build done, or its deadline): its record so far, and its line."""
        with self.lock:
            self.timing.precompile = record
        if self.options.progress:
            print(f"{chr(10) if self.sink.bar.tty else ''}parity: {precompile.line(record)}", file=sys.stderr)  # below the bar

    def _end_precompile(self) -> None:
        """The run's end: builds of the pre-pass still running are stopped; its record, with the lanes' waits. A run
        interrupted before its lanes' workers said what they run takes the backends' infos from the pre-pass's."""
        if self.precompiling is None:
            return
        record = self.precompiling.finish()
        record["lanes_waited_s"] = {lane: round(s, 3) for lane, s in self.prepass_waits.items()}
        record["lanes_set_aside"] = dict(self.set_aside)
        record["lanes_set_aside_waited_s"] = {lane: round(s, 3) for lane, s in self.aside_waits.items()}
        with self.lock:
            self.timing.precompile = record
        if self.interrupted:
            lost = {b for b, info in self.infos.items() if info.get("unavailable")}
            self.infos.update({b: i for b, i in self.prepass.infos.items() if b not in self.infos or b in lost})

    def _start_executors(self) -> None:
        """Every unit's executor, started at once (workers start in parallel), then their infos."""
        t_start, env = time.perf_counter(), self.plan.thread_env
        self.timing.worker_threads = int(env["OMP_NUM_THREADS"]) if "OMP_NUM_THREADS" in env else None
        for unit, (backend, _) in self.plan.units.items():
            log = runfolder.log_path(self.out_dir, _safe(unit)) if self.out_dir else None
            self.executors[unit] = make_executor(backend, self.options, log, self.plan.worker_env(unit), wait=False)
        for unit, ex in self.executors.items():
            self.unit_infos[unit] = ex.info
            self.infos.setdefault(self.plan.units[unit][0], ex.info)  # a split backend: its first part's
        self.timing.startup_s = time.perf_counter() - t_start  # the pre-pass, beside it, is not the workers' start-up

    def _close_executors(self) -> None:
        for ex in self.executors.values():
            ex.close()

    def interrupt(self, why: str) -> None:
        """End the run as a partial one (a stop signal, :mod:`.interrupt`; ``why``: its name): no new row starts
        (:meth:`_should_stop`, the path --time-limit takes), and every worker is stopped now, so a row in flight
        ends at once and is not recorded (:meth:`_step`; --resume runs it). Called from a signal handler in the
        main thread, maybe while it runs a lane: it only sets flags and signals the workers."""
        self.interrupted = self.interrupted or why
        self.stop.set()
        for ex in [*self.executors.values(), *self.prepass.live]:
            halt = getattr(ex, "halt", None)
            if halt is not None:
                halt()

    def _lane(self, lane_units: list[str]) -> None:
        """Cases outer, units inner; unit k+1 computes while the lane judges unit k's answer. A row whose kernel key
        the pre-pass is building now is set aside (:meth:`_set_aside`) and sent once that build ended, before the
        lane's next row, or after its last case (:meth:`_run_aside`)."""
        pending: list[Pending] = []
        aside: list[Aside] = []
        self._wait_for_prepass(lane_units)
        t_lane = time.perf_counter()
        try:
            for index, case in enumerate(self.cases):
                self._at(lane_units, index)
                for unit in lane_units:
                    if not self.plan.runs(unit, case):
                        continue  # another part's case
                    if not self._run_aside(aside, pending) or self._should_stop():
                        return
                    if not self._set_aside(case, unit, aside) and not self._step(case, unit, pending):
                        return
                self._finish(pending)
                if self.out_dir:  # after every case, so a run cut short still says where its time went
                    with self.lock:
                        write_timing(self.out_dir, self._timing_summary(partial=True))
            self._run_aside(aside, pending, " ".join(lane_units))
        finally:
            self._finish(pending)  # a result already in is never lost, even on Ctrl-C
            self._at(lane_units, len(self.cases))
            with self.lock:
                self.timing.lane_wall[tuple(lane_units)] = time.perf_counter() - t_lane
                self.aside_unsent += len(aside)

    def _wait_for_prepass(self, lane_units: list[str]) -> None:
        """Until the lane's backends' pre-pass keys are built (or the pre-pass is over): then it runs warm."""
        if self.precompiling is None:
            return
        t_wait = time.perf_counter()
        self.precompiling.wait({self.plan.units[u][0] for u in lane_units}, self.stop)
        self.precompiling.lane_started(max(1, (os.cpu_count() or 1) // len(self.plan.lanes)))  # its share of the CPUs
        with self.lock:
            self.prepass_waits[" ".join(lane_units)] = time.perf_counter() - t_wait

    def _set_aside(self, case: Case, unit: str, aside: list[Aside], held_back: Deferred | None = None) -> bool:
        """Whether ``case`` on ``unit`` is set aside: its kernel key is being built by the pre-pass right now
        (:meth:`.precompile.PrePass.being_built`; a build that went on past its deadline), so the lane runs its other
        rows meanwhile instead of building the key a second time beside it. A row already in the folder or of an
        unavailable backend needs no kernel: it goes now (:meth:`_step`). ``held_back``: the row held back to run
        alone that it is (:meth:`_deferred_lane`)."""
        if self.precompiling is None:
            return False
        backend = self.plan.units[unit][0]
        if self.sink.done(backend, case.case_id) or self.unit_infos[unit].get("unavailable"):
            return False
        built = self.precompiling.being_built(backend, case)
        if built is None:
            return False
        aside.append((case, unit, built, held_back))
        with self.lock:
            self.set_aside[backend] = self.set_aside.get(backend, 0) + 1
        return True

    def _run_aside(self, aside: list[Aside], pending: list[Pending], last: str | None = None) -> bool:
        """Send the set-aside rows whose key's build ended (built or not), in the lane's order; False: interrupted.
        ``last``: the lane (its wait's name in ``lanes_set_aside_waited_s``) is past its last case: wait for the builds
        of the rest, all of them within the pre-pass's key limit from now (or until the run's deadline,
        :meth:`_should_stop`: not sent, ``--resume`` runs them); a row whose build is still going then is sent anyway."""
        if not aside:
            return True
        bound = time.perf_counter() + (self.precompiling.key_limit if self.precompiling is not None else 0.0)
        while aside:
            ready = [row for row in aside if row[2].is_set() or time.perf_counter() > bound]
            if not ready and last is None:
                return True
            if not ready:
                self._finish(pending)  # judged while the builds go on
                if self._should_stop():
                    return False
                t_wait = time.perf_counter()
                aside[0][2].wait(0.05)
                self._waited_for_keys(last or "", t_wait)
                continue
            for row in ready:
                aside.remove(row)
                if self._should_stop() or not self._send(row[0], row[1], pending, row[3]):
                    return False
        return True

    def _send(self, case: Case, unit: str, pending: list[Pending], held_back: Deferred | None = None) -> bool:
        """:meth:`_step`, and a held-back row noted as run (:meth:`.deferred.Deferrals.ran`); False: interrupted."""
        if not self._step(case, unit, pending, held_back):
            return False
        if held_back is not None:
            self.deferred.ran(held_back)
        return True

    def _await_key(self, case: Case, unit: str) -> bool:
        """Before a timeout's retry: where the pre-pass is building the row's kernel key now (:meth:`_set_aside`), wait
        until that build ended, at most its key limit (the retries run one by one, after every other row: nothing is
        left to send meanwhile; the wait's name: ``retries``). False: the run stopped meanwhile (not sent)."""
        aside: list[Aside] = []
        if self.precompiling is None or not self._set_aside(case, unit, aside):
            return True
        t_wait = time.perf_counter()
        bound = t_wait + self.precompiling.key_limit
        try:
            while not aside[0][2].wait(0.05) and time.perf_counter() < bound:
                if self._should_stop():
                    return False
            return True
        finally:
            self._waited_for_keys("retries", t_wait)

    def _waited_for_keys(self, name: str, since: float) -> None:
        """Seconds since ``since`` waited for the pre-pass's builds, added to the wait of ``name`` (a lane, ``held
        back`` or ``retries``)."""
        with self.lock:
            self.aside_waits[name] = self.aside_waits.get(name, 0.0) + time.perf_counter() - since

    def _should_stop(self) -> bool:
        if self.stop.is_set() or self.sink.failed_fast.is_set() or self.lost_context:
            return True
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out.set()
            return True
        return False

    def _skipped(self, case: Case, unit: str, pending: list[Pending]) -> bool:
        """Whether ``case`` on ``unit`` needs no call: already in the folder (``--resume``), or its backend unavailable
        (its row written now)."""
        backend = self.plan.units[unit][0]
        if self.sink.done(backend, case.case_id):
            self.sink.skip(backend, case.case_id)
            self._done_with(case, unit)
            return True
        info = self.unit_infos[unit]
        if info.get("unavailable"):
            self._finish(pending)
            self.sink.skip(backend, case.case_id, shown=False)
            self._emit(unavailable(case, backend, info), unit)
            self._done_with(case, unit)
            return True
        return False

    def _step(self, case: Case, unit: str, pending: list[Pending], held_back: Deferred | None = None) -> bool:
        """Send ``case`` to ``unit``, judge the previous answer meanwhile, collect; False: interrupted. A row that needs
        its card to itself is held back to run after every other row (:mod:`.deferred`); ``held_back``: it runs now."""
        backend, _ = self.plan.units[unit]
        ex, info = self.executors[unit], self.unit_infos[unit]
        if self._skipped(case, unit, pending):
            return True
        if not self.options.isolate:  # nothing to overlap in this process; judged (reference included) before
            self._finish(pending)  # this backend's call can leave the process's CUDA context unusable
        ask = self.memory.ask(case, unit)
        if ask.alone and held_back is None:
            self.deferred.add(Deferred(case, unit))
            return True
        alone = held_back is not None and held_back.oom
        reserved = self.memory.reserve(case, unit, lambda: self._finish(pending), ask, alone)
        if reserved is None:
            return False
        t_ex, est = time.perf_counter(), reserved.est
        why = self.memory.host_refusal(case, unit, reserved)  # the machine cannot hold it: not sent, no reference
        # the case's shared draw (drawn now by the first row to meet it: the reference's stage, as its own draw was)
        draw = not why and not self.memory.refused(est, unit) and not self._refused_up_front(unit, case)
        shared, draw_s = self.shared_inputs.lease(case) if draw else (None, 0.0)
        failed = {"status": Outcome.UNSUPPORTED, "detail": why} if why else ex.submit(case, shared)
        t_sent = time.perf_counter()
        self._finish(pending)  # the previous row, overlapped with this backend's work
        t_ref = time.perf_counter()
        now = failed is None and self.options.isolate and not self.memory.refused(est, unit)  # a refused row needs no reference
        ref_s, ref_wait, early = self._reference_beside(case, unit, ex) if now else (0.0, 0.0, None)
        baseline_s = draw_s + ref_s
        limit = self.limits.limit(case, backend, unit)
        try:
            res = failed if failed is not None else early if early is not None else ex.collect(timeout=limit)
        finally:
            if shared is not None:
                self.shared_inputs.unlease(case)
        self.limits.note_built(case, unit, res)
        if res.get("oom") and self.memory.gate(unit).budget is not None:
            spent = (time.perf_counter() - t_ex - baseline_s, baseline_s)
            if (res := self._out_of_memory(case, unit, pending, res, held_back, spent)) is None:
                return True  # held back: it runs again alone after the other rows
        if self.stop.is_set():  # interrupted: this answer may be the worker being shut down
            return False
        res["est_mem_mb"] = est.mb
        wait_s = (t_sent - t_ex) + (time.perf_counter() - t_ref) - baseline_s - ref_wait  # ref_wait: judge_wait's
        if res.get("status") == "ok":  # the limits' ratio as before 2026-12-07: another lane's reference counted in
            self.limits.note_ratio(backend, case, unit, wait_s + ref_wait)
        if held_back is not None:  # its first attempt's seconds (an out-of-memory row), charged to it now
            wait_s, baseline_s = wait_s + held_back.spent_s, baseline_s + held_back.reference_s
        pending.append((case, unit, info, res, wait_s, baseline_s, limit, ref_wait))
        if not self.options.isolate and context_lost(res):
            self._lose_context(backend, case)
        return True

    def _refused_up_front(self, unit: str, case: Case) -> bool:
        """Whether ``unit``'s backend refuses ``case`` by its own check (:meth:`.RowMemory.refuses_itself`): its worker
        says so before it reads any inputs, so the row draws none (nor waits for another lane's draw: the first row to
        meet a case draws it, as its reference stage), and it held nothing on its gate. A worker that runs the row after
        all (its check said otherwise there) draws the same bytes itself."""
        return self.memory.refuses_itself(case, unit)

    def _reference_beside(self, case: Case, unit: str, ex: Any) -> tuple[float, float, dict[str, Any] | None]:
        """The case's reference computed while ``unit``'s worker (``ex``) runs it, its seconds scaling the row's time limit:
        (seconds computing it, seconds waited for another lane's: the cache computes one at a time, the worker's answer
        where it came first: within :data:`EARLY_ANSWER_S`, or while another lane's reference held the cache). An early
        answer with nothing to judge (a refusal, an error or crash: any but ``ok``) gets no reference, computed or
        waited for (h100-2026-12-07g-models: 1463 refused rows, ~2400 s of lanes waiting for other lanes' 32k
        references); one with an output gets it now, as before (the judge and the limits' ratio need it)."""
        if not self.limits.needs_reference_now(case, unit):  # cached, or a fixed --timeout: nothing to wait for
            return (*self.limits.reference_now(case, unit), None)
        waited = 0.0
        if not ex.answered(EARLY_ANSWER_S):
            try:
                return (*self.limits.reference_now(case, unit, unless=ex.answered), None)
            except Overtaken as exc:  # the answer came while another lane's reference held the cache
                waited = exc.waited
        res = ex.collect(timeout=self.limits.limit(case, self.plan.units[unit][0], unit))  # in: read, not waited for
        if res.get("status") != "ok":
            return 0.0, 0.0, res  # the lane's seconds meanwhile are the row's wait on its worker
        ref_s, ref_wait = self.limits.reference_now(case, unit)
        return ref_s, ref_wait + waited, res  # judge_wait: all it waited for other lanes' references, as before

    def _out_of_memory(
        self,
        case: Case,
        unit: str,
        pending: list[Pending],
        res: dict[str, Any],
        held_back: Deferred | None,
        spent: tuple[float, float],
    ) -> dict[str, Any] | None:
        """A worker's out-of-memory answer: final where the row ran alone; else held back to run once more alone
        after every other row (None); a held-back row that did not run alone runs again alone now
        (:meth:`.rowmemory.RowMemory.after_oom`). ``spent``: the lane's seconds on it and on its reference."""
        if held_back is not None and held_back.oom:
            return retried_alone(res)
        if held_back is not None or self.memory.ran_alone(case, unit):
            return self.memory.after_oom(case, unit, self.executors[unit], lambda: self._finish(pending), res)
        self.memory.release(unit, case)
        self.deferred.add(Deferred(case, unit, oom=True, spent_s=spent[0], reference_s=spent[1]))
        return None

    def _lose_context(self, backend: str, case: Case) -> None:
        """In this process a sticky CUDA error cannot be undone (a worker would be restarted,
        :mod:`parity.worker`): every later row would fail with it. No new row starts; the run is partial."""
        with self.lock:
            if self.lost_context:
                return
            self.lost_context = f"{backend} on {case.summary()}"
        why = "the rest of this run cannot use the GPU in this process"
        how = "rerun with --resume (without --no-isolate, each backend runs in its own worker process)"
        lead = "\n" if self.sink.bar.tty else ""  # past the progress bar's line
        print(f"{lead}parity: CUDA context lost in {self.lost_context}: {why}; {how}", file=sys.stderr, flush=True)

    def _finish(self, pending: list[Pending]) -> None:
        while pending:
            self._judge_and_emit(*pending.pop())

    def _judge_and_emit(
        self,
        case: Case,
        unit: str,
        info: dict[str, Any],
        res: dict[str, Any],
        wait_s: float,
        ref_s: float = 0.0,
        limit: float = 0.0,
        ref_wait: float = 0.0,
        retried: bool = False,
    ) -> None:
        backend, part = self.plan.units[unit]
        if res.get("status") == Outcome.TIMEOUT and not retried and self.options.isolate:
            with self.lock:  # judged after the lanes, once retried alone (:meth:`_retry_timeouts`)
                self.retries.append((case, unit, info, res, wait_s, ref_s, limit, ref_wait))
            self.memory.release(unit, case)  # its memory hold too: the retry runs after the lanes, alone
            return
        t_judge = time.perf_counter()
        try:
            judged, computed, waited = self._judge_row(case, unit, info, res)
        except ReferenceStopped:  # a stop signal during its reference: dropped as a row in flight (--resume runs it)
            return
        judged = apply_expectations(judged, self.options.expectations, str(info.get("version") or ""), case)
        baseline_s, t_lock = ref_s + computed, time.perf_counter()
        judge_s = t_lock - t_judge - computed - waited
        with self.lock:
            judge_wait = ref_wait + waited + time.perf_counter() - t_lock  # other lanes: their reference, this lock
            gate = self.memory.take_admission(unit, case)
            stages = self.timing.add(
                backend, case, res, wait_s, judge_s, baseline_s, unit=unit, part=part, gate=gate, judge_wait=judge_wait
            )
            self.sink.stages(backend, case, res, stages, gate)
            if self.sink.eta:
                lane_s = wait_s + judge_s + judge_wait + baseline_s
                self.sink.eta.done(backend, case.case_id, lane_s, ran=res.get("status") != Outcome.UNSUPPORTED)
        self._emit(judged, unit)

    def _judge_row(self, case: Case, unit: str, info: dict[str, Any], res: dict[str, Any]) -> tuple[Judged, float, float]:
        """The row judged against the reference (its memory hold released), the seconds spent computing its reference
        here (another lane's row had not met the case, or it was evicted), and the seconds waited for other lanes:
        the reference cache computing another case, the sweep's lock to release the hold."""
        backend, baselines = self.plan.units[unit][0], self._baselines(unit)
        # the baseline is shared by the backends (of a GPU's lanes): whichever meets a case first must not
        # be charged for it (it would make a backend's cases/s depend on the backend order)
        computed = waited = 0.0
        try:
            grad_ok = (res.get("grad") or {}).get("status") == "ok"  # its reference is charged like the forward's
            if res.get("status") == "ok":
                computed, waited = baselines.ensure_timed(case, grad=grad_ok)
            judged = judge(case, backend, info, res, baselines, self.options.budgets)
        except Exception as exc:  # out of memory in this process (on the device and the CPU): this row only
            if not is_oom(exc):
                raise
            computed, judged = 0.0, harness_oom_row(case, backend, info, res, exc)
        finally:
            t_release = time.perf_counter()
            self.memory.release(unit, case)  # under the sweep's lock: waiting for it, the rest microseconds
            waited += time.perf_counter() - t_release
            self._done_with(case, unit)
        return judged, computed, waited

    def _emit(self, judged: Judged, unit: str) -> None:
        with self.lock:
            self.timing.note_row(unit)
            self.sink.emit(judged, self.plan.gpu_of.get(unit, ""), time.perf_counter() - self.t_rows)

    def _baselines(self, unit: str) -> BaselineCache:
        return self.baselines[self._cache_key(unit)]

    def _cache_key(self, unit: str) -> str | None:
        gpu = self.plan.gpu_of.get(unit)
        return gpu if gpu in self.baselines else next(iter(self.baselines))

    def _give_demands(self) -> None:
        """Each reference cache its demand: the units that will judge each case (:mod:`.demand`); the cache holds it
        (:func:`_demand_of`), none other."""
        units: dict[str | None, list[str]] = {key: [] for key in self.baselines}
        for unit in self.plan.units:
            units[self._cache_key(unit)].append(unit)
        for key, demand in demands(self.cases, units, self.plan.runs).items():
            self.baselines[key].demand = demand

    def _done_with(self, case: Case, unit: str) -> None:
        """``unit`` needs ``case``'s reference no more (judged, or written without a call): dropped once no unit does."""
        cache = self._baselines(unit)
        if _demand_of(cache).release(unit, case.case_id):
            cache.release(case.case_id)
        self.shared_inputs.done(case.case_id)

    def _at(self, lane_units: list[str], index: int) -> None:
        """The lane of ``lane_units`` is at case ``index`` (``len(self.cases)``: done): the caches keep what is near."""
        for key in {self._cache_key(unit) for unit in lane_units}:
            _demand_of(self.baselines[key]).at(lane_units, index)

    def _retry_timeouts(self) -> None:
        """Each row that timed out, once more, alone (the lanes are done) with a longer limit, once the pre-pass is not
        building its key (:meth:`_await_key`); a second timeout is recorded, its detail saying how long the reference
        took on the case."""
        retries, self.retries = self.retries, []
        for retry in retries:
            case, unit, info, res, wait_s, ref_s, limit, ref_wait = retry
            if self._should_stop() or not self._await_key(case, unit):  # no build of its key beside a build under way
                self.retries.append(retry)
                continue  # not recorded: the run is partial, --resume runs the row again
            backend = self.plan.units[unit][0]
            longer = self.limits.limit(case, backend, unit, 1.0 if self.options.timeout is not None else self.options.retry_scale)
            print(
                f"parity: {backend} gave no answer within {limit:.0f} s on {case.summary()}; retrying it alone with {longer:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            ex = self.executors[unit]
            t0 = time.perf_counter()
            failed = ex.submit(case)
            again = failed if failed is not None else ex.collect(timeout=longer)
            if again.get("status") == Outcome.TIMEOUT:
                ref = self.limits.reference_seconds(case, unit)
                again = {
                    **again,
                    "detail": f"no answer within {limit:.3g} s, nor within {longer:.3g} s when retried alone; "
                    f"worker killed; the reference took {ref} on this case",
                }
            self._judge_and_emit(case, unit, info, again, wait_s + time.perf_counter() - t0, ref_s, longer, ref_wait, retried=True)


def _timing(lane_plan: LanePlan, options: SweepOptions, out_dir: Path | None) -> SweepTiming:
    """A sweep's timing record, with how its lanes were laid out (and the earlier calls of a resumed folder)."""
    timing = SweepTiming()
    timing.jobs, timing.lanes, timing.parts = options.jobs, lane_plan.lanes, dict(lane_plan.splits)
    timing.unit_gpu = dict(lane_plan.gpu_of)
    timing.auto_split = lane_plan.auto
    timing.shard = dict(options.shard) if options.shard else None
    timing.earlier = earlier_calls(read_timing(out_dir)) if options.resume and out_dir else []
    return timing


def _planned(backend_names: list[str], cases: list[Case]) -> list[tuple[str, str, float, bool]]:
    """The rows of a sweep for its time-left estimate: (backend, case id, cost, whether the backend
    takes the case, asked here when it can be; else assumed)."""
    from .. import backends
    from ..design import takes

    costs = {c.case_id: case_cost(c) for c in cases}
    out = []
    for backend in backend_names:
        try:
            be: Any = backends.get(backend)
        except Exception:  # noqa: BLE001 - e.g. a plugin importable only in its worker (--worker-path)
            be = None
        for c in cases:
            out.append((backend, c.case_id, costs[c.case_id], be is None or takes(be, c)))
    return out


def run_sweep(
    backend_names: Iterable[str],
    cases: list[Case],
    out_dir: Path | None = None,
    options: SweepOptions | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    **fields: Any,
) -> SweepResult:
    """Run every case on every backend with ``options`` (:class:`SweepOptions`); see
    :mod:`parity.sweep` for the verdicts. ``fields``: :class:`SweepOptions` fields given one by
    one (``run_sweep(backend_names, cases, jobs=2, isolate=False)``), over ``options``.

    ``jobs > 1`` splits the backends over that many lanes that run at once (each lane: cases
    outer, its backends inner), so compile-bound backends (flex, JAX) do not hold up the rest;
    per-case times are then measured while other lanes run. ``gpus`` pins each lane's workers to
    one GPU (``CUDA_VISIBLE_DEVICES``), lanes placed by cost; the row's ``gpu`` column says which.
    ``time_limit``: seconds after which no new row is started; the result is then ``partial`` and
    ``resume=True`` on the same folder runs the rest. ``splits``: ``{backend: K}`` runs that backend
    in K workers at once, each in its own lane, each taking the cases of its own configurations
    (:func:`parity.sweep.lanes.split_cases`); ``auto_split`` picks K for the other backends by their
    cost (:func:`parity.sweep.lanes.auto_splits`). Rows are the same whatever the lanes."""
    options = dataclasses.replace(options or SweepOptions(), **fields) if fields else options or SweepOptions()
    return Sweep(backend_names, cases, options, out_dir, on_row).run()
