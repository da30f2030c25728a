"""Lanes: how a sweep's backends are spread over workers that run at once (``--jobs``), over the
parts of a split backend (``--split``) and over GPUs (``--gpus``). Planned before any worker
starts, from the backends' cost hints alone, because a worker reads ``CUDA_VISIBLE_DEVICES`` when
it starts."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .. import shard
from ..backends import worker_path
from ..case import Case
from ..execute import InlineExecutor, ProcessExecutor, kernel_key
from ..shard import config_key
from .options import SweepOptions

__all__ = [
    "COMPILE_VARS",
    "THREAD_VARS",
    "LanePlan",
    "auto_splits",
    "backend_object",
    "check_splits",
    "chosen_splits",
    "config_key",
    "lane_costs",
    "lane_thread_env",
    "make_executor",
    "measured_costs",
    "plan",
    "plan_lanes",
    "run_lanes",
    "save_costs",
    "split_cases",
    "unit_key",
]


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Compiler worker pools, sized like the threads: inductor's Triton compile pool (``min(32, CPUs)`` processes
#: per worker by default: 14 lanes on 16 CPUs started 224 on the H100 of 2026-12-06c, and each compile took
#: 5-10x what it takes alone), and ninja's jobs for FlashInfer's nvcc builds and torch extensions.
COMPILE_VARS = ("TORCHINDUCTOR_COMPILE_THREADS", "MAX_JOBS")


def lane_thread_env(jobs: int, n_specs: int, cpus: int | None = None) -> dict[str, str]:
    """CPU threads per worker when ``jobs`` lanes run at once: the machine's CPUs shared
    between the lanes (each torch process would otherwise start one thread per CPU, and
    lanes decoding probes on the CPU at the same time then slow each other several-fold),
    and the compilers' worker pools (:data:`COMPILE_VARS`) likewise. Empty for one lane; a
    variable the user set themselves is left to them (with any of :data:`THREAD_VARS` set,
    those three are all left)."""
    lanes = max(1, min(jobs, n_specs))
    if lanes <= 1:
        return {}
    n = str(max(1, (cpus or os.cpu_count() or 1) // lanes))
    names = [v for v in COMPILE_VARS if v not in os.environ]
    if not any(v in os.environ for v in THREAD_VARS):
        names = [*THREAD_VARS, *names]
    return {v: n for v in names}


_BACKENDS: dict[str, Any] = {}


def backend_object(backend: str) -> Any:
    """``backend``'s backend object in this process (None for a plugin only its worker can import); made once."""
    if backend not in _BACKENDS:
        from .. import backends

        try:
            _BACKENDS[backend] = backends.get(backend)
        except Exception:  # noqa: BLE001 - a plugin importable only with its --worker-path
            _BACKENDS[backend] = None
    return _BACKENDS[backend]


def unit_key(backend: str) -> Callable[[Case], tuple[Any, ...]]:
    """What ``backend`` builds a kernel for (:func:`parity.execute.kernel_key`): cases of one key run on one
    kernel, so parts and the compile grace keep them together; the configuration where the backend is unknown here."""
    be = backend_object(backend)
    return (lambda c: kernel_key(be, c)) if be is not None else config_key


def measured_costs(path: str | os.PathLike[str] | None) -> dict[str, float]:
    """The seconds per row each backend took in earlier runs (``{backend: seconds}``), from the cost
    file at ``path`` (:func:`save_costs`); empty where there is none or it cannot be read."""
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
        return {str(k): float(v) for k, v in (doc.get("seconds_per_row") or {}).items() if float(v) > 0}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_costs(path: str | os.PathLike[str], per_backend: Mapping[str, Mapping[str, float]]) -> None:
    """Update the cost file at ``path`` with each backend's seconds per row of this run (``per_backend``:
    timing.json's, its ``exec_s + judge_s`` over its ``cases``); backends this run did not time are kept."""
    costs = measured_costs(path)
    for backend, t in per_backend.items():
        if t.get("cases"):
            costs[backend] = round((float(t.get("exec_s", 0.0)) + float(t.get("judge_s", 0.0))) / float(t["cases"]), 6)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"seconds_per_row": dict(sorted(costs.items()))}, indent=1) + "\n")
    except OSError:
        pass  # a cache that cannot be written costs the next run its measured plan, nothing else


def lane_costs(hints: Mapping[str, float], measured: Mapping[str, float]) -> dict[str, float]:
    """Each backend's cost for planning lanes: its measured seconds per row where an earlier run timed it,
    else its cost hint in seconds (scaled by the median ratio of measured seconds to hint over the
    backends that have both; the hints as they are when none has)."""
    both = [measured[s] / hints[s] for s in hints if s in measured and hints[s] > 0]
    scale = statistics.median(both) if both else 1.0
    if not measured.keys() & hints.keys():
        return dict(hints)
    return {s: measured.get(s, h * scale) for s, h in hints.items()}


def plan_lanes(backend_names: list[str], jobs: int, costs: dict[str, float], group: dict[str, str] | None = None) -> list[list[str]]:
    """Split backends over ``jobs`` lanes, heaviest first onto the least loaded lane (LPT).

    ``group``: the parts of one split backend (``--split``) share a group and go to different
    lanes while there are lanes without one of them (they exist to run at once).
    """
    group = group or {}
    jobs = max(1, min(jobs, len(backend_names)))
    lanes: list[list[str]] = [[] for _ in range(jobs)]
    load = [0.0] * jobs
    for backend in sorted(backend_names, key=lambda s: -costs.get(s, 1.0)):
        g = group.get(backend, backend)
        free = [i for i in range(jobs) if all(group.get(o, o) != g for o in lanes[i])] or list(range(jobs))
        i = min(free, key=lambda j: (load[j], j))
        lanes[i].append(backend)
        load[i] += costs.get(backend, 1.0)
    order = {s: n for n, s in enumerate(backend_names)}
    return [sorted(lane, key=order.__getitem__) for lane in lanes if lane]


def check_splits(splits: dict[str, int] | None, backend_names: list[str], jobs: int, isolate: bool) -> dict[str, int]:
    """The backends really split (K > 1) of ``splits`` (``--split``); ValueError naming what cannot be."""
    for s, k in (splits or {}).items():
        if k < 1:
            raise ValueError(f"--split {s}={k}: K must be >= 1")
        if s not in backend_names:
            raise ValueError(f"--split {s}={k}: {s!r} is not among the backends of this run ({', '.join(backend_names)})")
    out = {s: k for s, k in (splits or {}).items() if k > 1}
    if out and not isolate:
        raise ValueError("--split runs a backend in several worker processes; it cannot be used with --no-isolate")
    if out and jobs < max(out.values()):
        k = max(out.values())
        raise ValueError(f"--split into {k} parts needs --jobs {k} or more (at least {k} lanes: each part runs in its own lane)")
    return out


def auto_splits(loads: Mapping[str, float], configs: Mapping[str, int], jobs: int) -> dict[str, int]:
    """``--split auto``: the backends worth splitting, each with its number of parts K >= 2 (a backend
    left out is not split).

    ``loads``: each backend's expected lane time (its cases x its cost per row, :func:`lane_costs`);
    ``configs``: its distinct configurations (:func:`config_key`) among the cases. M = sum(loads) / jobs
    is a lane's load were the work spread evenly; a backend whose load exceeds M gets K = ceil(load / M)
    parts, at most its configurations (:func:`split_cases` keeps a configuration in one part) and at
    most ``jobs`` (each part needs a lane of its own; load / M never exceeds jobs, so a guard only):

    ===============  ===========  ====  ============  ==========================================
    loads            configs      jobs  result        why
    ===============  ===========  ====  ============  ==========================================
    a=10 b=1 c=1     5 each       2     {a: 2}        M = 6, ceil(10 / 6) = 2
    a=10 b=1 c=1     5 each       4     {a: 4}        M = 3, ceil(10 / 3) = 4
    a=10 b=1 c=1     5 each       8     {a: 5}        M = 1.5, ceil(10 / 1.5) = 7 > 5 configurations
    a=10 b=1 c=1     a: 1         4     {}            one configuration: one part
    a=6 b=5 c=1      5 each       3     {a: 2, b: 2}  M = 4: both above it
    a=2 b=1 c=1      5 each       2     {}            M = 2: a load equal to M is not above it
    anything         any          1     {}            one lane
    ===============  ===========  ====  ============  ==========================================

    Worker processes and lanes are the caller's to check: :func:`plan` asks only with isolation on
    and more than one lane (``--no-isolate`` or ``--jobs 1``: nothing is split).
    """
    total = sum(loads.values())
    if jobs <= 1 or total <= 0:
        return {}
    mean = total / jobs
    out: dict[str, int] = {}
    for backend, load in loads.items():
        k = min(jobs, configs.get(backend, 1), math.ceil(load / mean - 1e-9))  # 1e-9: a load equal to M is not split
        if k > 1:
            out[backend] = k
    return out


def split_cases(cases: list[Case], parts: int, key: Callable[[Case], tuple[Any, ...]] = config_key) -> dict[str, int]:
    """Case id -> part (0 .. parts-1) for a backend split over ``parts`` workers (``--split``).

    Every case of one ``key`` (the backend's kernel key, :func:`unit_key`; by default the configuration)
    goes to the same part, so no two workers compile the same kernel; keys are dealt out largest first
    onto the part with the fewest cases.
    """
    groups: dict[tuple[Any, ...], list[Case]] = {}
    for c in cases:
        groups.setdefault(key(c), []).append(c)
    load = [0] * parts
    out: dict[str, int] = {}
    for members in sorted(groups.values(), key=len, reverse=True):  # stable: ties keep first-seen order
        i = load.index(min(load))
        load[i] += len(members)
        for c in members:
            out[c.case_id] = i
    return out


def make_executor(
    backend: str, options: SweepOptions, log_path: Path | None = None, env: Mapping[str, str] | None = None, wait: bool = True
) -> InlineExecutor | ProcessExecutor:
    """``backend``'s executor as ``options`` say: a worker process (``isolate``; its worker path: its own, else its
    base backend's for a variant, :func:`parity.backends.worker_path`), else in this process."""
    if not options.isolate:
        return InlineExecutor(backend, options.probes, options.max_passes, options.repeats, options.grad, options.checks)
    return ProcessExecutor(
        backend,
        probes=options.probes,
        max_passes=options.max_passes,
        repeats=options.repeats,
        timeout=options.timeout or options.timeout_floor,
        log_path=log_path,
        extra_path=worker_path(options.worker_paths, backend),
        env=dict(env or {}),
        wait=wait,
        grad=options.grad,
        checks=options.checks,
    )


@dataclasses.dataclass(frozen=True)
class LanePlan:
    """What runs where. A unit is a backend, or one part of a split backend (``backend#k``)."""

    units: dict[str, tuple[str, int | None]]  # unit -> (backend, part or None)
    part_of: dict[str, dict[str, int]]  # split backend -> case id -> its part
    lanes: list[list[str]]  # units, one list per lane
    gpu_of: dict[str, str]  # unit -> GPU id (empty without --gpus)
    splits: dict[str, int]
    thread_env: dict[str, str]  # CPU threads per worker (lanes share the CPUs)
    note: str = ""  # GPUs left idle, said once
    auto: dict[str, int] | None = None  # --split auto: the parts it chose per backend (None: not asked)
    costs: dict[str, float] = dataclasses.field(default_factory=dict)  # unit -> the lane cost it was planned by

    def rebalanced(self, unavailable: Collection[str]) -> LanePlan:
        """The same units over as many lanes, planned again once the workers said which are ``unavailable``: their
        rows cost nothing (each is written at once), so a lane of them alone would end at once while the others
        queue (h100-2026-12-07c-models-gate: nothing staged, 9 of 14 lanes idle after 2 s). Units keep their
        workers; with units on several GPUs the lanes stay as planned (each lane's GPU balance is :func:`plan`'s).

        ===========================================  =====  ==========================================
        lanes as planned (unit: cost), unavailable   lanes  lanes after
        ===========================================  =====  ==========================================
        [a: 30] [b: 1, c: 1, d: 8], a and d          2      [a, b, d] [c]: b and c run at once
        any, none unavailable                        any    as planned
        units on several GPUs                        any    as planned
        ===========================================  =====  ==========================================
        """
        idle = set(unavailable) & set(self.units)
        if len(self.lanes) <= 1 or not idle or len(set(self.gpu_of.values())) > 1:
            return self
        costs = {u: 0.0 if u in idle else self.costs.get(u, 1.0) for u in self.units}
        lanes = plan_lanes(list(self.units), len(self.lanes), costs, {u: s for u, (s, _) in self.units.items()})
        return dataclasses.replace(self, lanes=lanes, costs=costs)

    def runs(self, unit: str, case: Case) -> bool:
        """Does ``unit`` run ``case``? (A part of a split backend runs its own configurations only.)"""
        backend, part = self.units[unit]
        return part is None or self.part_of[backend][case.case_id] == part

    def auto_line(self) -> str:
        """What ``--split auto`` chose, in one line ("" where it did not run: not asked, one lane, no isolation)."""
        if self.auto is None:
            return ""
        chosen = ", ".join(f"{s} into {k} parts" for s, k in self.auto.items())
        return f"--split auto: {chosen or 'none split (no backend left to it costs more than an even share of the lanes)'}"

    def worker_env(self, unit: str) -> dict[str, str]:
        env = dict(self.thread_env)
        if unit in self.gpu_of:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_of[unit]
        return env


def plan(backend_names: Sequence[str], cases: list[Case], options: SweepOptions) -> LanePlan:
    """The sweep's units, lanes and their GPUs, before any worker starts: lanes from the backends'
    cost hints (:func:`parity.shard.cost_hints`), or their seconds per row measured by earlier runs
    (``options.cost_file``, :func:`lane_costs`), over their parts (:func:`chosen_splits`), placed on
    ``options.gpus`` by :func:`parity.shard.unit_gpus`."""
    # one lane: nothing to balance
    hints = lane_costs(shard.cost_hints(backend_names), measured_costs(options.cost_file)) if options.jobs > 1 else {}
    splits, auto = chosen_splits(backend_names, cases, options, hints)
    units: dict[str, tuple[str, int | None]] = {}
    for s in backend_names:
        parts = splits.get(s)
        units.update({f"{s}#{i + 1}": (s, i) for i in range(parts)} if parts else {s: (s, None)})
    costs = {u: hints.get(s, 1.0) / splits.get(s, 1) for u, (s, _) in units.items()}
    if options.jobs <= 1:
        lanes = [list(units)]
    else:
        lanes = plan_lanes(list(units), options.jobs, costs, {u: s for u, (s, _) in units.items()})
    gpus = list(options.gpus[: len(lanes)])
    note = ""
    if len(options.gpus) > len(lanes):
        idle = ", ".join(options.gpus[len(lanes) :])
        note = f"{len(lanes)} lane(s) for {len(options.gpus)} GPUs: GPU {idle} left idle (--jobs {len(options.gpus)} uses them all)"
    gpu_of = {u: env["CUDA_VISIBLE_DEVICES"] for u, env in shard.unit_gpus(lanes, costs, gpus).items()} if gpus else {}
    part_of = {s: split_cases(cases, k, unit_key(s)) for s, k in splits.items()}
    return LanePlan(units, part_of, lanes, gpu_of, splits, lane_thread_env(options.jobs, len(units)), note, auto, costs)


def chosen_splits(
    backend_names: Sequence[str], cases: list[Case], options: SweepOptions, costs: Mapping[str, float]
) -> tuple[dict[str, int], dict[str, int] | None]:
    """The backends split (K > 1) and those :func:`auto_splits` chose (``options.auto_split``; None where
    not asked, or where parts would get no worker processes or lanes: ``isolate`` off, ``jobs`` 1).
    ``--split B=K`` wins for B; auto loads each backend with its cases x ``costs`` (its cost per row)."""
    splits = check_splits(dict(options.splits), list(backend_names), options.jobs, options.isolate)
    if not (options.auto_split and options.isolate and options.jobs > 1):
        return splits, None
    loads = {s: len(cases) * costs.get(s, 1.0) for s in backend_names}
    configs = {s: len({unit_key(s)(c) for c in cases}) for s in backend_names}
    auto = {s: k for s, k in auto_splits(loads, configs, options.jobs).items() if s not in options.splits}
    return {**splits, **auto}, auto


_Work = TypeVar("_Work")


def run_lanes(lanes: Sequence[_Work], lane: Callable[[_Work], None], stop: threading.Event, on_interrupt: Callable[[], None]) -> None:
    """Run ``lane(units)`` for every lane (its units; or any one thread's work), one thread each (in this thread for one lane). The first
    error of a lane stops the others and is raised here; Ctrl-C calls ``on_interrupt`` (close the
    workers, so lanes waiting on one return) and is raised."""
    if len(lanes) == 1:
        lane(lanes[0])
        return
    errors: list[BaseException] = []

    def guarded(units: _Work) -> None:
        try:
            lane(units)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(units,), daemon=True) for units in lanes]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short joins: Ctrl-C reaches this thread
    except BaseException:
        stop.set()
        on_interrupt()
        raise
    if errors:
        raise errors[0]
