"""Where a sweep's wall time goes (``OUT/timing.json``): per backend, per lane, per GPU, and the
shard the run was (``--shard``)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..case import Case
from ..results import Outcome
from ..runfolder import read_timing, write_timing
from .memgate import Admission

__all__ = [
    "STAGES",
    "SweepTiming",
    "all_calls",
    "earlier_calls",
    "gate_line",
    "merged_timing",
    "row_stages",
    "split_line",
    "stage_table",
    "write_timing",
]

#: The stages of one row, in seconds (``*_calls``: a count), as ``stages.jsonl`` and ``timing.json`` give them:
#: the worker's (inputs .. worker), then the sweep's (gate .. reference).
STAGES = (
    "inputs",  # the case's inputs, mapped from the sweep's one draw of the case (parity.sweep.inputstore; drawn by
    # the worker before 2026-12-07, and where the sweep holds none) and moved to the backend's device
    "call",  # the backend's timed call(s), warm-up included: a first call of a configuration compiles here
    "compile",  # of which first-use compilation (the first row of a configuration, on CUDA or a compiling backend)
    "output_copy",  # the output copied to the CPU for the judge
    "mask_probe",  # the mask probe in all: building its inputs, its calls, decoding
    "mask_backend",  # of which inside the backend's calls
    "mask_calls",  # the backend calls it took (passes batched per call)
    "gqa_probe",
    "gqa_backend",
    "read_probe",
    "read_backend",
    "backward",  # --grad: the backend's backward (autograd or its backward op; a first call compiles here)
    "invariance",  # --invariance: the batch invariance check's sub-batch calls and comparisons
    "graph_replay",  # --graph-replay: the eager call on new inputs, the captures and replays
    "worker",  # the whole row in the worker process
    "gate",  # what the lane waited at the memory gate before sending the row: other rows holding the card, or the
    # card draining for a row that runs alone (this one, or another lane's); its line says which (ran_alone, drained)
    "wait",  # what the lane waited on the worker (overlaps judging the previous row)
    "ipc",  # wait not spent in the worker: sending, the answer's pickle (its large tensors as files since 2026-12-07,
    # parity.transfer), process scheduling
    "judge",  # the comparison with the reference and the known divergences (the probes are decoded in the worker)
    "judge_wait",  # what judging the row waited for other lanes: a reference another lane was computing (the cache
    # computes one at a time), the sweep's lock to release its memory hold and to record it (before 2026-12-07: in judge),
    # and what its lane waited for another lane's reference beside its worker (before 2026-12-07: in wait and ipc)
    "reference",  # inputs + float64 reference + same-dtype baseline (and, with --grad, their gradients): charged
    # to the first row to meet the case; inputs: the sweep's shared draw, made by that row's lane before it is sent
)

_WORKER = {
    "inputs": "gen_s",
    "call": "call_s",
    "compile": "compile_s",
    "output_copy": "out_s",
    "mask_probe": "mask_s",
    "mask_backend": "mask_call_s",
    "mask_calls": "mask_calls",
    "gqa_probe": "gqa_s",
    "gqa_backend": "gqa_call_s",
    "read_probe": "read_s",
    "read_backend": "read_call_s",
    "backward": "grad_s",
    "invariance": "invariance_s",
    "graph_replay": "graph_s",
    "worker": "worker_s",
}


def row_stages(
    res: dict[str, Any], wait_s: float, judge_s: float, reference_s: float, gate_s: float = 0.0, judge_wait: float = 0.0
) -> dict[str, float]:
    """One row's :data:`STAGES` (seconds; 0 where the row did not reach a stage)."""
    w = res.get("timing") or {}
    out = {stage: float(w.get(key, 0.0)) for stage, key in _WORKER.items()}
    worker = out["worker"]
    ipc = max(0.0, wait_s - worker) if worker else 0.0
    out.update(gate=gate_s, wait=wait_s, ipc=ipc, judge=judge_s, judge_wait=judge_wait, reference=reference_s)
    return out


#: What ``timing.json`` keeps of each earlier call of a run continued with ``--resume``.
CALL_KEYS = ("wall_s", "startup_s", "rows_run", "backend_calls_s", "reference_s", "jobs", "partial", "stages", "precompile", "gate")


def _headline(timing: dict[str, Any]) -> dict[str, Any]:
    """One call's record (:data:`CALL_KEYS`) from its :meth:`SweepTiming.summary` / ``timing.json``."""
    return {k: timing.get(k) for k in CALL_KEYS}


def earlier_calls(previous: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a folder's ``timing.json`` already records, oldest first: its own ``earlier_calls`` and then
    its headline (:data:`CALL_KEYS`). ``[]`` for an absent or empty file (a fresh run)."""
    if not previous or "wall_s" not in previous:
        return []
    calls = [c for c in previous.get("earlier_calls") or [] if isinstance(c, dict)]
    return [*calls, _headline(previous)]


def all_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The sums over every call of a resumed run (earlier ones and this one): what the whole run cost."""
    total = {k: round(sum(float(c.get(k) or 0.0) for c in calls), 3) for k in ("wall_s", "startup_s", "backend_calls_s", "reference_s")}
    rows = sum(int(c.get("rows_run") or 0) for c in calls)
    gates = [c["gate"] for c in calls if c.get("gate")]
    gate = {k: round(sum(float(g.get(k) or 0) for g in gates), 3) for k in GATE_KEYS} if gates else None
    return {"calls": len(calls), **total, "rows_run": rows, "stages": _sum_stages([c.get("stages") or {} for c in calls]), "gate": gate}


def _sum_stages(each: list[dict[str, Any]]) -> dict[str, Any]:
    """:meth:`SweepTiming.stage_summary` records of several calls, summed per backend (rows/s over the sums)."""
    out: dict[str, Any] = {}
    for stages in each:
        for backend, st in stages.items():
            o = out.setdefault(backend, {"stages_s": {}, "compile_s": 0.0, "first_config_rows": 0, "rows": 0})
            for k, v in (st.get("stages_s") or {}).items():
                o["stages_s"][k] = round(o["stages_s"].get(k, 0) + v, 4)
            o["compile_s"] = round(o["compile_s"] + float(st.get("compile_s") or 0.0), 4)
            o["first_config_rows"] += int(st.get("first_config_rows") or 0)
            for k in ("gate_alone_rows", "gate_drains"):
                o[k] = int(o.get(k) or 0) + int(st.get(k) or 0)
            o["rows"] += int(st.get("rows") or 0)
            if st.get("kernels_built") is not None:  # the library's count, where it keeps one (None: unknown)
                o["kernels_built"] = int(o.get("kernels_built") or 0) + int(st["kernels_built"])
    for o in out.values():
        o["rows_per_s"] = _rows_per_s(o["rows"], o["stages_s"])
    return out


def _rows_per_s(rows: int, stages_s: dict[str, float]) -> float | None:
    """Rows per second of the lane's time on a backend: waiting on its worker, judging, the reference."""
    busy = sum(stages_s.get(k, 0.0) for k in ("wait", "judge", "judge_wait", "reference"))
    return round(rows / busy, 2) if busy > 0 else None


#: The run's memory-gate record (``timing.json``'s ``gate``): the seconds its rows waited at the gates in all, the rows
#: that ran alone, the drains of a card for them (others held memory when they asked), the rows the lanes held back to
#: run last (:mod:`parity.sweep.deferred`) and the seconds that took.
GATE_KEYS = ("wait_s", "alone_rows", "drains", "held_back", "held_back_s")


def gate_line(timing: dict[str, Any]) -> str:
    """The memory gates of a run in one line, from its timing.json (every call of a resumed run): "gate: N rows ran
    alone, lanes waited S s in all"; "" where it records none, or none waited and none ran alone."""
    gate = (timing.get("all_calls") or {}).get("gate") or timing.get("gate") or {}
    alone, wait = int(gate.get("alone_rows") or 0), float(gate.get("wait_s") or 0.0)
    if not alone and wait < 0.05:
        return ""
    held, drains = int(gate.get("held_back") or 0), int(gate.get("drains") or 0)
    last = f"{held} held back to run last, in {float(gate.get('held_back_s') or 0.0):.1f} s; " if held else ""
    return f"gate: {alone} rows ran alone ({last}{drains} drains of a card), lanes waited {wait:.1f} s in all"


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 5) if xs else None


class SweepTiming:
    """Where a sweep's wall time goes: backend calls vs the harness (written as OUT/timing.json).

    Per backend, from the worker: ``call_s`` its time around the timed backend calls
    (warm-up and repeats), ``probe_call_s`` inside backend calls made by the mask/GQA
    probes, ``probe_s`` the probes in all (building inputs, decoding included),
    ``gen_s`` input generation. From the sweep: ``exec_s`` the time it waited on the
    worker (sending the case, then blocked until the answer: IPC included), ``judge_s``
    the comparison (its waits for other lanes are ``stages``' ``judge_wait``), ``baseline_s`` the
    float64 reference and same-dtype baseline computed
    while judging this backend's rows: computed once per case and shared by all backends,
    it falls to whichever backend met the case first, so it is kept out of ``judge_s`` and
    of the rates below (the sweep's total is ``reference_s``). Judging backend k's row
    overlaps backend k+1's work, so ``exec_s + judge_s + baseline_s`` (and ``judge_wait``) summed
    over backends bounds the loop's wall time from above.

    Harness overhead = wall - call_s - probe_call_s: start-up, generation, probe
    building and decoding, reference, comparison, IPC, writing rows.

    ``cases_per_s_upto_4096`` = cases the backend ran (not declined as unsupported) with
    every length <= 4096 / their exec_s + judge_s
    (every first-use compile included); for a backend split over K workers (``--split``),
    which run at once, the divisor is the largest of its parts' sums (``part_small_s``: the
    part that finished its cases last); ``median_case_s_upto_4096`` = the median of one
    such case's exec_s + judge_s: what a case costs once its kernel is compiled, for the
    backends that compile per configuration (most cases then reuse a compiled kernel).

    ``gpus`` / ``per_gpu`` (``--gpus``): per GPU, its lanes, their units, the rows they wrote, the
    longest of its lanes' wall times and their backends' call time; ``shard``: the ``--shard``
    record of the run (``parity merge`` writes each merged run's in its ``timing.json``);
    ``auto_split`` (``--split auto`` only, where it ran): ``{backend: parts}`` it chose.
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
        self.auto_split: dict[str, int] | None = None  # --split auto: the parts it chose (None: it did not run)
        self.part_small: dict[str, dict[int, float]] = {}  # split backends: per part, the sum of small_times
        self.unit_calls: dict[str, float] = {}  # per lane unit (a backend or one part): call_s + probe_call_s
        self.unit_rows: dict[str, int] = {}  # per lane unit: rows written (unavailable ones included)
        self.unit_gpu: dict[str, str] = {}  # per lane unit: the GPU its worker was pinned to (--gpus)
        self.shard: dict[str, Any] | None = None  # --shard: the shard record (k, n, key, cases)
        self.stages: dict[str, dict[str, float]] = {}  # per backend: STAGES summed over its rows
        self.first_rows: dict[str, int] = {}  # per backend: rows that were the first of their kernel key in a worker
        self.kernel_keys: dict[str, set[str]] = {}  # per compiling backend: the distinct compile keys of its rows
        self.kernels_built: dict[str, int] = {}  # per backend: kernels its workers built, by the library's own count
        self.reference_stages: dict[str, float] = {}  # the baselines' inputs / reference / baseline seconds
        self.reference_recomputed = 0  # baselines computed again after being evicted
        self.earlier: list[dict[str, Any]] = []  # --resume: the earlier calls' headlines (:func:`earlier_calls`)
        self.precompile: dict[str, Any] | None = None  # the compile pre-pass's record (None: it did not run)
        self.gate_rows: dict[str, dict[str, int]] = {}  # per backend: rows that ran alone, drains of the card for them
        self.held_back = 0  # rows the lanes held back to run alone after the others (:mod:`parity.sweep.deferred`)
        self.held_back_s = 0.0  # the wall time of running them

    def add(
        self,
        backend: str,
        case: Case,
        res: dict[str, Any],
        exec_s: float,
        judge_s: float,
        baseline_s: float = 0.0,
        unit: str | None = None,
        part: int | None = None,
        gate: Admission | None = None,
        judge_wait: float = 0.0,
    ) -> dict[str, float]:
        """Add one row (``gate``: its waits at the memory gate; ``judge_wait``: judging it, for other lanes); its
        :func:`row_stages`."""
        t = self.per.setdefault(backend, {k: 0.0 for k in self.KEYS})
        w = res.get("timing") or {}
        gate = gate or Admission(0)
        stages = row_stages(res, exec_s, judge_s, baseline_s, gate.wait_s, judge_wait)
        tot = self.stages.setdefault(backend, dict.fromkeys(STAGES, 0.0))
        for k, v in stages.items():
            tot[k] += v
        counts = self.gate_rows.setdefault(backend, {"alone": 0, "drained": 0})
        counts["alone"] += gate.alone
        counts["drained"] += gate.drained
        if w.get("first_config"):
            self.first_rows[backend] = self.first_rows.get(backend, 0) + 1
        if w.get("kernel_key"):
            self.kernel_keys.setdefault(backend, set()).add(str(w["kernel_key"]))
        if w.get("kernels_built") is not None:
            self.kernels_built[backend] = self.kernels_built.get(backend, 0) + int(w["kernels_built"])
        unit = unit or backend
        self.unit_calls[unit] = self.unit_calls.get(unit, 0.0) + float(w.get("call_s", 0.0)) + float(w.get("probe_call_s", 0.0))
        t["cases"] += 1
        t["exec_s"] += exec_s
        t["judge_s"] += judge_s
        t["baseline_s"] += baseline_s
        for k in ("call_s", "probe_call_s", "probe_s", "gen_s"):
            t[k] += float(w.get(k, 0.0))
        # a case the backend declines costs it nothing: it would only inflate the rate
        if res.get("status") != Outcome.UNSUPPORTED and max(max(case.q_lens), max(case.k_lens)) <= 4096:
            self.small_times.setdefault(backend, []).append(exec_s + judge_s)
            if part is not None:
                sums = self.part_small.setdefault(backend, {})
                sums[part] = sums.get(part, 0.0) + exec_s + judge_s
        return stages

    def stage_summary(self) -> dict[str, Any]:
        """Per backend: its stages' seconds summed (``stages_s``), first-use compilation (``compile_s``, over
        ``first_config_rows`` rows: the first of a kernel key in a worker), a compiling backend's distinct compile
        keys (``compile_keys``) beside the kernels its workers built by the library's own count (``kernels_built``,
        None where the library keeps none), and rows per second of the lane's time on it."""
        out: dict[str, Any] = {}
        for backend, tot in self.stages.items():
            rows = int(self.per.get(backend, {}).get("cases", 0))
            out[backend] = {
                "stages_s": {k: round(v, 4) if not k.endswith("_calls") else int(v) for k, v in tot.items()},
                "compile_s": round(tot["compile"], 4),
                "first_config_rows": self.first_rows.get(backend, 0),
                "compile_keys": len(self.kernel_keys[backend]) if backend in self.kernel_keys else None,
                "kernels_built": self.kernels_built.get(backend),
                "gate_alone_rows": self.gate_rows.get(backend, {}).get("alone", 0),
                "gate_drains": self.gate_rows.get(backend, {}).get("drained", 0),
                "rows": rows,
                "rows_per_s": _rows_per_s(rows, tot),
            }
        return out

    def gate_summary(self) -> dict[str, Any]:
        """The run's :data:`GATE_KEYS`: its rows' gate stages and counts summed, the rows held back and their time."""
        return {
            "wait_s": round(sum(st.get("gate", 0.0) for st in self.stages.values()), 3),
            "alone_rows": sum(c["alone"] for c in self.gate_rows.values()),
            "drains": sum(c["drained"] for c in self.gate_rows.values()),
            "held_back": self.held_back,
            "held_back_s": round(self.held_back_s, 3),
        }

    def _lane_shares(self) -> dict[str, Any]:
        """Per lane (``--jobs``): 1 - its backends' call time / the lane's wall time. Each lane is
        serial, so this is the harness's share of that lane; with one lane it is the sweep's share
        after start-up."""
        out = {}
        for lane, wall in self.lane_wall.items():
            calls = sum(self.unit_calls.get(u, 0.0) for u in lane)
            out[" ".join(lane)] = {
                "wall_s": round(wall, 3),
                "backend_calls_s": round(calls, 3),
                "overhead_share": round((wall - calls) / wall, 4) if wall > 0 else None,
            }
        return out

    def note_row(self, unit: str) -> None:
        self.unit_rows[unit] = self.unit_rows.get(unit, 0) + 1

    def _gpu_shares(self) -> dict[str, Any]:
        """Per GPU (``--gpus``): its lanes, units, rows, the longest of its lanes' wall times and its
        backends' call time."""
        out: dict[str, Any] = {}
        for lane in self.lanes:
            gpu = self.unit_gpu.get(lane[0]) if lane else None
            if gpu is None:
                continue
            g = out.setdefault(gpu, {"lanes": 0, "units": [], "rows": 0, "wall_s": 0.0, "backend_calls_s": 0.0})
            g["lanes"] += 1
            g["units"] += list(lane)
            g["rows"] += sum(self.unit_rows.get(u, 0) for u in lane)
            g["wall_s"] = round(max(g["wall_s"], self.lane_wall.get(tuple(lane), 0.0)), 3)
            g["backend_calls_s"] = round(g["backend_calls_s"] + sum(self.unit_calls.get(u, 0.0) for u in lane), 3)
        return out

    def summary(self, wall: float, reference_s: float) -> dict[str, Any]:
        calls = sum(t["call_s"] + t["probe_call_s"] for t in self.per.values())
        per: dict[str, dict[str, Any]] = {}
        for backend, t in self.per.items():
            small = self.small_times.get(backend, [])
            small_s = sum(small)
            parts = self.part_small.get(backend)
            span = max(parts.values()) if parts else small_s  # split: its parts ran at once
            per[backend] = {
                **{k: round(v, 4) for k, v in t.items()},
                "small_cases": len(small),
                "small_s": round(small_s, 4),
                "cases_per_s_upto_4096": round(len(small) / span, 2) if span else None,
                "median_case_s_upto_4096": _median(small),
            }
            if backend in self.parts:
                per[backend]["parts"] = self.parts[backend]
                per[backend]["part_small_s"] = [round((parts or {}).get(i, 0.0), 4) for i in range(self.parts[backend])]
        rows = sum(t["cases"] for t in self.per.values())
        loop = wall - self.startup_s
        serial = self.jobs <= 1  # with lanes running at once, backend calls overlap and wall - calls means nothing
        out = {
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
            "gpus": sorted(set(self.unit_gpu.values()), key=lambda g: (len(g), g)),
            "per_gpu": self._gpu_shares(),
            "shard": self.shard,
            "precompile": self.precompile,
            "per_backend": per,
            "stages": self.stage_summary(),
            "gate": self.gate_summary(),
            "reference_stages_s": {k: round(v, 4) for k, v in self.reference_stages.items()},
            "reference_recomputed": self.reference_recomputed,
        }
        if self.auto_split is not None:
            out["auto_split"] = dict(self.auto_split)
        if self.earlier:  # a run continued with --resume: each call's headline, and every call summed
            out.update(earlier_calls=self.earlier, all_calls=all_calls([*self.earlier, _headline(out)]))
        return out


def stage_table(timing: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Where each backend's time went, from a ``timing.json``: a header and one row of cells per
    backend (seconds; empty when the run has no stages). A resumed run's: every call's (``all_calls``)."""
    head = [
        "backend",
        "rows",
        "rows/s",
        "inputs",
        "call",
        "compile",
        "mask",
        "(calls)",
        "gqa",
        "read",
        "backward",
        "gate",
        "ipc",
        "judge",
        "judge wait",
        "reference",
    ]
    rows = []
    for backend, st in ((timing.get("all_calls") or {}).get("stages") or timing.get("stages") or {}).items():
        s = st.get("stages_s") or {}
        rate = st.get("rows_per_s")
        cells = [s.get(k, 0.0) for k in ("inputs", "call")] + [st.get("compile_s", 0.0)]
        cells += [s.get(k, 0.0) for k in ("mask_probe",)]
        tail = [s.get(k, 0.0) for k in ("gqa_probe", "read_probe", "backward", "gate", "ipc", "judge", "judge_wait", "reference")]
        rows.append(
            [backend, str(st.get("rows", 0)), "-" if rate is None else f"{rate:g}"]
            + [f"{v:.2f}" for v in cells]
            + [str(int(s.get("mask_calls", 0)))]
            + [f"{v:.2f}" for v in tail]
        )
    return head, rows


def merged_timing(dirs: list[Path]) -> dict[str, Any] | None:
    """``timing.json`` of a folder merged from ``dirs`` (``parity merge``): each input run's shard,
    wall time, rows and GPUs, the longest wall and the rows summed; None when no input has one."""
    runs = []
    for d in dirs:
        t = read_timing(Path(d))
        if not t:
            continue
        runs.append(
            {
                "folder": str(d),
                "shard": t.get("shard"),
                "wall_s": t.get("wall_s", 0.0),
                "rows_run": t.get("rows_run", 0),
                "lanes": len(t.get("lanes") or []),
                "gpus": t.get("gpus") or [],
                "per_gpu": t.get("per_gpu") or {},
            }
        )
    if not runs:
        return None
    return {"merged": True, "wall_s": max(r["wall_s"] for r in runs), "rows_run": sum(r["rows_run"] for r in runs), "runs": runs}


def split_line(timing: dict[str, Any]) -> str:
    """How the work of a run was split, in one line (from its timing.json): the shard, the lanes and
    the GPUs they ran on (of each merged run, for a merged folder), and the calls of a resumed run; empty
    for one call of one lane on no GPU."""
    if timing.get("merged"):
        each = [
            f"{(r['shard'] or {}).get('k', '?')}/{(r['shard'] or {}).get('n', '?')}: {r['rows_run']} rows, "
            f"{r['wall_s']:g} s" + (f" on {len(r['gpus'])} GPU(s)" if r["gpus"] else "")
            for r in timing["runs"]
        ]
        return f"work split: {len(each)} runs merged ({'; '.join(each)})"
    parts = []
    shard = timing.get("shard")
    if shard:
        parts.append(f"shard {shard.get('k')}/{shard.get('n')} ({shard.get('cases', '?')} cases)")
    lanes = timing.get("lanes") or []
    per_gpu = timing.get("per_gpu") or {}
    if per_gpu:
        gpus = "; ".join(f"GPU {g}: {v['lanes']} lane(s), {v['rows']} rows, {v['wall_s']:g} s" for g, v in per_gpu.items())
        parts.append(f"{len(lanes)} lane(s) on {len(per_gpu)} GPU(s) ({gpus})")
    elif len(lanes) > 1:
        parts.append(f"{len(lanes)} lanes on the CPU")
    auto = timing.get("auto_split")
    split = {s: t["parts"] for s, t in (timing.get("per_backend") or {}).items() if t.get("parts")}
    if split or auto is not None:
        told = ", ".join(f"{s} in {k} parts" + (" (--split auto)" if s in (auto or {}) else "") for s, k in split.items())
        parts.append(told or "--split auto split no backend")
    total = timing.get("all_calls")
    if total:  # a run continued with --resume
        parts.append(f"{total['calls']} calls (--resume): {total['wall_s']:g} s and {total['rows_run']} rows in all")
    return "work split: " + "; ".join(parts) if parts else ""
