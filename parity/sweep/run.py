"""Running a sweep: :class:`Sweep` starts one executor per unit (:mod:`.lanes`), runs the lanes,
judges each result (:mod:`parity.judge`) while the next backend computes, and writes rows, masks and
timing as it goes (:mod:`.writers`, :mod:`.timing`)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import shard
from ..case import Case
from ..execute import context_lost
from ..judge import BaselineCache, apply_expectations, harness_oom_row, judge, unavailable
from ..maskcheck import mask_passes_at_most
from ..memory import MemoryEstimate, card_bytes, card_refusal, estimate, is_oom
from ..results import FAIL_VERDICTS, Judged
from ..runfolder import ResultsWriter, read_timing
from . import precompile
from .eta import Eta, case_cost, clock
from .lanes import LanePlan, make_executor, plan, run_lanes, save_costs, unit_key
from .memgate import MemoryGate, device_budget
from .options import SweepOptions
from .timing import SweepTiming, earlier_calls, split_line, write_timing
from .writers import Progress

#: One line per row: where its time went (:data:`parity.sweep.timing.STAGES`, in milliseconds).
STAGES_FILE = "stages.jsonl"

#: One backend's answer waiting to be judged: (case, unit, backend info, result, seconds waited on the worker,
#: seconds spent on the case's reference meanwhile, the row's time limit in seconds).
Pending = tuple[Case, str, dict[str, Any], dict[str, Any], float, float, float]


@dataclasses.dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    infos: dict[str, dict[str, Any]]
    seconds: float
    reference_seconds: float
    out_dir: Path | None
    partial: bool = False  # stopped before every row ran (--time-limit, --fail-fast, a lost CUDA context)
    already: int = 0  # rows found in the folder on --resume
    total: int = 0  # backends x cases
    split: str = ""  # how the work was split (lanes, GPUs, shard), one line; empty for one plain lane
    stopped_by: str = ""  # why a partial run stopped ("" when it did not stop early)

    @property
    def planned(self) -> int:
        """Rows this run set out to produce."""
        return self.total - self.already

    def counts(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for r in self.rows:
            table.setdefault(r["backend"], {}).setdefault(r["verdict"], 0)
            table[r["backend"]][r["verdict"]] += 1
        return table

    @property
    def failed(self) -> bool:
        return any(r["verdict"] in FAIL_VERDICTS for r in self.rows)


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


class Sweep:
    """One run of ``cases`` x ``specs`` with ``options``; :meth:`run` once."""

    def __init__(
        self,
        specs: Iterable[str],
        cases: list[Case],
        options: SweepOptions,
        out_dir: Path | None = None,
        on_row: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.specs, self.cases, self.options, self.out_dir, self.on_row = list(dict.fromkeys(specs)), cases, options, out_dir, on_row
        self.plan = plan(self.specs, cases, options)
        self.writer = ResultsWriter(out_dir, options.resume) if out_dir else None
        self.stages_fh = (out_dir / STAGES_FILE).open("a" if options.resume else "w") if out_dir else None
        self.baselines = reference_caches(self.plan, options)
        self.rows: list[dict[str, Any]] = []
        self.infos: dict[str, dict[str, Any]] = {}
        self.executors: dict[str, Any] = {}  # per unit
        self.unit_infos: dict[str, dict[str, Any]] = {}
        self.timing = SweepTiming()
        self.timing.jobs, self.timing.lanes, self.timing.parts = options.jobs, self.plan.lanes, dict(self.plan.splits)
        self.timing.unit_gpu = dict(self.plan.gpu_of)
        self.timing.auto_split = self.plan.auto
        self.timing.shard = dict(options.shard) if options.shard else None
        self.timing.earlier = earlier_calls(read_timing(out_dir)) if options.resume and out_dir else []
        self.bar = Progress(len(self.specs) * len(cases), enabled=options.progress)
        self.eta = Eta(_planned(self.specs, cases)) if options.progress else None
        self.ratios: dict[str, list[float]] = {}  # per backend: seconds waited / the reference's seconds, rows that ran
        self.retries: list[Pending] = []  # rows that timed out once: retried alone after the lanes
        self.built: dict[str, set[tuple[Any, ...]]] = {}  # per unit: configurations its worker answered (compiled)
        self.lock = threading.RLock()  # rows, writer, progress bar, timing
        self.stop, self.timed_out, self.failed_fast = threading.Event(), threading.Event(), threading.Event()
        self.lost_context = ""  # --no-isolate: "BACKEND on CASE" that left this process's CUDA context unusable
        self.gates: dict[str | None, MemoryGate] = {}  # per GPU of the lanes (None: no --gpus)
        self.held: dict[tuple[str, str], tuple[MemoryGate, int]] = {}  # (unit, case id) -> the bytes it holds
        self.cards: dict[str | None, int | None] = {}  # per GPU: what one row can use there (None: no limit)
        self.backend_objs: dict[str, Any] = {}  # for their workspace hints
        self.t0 = time.perf_counter()
        self.deadline = None if options.time_limit is None else self.t0 + options.time_limit

    def run(self) -> SweepResult:
        for line in (self.plan.note, self.plan.auto_line()):
            if line and self.options.progress:
                print(f"parity: {line}", file=sys.stderr)
        try:
            self._precompile()
            self._start_executors()
            self.t_rows = time.perf_counter()
            self._make_gates()
            run_lanes(self.plan.lanes, self._lane, self.stop, self._close_executors)
            self._retry_timeouts()
        finally:
            self._close_executors()
            if self.writer:
                self.writer.close()
            if self.stages_fh:
                self.stages_fh.close()
        return self._result(time.perf_counter() - self.t0)

    def _precompile(self) -> None:
        """The compile pre-pass (:mod:`parity.sweep.precompile`) over the rows still to run, where it is wanted."""
        from ..compile_cache import ENV_VAR

        if not precompile.wanted(self.options, bool(os.environ.get(ENV_VAR))):
            return
        done = self.writer.done if self.writer else set()
        todo = {s: [c for c in self.cases if (s, c.case_id) not in done] for s in self.specs}
        pre = precompile.plan_precompile(todo, self.options, built=precompile.recorded(precompile.cache_root()))
        if not pre.keys:
            return
        logs = self.out_dir / "logs" if self.out_dir else None
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
        self.timing.precompile = precompile.run_precompile(pre, self.options, logs, self.deadline, self.plan.thread_env)
        if self.options.progress:
            print(f"parity: {precompile.line(self.timing.precompile)}", file=sys.stderr)

    def _start_executors(self) -> None:
        """Every unit's executor, started at once (workers start in parallel), then their infos."""
        env = self.plan.thread_env
        self.timing.worker_threads = int(env["OMP_NUM_THREADS"]) if "OMP_NUM_THREADS" in env else None
        for unit, (spec, _) in self.plan.units.items():
            log = self.out_dir / "logs" / f"{_safe(unit)}.log" if self.out_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            self.executors[unit] = make_executor(spec, self.options, log, self.plan.worker_env(unit), wait=False)
        for unit, ex in self.executors.items():
            self.unit_infos[unit] = ex.info
            self.infos.setdefault(self.plan.units[unit][0], ex.info)  # a split backend: its first part's
        pre = float((self.timing.precompile or {}).get("wall_s", 0.0))  # the pre-pass is not the workers' start-up
        self.timing.startup_s = time.perf_counter() - self.t0 - pre

    def _close_executors(self) -> None:
        for ex in self.executors.values():
            ex.close()

    def _lane(self, lane_units: list[str]) -> None:
        """Cases outer, units inner; unit k+1 computes while the lane judges unit k's answer."""
        pending: list[Pending] = []
        t_lane = time.perf_counter()
        try:
            for case in self.cases:
                for unit in lane_units:
                    if not self.plan.runs(unit, case):
                        continue  # another part's case
                    if self._should_stop() or not self._step(case, unit, pending):
                        return
                self._finish(pending)
                if self.out_dir:  # after every case, so a run cut short still says where its time went
                    with self.lock:
                        write_timing(self.out_dir, self._timing_summary(partial=True))
        finally:
            self._finish(pending)  # a result already in is never lost, even on Ctrl-C
            with self.lock:
                self.timing.lane_wall[tuple(lane_units)] = time.perf_counter() - t_lane

    def _should_stop(self) -> bool:
        if self.stop.is_set() or self.failed_fast.is_set() or self.lost_context:
            return True
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out.set()
            return True
        return False

    def _step(self, case: Case, unit: str, pending: list[Pending]) -> bool:
        """Send ``case`` to ``unit``, judge the previous answer meanwhile, collect; False: interrupted."""
        spec, _ = self.plan.units[unit]
        ex, info = self.executors[unit], self.unit_infos[unit]
        if self.writer and (spec, case.case_id) in self.writer.done:
            with self.lock:
                self.bar.update("skipped", spec)
                if self.eta:
                    self.eta.skip(spec, case.case_id)
            return True
        if info.get("unavailable"):
            self._finish(pending)
            if self.eta:
                with self.lock:
                    self.eta.skip(spec, case.case_id)
            self._emit(unavailable(case, spec, info), unit)
            return True
        if not self.options.isolate:  # nothing to overlap in this process; judged (reference included) before
            self._finish(pending)  # this backend's call can leave the process's CUDA context unusable
        est = self._reserve(case, unit, pending)
        if est is None:
            return False
        t_ex = time.perf_counter()
        failed = ex.submit(case)
        t_sent = time.perf_counter()
        self._finish(pending)  # the previous row, overlapped with this backend's work
        t_ref = time.perf_counter()
        now = failed is None and self.options.isolate and not self._refused(est, unit)  # a refused row needs no reference
        baseline_s = self._reference_now(case, unit) if now else 0.0
        limit = self._limit(case, spec, unit)
        res = failed if failed is not None else ex.collect(timeout=limit)
        self._note_built(case, unit, res)
        if res.get("oom") and self._gate(unit).budget is not None:
            res = self._retry_alone(case, unit, pending, res) if not self._ran_alone(case, unit) else self._alone_oom(res)
        if self.stop.is_set():  # interrupted: this answer may be the worker being shut down
            return False
        res["est_mem_mb"] = est.mb
        wait_s = (t_sent - t_ex) + (time.perf_counter() - t_ref) - baseline_s
        if res.get("status") == "ok" and self.options.timeout is None:
            with self.lock:
                self.ratios.setdefault(spec, []).append(wait_s / max(self._reference_s_of(case, unit), 1e-3))
        pending.append((case, unit, info, res, wait_s, baseline_s, limit))
        if not self.options.isolate and context_lost(res):
            self._lose_context(spec, case)
        return True

    def _lose_context(self, spec: str, case: Case) -> None:
        """In this process a sticky CUDA error cannot be undone (a worker would be restarted,
        :mod:`parity.worker`): every later row would fail with it. No new row starts; the run is partial."""
        with self.lock:
            if self.lost_context:
                return
            self.lost_context = f"{spec} on {case.summary()}"
        why = "the rest of this run cannot use the GPU in this process"
        how = "rerun with --resume (without --no-isolate, each backend runs in its own worker process)"
        lead = "\n" if self.bar.tty else ""  # past the progress bar's line
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
        retried: bool = False,
    ) -> None:
        spec, part = self.plan.units[unit]
        if res.get("status") == "timeout" and not retried and self.options.isolate:
            with self.lock:  # judged after the lanes, once retried alone (:meth:`_retry_timeouts`)
                self.retries.append((case, unit, info, res, wait_s, ref_s, limit))
            self._release(unit, case)  # its memory hold too: the retry runs after the lanes, alone
            return
        baselines = self._baselines(unit)
        t_judge = time.perf_counter()
        # the baseline is shared by the backends (of a GPU's lanes): whichever meets a case first must not
        # be charged for it (it would make a backend's cases/s depend on the backend order)
        try:
            grad_ok = (res.get("grad") or {}).get("status") == "ok"  # its reference is charged like the forward's
            baseline_s = ref_s + (baselines.ensure(case, grad=grad_ok) if res.get("status") == "ok" else 0.0)
            judged = judge(case, spec, info, res, baselines, self.options.budgets)
        except Exception as exc:  # out of memory in this process (on the device and the CPU): this row only
            if not is_oom(exc):
                raise
            baseline_s, judged = ref_s, harness_oom_row(case, spec, info, res, exc)
        finally:
            self._release(unit, case)
        judged = apply_expectations(judged, self.options.expectations, str(info.get("version") or ""), case)
        with self.lock:
            judge_s = time.perf_counter() - t_judge - (baseline_s - ref_s)
            stages = self.timing.add(spec, case, res, wait_s, judge_s, baseline_s, unit=unit, part=part)
            self._write_stages(spec, case, res, stages)
            if self.eta:
                self.eta.done(spec, case.case_id, wait_s + judge_s + baseline_s, ran=res.get("status") != "unsupported")
        self._emit(judged, unit)

    def _write_stages(self, spec: str, case: Case, res: dict[str, Any], stages: dict[str, float]) -> None:
        """One line of ``OUT/stages.jsonl``: the row's :data:`parity.sweep.timing.STAGES` in milliseconds."""
        if self.stages_fh is None:
            return
        ms = {k: (int(v) if k.endswith("_calls") else round(v * 1e3, 3)) for k, v in stages.items()}
        first = bool((res.get("timing") or {}).get("first_config"))
        line = {"backend": spec, "case_id": case.case_id, "status": res.get("status"), "first_config": first, "stage_ms": ms}
        self.stages_fh.write(json.dumps(line) + "\n")
        self.stages_fh.flush()

    def _emit(self, judged: Judged, unit: str) -> None:
        row = judged.row
        row["gpu"] = self.plan.gpu_of.get(unit, "")
        with self.lock:
            self.rows.append(row)
            if self.options.fail_fast and row["verdict"] in FAIL_VERDICTS:
                self.failed_fast.set()
            self.timing.note_row(unit)
            if self.writer:
                self.writer.write(judged)
            if self.on_row:
                self.on_row(row)
            left = self.eta.left(time.perf_counter() - self.t_rows) if self.eta else None
            self.bar.update(row["verdict"], f"{row['backend']} {judged.summary}", eta=None if left is None else clock(left))

    # -- time limits per row, and the retry of a row that timed out ------------------------------

    def _baselines(self, unit: str) -> BaselineCache:
        return self.baselines.get(self.plan.gpu_of.get(unit)) or next(iter(self.baselines.values()))

    def _reference_now(self, case: Case, unit: str) -> float:
        """Compute ``case``'s reference while the backend works (its time scales the row's limit); the
        seconds spent (0.0 when cached, or when it cannot be computed here: the judge will say why)."""
        if self.options.timeout is not None:
            return 0.0
        try:
            return self._baselines(unit).ensure(case)
        except Exception:  # noqa: BLE001 - e.g. out of memory: the judge meets it again, on its own row
            return 0.0

    def _reference_s_of(self, case: Case, unit: str) -> float:
        return self._baselines(unit).case_seconds.get(case.case_id, 0.0)

    def _limit(self, case: Case, spec: str, unit: str, scale: float = 1.0) -> float:
        """The row's time limit: its base (:meth:`_base_limit`) ``x scale`` (a retry's), plus the compile
        grace of a first row of its configuration in a compiling backend's worker (:meth:`_grace`). The grace
        ends with ``--time-limit``: a build still running then is killed at its base limit past it, and the
        row is left to ``--resume`` (not recorded), so a limited run ends soon after its limit."""
        grace = self._grace(case, unit)
        if grace and self.deadline is not None:
            grace = min(grace, max(0.0, self.deadline - time.perf_counter()))
        return self._base_limit(case, spec, unit) * scale + grace

    def _grace(self, case: Case, unit: str) -> float:
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

    def _note_built(self, case: Case, unit: str, res: dict[str, Any]) -> None:
        """An answered row built its configuration in the worker; a timeout or crash restarts the worker, so
        what it built in memory is gone (its disk cache stays, but a build killed halfway is lost)."""
        with self.lock:
            if res.get("status") in ("timeout", "crash"):
                self.built.pop(unit, None)
            elif res.get("status") == "ok":
                self.built.setdefault(unit, set()).add(unit_key(self.plan.units[unit][0])(case))

    def _base_limit(self, case: Case, spec: str, unit: str) -> float:
        """``--timeout``, else ``floor + scale x`` the reference's seconds on the case ``x`` the backend's
        calls per row (1 + mask probe passes, the scaled probe's describing ones included, or the median ratio
        of its rows so far of seconds waited to the reference's seconds, the larger)."""
        o = self.options
        if o.timeout is not None:
            return o.timeout
        calls = 1 + (mask_passes_at_most(case, o.max_passes) if o.probes else 0) + (3 if o.grad else 0)  # a backward: ~3 forwards
        calls += (4 if "invariance" in o.checks else 0) + (5 if "graph" in o.checks else 0)  # sub-batches; eager, warm-ups, replays
        with self.lock:
            seen = sorted(self.ratios.get(spec, []))
        ratio = max(float(calls), seen[len(seen) // 2] if seen else 0.0)
        return o.timeout_floor + o.timeout_scale * ratio * self._reference_s_of(case, unit)

    def _retry_timeouts(self) -> None:
        """Each row that timed out, once more, alone (the lanes are done) with a longer limit; a second
        timeout is recorded, its detail saying how long the reference took on the case."""
        retries, self.retries = self.retries, []
        for case, unit, info, res, wait_s, ref_s, limit in retries:
            if self._should_stop():
                self.retries.append((case, unit, info, res, wait_s, ref_s, limit))
                continue  # not recorded: the run is partial, --resume runs the row again
            spec = self.plan.units[unit][0]
            longer = self._limit(case, spec, unit, 1.0 if self.options.timeout is not None else self.options.retry_scale)
            print(
                f"parity: {spec} gave no answer within {limit:.0f} s on {case.summary()}; retrying it alone with {longer:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            ex = self.executors[unit]
            t0 = time.perf_counter()
            failed = ex.submit(case)
            again = failed if failed is not None else ex.collect(timeout=longer)
            if again.get("status") == "timeout":
                ref = self._reference_seconds(case, unit)
                again = {
                    **again,
                    "detail": f"no answer within {limit:.3g} s, nor within {longer:.3g} s when retried alone; "
                    f"worker killed; the reference took {ref} on this case",
                }
            self._judge_and_emit(case, unit, info, again, wait_s + time.perf_counter() - t0, ref_s, longer, retried=True)

    def _reference_seconds(self, case: Case, unit: str) -> str:
        """How long the reference took on ``case``, in words (computed now if it was not)."""
        try:
            self._baselines(unit).ensure(case)
        except Exception as exc:  # noqa: BLE001
            return f"? s (it could not be computed: {type(exc).__name__})"
        return f"{self._reference_s_of(case, unit):.3g} s"

    # -- device memory: rows placed so that the lanes' estimates fit (parity.sweep.memgate) ----------

    def _make_gates(self) -> None:
        """One gate per GPU the lanes use, with a budget where a backend runs on CUDA; what a row can use on that
        card (:func:`parity.memory.card_bytes`), as its worker will judge it."""
        cuda = any(i.get("device") == "cuda" for i in self.unit_infos.values())
        visible = shard.visible_gpus()
        for g in {self.plan.gpu_of.get(u) for u in self.plan.units}:
            index = visible.index(g) if g is not None and g in visible else None
            reserved = self._cache(g).max_bytes if self._cache(g).device.startswith("cuda") else 0
            self.gates[g] = MemoryGate(device_budget(index, reserved) if cuda else None)
            self.cards[g] = card_bytes(index) if cuda else None

    def _cache(self, gpu: str | None) -> BaselineCache:
        return self.baselines.get(gpu) or next(iter(self.baselines.values()))

    def _gate(self, unit: str) -> MemoryGate:
        return self.gates.get(self.plan.gpu_of.get(unit)) or self.gates.setdefault(None, MemoryGate(None))

    def _estimate(self, case: Case, unit: str) -> MemoryEstimate:
        spec = self.plan.units[unit][0]
        if spec not in self.backend_objs:
            from .. import backends

            try:
                self.backend_objs[spec] = backends.get(spec)
            except Exception:  # noqa: BLE001 - a plugin only its worker can import: no hint
                self.backend_objs[spec] = None
        on_device = self._cache(self.plan.gpu_of.get(unit)).device.startswith("cuda")
        return estimate(case, self.options.probes, self.options.max_passes, harness_on_device=on_device, backend=self.backend_objs[spec])

    def _need(self, case: Case, unit: str, est: MemoryEstimate) -> int:
        """The bytes ``case`` holds on its gate (:mod:`.memgate`'s table): none for a row its worker refuses for
        its card (:func:`parity.memory.card_refusal`: nothing runs, so nothing drains); the worker's estimate on
        a CUDA backend; the harness's where the reference runs on the device and the case's is not cached yet
        (once per case and GPU, not once per backend). A plugin only its worker can import has no hints here:
        its row asks the estimate without them, and its worker (which has them) may still refuse it."""
        cuda = self.unit_infos[unit].get("device") == "cuda"
        if self._refused(est, unit):
            return 0
        harness = est.harness_bytes if est.harness_on_device and not self._baselines(unit).cached(case) else 0
        return (est.worker_bytes if cuda else 0) + harness

    def _refused(self, est: MemoryEstimate, unit: str) -> bool:
        """Whether ``unit``'s worker will refuse the row for its card (:func:`parity.memory.card_refusal`)."""
        cuda = self.unit_infos[unit].get("device") == "cuda"
        return cuda and card_refusal(est, self.cards.get(self.plan.gpu_of.get(unit))) is not None

    def _reserve(self, case: Case, unit: str, pending: list[Pending]) -> MemoryEstimate | None:
        """Hold ``case``'s need (:meth:`_need`) on its lane's gate before it is sent; where it does not fit now,
        judge this lane's pending row first (it frees what it holds) and wait. None: the run was stopped."""
        est, gate = self._estimate(case, unit), self._gate(unit)
        need = self._need(case, unit, est)
        if not gate.try_acquire(need):
            self._finish(pending)
            held = gate.acquire(need, self.stop)
            if held is None:
                return None
        with self.lock:
            self.held[(unit, case.case_id)] = (gate, need)
        return est

    def _release(self, unit: str, case: Case) -> None:
        with self.lock:
            gate, held = self.held.pop((unit, case.case_id), (None, 0))
        if gate is not None:
            gate.release(held)

    def _ran_alone(self, case: Case, unit: str) -> bool:
        """Whether ``case`` held its whole gate (an estimate over the budget runs alone): a retry alone would repeat it."""
        with self.lock:
            gate, held = self.held.get((unit, case.case_id), (None, 0))
        return gate is not None and gate.budget is not None and held >= gate.budget

    @staticmethod
    def _alone_oom(res: dict[str, Any]) -> dict[str, Any]:
        res["detail"] = f"{res.get('detail', '')} (ran alone: its estimate exceeds what the lanes may hold; not retried)"
        return res

    def _retry_alone(self, case: Case, unit: str, pending: list[Pending], res: dict[str, Any]) -> dict[str, Any]:
        """A worker's out-of-memory row, run once more alone on its GPU (nothing else holds memory there)."""
        self._finish(pending)
        self._release(unit, case)
        gate = self._gate(unit)
        held = gate.acquire(0, self.stop, alone=True)
        if held is None:
            return res
        with self.lock:
            self.held[(unit, case.case_id)] = (gate, held)
        ex = self.executors[unit]
        failed = ex.submit(case)
        again = failed if failed is not None else ex.collect()
        if again.get("oom"):
            again["detail"] = f"{again.get('detail', '')} (retried alone: out of memory again)"
        return again

    def _reference_s(self) -> float:
        return sum(b.seconds for b in self.baselines.values())

    def _timing_summary(self, partial: bool) -> dict[str, Any]:
        self._note_reference_stages()
        return {"partial": partial, **self.timing.summary(time.perf_counter() - self.t0, self._reference_s())}

    def _note_reference_stages(self) -> None:
        """The baseline caches' stage seconds and recomputations, into the timing."""
        stages: dict[str, float] = {}
        for b in self.baselines.values():
            for k, v in b.stage_seconds.items():
                stages[k] = stages.get(k, 0.0) + v
        self.timing.reference_stages = stages
        self.timing.reference_recomputed = sum(b.recomputed for b in self.baselines.values())

    def _stopped_by(self) -> str:
        """Why the run stopped before every row ran; "" when it did not."""
        if self.retries:
            why = (
                f" (--time-limit {self.options.time_limit:g} s reached: a build in flight then was cut)" if self.timed_out.is_set() else ""
            )
            return f"{len(self.retries)} row(s) that timed out were not retried before the run stopped{why}"
        if self.lost_context:
            return f"CUDA context lost in {self.lost_context} (--no-isolate)"
        if self.failed_fast.is_set():
            return "--fail-fast: stopped after the first failing row"
        if self.timed_out.is_set():
            return f"--time-limit {self.options.time_limit:g} s reached"
        return ""

    def _result(self, wall: float) -> SweepResult:
        stopped_by = self._stopped_by()
        partial = bool(stopped_by)
        self._note_reference_stages()
        summary = {"partial": partial, **self.timing.summary(wall, self._reference_s())}
        if self.out_dir:
            write_timing(self.out_dir, summary)
        if self.options.cost_file:  # what the next run plans its lanes by
            save_costs(self.options.cost_file, summary["per_backend"])
        precompile.remember(precompile.cache_root(), self.timing.kernel_keys)  # what the next pre-pass may skip
        ids = {c.case_id for c in self.cases}
        already = sum(1 for b, c in self.writer.done if b in self.specs and c in ids) if self.writer else 0
        return SweepResult(
            self.rows,
            self.infos,
            wall,
            self._reference_s(),
            self.out_dir,
            partial=partial,
            already=already,
            total=len(self.specs) * len(self.cases),
            split=split_line(summary),
            stopped_by=stopped_by,
        )


def _planned(specs: list[str], cases: list[Case]) -> list[tuple[str, str, float, bool]]:
    """The rows of a sweep for its time-left estimate: (backend, case id, cost, whether the backend
    takes the case, asked here when it can be; else assumed)."""
    from .. import backends
    from ..design import takes

    costs = {c.case_id: case_cost(c) for c in cases}
    out = []
    for spec in specs:
        try:
            be: Any = backends.get(spec)
        except Exception:  # noqa: BLE001 - e.g. a plugin importable only in its worker (--worker-path)
            be = None
        for c in cases:
            out.append((spec, c.case_id, costs[c.case_id], be is None or takes(be, c)))
    return out


def run_sweep(
    specs: Iterable[str],
    cases: list[Case],
    out_dir: Path | None = None,
    options: SweepOptions | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    **fields: Any,
) -> SweepResult:
    """Run every case on every backend with ``options`` (:class:`SweepOptions`); see
    :mod:`parity.sweep` for the verdicts. ``fields``: :class:`SweepOptions` fields given one by
    one (``run_sweep(specs, cases, jobs=2, isolate=False)``), over ``options``.

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
    return Sweep(specs, cases, options, out_dir, on_row).run()
