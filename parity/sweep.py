"""The parity sweep: cases x backends -> one verdict row each, written as it is produced.

Verdicts:

===============  =============================================================
``pass``         ran; within the error budget; exact mask and GQA probes agree
``fail``         ran; at least one reason in ``reasons`` (see :mod:`parity.verdict`)
``unsupported``  the backend declined the case (``detail`` says why)
``unavailable``  the backend cannot run here at all (``detail`` says why)
``error``        the backend raised, or broke the interface
``crash``        the worker process died (signal, abort, out of memory)
``timeout``      no answer within the per-case timeout
``expected``     failed as a known divergence describes (:mod:`parity.expect`): counted
                 apart, never a pass and never a failure; ``raw_verdict`` keeps the verdict
                 above, ``expected_id`` the entry
``unexpected-pass``  passed, but a strict known divergence covers it: a failure (the entry
                 is stale: fixed upstream?), ``expected_id`` names it
===============  =============================================================

Only ``pass`` is a pass; :data:`FAIL_VERDICTS` make a run exit 1. Rows are appended to ``results.csv`` and flushed one by one,
so an interrupted run keeps every finished row, and ``resume=True`` skips them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from .case import Case, make_inputs
from .errors import UserError
from .expect import Expectations
from .maskcheck import DEFAULT_MAX_PASSES
from .reference import attention_reference
from .results import COLUMNS, FAIL_VERDICTS, RAW_FAIL_VERDICTS, VERDICTS  # noqa: F401 - also re-exported
from .verdict import BUDGETS, Baseline, Budget, compare, make_baseline


def case_columns(case: Case) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "family": case.family,
        "dtype": case.dtype,
        "layout": case.layout,
        "hq": case.hq,
        "hkv": case.hkv,
        "head_dim": case.head_dim,
        "batch": case.batch,
        "q_lens": " ".join(map(str, case.q_lens)),
        "k_lens": " ".join(map(str, case.k_lens)),
        "window_left": "" if case.window.left is None else case.window.left,
        "window_right": "" if case.window.right is None else case.window.right,
        "align": case.window.align,
        "softcap": "" if case.softcap is None else case.softcap,
        "scale": "" if case.scale is None else case.scale,
        "page_size": "" if case.page_size is None else case.page_size,
        "seed": case.seed,
        "case_json": case.to_json(),
    }


def unavailable_row(case: Case, spec: str, info: dict[str, Any]) -> dict[str, Any]:
    """The row of a backend that cannot run here: verdict ``unavailable``, the reason in ``detail``."""
    row: dict[str, Any] = {c: "" for c in COLUMNS}
    row.update(case_columns(case))
    row.update(
        backend=spec,
        backend_name=info.get("name", spec),
        verdict="unavailable",
        detail=info["unavailable"],
        repro=case.repro(spec),
        raw_verdict="unavailable",
    )
    return row


class BaselineCache:
    """Reference and same-dtype baseline, computed once per case for all backends."""

    def __init__(self, device: str = "cpu", keep: int = 64):
        self.device = device
        self.keep = keep
        self._cache: dict[str, Baseline] = {}  # insertion-ordered: oldest evicted first
        self.seconds = 0.0
        self._lock = threading.Lock()  # lanes (--jobs) share one cache

    def get(self, case: Case) -> Baseline:
        with self._lock:
            return self._get(case)

    def ensure(self, case: Case) -> float:
        """Compute ``case``'s baseline unless cached; the seconds spent computing it (0.0 on a hit)."""
        with self._lock:
            before = self.seconds
            self._get(case)
            return self.seconds - before

    def _get(self, case: Case) -> Baseline:
        hit = self._cache.get(case.case_id)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        inputs = make_inputs(case, self.device)
        ref = attention_reference(inputs, torch.float64)  # (total_q, hq, d)
        same = attention_reference(inputs, case.torch_dtype)  # (total_q, hq, d)
        base = make_baseline(case, ref, same)
        if len(self._cache) >= self.keep:
            self._cache.pop(next(iter(self._cache)))
        self._cache[case.case_id] = base
        self.seconds += time.perf_counter() - t0
        return base


def judge(
    case: Case,
    spec: str,
    info: dict[str, Any],
    res: dict[str, Any],
    baselines: BaselineCache,
    budgets: dict[str, Budget],
) -> dict[str, Any]:
    """Turn one execution result into a results row."""
    row: dict[str, Any] = {c: "" for c in COLUMNS}
    row.update(case_columns(case))
    row["backend"] = spec
    row["backend_name"] = info.get("name", spec)
    row["repro"] = case.repro(spec)
    status = res.get("status")
    if status != "ok":
        row["verdict"] = row["raw_verdict"] = status if status in ("unsupported", "error", "crash", "timeout") else "error"
        row["detail"] = res.get("detail", "")
        return row
    base = baselines.get(case)
    cmp = compare(case, res["output"], base, budgets[case.dtype], res.get("unwritten"))
    reasons = list(cmp.reasons)
    mask = res.get("mask") or {"status": "not_run", "detail": "probes disabled"}
    gqa = res.get("gqa") or {"status": "not_run", "detail": "probes disabled"}
    if mask["status"] == "mismatch":
        reasons.append("mask")
    if gqa["status"] == "mismatch":
        reasons.append("gqa")
    w = cmp.worst
    row.update(
        {
            "verdict": "fail" if reasons else "pass",
            "reasons": " ".join(reasons),
            "max_abs_err": f"{cmp.max_abs_err:.6g}",
            "max_rel_err": f"{cmp.max_rel_err:.6g}",
            "mean_abs_err": f"{cmp.mean_abs_err:.6g}",
            "err_ratio": f"{cmp.err_ratio:.4g}",
            "budget_frac": f"{cmp.budget_frac:.4g}",
            "mismatch_pct": f"{cmp.mismatch_pct:.4g}",
            "threshold_max": f"{cmp.threshold_max:.6g}",
            "baseline_max": f"{cmp.baseline_max:.6g}",
            "baseline_mean": f"{cmp.baseline_mean:.6g}",
            "nan_count": cmp.nan_count,
            "inf_count": cmp.inf_count,
            "nan_masked_rows": cmp.nan_masked_rows,
            "unwritten": "n/a" if cmp.unwritten is None else cmp.unwritten,
            "mask_check": mask["status"],
            "mask_detail": mask["detail"],
            "gqa_check": gqa["status"],
            "gqa_detail": gqa["detail"],
            "worst_seq": w.get("seq", ""),
            "worst_head": w.get("head", ""),
            "worst_row": w.get("row", ""),
            "worst_left_edge": "" if w.get("left_edge") is None else w["left_edge"],
            "worst_where": cmp.worst_text(),
            "time_ms": f"{res.get('time_ms', 0.0):.4g}",
        }
    )
    row["raw_verdict"] = row["verdict"]  # parity.expect may turn it into expected / unexpected-pass
    row["_mask_image"] = mask.get("image")
    row["_comparison"] = cmp
    return row


class ResultsWriter:
    """Appends rows to ``DIR/results.csv`` (flushed per row) and mask images to ``masks.jsonl``."""

    def __init__(self, out_dir: Path, resume: bool = False):
        self.dir = out_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "results.csv"
        self.done: set[tuple[str, str]] = set()
        mode = "w"
        if resume and self.path.exists() and self._drop_torn_row():
            with self.path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                if reader.fieldnames and not {"backend", "case_id", "verdict"} <= set(reader.fieldnames):
                    raise UserError(f"--resume: {self.path} is not a results.csv of this tool (no backend/case_id/verdict columns)")
                if reader.fieldnames and list(reader.fieldnames) != COLUMNS:
                    raise UserError(f"--resume: {self.path} has other columns than this attn-parity writes "
                                     "(an older version's run); finish it with that version, or start a new --out")
                for r in reader:
                    if r.get("verdict"):  # a complete row
                        self.done.add((r["backend"], r["case_id"]))
            mode = "a"
        self._fh = self.path.open(mode, newline="")
        self._csv = csv.DictWriter(self._fh, fieldnames=COLUMNS, extrasaction="ignore")
        if mode == "w":
            self._csv.writeheader()
            self._fh.flush()
        self._masks = (self.dir / "masks.jsonl").open("a" if resume else "w")

    def _drop_torn_row(self) -> int:
        """A run killed mid-write can leave a last line without its newline: cut it off; the size left."""
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            with self.path.open("r+b") as fh:
                fh.truncate(len(data))
        return len(data)

    def write(self, row: dict[str, Any]) -> None:
        self._csv.writerow(row)
        self._fh.flush()
        if row.get("_mask_image"):
            self._masks.write(json.dumps({"backend": row["backend"], "case_id": row["case_id"], **row["_mask_image"]}) + "\n")
            self._masks.flush()

    def close(self) -> None:
        self._fh.close()
        self._masks.close()


class Progress:
    """A one-line progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, total: int, stream=sys.stderr, enabled: bool = True):
        self.total, self.n, self.stream = total, 0, stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.counts: dict[str, int] = {}

    def update(self, verdict: str, label: str) -> None:
        self.n += 1
        self.counts[verdict] = self.counts.get(verdict, 0) + 1
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.tty and now - self.last < 10 and self.n != self.total:
            return
        self.last = now
        frac = self.n / max(self.total, 1)
        bar = "#" * int(frac * 24)
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        line = f"[{bar:<24}] {self.n}/{self.total} {now - self.t0:5.0f}s {counts} {label[:40]}"
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.n == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


@dataclasses.dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    infos: dict[str, dict[str, Any]]
    seconds: float
    reference_seconds: float
    out_dir: Path | None
    partial: bool = False  # stopped by the time limit before every row ran
    already: int = 0  # rows found in the folder on --resume
    total: int = 0  # backends x cases

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


def make_executor(spec: str, isolate: bool, **kw: Any):
    from .execute import InlineExecutor, ProcessExecutor

    if isolate:
        return ProcessExecutor(spec, **kw)
    kw.pop("timeout", None)
    kw.pop("log_path", None)
    kw.pop("extra_path", None)
    kw.pop("env", None)
    return InlineExecutor(spec, **kw)


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def lane_thread_env(jobs: int, n_specs: int, cpus: int | None = None) -> dict[str, str]:
    """CPU threads per worker when ``jobs`` lanes run at once: the machine's CPUs shared
    between the lanes (each torch process would otherwise start one thread per CPU, and
    lanes decoding probes on the CPU at the same time then slow each other several-fold).
    Empty for one lane, or where the user set any of :data:`THREAD_VARS` themselves."""
    lanes = max(1, min(jobs, n_specs))
    if lanes <= 1 or any(v in os.environ for v in THREAD_VARS):
        return {}
    n = str(max(1, (cpus or os.cpu_count() or 1) // lanes))
    return {v: n for v in THREAD_VARS}


def plan_lanes(specs: list[str], jobs: int, costs: dict[str, float], group: dict[str, str] | None = None) -> list[list[str]]:
    """Split backends over ``jobs`` lanes, heaviest first onto the least loaded lane (LPT).

    ``group``: the parts of one split backend (``--split``) share a group and go to different
    lanes while there are lanes without one of them (they exist to run at once).
    """
    group = group or {}
    jobs = max(1, min(jobs, len(specs)))
    lanes: list[list[str]] = [[] for _ in range(jobs)]
    load = [0.0] * jobs
    for spec in sorted(specs, key=lambda s: -costs.get(s, 1.0)):
        g = group.get(spec, spec)
        free = [i for i in range(jobs) if all(group.get(o, o) != g for o in lanes[i])] or list(range(jobs))
        i = min(free, key=lambda j: (load[j], j))
        lanes[i].append(spec)
        load[i] += costs.get(spec, 1.0)
    order = {s: n for n, s in enumerate(specs)}
    return [sorted(lane, key=order.__getitem__) for lane in lanes if lane]


def check_splits(splits: dict[str, int] | None, specs: list[str], jobs: int, isolate: bool) -> dict[str, int]:
    """The backends really split (K > 1) of ``splits`` (``--split``); ValueError naming what cannot be."""
    for s, k in (splits or {}).items():
        if k < 1:
            raise ValueError(f"--split {s}={k}: K must be >= 1")
        if s not in specs:
            raise ValueError(f"--split {s}={k}: {s!r} is not among the backends of this run ({', '.join(specs)})")
    out = {s: k for s, k in (splits or {}).items() if k > 1}
    if out and not isolate:
        raise ValueError("--split runs a backend in several worker processes; it cannot be used with --no-isolate")
    if out and jobs < max(out.values()):
        k = max(out.values())
        raise ValueError(f"--split into {k} parts needs --jobs {k} or more (at least {k} lanes: each part runs in its own lane)")
    return out


def config_key(case: Case) -> tuple[Any, ...]:
    """What a compiling backend builds a kernel for, lengths aside (their buckets compile within it)."""
    return (case.dtype, case.hq, case.hkv, case.head_dim, case.softcap, case.page_size is not None)


def split_cases(cases: list[Case], parts: int) -> dict[str, int]:
    """Case id -> part (0 .. parts-1) for a backend split over ``parts`` workers (``--split``).

    Every case of one :func:`config_key` goes to the same part, so no two workers compile the
    same kernel; configurations are dealt out largest first onto the part with the fewest cases.
    """
    groups: dict[tuple[Any, ...], list[Case]] = {}
    for c in cases:
        groups.setdefault(config_key(c), []).append(c)
    load = [0] * parts
    out: dict[str, int] = {}
    for members in sorted(groups.values(), key=len, reverse=True):  # stable: ties keep first-seen order
        i = load.index(min(load))
        load[i] += len(members)
        for c in members:
            out[c.case_id] = i
    return out


def run_sweep(
    specs: Iterable[str],
    cases: list[Case],
    out_dir: Path | None = None,
    isolate: bool = True,
    probes: bool = True,
    max_passes: int = DEFAULT_MAX_PASSES,
    timeout: float = 300.0,
    budgets: dict[str, Budget] | None = None,
    reference_device: str = "cpu",
    resume: bool = False,
    progress: bool = True,
    repeats: int = 1,
    worker_paths: dict[str, list[str]] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    jobs: int = 1,
    time_limit: float | None = None,
    splits: dict[str, int] | None = None,
    expectations: Expectations | None = None,
) -> SweepResult:
    """Run every case on every backend; see the module docstring for the verdicts.

    ``expectations``: known divergences (:mod:`parity.expect`) applied to each row as it is
    judged, with the backend's version string and this process's torch version.

    ``jobs > 1`` splits the backends over that many lanes that run at once (each lane:
    cases outer, its backends inner), so compile-bound backends (flex, JAX) do not hold
    up the rest. Per-case times are then measured while other lanes run.

    ``time_limit``: seconds after which no new row is started; the result is then
    ``partial`` and ``resume=True`` on the same folder runs the rest.

    ``splits``: ``{backend: K}`` runs that backend in K workers at once, each in its own lane,
    each taking the cases of its own configurations (:func:`split_cases`): for backends whose
    time goes into compiling a kernel per configuration on the host. Rows are as without it.
    """
    budgets = budgets or BUDGETS
    specs = list(dict.fromkeys(specs))
    splits = check_splits(splits, specs, jobs, isolate)
    # the units the lanes run: a backend, or one part of a split backend
    units: dict[str, tuple[str, int | None]] = {}
    for s in specs:
        if s in splits:
            units.update({f"{s}#{i + 1}": (s, i) for i in range(splits[s])})
        else:
            units[s] = (s, None)
    part_of = {s: split_cases(cases, k) for s, k in splits.items()}
    writer = ResultsWriter(out_dir, resume) if out_dir else None
    baselines = BaselineCache(reference_device, keep=64 if jobs <= 1 else 512)
    rows: list[dict[str, Any]] = []
    infos: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    bar = Progress(len(specs) * len(cases), enabled=progress)
    executors: dict[str, Any] = {}  # per unit
    unit_infos: dict[str, dict[str, Any]] = {}
    timing = SweepTiming()
    timing.jobs = jobs
    lock = threading.RLock()  # rows, writer, progress bar, timing
    stop = threading.Event()
    timed_out = threading.Event()
    deadline = None if time_limit is None else t0 + time_limit

    def emit(row: dict[str, Any]) -> None:
        with lock:
            rows.append(row)
            if writer:
                writer.write(row)
            if on_row:
                on_row(row)
            bar.update(row["verdict"], f"{row['backend']} {row['_summary']}")

    def judge_and_emit(case: Case, unit: str, info: dict[str, Any], res: dict[str, Any], wait_s: float) -> None:
        spec, part = units[unit]
        t_judge = time.perf_counter()
        # the baseline is the sweep's, shared by every backend: whichever backend meets a case first
        # must not be charged for it (it would make a backend's cases/s depend on the backend order)
        baseline_s = baselines.ensure(case) if res.get("status") == "ok" else 0.0
        row = judge(case, spec, info, res, baselines, budgets)
        if expectations:
            row = expectations.judge(row, str(info.get("version") or ""), torch.__version__, case)
        with lock:
            timing.add(spec, case, res, wait_s, time.perf_counter() - t_judge - baseline_s, baseline_s, unit=unit, part=part)
        row["_summary"] = case.summary()
        emit(row)

    def lane(lane_units: list[str]) -> None:
        """Cases outer, backends inner; backend k+1 computes while the lane judges backend k.

        A lane runs units: backends, or parts of a split backend (each its cases only)."""
        pending: tuple[Case, str, dict[str, Any], dict[str, Any], float] | None = None

        def finish() -> None:
            nonlocal pending
            if pending is not None:
                done, pending = pending, None
                judge_and_emit(*done)

        t_lane = time.perf_counter()
        try:
            for case in cases:
                for unit in lane_units:
                    spec, part = units[unit]
                    if part is not None and part_of[spec][case.case_id] != part:
                        continue  # another part's case
                    if stop.is_set():
                        return
                    if deadline is not None and time.perf_counter() > deadline:
                        timed_out.set()
                        return
                    ex, info = executors[unit], unit_infos[unit]
                    if writer and (spec, case.case_id) in writer.done:
                        with lock:
                            bar.update("skipped", spec)
                        continue
                    if info.get("unavailable"):
                        finish()
                        emit({**unavailable_row(case, spec, info), "_summary": case.summary()})
                        continue
                    t_ex = time.perf_counter()
                    failed = ex.submit(case)
                    t_sent = time.perf_counter()
                    finish()  # the previous row, overlapped with this backend's work
                    t_wait = time.perf_counter()
                    res = failed if failed is not None else ex.collect()
                    if stop.is_set():  # interrupted: this answer may be the worker being shut down
                        return
                    pending = (case, unit, info, res, (t_sent - t_ex) + (time.perf_counter() - t_wait))
                finish()
                if out_dir:  # after every case, so a run cut short still says where its time went
                    with lock:
                        _write_timing(out_dir, timing, time.perf_counter() - t0, baselines.seconds, partial=True)
        finally:
            finish()  # a result already in is never lost, even on Ctrl-C
            with lock:
                timing.lane_wall[tuple(lane_units)] = time.perf_counter() - t_lane

    worker_env = lane_thread_env(jobs, len(units))
    timing.worker_threads = int(worker_env["OMP_NUM_THREADS"]) if worker_env else None
    try:
        for unit, (spec, _) in units.items():
            log = out_dir / "logs" / f"{_safe(unit)}.log" if out_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            kw: dict[str, Any] = {"wait": False} if isolate else {}
            executors[unit] = make_executor(
                spec,
                isolate,
                probes=probes,
                max_passes=max_passes,
                repeats=repeats,
                timeout=timeout,
                log_path=log,
                extra_path=(worker_paths or {}).get(spec),
                env=worker_env,
                **kw,
            )
        for unit, ex in executors.items():  # the workers start in parallel; wait for each
            unit_infos[unit] = ex.info
            infos.setdefault(units[unit][0], unit_infos[unit])  # a split backend: its first part's
        timing.startup_s = time.perf_counter() - t0
        timing.parts = dict(splits)
        if jobs <= 1:
            lane(list(units))
        else:
            from . import backends

            def cost(unit: str) -> float:
                spec, _ = units[unit]
                if unit_infos[unit].get("unavailable"):
                    return 0.0
                return float(getattr(backends.get(spec), "cost_hint", 1.0)) / splits.get(spec, 1)

            timing.lanes = plan_lanes(list(units), jobs, {u: cost(u) for u in units}, {u: units[u][0] for u in units})
            errors: list[BaseException] = []

            def guarded(lane_specs: list[str]) -> None:
                try:
                    lane(lane_specs)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                    errors.append(exc)
                    stop.set()

            threads = [threading.Thread(target=guarded, args=(ls,), daemon=True) for ls in timing.lanes]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)  # short joins: Ctrl-C reaches this thread
            except BaseException:
                stop.set()
                for ex in executors.values():  # unblock lanes waiting on a worker
                    ex.close()
                raise
            if errors:
                raise errors[0]
    finally:
        for ex in executors.values():
            ex.close()
        if writer:
            writer.close()
    wall = time.perf_counter() - t0
    partial = timed_out.is_set()
    if out_dir:
        _write_timing(out_dir, timing, wall, baselines.seconds, partial=partial)
    ids = {c.case_id for c in cases}
    already = sum(1 for b, c in writer.done if b in specs and c in ids) if writer else 0
    return SweepResult(rows, infos, wall, baselines.seconds, out_dir, partial=partial, already=already, total=len(specs) * len(cases))


def _write_timing(out_dir: Path, timing: SweepTiming, wall: float, reference_s: float, partial: bool) -> None:
    summary = {"partial": partial, **timing.summary(wall, reference_s)}
    tmp = out_dir / "timing.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(out_dir / "timing.json")  # atomic: a kill never leaves half a file


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 5) if xs else None


class SweepTiming:
    """Where a sweep's wall time goes: backend calls vs the harness (written as OUT/timing.json).

    Per backend, from the worker: ``call_s`` its time around the timed backend calls
    (warm-up and repeats), ``probe_call_s`` inside backend calls made by the mask/GQA
    probes, ``probe_s`` the probes in all (building inputs, decoding included),
    ``gen_s`` input generation. From the sweep: ``exec_s`` the time it waited on the
    worker (sending the case, then blocked until the answer: IPC included), ``judge_s``
    the comparison, ``baseline_s`` the float64 reference and same-dtype baseline computed
    while judging this backend's rows: computed once per case and shared by all backends,
    it falls to whichever backend met the case first, so it is kept out of ``judge_s`` and
    of the rates below (the sweep's total is ``reference_s``). Judging backend k's row
    overlaps backend k+1's work, so ``exec_s + judge_s + baseline_s`` summed over backends
    bounds the loop's wall time from above.

    Harness overhead = wall - call_s - probe_call_s: start-up, generation, probe
    building and decoding, reference, comparison, IPC, writing rows.

    ``cases_per_s_upto_4096`` = cases the backend ran (not declined as unsupported) with
    every length <= 4096 / their exec_s + judge_s
    (every first-use compile included); for a backend split over K workers (``--split``),
    which run at once, the divisor is the largest of its parts' sums (``part_small_s``: the
    part that finished its cases last); ``median_case_s_upto_4096`` = the median of one
    such case's exec_s + judge_s: what a case costs once its kernel is compiled, for the
    backends that compile per configuration (most cases then reuse a compiled kernel).
    """

    KEYS = ("cases", "exec_s", "judge_s", "baseline_s", "call_s", "probe_call_s", "probe_s", "gen_s")

    def __init__(self) -> None:
        self.per: dict[str, dict[str, float]] = {}
        self.startup_s = 0.0
        self.jobs = 1
        self.lanes: list[list[str]] = []
        self.lane_wall: dict[tuple[str, ...], float] = {}  # each lane's own wall time (after start-up)
        self.worker_threads: int | None = None  # OMP_NUM_THREADS given to each worker (lanes), None: their default
        self.small_times: dict[str, list[float]] = {}  # per backend: each S <= 4096 case's exec_s + judge_s
        self.parts: dict[str, int] = {}  # split backends: number of parts
        self.part_small: dict[str, dict[int, float]] = {}  # split backends: per part, the sum of small_times
        self.unit_calls: dict[str, float] = {}  # per lane unit (a backend or one part): call_s + probe_call_s

    def add(
        self,
        spec: str,
        case: Case,
        res: dict[str, Any],
        exec_s: float,
        judge_s: float,
        baseline_s: float = 0.0,
        unit: str | None = None,
        part: int | None = None,
    ) -> None:
        t = self.per.setdefault(spec, {k: 0.0 for k in self.KEYS})
        w = res.get("timing") or {}
        unit = unit or spec
        self.unit_calls[unit] = self.unit_calls.get(unit, 0.0) + float(w.get("call_s", 0.0)) + float(w.get("probe_call_s", 0.0))
        t["cases"] += 1
        t["exec_s"] += exec_s
        t["judge_s"] += judge_s
        t["baseline_s"] += baseline_s
        for k in ("call_s", "probe_call_s", "probe_s", "gen_s"):
            t[k] += float(w.get(k, 0.0))
        # a case the backend declines costs it nothing: it would only inflate the rate
        if res.get("status") != "unsupported" and max(max(case.q_lens), max(case.k_lens)) <= 4096:
            self.small_times.setdefault(spec, []).append(exec_s + judge_s)
            if part is not None:
                sums = self.part_small.setdefault(spec, {})
                sums[part] = sums.get(part, 0.0) + exec_s + judge_s

    def _lane_shares(self) -> dict[str, Any]:
        """Per lane (``--jobs``): 1 - its backends' call time / the lane's wall time. Each lane is
        serial, so this is the harness's share of that lane; with one lane it is the sweep's share
        after start-up."""
        out = {}
        for lane, wall in self.lane_wall.items():
            calls = sum(self.unit_calls.get(u, 0.0) for u in lane)
            out[" ".join(lane)] = {"wall_s": round(wall, 3), "backend_calls_s": round(calls, 3),
                                   "overhead_share": round((wall - calls) / wall, 4) if wall > 0 else None}
        return out

    def summary(self, wall: float, reference_s: float) -> dict[str, Any]:
        calls = sum(t["call_s"] + t["probe_call_s"] for t in self.per.values())
        per: dict[str, dict[str, Any]] = {}
        for spec, t in self.per.items():
            small = self.small_times.get(spec, [])
            small_s = sum(small)
            parts = self.part_small.get(spec)
            span = max(parts.values()) if parts else small_s  # split: its parts ran at once
            per[spec] = {**{k: round(v, 4) for k, v in t.items()},
                         "small_cases": len(small),
                         "small_s": round(small_s, 4),
                         "cases_per_s_upto_4096": round(len(small) / span, 2) if span else None,
                         "median_case_s_upto_4096": _median(small)}
            if spec in self.parts:
                per[spec]["parts"] = self.parts[spec]
                per[spec]["part_small_s"] = [round((parts or {}).get(i, 0.0), 4) for i in range(self.parts[spec])]
        rows = sum(t["cases"] for t in self.per.values())
        loop = wall - self.startup_s
        serial = self.jobs <= 1  # with lanes running at once, backend calls overlap and wall - calls means nothing
        return {
            "jobs": self.jobs,
            "lanes": self.lanes,
            "worker_threads": self.worker_threads,
            "wall_s": round(wall, 3),
            "startup_s": round(self.startup_s, 3),
            "reference_s": round(reference_s, 3),
            "backend_calls_s": round(calls, 3),
            "harness_overhead_s": round(wall - calls, 3) if serial else None,
            "harness_overhead_share": round((wall - calls) / wall, 4) if wall and serial else None,
            "harness_overhead_share_after_startup": round((loop - calls) / loop, 4) if loop > 0 and serial else None,
            "lane_overhead_share": self._lane_shares(),
            "rows_run": int(rows),
            "rows_per_s_after_startup": round(rows / loop, 2) if loop > 0 and rows else None,
            "per_backend": per,
        }


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def summary_table(result: SweepResult) -> str:
    """A fixed-width summary: one line per backend, then known vs new failures at a glance."""
    cols = VERDICTS
    width = max([28, *(len(s) + 2 for s in result.infos)])
    widths = [max(len(c) + 2, 9) for c in cols]
    head = f"{'backend':<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'worst ratio':>13}"
    lines = [head, "-" * len(head)]
    counts = result.counts()
    for spec in result.infos:
        c = counts.get(spec, {})
        ratios = [float(r["err_ratio"]) for r in result.rows if r["backend"] == spec and r.get("err_ratio") not in ("", None)]
        worst = f"{max(ratios):.3g}" if ratios else "-"
        lines.append(f"{spec:<{width}}" + "".join(f"{c.get(k, 0):>{w}}" for k, w in zip(cols, widths)) + f"{worst:>13}")
    for spec, info in result.infos.items():
        if info.get("unavailable"):
            lines.append(f"  {spec}: unavailable: {info['unavailable']}")
    return "\n".join([*lines, *known_vs_new(result.rows)])


def known_vs_new(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Lines saying how many failing rows are known divergences, how many are new, and which
    strict entries passed (empty when there is nothing to say)."""
    by_id: dict[str, dict[str, int]] = {}
    new = 0
    for r in rows:
        if r["verdict"] in ("expected", "unexpected-pass"):
            n = by_id.setdefault(r.get("expected_id") or "?", {"expected": 0, "unexpected-pass": 0})
            n[r["verdict"]] += 1
        elif r["verdict"] in RAW_FAIL_VERDICTS:
            new += 1
    expected = {k: v["expected"] for k, v in by_id.items() if v["expected"]}
    xpass = {k: v["unexpected-pass"] for k, v in by_id.items() if v["unexpected-pass"]}
    out = []
    if expected or new or xpass:
        out.append(f"known divergences: {sum(expected.values())} rows expected"
                   + (" (" + ", ".join(f"{k} {n}" for k, n in expected.items()) + ")" if expected else ""))
        out.append(f"new failures: {new} rows (failing, no known divergence explains them)")
    if xpass:
        out.append(f"unexpected passes: {sum(xpass.values())} rows covered by strict entries that passed ("
                   + ", ".join(f"{k} {n}" for k, n in xpass.items()) + "): retire or narrow those entries")
    return out
