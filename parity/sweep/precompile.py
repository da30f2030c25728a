"""The compile pre-pass: while the lanes start, build each distinct kernel key of the run's compiling
backends once, many at a time, so that the lanes run warm from the compilers' disk caches.

Why: on the H100 of 2026-12-06c (lab/runs/h100-2026-12-06c-throughput) 75% of the workers' time was
first-use compilation, and a compile inside the run cost 5-10x what it costs alone
(../shared/compile-probe-2026-12-06): 14 lanes each compiled their own keys one after the other while
running rows, each lane with a compile pool of its own. Here each key is built by one small row of it
(the case of that key with the fewest score elements) in worker processes of its backend, which take its keys
from one queue; the lanes then find the kernels on disk (inductor's FX graph and Triton caches, FA4's CuTe cache,
JAX's persistent cache, FlashInfer's JIT folder, all under ``--compile-cache``) and only repeat what every new
process repeats (Dynamo's tracing, a module load).

What a pre-pass row computes is thrown away: the lanes run every row, that one too, and judge it as
in a run without the pre-pass, so results never depend on it. A pre-pass row that fails, crashes or
times out costs nothing but its time: the lanes meet the same key again and report it on its row; what it
said is kept with both ends (:func:`parity.results.clip`: the reason is often the tail).

=====================  ===============================================  =========================
``--precompile``       when                                             builds
=====================  ===============================================  =========================
``off``                never                                            nothing
``auto`` (default)     workers isolated, a compile cache in use          every key of >= 2 rows
                       (``--compile-cache`` or ``$PARITY_COMPILE_CACHE``)
``on``                 workers isolated (a usage error without)         every key of >= 2 rows
=====================  ===============================================  =========================

Time. Each lane starts as soon as every backend of it is done with its pre-pass, and so is the backend that builds its
``build_group``'s keys (a lane without a compiling backend at once), so no lane waits on the slowest backend's builds.
With ``--time-limit`` the pre-pass has :data:`SHARE` of it (a third): at that deadline every lane starts, no key
starts any more, and the keys not built are left to the lanes (``left_to_lanes``, not failures); a build under way
then goes on, beside the lanes, into the cache until the run's own limit; the run's end stops it. A lane does not send
a row whose key is being built then (:meth:`PrePass.being_built`): it sets the row aside, runs its other rows, and
sends it once that build ended (built or not), or after its last case, waiting for the build (at most the key limit,
within the run's deadline); so do the rows held back to run alone after every other row (their gate's other rows go
first), and a timeout's retry waits for it (at most the key limit). Sent at once, a row of it would build the key a
second time beside the pre-pass where nothing shares a build under way (vLLM's FA2, the CUDA driver's JIT: 14 of 19
keys late in h100-2026-12-07g-versions, each of their rows ~120 s; inductor and JAX, whose caches take either build),
or block its lane on the library's lock (FlashInfer, FA4). A set-aside row not sent by the run's end is not written
(``--resume`` runs it, as any row not started). No key waits longer than :data:`KEY_BOUND_S`, with or without
``--time-limit``.

CPUs. A backend's worker builds with :attr:`parity.backends.base.Backend.compile_threads` threads
(``MAX_JOBS``, ninja's jobs for FlashInfer's nvcc builds; ``TORCHINDUCTOR_COMPILE_THREADS``), and a worker
process starts only once its threads are free among the machine's CPUs (:class:`CpuSlots`), so the pre-pass's
workers x threads never exceed the CPU count; a lane that starts beside the pre-pass takes its share of the CPUs
out of the pre-pass's (workers not yet started then wait for more). The workers are dealt to the backends by keys
x cost hint.

A key of one row is left to that row (building it twice would cost more than it saves); so is a key the
cache folder already holds by its record (:data:`RECORD`: the keys earlier runs on this GPU model and torch
built there, written after each run), so a warm rerun or a ``--resume`` spends nothing on it. The record
only saves time: a key listed there whose files are gone is rebuilt by its row, as without a pre-pass. Keys whose
smallest case is estimated above :data:`MAX_ROW_BYTES` of device memory are left to the lanes (their
memory gate places such rows); ``timing.json`` (``precompile``) says per backend how many keys were
built (``late``: after the deadline), failed, left to the lanes, the workers and threads, the seconds it
took, and the deadline it had; ``lanes_set_aside``: per backend, the rows the lanes set aside while their key was
built (held-back rows and retries too), and ``lanes_set_aside_waited_s``: each lane's wait for those builds after its
last case (``held back``: the held-back rows', ``retries``: the retries').
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..case import Case
from ..memory import estimate
from ..results import Outcome, clip
from .lanes import COMPILE_VARS, backend_object, make_executor, unit_key
from .options import SweepOptions

#: The file in the compile cache folder listing, per backend, the kernel keys built there (and for what).
RECORD = "precompiled.json"
#: A pre-pass row estimated above this many device bytes is left to the lanes (many pre-pass rows run at once).
MAX_ROW_BYTES = 2 << 30
#: The share of ``--time-limit`` the pre-pass may take before every lane starts (d4 of 2026-12-07: a pre-pass
#: of 260 s in a run of 230 s left no time to any row); :data:`SHARE_WORDS` says it in the run's output.
SHARE = 1 / 3
SHARE_WORDS = "a third of --time-limit"
#: No pre-pass key waits longer than this (seconds), whatever ``--timeout`` and ``--compile-grace`` add up to: a
#: FlashInfer module built with its jobs (:data:`COMPILE_VARS`) takes minutes, not ten.
KEY_BOUND_S = 600.0


def worker_env(threads: int) -> dict[str, str]:
    """Environment of a pre-pass worker, over the lanes' own (:attr:`LanePlan.thread_env`: a kernel built for
    another CPU thread count is another cache entry): ``threads`` compile threads (:data:`COMPILE_VARS`)."""
    return {v: str(threads) for v in COMPILE_VARS}


@dataclasses.dataclass
class Halt:
    """What ends a pre-pass early: the sweep's ``stop`` event (a stop signal: :meth:`parity.sweep.Sweep.interrupt`
    halts the ``live`` executors too); ``infos``: each backend's info from its pre-pass workers (what a run
    interrupted in its pre-pass records where its lanes' workers could not say it)."""

    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    live: list[Any] = dataclasses.field(default_factory=list)
    infos: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


class CpuSlots:
    """The machine's CPUs, shared by the pre-pass's workers: a worker holds its threads' worth from before its
    process starts until it ends, so workers x threads at once never exceed ``cpus`` (a worker wider than all of
    them holds all). A lane that starts beside the pre-pass takes its threads out of them (:meth:`lend`). ``peak``:
    the most held at once."""

    def __init__(self, cpus: int):
        self.total = self.free = max(1, cpus)
        self.peak = 0
        self.cond = threading.Condition()

    def take(self, n: int, give_up: Callable[[], bool]) -> int:
        """Hold ``n`` CPUs (at most all) once they are free: how many it holds, for :meth:`give`; 0 (holding none)
        once ``give_up()`` is true before."""
        with self.cond:
            while self.free < min(n, self.total):
                if give_up():
                    return 0
                self.cond.wait(0.1)
            n = min(n, self.total)
            self.free -= n
            self.peak = max(self.peak, self.total - self.free)
            return n

    def give(self, n: int) -> None:
        with self.cond:
            self.free += n
            self.cond.notify_all()

    def lend(self, n: int) -> None:
        """``n`` CPUs no longer the pre-pass's (a lane's threads, started beside it); one always stays. Builds under
        way go on: those waiting start once enough of them ended."""
        with self.cond:
            n = max(0, min(n, self.total - 1))
            self.total -= n
            self.free -= n


@dataclasses.dataclass(frozen=True)
class PrecompilePlan:
    """Per backend: one case per kernel key to build (``tasks``), keys left to the lanes (``left``), how many
    worker processes build them (``procs``) with how many compile threads each (``threads``), ``cpus`` in all."""

    tasks: Mapping[str, list[Case]]
    left: Mapping[str, int]
    procs: Mapping[str, int]
    threads: Mapping[str, int] = dataclasses.field(default_factory=dict)
    cpus: int = 1

    @property
    def keys(self) -> int:
        return sum(len(v) for v in self.tasks.values())


def wanted(options: SweepOptions, cache_on: bool) -> bool:
    """Whether the pre-pass runs (the module docstring's table); ``cache_on``: a compile cache is in use."""
    if options.precompile == "off" or not options.isolate:
        return False
    return options.precompile == "on" or cache_on


def _elements(case: Case) -> int:
    return case.hq * sum(q * k for q, k in zip(case.q_lens, case.k_lens))


def key_text(key: tuple[Any, ...]) -> str:
    """A kernel key (:func:`parity.execute.kernel_key`) as ``timing.json`` and :data:`RECORD` write it."""
    return repr(key[1:])


def _fingerprint() -> dict[str, str]:
    """What a cache's kernels were built for, as far as this process can tell: torch and the GPU model."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"torch": torch.__version__, "gpu": gpu}


def recorded(root: Path | None) -> dict[str, set[str]]:
    """Per backend, the kernel keys :data:`RECORD` in ``root`` lists for this torch and GPU (empty: none)."""
    try:
        doc = json.loads((root / RECORD).read_text()) if root else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("for") != _fingerprint():
        return {}
    return {str(s): set(map(str, keys)) for s, keys in (doc.get("keys") or {}).items()}


def remember(root: Path | None, keys: Mapping[str, set[str]]) -> None:
    """Add ``keys`` (per backend) to :data:`RECORD` in ``root``; a folder that cannot be written is left as it is."""
    if root is None or not any(keys.values()):
        return
    have = recorded(root)
    for backend, ks in keys.items():
        have.setdefault(backend, set()).update(ks)
    doc = {"for": _fingerprint(), "keys": {s: sorted(ks) for s, ks in sorted(have.items())}}
    try:
        (root / RECORD).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError:
        pass


def representatives(
    backend_name: str, cases: list[Case], options: SweepOptions, built: AbstractSet[str] = frozenset()
) -> tuple[list[Case], int]:
    """``backend_name``'s cases to build, one per kernel key of two rows or more that is not ``built`` already (its
    smallest case that the backend takes), and how many such keys are left to the lanes for their size."""
    be = backend_object(backend_name)
    if be is None or not getattr(be, "first_use_compile", False):
        return [], 0
    from ..design import takes

    key = unit_key(backend_name)
    groups: dict[Any, list[Case]] = {}
    for c in cases:
        if takes(be, c):
            groups.setdefault(key(c), []).append(c)
    chosen, left = [], 0
    for k, members in groups.items():
        if len(members) < 2 or key_text(k) in built:
            continue
        small = min(members, key=lambda c: (_elements(c), c.case_id))
        if estimate(small, options.probes, options.max_passes, backend=be).device_bytes > MAX_ROW_BYTES:
            left += 1
        else:
            chosen.append(small)
    return chosen, left


def plan_precompile(
    cases_of: Mapping[str, list[Case]], options: SweepOptions, cpus: int | None = None, built: Mapping[str, set[str]] | None = None
) -> PrecompilePlan:
    """The pre-pass of a sweep whose backends have ``cases_of[backend]`` rows still to run: its keys per backend
    (less those ``built`` already, :func:`recorded`), and worker processes dealt to the backends by their keys x
    cost hint over their compile threads (at least one each that has keys), ``cpus`` (default: this machine's) in
    all. Where those add up to more (many backends, or wide ones), :class:`CpuSlots` starts a worker only once its
    threads are free: a backend's worker is never cut to make room (d7 of 2026-12-07: six FlashInfer backends of
    four threads on 16 CPUs would have left FA4's 32 keys one worker)."""
    tasks, left = {}, {}
    built = built or {}
    claimed: set[tuple[str, str]] = set()
    for backend, cases in cases_of.items():
        reps, n_left = representatives(backend, cases, options, built.get(backend, set()))
        reps = _unclaimed(backend, reps, claimed)
        if reps:
            tasks[backend] = reps
        if n_left:
            left[backend] = n_left
    total = max(1, cpus or os.cpu_count() or 1)
    threads = {s: max(1, min(total, int(getattr(backend_object(s), "compile_threads", 1) or 1))) for s in tasks}
    weight = {s: len(r) * max(1.0, float(getattr(backend_object(s), "cost_hint", 1.0))) for s, r in tasks.items()}
    whole = sum(weight.values()) or 1.0
    procs = {s: max(1, min(len(tasks[s]), math.floor(total * w / whole / threads[s]))) for s, w in weight.items()}
    return PrecompilePlan(tasks, left, procs, threads, total)


def build_id(backend: str, case: Case) -> tuple[str, str]:
    """What the pre-pass builds for ``case`` on ``backend``: its ``build_group`` (else the backend) and kernel key
    (:func:`key_text`), the same for every backend of a group (:func:`_unclaimed`)."""
    return _group(backend) or backend, key_text(unit_key(backend)(case))


def _group(backend: str) -> str:
    """``backend``'s ``build_group`` ("" without one)."""
    return str(getattr(backend_object(backend), "build_group", "") or "")


def _unclaimed(backend: str, reps: list[Case], claimed: set[tuple[str, str]]) -> list[Case]:
    """``reps`` less the keys another backend of ``backend``'s ``build_group`` builds already (FlashInfer's three
    split-KV decode variants build the same modules into one JIT cache: one worker builds each, the other lanes load it
    or wait on the library's own file lock); the keys kept are claimed for the group. No group: ``reps``."""
    if not _group(backend):
        return reps
    kept = [c for c in reps if build_id(backend, c) not in claimed]
    claimed.update(build_id(backend, c) for c in kept)
    return kept


@dataclasses.dataclass(frozen=True)
class PrePassOptions:
    """What a pre-pass runs with, built once by its caller (:meth:`parity.sweep.run.Sweep._precompile`, or a test)
    and passed down unchanged: its ``plan``, the sweep's options (``sweep``), where its workers' logs go (``log_dir``;
    None: nowhere), the run's ``deadline`` (``--time-limit`` after its start, a ``time.perf_counter()`` value; None:
    none) and the environment its workers start from (``lane_env``: the lanes' own, :attr:`LanePlan.thread_env`;
    copied, read-only)."""

    plan: PrecompilePlan
    sweep: SweepOptions
    log_dir: Path | None = None
    deadline: float | None = None
    lane_env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lane_env", MappingProxyType(dict(self.lane_env)))

    @property
    def budget(self) -> float | None:
        """The pre-pass's seconds: :data:`SHARE` of ``--time-limit`` (None: no deadline)."""
        limit = self.sweep.time_limit
        return None if self.deadline is None or limit is None else limit * SHARE

    @property
    def until(self) -> float | None:
        """When every lane starts (a ``time.perf_counter()`` value): the run's deadline less the lanes' share."""
        limit = self.sweep.time_limit
        return None if self.deadline is None or limit is None else self.deadline - limit * (1 - SHARE)

    @property
    def key_limit(self) -> float:
        """One key's seconds at most: the row limit (``--timeout``, else its floor) and the compile grace, within
        :data:`KEY_BOUND_S`."""
        return min(KEY_BOUND_S, (self.sweep.timeout or self.sweep.timeout_floor) + self.sweep.compile_grace)


class PrePass:
    """A pre-pass under way (:meth:`start`): per backend, ``plan.procs`` worker threads take its keys from one queue,
    each worker process started once its threads are free (:class:`CpuSlots`). :meth:`wait`: a lane's wait for its
    backends; :attr:`over`: every build done, or the deadline (:data:`SHARE` of ``--time-limit``) passed, or a stop
    signal; ``on_over`` is then called with the record. :meth:`finish`: the run's end (builds still running are
    stopped, their keys left to the lanes) and ``timing.json``'s record."""

    def __init__(self, setup: PrePassOptions, halt: Halt | None = None, on_over: Any = None):
        """``setup``: what it runs with; ``halt``: the sweep's (a stop signal ends it); ``on_over``: called with the
        record once it is over."""
        self.setup, self.plan, self.options = setup, setup.plan, setup.sweep
        self.halt, self.on_over, self.deadline = halt or Halt(), on_over, setup.deadline
        self.t0 = time.perf_counter()
        self.budget, self.until, self.key_limit = setup.budget, setup.until, setup.key_limit
        plan = setup.plan
        self.queues = {s: deque(reps) for s, reps in plan.tasks.items()}
        self.results: dict[str, list[dict[str, Any]]] = {s: [] for s in plan.tasks}
        self.running = dict(plan.procs)
        self.done = {s: threading.Event() for s in plan.tasks}
        self.unavailable: dict[str, str] = {}
        self.over = threading.Event()
        self.slots = CpuSlots(plan.cpus)
        self.lock = threading.Lock()
        self.closing = False
        self.wall: float | None = None
        self.building = 0  # keys being built now
        self.in_flight: dict[tuple[str, str], threading.Event] = {}  # (build, key_text) being built now: set when done
        self.threads: list[threading.Thread] = []

    def start(self) -> PrePass:
        gpus = list(self.options.gpus)
        for backend in self.plan.tasks:
            for i in range(self.plan.procs[backend]):
                env = {**self.setup.lane_env, **worker_env(self.plan.threads.get(backend, 1))}
                if gpus:
                    env["CUDA_VISIBLE_DEVICES"] = gpus[len(self.threads) % len(gpus)]
                safe = backend.replace(":", "_").replace("/", "_")
                log_dir = self.setup.log_dir
                log = log_dir / f"precompile-{safe}-{i + 1}.log" if log_dir else None
                self.threads.append(threading.Thread(target=self._worker, args=(backend, log, env), daemon=True))
        for t in self.threads:
            t.start()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def past_deadline(self) -> bool:
        return self.until is not None and time.perf_counter() >= self.until

    def _given_up(self) -> bool:
        return self.closing or self.halt.stop.is_set() or self.past_deadline()

    def _watch(self) -> None:
        while not all(e.is_set() for e in self.done.values()) and not self.halt.stop.is_set() and not self.past_deadline():
            time.sleep(0.05)
        self.wall = time.perf_counter() - self.t0
        self.over.set()
        if self.on_over is not None:
            self.on_over(self.record())

    def wait(self, backends: AbstractSet[str], stop: threading.Event) -> None:
        """Until each of ``backends`` is done with its pre-pass, and so is every backend of their ``build_group``s (none
        of them in it: at once), or it is over, or ``stop``. A group's keys are built by the backend that claimed them
        first (:func:`_unclaimed`): its other backends have none queued of their own, and a lane of theirs sent at once
        would build a queued key itself beside the pre-pass's worker, or block on the library's lock behind it."""
        groups = {g for b in backends if (g := _group(b))}
        events = [e for b, e in self.done.items() if b in backends or (groups and _group(b) in groups)]
        while not all(e.is_set() for e in events) and not self.over.is_set() and not stop.is_set():
            self.over.wait(0.05)

    def lane_started(self, threads: int) -> None:
        """A lane starts while the pre-pass still builds: its ``threads`` leave the pre-pass's CPUs (:meth:`CpuSlots.lend`)."""
        if not self.over.is_set():
            self.slots.lend(threads)

    def _worker(self, backend: str, log: Path | None, env: dict[str, str]) -> None:
        try:
            held = self.slots.take(self.plan.threads.get(backend, 1), self._given_up) if self.queues[backend] else 0
            if held:
                try:
                    self._builds(backend, log, env)
                finally:
                    self.slots.give(held)
        finally:
            with self.lock:
                self.running[backend] -= 1
                if not self.running[backend]:
                    self.done[backend].set()

    def _builds(self, backend: str, log: Path | None, env: dict[str, str]) -> None:
        """One worker process of ``backend``: its queue's keys, one after the other, until it is empty or given up."""
        with self.lock:  # started, or seen closing, before :meth:`finish` halts the live executors
            if self._given_up() or not self.queues[backend]:
                return
            ex = make_executor(backend, dataclasses.replace(self.options, timeout=self.key_limit), log, env, wait=False)
            self.halt.live.append(ex)
        try:
            if ex.info.get("unavailable"):  # its rows say why: nothing to build
                with self.lock:
                    self.unavailable.setdefault(backend, str(ex.info["unavailable"]))
                    self.queues[backend].clear()
                return
            self.halt.infos.setdefault(backend, ex.info)
            while (case := self._next(backend)) is not None:
                try:
                    row = self._build(ex, case)
                finally:
                    with self.lock:
                        self.building -= 1
                        self.in_flight.pop(build_id(backend, case)).set()  # a lane's row of it goes now
                with self.lock:
                    self.results[backend].append(row)
        finally:
            ex.close()

    def _next(self, backend: str) -> Case | None:
        with self.lock:
            if self._given_up() or not self.queues[backend]:
                return None
            self.building += 1
            case = self.queues[backend].popleft()
            self.in_flight[build_id(backend, case)] = threading.Event()
            return case

    def being_built(self, backend: str, case: Case) -> threading.Event | None:
        """Whether ``case``'s kernel key on ``backend`` is being built by the pre-pass now (by ``backend`` or another of
        its ``build_group``): the event set once that build ended (built, failed or cut), else None (never started, or
        done). A lane sets such a row aside until then (:meth:`parity.sweep.run.Sweep._lane`): sent now, it would build
        the key a second time beside the pre-pass, where no library lock or cache shares a build under way (vLLM's FA2:
        the CUDA driver's JIT of its module)."""
        with self.lock:
            return self.in_flight.get(build_id(backend, case)) if self.in_flight else None

    def _build(self, ex: Any, case: Case) -> dict[str, Any]:
        """One key built: its status, seconds and what it built; one cut short by the run (its end, a stop signal,
        its limit) is ``cut``: left to the lanes."""
        now = time.perf_counter()
        wait = self.key_limit if self.deadline is None else max(1.0, min(self.key_limit, self.deadline - now))
        res = ex.submit(case) or ex.collect(wait)
        timing = res.get("timing") or {}
        row = {"status": res.get("status"), "s": time.perf_counter() - now, "built": timing.get("kernels_built")}
        row.update(key=timing.get("kernel_key"), late=self.past_deadline())
        if row["status"] == "ok":
            return row
        cut = self.closing or self.halt.stop.is_set() or (row["status"] == Outcome.TIMEOUT and wait < self.key_limit)
        return {**row, "cut": cut, "detail": clip(str(res.get("detail") or "")), "case": case.case_id}

    def finish(self) -> dict[str, Any]:
        """The run's end: builds still running are stopped (their keys left to the lanes), the keys built recorded
        (:data:`RECORD`); ``timing.json``'s record."""
        with self.lock:
            self.closing = True
            for ex in self.halt.live:
                getattr(ex, "halt", lambda: None)()
        end = time.monotonic() + 30
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        self.over.wait(1.0)
        remember(cache_root(), built_keys(self.results))
        return self.record()

    def record(self) -> dict[str, Any]:
        """``timing.json``'s ``precompile`` as it stands."""
        with self.lock:
            results = {s: list(r) for s, r in self.results.items()}
            queued = {s: len(q) for s, q in self.queues.items()}
            building = self.building
        wall = self.wall if self.wall is not None else time.perf_counter() - self.t0
        rec = _record(self.plan, results, queued, wall)
        per = rec["per_backend"]
        for backend, why in self.unavailable.items():
            per[backend]["unavailable"] = why
        rec.update(cpus=self.plan.cpus, cpus_peak=self.slots.peak, key_limit_s=round(self.key_limit, 3))
        rec.update(budget_s=None if self.budget is None else round(self.budget, 3), budget=SHARE_WORDS if self.budget else None)
        rec["deadline_hit"] = self.until is not None and self.t0 + wall >= self.until - 0.01
        rec["left_to_lanes"] = sum(p["left_to_lanes"] for p in per.values())
        rec["building"] = building
        return rec


def run_precompile(setup: PrePassOptions, halt: Halt | None = None) -> dict[str, Any]:
    """The whole pre-pass at once, no lane beside it: :class:`PrePass` started, waited until it is over (every build
    done, or its deadline), finished (builds still running stopped); ``timing.json``'s record of it."""
    pre = PrePass(setup, halt).start()
    while not pre.over.wait(0.2):
        pass
    return pre.finish()


def cache_root() -> Path | None:
    """The run's compile cache folder (``--compile-cache`` sets ``$PARITY_COMPILE_CACHE``), None without one."""
    from ..compile_cache import resolve

    return resolve(None)


def built_keys(results: Mapping[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    """Per backend, the keys its pre-pass rows built (answered ``ok``)."""
    return {s: {str(r["key"]) for r in got if r.get("status") == "ok" and r.get("key")} for s, got in results.items()}


def _record(plan: PrecompilePlan, results: dict[str, list[dict[str, Any]]], queued: Mapping[str, int], wall: float) -> dict[str, Any]:
    """Per backend: its keys, built (``late``: after the deadline), failed, left to the lanes (too large, not
    started, or cut short by the run), its workers and threads, seconds, kernels and what its failures said."""
    per = {}
    for backend, reps in plan.tasks.items():
        got = results.get(backend, [])
        built = [r["built"] for r in got if r.get("built") is not None]
        per[backend] = {
            "keys": len(reps),
            "ran": len(got),
            "ok": sum(r["status"] == "ok" for r in got),
            "late": sum(r["status"] == "ok" and bool(r.get("late")) for r in got),
            "failed": len(_failed(got)),
            "left_to_lanes": plan.left.get(backend, 0) + queued.get(backend, 0) + sum(bool(r.get("cut")) for r in got),
            "procs": plan.procs[backend],
            "threads": plan.threads.get(backend, 1),
            "worker_s": round(sum(r["s"] for r in got), 3),
            "kernels_built": sum(built) if built else None,
            "failures": [f"{r.get('case', '?')} {r['status']}: {r.get('detail', '')}" for r in _failed(got)[:5]],
        }
    for backend, n in plan.left.items():
        empty = {"keys": 0, "ran": 0, "ok": 0, "late": 0, "failed": 0, "procs": 0, "threads": 0, "worker_s": 0.0, "kernels_built": None}
        per.setdefault(backend, {**empty, "left_to_lanes": n, "failures": []})
    return {"wall_s": round(wall, 3), "procs": sum(plan.procs.values()), "per_backend": per}


def _failed(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pre-pass rows that failed: neither built, nor refused (``unsupported``), nor cut short by the run (their
    keys are the lanes'). ``failures`` keeps what the first five said (``CASE_ID status: detail``): the lanes' row
    of the case may never run (a partial run), and the pre-pass worker's log is not kept with the run folder."""
    return [r for r in got if r.get("status") not in ("ok", Outcome.UNSUPPORTED) and not r.get("cut")]


def start_line(plan: PrecompilePlan, budget: float | None, key_limit: float) -> str:
    """One line for the terminal as the pre-pass starts: its keys, workers, CPUs and time."""
    threads = sorted({plan.threads.get(s, 1) for s in plan.tasks})
    within = f"at most {budget:.0f} s ({SHARE_WORDS})" if budget is not None else "no deadline"
    return (
        f"compile pre-pass: {plan.keys} kernel key(s) of {len(plan.tasks)} backend(s), {sum(plan.procs.values())} worker(s) "
        f"of {'/'.join(map(str, threads))} compile thread(s) within {plan.cpus} CPUs; {within}, each key at most "
        f"{key_limit:.0f} s; a lane starts once its backends' keys are built"
    )


def line(record: dict[str, Any]) -> str:
    """One line for the terminal: what the pre-pass built, in how long, and what it left to the lanes."""
    per = record["per_backend"]
    keys = sum(p["keys"] for p in per.values())
    failed = sum(p["failed"] for p in per.values())
    parts = ", ".join(f"{s} {p['ok']}/{p['keys']}" for s, p in per.items() if p["keys"])
    tail = f"; {failed} failed (their rows report it)" if failed else ""
    if record.get("deadline_hit"):
        going = f", {record['building']} still building beside them" if record.get("building") else ""
        tail += f"; its deadline ({SHARE_WORDS}: {record['budget_s']:.0f} s) left {record['left_to_lanes']} key(s) to the lanes{going}"
    return f"compile pre-pass: {keys} kernel key(s) in {record['wall_s']:.0f} s on {record['procs']} worker(s) ({parts}){tail}"
