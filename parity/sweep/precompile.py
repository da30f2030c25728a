"""The compile pre-pass: before the lanes start, build each distinct kernel key of the run's compiling
backends once, many at a time, so that the lanes run warm from the compilers' disk caches.

Why: on the H100 of 2026-12-06c (lab/runs/h100-2026-12-06c-throughput) 75% of the workers' time was
first-use compilation, and a compile inside the run cost 5-10x what it costs alone
(../shared/compile-probe-2026-12-06): 14 lanes each compiled their own keys one after the other while
running rows, each lane with a compile pool of its own. Here each key is built by one small row of it
(the case of that key with the fewest score elements), in ``procs`` worker processes at once, each
with one compile thread; the lanes then find the kernels on disk (inductor's FX graph and Triton
caches, FA4's CuTe cache, JAX's persistent cache, FlashInfer's JIT folder, all under
``--compile-cache``) and only repeat what every new process repeats (Dynamo's tracing, a module load).

What a pre-pass row computes is thrown away: the lanes run every row, that one too, and judge it as
in a run without the pre-pass, so results never depend on it. A pre-pass row that fails, crashes or
times out costs nothing but its time: the lanes meet the same key again and report it on its row.

=====================  ===============================================  =========================
``--precompile``       when                                             builds
=====================  ===============================================  =========================
``off``                never                                            nothing
``auto`` (default)     workers isolated, a compile cache in use          every key of >= 2 rows
                       (``--compile-cache`` or ``$PARITY_COMPILE_CACHE``)
``on``                 workers isolated (a usage error without)         every key of >= 2 rows
=====================  ===============================================  =========================

A key of one row is left to that row (building it twice would cost more than it saves); so is a key the
cache folder already holds by its record (:data:`RECORD`: the keys earlier runs on this GPU model and torch
built there, written after each run), so a warm rerun or a ``--resume`` spends nothing on it. The record
only saves time: a key listed there whose files are gone is rebuilt by its row, as without a pre-pass. Keys whose
smallest case is estimated above :data:`MAX_ROW_BYTES` of device memory are left to the lanes (their
memory gate places such rows); ``timing.json`` (``precompile``) says per backend how many keys were
built, left out, failed, and the seconds it took.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from ..case import Case
from ..memory import estimate
from ..results import Outcome
from .lanes import backend_object, make_executor, unit_key
from .options import SweepOptions

#: The file in the compile cache folder listing, per backend, the kernel keys built there (and for what).
RECORD = "precompiled.json"
#: A pre-pass row estimated above this many device bytes is left to the lanes (many pre-pass rows run at once).
MAX_ROW_BYTES = 2 << 30
#: Environment of a pre-pass worker, over the lanes' own (:attr:`LanePlan.thread_env`: a kernel built for
#: another CPU thread count is another cache entry): one compile thread each, the CPUs shared by ``procs`` of them.
WORKER_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "MAX_JOBS": "1"}


@dataclasses.dataclass
class Halt:
    """What ends a pre-pass early: the sweep's ``stop`` event (a stop signal: :meth:`parity.sweep.Sweep.interrupt`
    halts the ``live`` executors too); ``infos``: each backend's info from its pre-pass workers (what a run
    interrupted in its pre-pass records, no lane's worker started)."""

    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    live: list[Any] = dataclasses.field(default_factory=list)
    infos: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PrecompilePlan:
    """Per backend: one case per kernel key to build (``tasks``), keys left to the lanes (``left``), and
    how many worker processes build them (``procs``)."""

    tasks: Mapping[str, list[Case]]
    left: Mapping[str, int]
    procs: Mapping[str, int]

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
    cost hint (at least one each that has keys), ``cpus`` (default: this machine's) in all."""
    tasks, left = {}, {}
    built = built or {}
    for backend, cases in cases_of.items():
        reps, n_left = representatives(backend, cases, options, built.get(backend, set()))
        if reps:
            tasks[backend] = reps
        if n_left:
            left[backend] = n_left
    total = max(1, cpus or os.cpu_count() or 1)
    weight = {s: len(r) * max(1.0, float(getattr(backend_object(s), "cost_hint", 1.0))) for s, r in tasks.items()}
    whole = sum(weight.values()) or 1.0
    procs = {s: max(1, min(len(tasks[s]), math.floor(total * w / whole))) for s, w in weight.items()}
    return PrecompilePlan(tasks, left, procs)


def _build(
    backend: str, chunk: list[Case], options: SweepOptions, log: Path | None, env: dict[str, str], stop: float | None, halt: Halt
) -> list[dict[str, Any]]:
    """One pre-pass worker: ``chunk``'s rows, one after the other; their status, seconds and what they built.
    ``halt``: a stop signal ends it (:class:`Halt`; its executor is live there while it runs)."""
    limit = (options.timeout or options.timeout_floor) + options.compile_grace
    ex = make_executor(backend, dataclasses.replace(options, timeout=limit), log, env, wait=False)
    halt.live.append(ex)
    out: list[dict[str, Any]] = []
    try:
        if halt.stop.is_set() or ex.info.get("unavailable"):  # interrupted; or its rows say why, nothing to build
            return out
        halt.infos.setdefault(backend, ex.info)
        for case in chunk:
            now = time.perf_counter()
            if (stop is not None and now >= stop) or halt.stop.is_set():
                break
            # a build still running at the run's time limit is killed soon after it (30 s on): its row builds it again
            wait = limit if stop is None else max(30.0, min(limit, stop - now + 30.0))
            res = ex.submit(case) or ex.collect(wait)
            timing = res.get("timing") or {}
            key = timing.get("kernel_key")
            row = {"status": res.get("status"), "s": time.perf_counter() - now, "built": timing.get("kernels_built"), "key": key}
            out.append(row if row["status"] == "ok" else {**row, "detail": str(res.get("detail") or "")[:300], "case": case.case_id})
    finally:
        ex.close()
    return out


def run_precompile(
    plan: PrecompilePlan,
    options: SweepOptions,
    log_dir: Path | None,
    deadline: float | None,
    lane_env: Mapping[str, str],
    halt: Halt | None = None,
) -> dict[str, Any]:
    """Build ``plan``'s keys, ``plan.procs[backend]`` workers per backend, all at once, each with the lanes' thread
    environment ``lane_env`` and :data:`WORKER_ENV`; ``timing.json``'s record of it. ``halt``: what ends
    the pre-pass early: :class:`Halt`)."""
    halt = halt or Halt()
    t0 = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in plan.tasks}
    root = cache_root()
    gpus = list(options.gpus)
    jobs: list[tuple[str, list[Case], Path | None, dict[str, str]]] = []
    for backend, reps in plan.tasks.items():
        n = plan.procs[backend]
        for i in range(n):
            env = {**lane_env, **WORKER_ENV}
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = gpus[len(jobs) % len(gpus)]
            log = log_dir / f"precompile-{backend.replace(':', '_').replace('/', '_')}-{i + 1}.log" if log_dir else None
            jobs.append((backend, reps[i::n], log, env))
    lock = threading.Lock()

    def work(backend: str, chunk: list[Case], log: Path | None, env: dict[str, str]) -> None:
        got = _build(backend, chunk, options, log, env, deadline, halt)
        with lock:
            results[backend].extend(got)

    threads = [threading.Thread(target=work, args=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    remember(root, built_keys(results))
    return _record(plan, results, time.perf_counter() - t0)


def cache_root() -> Path | None:
    """The run's compile cache folder (``--compile-cache`` sets ``$PARITY_COMPILE_CACHE``), None without one."""
    from ..compile_cache import resolve

    return resolve(None)


def built_keys(results: Mapping[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    """Per backend, the keys its pre-pass rows built (answered ``ok``)."""
    return {s: {str(r["key"]) for r in got if r.get("status") == "ok" and r.get("key")} for s, got in results.items()}


def _record(plan: PrecompilePlan, results: dict[str, list[dict[str, Any]]], wall: float) -> dict[str, Any]:
    per = {}
    for backend, reps in plan.tasks.items():
        got = results.get(backend, [])
        built = [r["built"] for r in got if r.get("built") is not None]
        per[backend] = {
            "keys": len(reps),
            "ran": len(got),
            "ok": sum(r["status"] == "ok" for r in got),
            "failed": sum(r["status"] not in ("ok", Outcome.UNSUPPORTED) for r in got),
            "left_to_lanes": plan.left.get(backend, 0),
            "procs": plan.procs[backend],
            "worker_s": round(sum(r["s"] for r in got), 3),
            "kernels_built": sum(built) if built else None,
            "failures": _failures(got),
        }
    for backend, n in plan.left.items():
        empty = {"keys": 0, "ran": 0, "ok": 0, "failed": 0, "procs": 0, "worker_s": 0.0, "kernels_built": None}
        per.setdefault(backend, {**empty, "left_to_lanes": n})
    return {"wall_s": round(wall, 3), "procs": sum(plan.procs.values()), "per_backend": per}


def _failures(got: list[dict[str, Any]], most: int = 5) -> list[str]:
    """What the first ``most`` failed pre-pass rows said (``CASE_ID status: detail``): the lanes' row of the case may
    never run (a partial run), and the pre-pass worker's log is not kept with the run folder."""
    bad = [r for r in got if r.get("status") not in ("ok", Outcome.UNSUPPORTED)]
    return [f"{r.get('case', '?')} {r['status']}: {r.get('detail', '')}" for r in bad[:most]]


def line(record: dict[str, Any]) -> str:
    """One line for the terminal: what the pre-pass built, in how long."""
    per = record["per_backend"]
    keys = sum(p["keys"] for p in per.values())
    failed = sum(p["failed"] for p in per.values())
    parts = ", ".join(f"{s} {p['ok']}/{p['keys']}" for s, p in per.items() if p["keys"])
    tail = f"; {failed} failed (their rows report it)" if failed else ""
    return f"compile pre-pass: {keys} kernel key(s) in {record['wall_s']:.0f} s on {record['procs']} worker(s) ({parts}){tail}"
