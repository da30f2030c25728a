"""Device memory: what one row is estimated to need, what its card can hold, and what counts as out of memory.

:func:`estimate` follows a row through its stages in the worker (:func:`parity.execute.execute`) and takes
the largest; what is live in each (``O``: the output's elements, ``out``: its bytes, ``W``: the backend's
own hint, :meth:`parity.backends.base.Backend.workspace_bytes`):

=========  =====================================================================================
Parts of the largest stage (additive): ``inputs``, ``output`` (its buffer and LSE), ``workspace``,
``check``, ``probes``; then ``margin`` (:data:`WORKER_MARGIN` of those: what the model names no figure for),
``resident`` (what the backend's worker keeps between rows: FlashInfer's 128 MiB buffer) and ``foreign``
(device memory outside torch's allocator, JAX's: not in ``peak_mem_mb``). The harness's parts, on the
device where the reference runs there (``--reference-device cuda``), from its own stages: ``reference``
(inputs, the float64 output and LSE) and ``baseline`` (the larger of the reference's per-sequence copy and
band block, the same-dtype pass, the baseline's row chunks). Set beside the measured peaks of the H100
models runs by ``benchmarks/memory_estimate.py`` (``benchmarks/memory_estimate_2026-12-06.txt``).

:func:`card_refusal` is the one place that decides a row cannot fit its card (:func:`card_bytes`): the
worker asks it before making inputs (:func:`parity.execute.execute`: ``parity run``, the API and the
pytest plugin alike), the sweep before it holds memory for the row (no drain for it).

Host memory (:func:`host_need`, :func:`host_refusal`, :func:`row_host_refusal`): the same estimate, counted where its parts live. A worker
on the CPU holds its largest stage in host memory; every process that makes a case's inputs first draws them in
float32 and casts them (:func:`draw_bytes`: ``draw``, in host memory whatever the device: 3x a bfloat16 case's
inputs); the harness's ``reference`` and ``baseline`` are host memory where the reference runs on the CPU
(``--reference-device cpu``, the default without CUDA, and always :func:`parity.evaluate`'s). What the machine has
(:func:`host_memory`): its physical memory or its cgroup's limit, and MemAvailable (or the cgroup's room) now.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import torch

from .case import UNREFERENCED_PAGES, Case, padded_capacity
from .maskcheck import (
    CPU_DECODE_ELEMENTS,
    MAX_DESCRIBED_ROWS,
    SCALED_CHUNK_ELEMENTS,
    STREAM_ELEMENTS,
    mask_plan,
    passes_per_call,
    probe_case,
)
from .reference import BLOCK_TEMPORARIES, band_block_bytes, block_kv_bytes, reference_workspace_bytes
from .verdict import CHUNK_ELEMENTS

MIB = 2**20
GIB = 2**30
#: float64 temporaries of one row chunk of the comparison / baseline.
CHUNK_TEMPORARIES = 4
#: Bytes of a row at which a worker releases its cached blocks afterwards (``torch.cuda.empty_cache``).
LARGE_ROW_BYTES = 1 << 30
#: Bytes per output element of the unwritten check: ``out == POISON`` (bool) and the int64 copy of it that
#: torch's ``sum`` of a bool tensor makes first (a 32k prefill at 32 heads, d 128: 1.1 GiB, the row's peak).
CHECK_BYTES = 1 + 8
#: Bytes per output element while the streamed mask probe folds one pass in (:class:`parity.maskcheck.MaskStream`),
#: beside the pass's output: the float32 weights, their masked copies and the bools (the H100 models run of
#: 2026-12-07d: 20.0 bytes per element beyond the inputs and the row's output on every streamed row, two of them the
#: pass's bfloat16 output).
STREAM_BYTES = 18
#: Bytes per (described pair, key) while a streamed probe's mismatch is put in words: the int64 copy that torch's
#: ``sum`` of the visible keys (bool) makes first (:func:`parity.maskcheck._row_patterns`; 2026-12-07d: a JAX cuDNN
#: mismatch at 2k x 12k keys, 4 heads, peaked at 508 MiB, 384 of them this).
DESCRIBE_BYTES = 8
#: Bytes per readout element of a row chunk the scaled probe compares (:func:`parity.maskcheck._residue_check`): the
#: stacked outputs (2, bfloat16), their float32 copy, its ratio to the row's largest, the ratio rounded, their
#: difference and its absolute value (4 each: 22), rounded up.
SCALED_BYTES = 24
#: Bytes per weight of a mask probe decoded whole on the device (:func:`parity.maskcheck.decode_mask`).
DECODE_BYTES = 16
#: The harness's named parts times this (:func:`harness_parts`).
MARGIN = 1.1
#: The named parts of a worker's stage times this: index tensors, ``cu_seqlens``, LSE conversions, the
#: allocator's rounding, and room for fragmentation: on the 501 rows of the H100 models runs of 2026-12-07c/d the
#: named parts alone are at least 0.98x the measured peak, so the estimate is at least 1.1x every one of them
#: (``tests/test_memory.py`` replays those rows).
WORKER_MARGIN = 1.15
#: Device memory one process takes before any tensor (its CUDA context, cuBLAS / cuDNN handles): 0.5-0.6 GiB
#: per worker on the H100 of 2026-12-06 ("Process ... has 610.00 MiB memory in use" beside an idle worker),
#: rounded up. A row can use its card less two of them: its worker's and the harness's (:func:`card_bytes`).
CONTEXT_BYTES = GIB
#: Worker parts (what ``peak_mem_mb`` measures, ``foreign`` aside) and the harness's.
WORKER_PARTS = ("inputs", "output", "workspace", "check", "probes", "margin", "resident", "foreign")
HARNESS_PARTS = ("reference", "baseline")


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """One row's estimated bytes per part (see the module docstring); ``stage``: the worker's largest;
    ``words``: what the backend says dominates (its ``workspace_words``); ``harness_on_device``: the
    reference parts count on the device."""

    parts: dict[str, int]
    harness_on_device: bool = False
    stage: str = ""
    words: str = ""
    draw: int = 0  # host bytes of drawing the inputs (:func:`draw_bytes`), in each process that makes them

    @property
    def worker_bytes(self) -> int:
        return sum(v for k, v in self.parts.items() if k not in HARNESS_PARTS)

    @property
    def measured_bytes(self) -> int:
        """The worker's bytes torch's allocator sees (``peak_mem_mb`` measures these): all but ``foreign``."""
        return self.worker_bytes - self.parts.get("foreign", 0)

    @property
    def harness_bytes(self) -> int:
        return sum(self.parts.get(k, 0) for k in HARNESS_PARTS)

    @property
    def device_bytes(self) -> int:
        """What the row needs on its GPU: the worker's parts, and the harness's where its reference runs there."""
        return self.worker_bytes + (self.harness_bytes if self.harness_on_device else 0)

    @property
    def mb(self) -> float:
        return self.device_bytes / MIB

    def text(self) -> str:
        parts = ", ".join(f"{k} {v / MIB:.0f}" for k, v in self.parts.items() if v)
        return f"{self.mb:.0f} MiB ({parts})"


@dataclasses.dataclass(frozen=True)
class Hints:
    """What a backend tells the estimate (duck-typed from its attributes; :func:`hints_of`)."""

    workspace: Callable[[Case], int] = lambda case: 0  # a call's own bytes beyond inputs and output
    again: Callable[[Case], int] = lambda case: 0  # the same, a call of lengths it has met (caches warm)
    resident: int = 0  # kept by its worker between rows
    foreign: Callable[[Case], int] = lambda case: 0  # outside torch's allocator
    paged: bool = False  # it has a paged path (the read probe runs on paged cases)
    padded: Callable[[Case], bool] = lambda case: False  # it reads this case through a padded cache
    words: Callable[[Case], str] = lambda case: ""  # what dominates its workspace, in words


def _safe(fn: Any, default: Any) -> Callable[[Case], Any]:
    """``fn`` where it answers, ``default`` where it is missing or raises (a hint only)."""

    def call(case: Case) -> Any:
        try:
            return fn(case) if fn is not None else default
        except Exception:  # noqa: BLE001 - a hint only
            return default

    return call


def hints_of(backend: object | None, workspace: int = 0) -> Hints:
    """``backend``'s hints (``workspace_bytes``, ``workspace_again_bytes``, ``resident_bytes``,
    ``foreign_bytes``, ``supports_paged``, ``padded_kv``, ``workspace_words``); without one,
    ``workspace`` bytes for every call."""
    if backend is None:
        return Hints(workspace=lambda case: workspace, again=lambda case: workspace)
    first = _safe(getattr(backend, "workspace_bytes", None), 0)
    again = _safe(getattr(backend, "workspace_again_bytes", None), None)
    return Hints(
        workspace=lambda case: max(int(first(case) or 0), workspace),
        again=lambda case: max(int(v if (v := again(case)) is not None else first(case) or 0), workspace),
        resident=int(getattr(backend, "resident_bytes", 0) or 0),
        foreign=lambda case: int(_safe(getattr(backend, "foreign_bytes", None), 0)(case) or 0),
        paged=bool(getattr(backend, "supports_paged", False)),
        padded=lambda case: bool(_safe(getattr(backend, "padded_kv", None), False)(case)),
        words=lambda case: str(_safe(getattr(backend, "workspace_words", None), "")(case) or ""),
    )


def paged_keys(case: Case, page_size: int | None = None) -> int:
    """Key slots of a paged cache as :func:`parity.case.paged_layout` builds it: every sequence's pages and the null page."""
    ps = page_size or case.page_size or 1
    return (sum(-(-sk // ps) for sk in case.k_lens) + UNREFERENCED_PAGES) * ps


def paged_bytes(case: Case, page_size: int | None = None) -> int:
    """One paged cache (k or v) as :func:`parity.case.paged_layout` builds it."""
    return paged_keys(case, page_size) * case.hkv * case.head_dim * _kv_elem(case)


def padded_bytes(case: Case) -> int:
    """One padded cache (k or v) as :func:`parity.case.padded_layout` builds it."""
    return case.batch * padded_capacity(case.k_lens) * case.hkv * case.head_dim * _kv_elem(case)


def _elem(case: Case) -> int:
    return torch.finfo(case.torch_dtype).bits // 8


def _kv_elem(case: Case) -> int:
    return 1 if case.kv_dtype is not None else _elem(case)


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """Bytes of one case's tensors on the device."""

    q: int  # the query (fp8 where q_fp8)
    kv: int  # k or v (fp8 KV: one byte each)
    out: int  # the output, in the case's dtype
    elements: int  # of the output
    lse: int  # a float32 LSE (total_q, hq)

    @property
    def inputs(self) -> int:
        return self.q + 2 * self.kv


def _sizes(case: Case) -> _Sizes:
    tq, tk = sum(case.q_lens), sum(case.k_lens)
    elements = tq * case.hq * case.head_dim
    q = elements * (1 if case.q_fp8 else _elem(case))
    return _Sizes(q, tk * case.hkv * case.head_dim * _kv_elem(case), elements * _elem(case), elements, tq * case.hq * 4)


def _call_stage(s: _Sizes, w: int) -> dict[str, int]:
    """The row's own call, then its unwritten check (not at once: ``W`` is freed by then)."""
    check = CHECK_BYTES * s.elements
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w if w >= check else 0, "check": check if check > w else 0}


def _compile_stage(s: _Sizes, w_again: int) -> dict[str, int]:
    """A configuration's first row: one more call (caches warm) beside the kept output."""
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w_again, "probes": s.out + s.lse}


def _gqa_stage(s: _Sizes, w_again: int) -> dict[str, int]:
    """The GQA probe: its V and zero q (:func:`parity.maskcheck.gqa_probe_inputs`), its output, the backend's workspace."""
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w_again, "probes": s.kv + s.q + s.out + s.lse}


def _mask_stage(case: Case, s: _Sizes, again: Callable[[Case], int], max_passes: int) -> dict[str, int] | None:
    """The mask probe's largest moment: a batched call, or the decoding after it (None: the probe does not run).
    The probe is the one that runs (:func:`parity.maskcheck.mask_plan`): the full one, or past ``max_passes`` the
    scaled one (:func:`_scaled_stage`)."""
    kind, passes = mask_plan(case, max_passes)
    if kind == "not_run":
        return None
    n = passes_per_call(case, passes=passes)
    if kind == "scaled":
        return _scaled_stage(case, s, again, passes, n)
    probe_in = _probe_inputs(s, n)
    weights = case.hq * sum(sq * sk for sq, sk in zip(case.q_lens, case.k_lens))
    w = again(probe_case(case, n))
    if weights <= STREAM_ELEMENTS:  # every pass kept (views of the calls' outputs), then decoded whole
        held = passes * (s.out + s.lse)
        after = 0 if weights <= CPU_DECODE_ELEMENTS else DECODE_BYTES * weights  # decoded on the device when large
    else:  # streamed: a call's output stays while each of its passes is folded in, beside the per-pair figures
        pairs = zip(case.q_lens, case.k_lens)  # and, on a mismatch, the visible / partial keys of the pairs it describes
        described = [min(MAX_DESCRIBED_ROWS, sq * case.hq) * sk for sq, sk in pairs]
        held = n * (s.out + s.lse) + 6 * sum(case.q_lens) * case.hq * 4 + 2 * sum(described) + 2 * 128 * max(case.k_lens)
        # one pass's float32 weights (the call's W freed by then), or a mismatch put in words after the passes
        after = max(STREAM_BYTES * s.elements, DESCRIBE_BYTES * max(described))
    # the largest of: a call (its probe inputs and W) and the decoding after it, beside what is held
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w, "probes": held + max(probe_in, after - w)}


def _probe_inputs(s: _Sizes, n: int) -> int:
    """A mask probe call's inputs, ``n`` passes batched: zero q, k repeated (n > 1), the pass values v."""
    return n * s.q + (n * s.kv if n > 1 else 0) + n * s.kv


def _scaled_stage(case: Case, s: _Sizes, again: Callable[[Case], int], passes: int, n: int) -> dict[str, int]:
    """The scaled probe's largest moment (:func:`parity.maskcheck.run_scaled_probe`): a residue call (its probe
    inputs and ``W`` beside the passes' outputs, all kept); the comparison after the calls, in row chunks
    (:func:`parity.maskcheck._residue_check`: :data:`SCALED_BYTES` per element of a chunk and the int8 spec
    readouts of the longest sequence, the calls' ``W`` and probe inputs freed by then: a 2k x 12k prefill at 32
    heads peaked at 481 MiB on SDPA's efficient kernel, its inputs, output, three outputs and one chunk of 16.8M
    elements at 22 bytes, not its 304 MiB ``W`` besides); or, on a mismatch, a refining call (one pass, the
    case's ``W``) beside the block pass's output, the previous refining output and the described pairs' float32
    readouts twice, kept and decoded (:func:`parity.maskcheck._describe_scaled`: a JAX cuDNN mismatch at 1+1+1+2k
    queries, 4 heads, d 256 peaked 20 MiB above the rows that pass)."""
    probe_in = _probe_inputs(s, n)
    kept = passes * (s.out + s.lse)
    per_row = passes * case.hq * case.head_dim
    chunk = SCALED_BYTES * per_row * min(max(1, SCALED_CHUNK_ELEMENTS // per_row), max(case.q_lens))
    pairs = sum(min(MAX_DESCRIBED_ROWS, sq * case.hq) for sq in case.q_lens)
    w_call, w_one = again(probe_case(case, n)), again(case)
    moments = [  # (its W, the probes' bytes beside it)
        (w_call, kept + probe_in),
        (0, kept + chunk + passes * max(case.q_lens) * case.head_dim),
        (w_one, s.q + s.kv + 3 * (s.out + s.lse) + 2 * 4 * passes * case.head_dim * pairs),
    ]
    w, probes = max(moments, key=sum)
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w, "probes": probes}


def _read_stage(case: Case, s: _Sizes, h: Hints, w_again: int) -> dict[str, int] | None:
    """The read probe (:func:`parity.maskcheck.run_read_probe`): a call on poisoned caches (None: the probe does not
    run). The backend's ``W`` holds its caches; making the poisoned ones holds the clean caches and their copies
    at once (:meth:`parity.case.Inputs.paged` / ``padded``: 4 caches, the larger of that and ``W``). Where a paged
    call reads NaN, one pass per poisoned part follows, their outputs kept beside the first's. The 1+1+1k-query
    paged rows of 2026-12-07d peaked at their inputs, output, probe output and 4 caches (1016 MiB on vLLM FA2 at
    16 heads, d 256: 4 x 166 MiB), 4-20 MiB more on those that read NaN. 6 were counted before (1.5x): the
    poisoning of 2026-12-06 (845f4c8) concatenated the unreferenced pages onto its copies, a third pair at once."""
    if case.page_size is not None and h.paged:
        poisoning, outputs = 4 * paged_bytes(case), 3  # the null page included
    elif case.page_size is None and h.padded(case):
        poisoning, outputs = 4 * padded_bytes(case), 1
    else:
        return None
    probes = outputs * (s.out + s.lse) + max(0, poisoning - w_again)
    return {"inputs": s.inputs, "output": s.out + s.lse, "workspace": w_again, "probes": probes}


def worker_stages(case: Case, h: Hints, probes: bool = True, max_passes: int = 64) -> dict[str, dict[str, int]]:
    """Each stage of the row in its worker (the module docstring's table): its parts' bytes."""
    s = _sizes(case)
    w_again = h.again(case)
    stages = {"call": _call_stage(s, h.workspace(case)), "compile": _compile_stage(s, w_again)}
    if probes:
        stages["gqa"] = _gqa_stage(s, w_again)
        for name, stage in (("mask", _mask_stage(case, s, h.again, max_passes)), ("read", _read_stage(case, s, h, w_again))):
            if stage is not None:
                stages[name] = stage
    return stages


def harness_parts(case: Case) -> dict[str, int]:
    """The harness's bytes for ``case`` (:func:`parity.judge.compute_baseline`, then the comparison): ``reference``
    (inputs, the float64 output and both LSEs) and ``baseline`` (the largest transient beside them), each with
    :data:`MARGIN` (the memory benchmark's 12 rows at real lengths: 1.1-1.5x their measured peaks)."""
    s = _sizes(case)
    e = _elem(case)
    kept = s.inputs + s.elements * 8 + s.lse * 3  # float64 reference LSE and the same-dtype float32 one
    seq = max(sq for sq in case.q_lens) * case.hq * case.head_dim if case.q_lens else 0
    reference = reference_workspace_bytes(case) - s.elements * 8  # its per-sequence copy and one band block (out: kept)
    same = s.elements * e + seq * e + BLOCK_TEMPORARIES * band_block_bytes(case, e) + block_kv_bytes(case, e)
    chunks = s.elements * e + min(CHUNK_ELEMENTS, s.elements) * 8 * CHUNK_TEMPORARIES
    return {"reference": int(kept * MARGIN), "baseline": int(max(reference, same, chunks) * MARGIN)}


def estimate(
    case: Case,
    probes: bool = True,
    max_passes: int = 64,
    workspace: int = 0,
    harness_on_device: bool = False,
    backend: object | None = None,
) -> MemoryEstimate:
    """``case``'s estimated bytes per part on ``backend`` (its hints, :func:`hints_of`; without one, ``workspace``
    bytes for every call): the largest worker stage with its margin, resident and foreign bytes, and the harness's."""
    h = hints_of(backend, workspace)
    stages = worker_stages(case, h, probes, max_passes)
    stage = max(stages, key=lambda k: sum(stages[k].values()))
    parts = {k: 0 for k in WORKER_PARTS}
    parts.update(stages[stage])
    named = sum(parts.values())
    parts.update(margin=int(named * (WORKER_MARGIN - 1)), resident=h.resident, foreign=h.foreign(case), **harness_parts(case))
    return MemoryEstimate(parts, harness_on_device, stage, h.words(case), draw_bytes(case))


def output_bytes(case: Case) -> int:
    """One copy of the output in the case's dtype (a backend that returns its own and the harness copies it)."""
    return _sizes(case).out


def sequence_output_bytes(case: Case) -> int:
    """The largest sequence's output (a backend that returns one per sequence)."""
    return max(case.q_lens, default=0) * case.hq * case.head_dim * _elem(case)


def lse_bytes(case: Case) -> int:
    """A float32 LSE ``(total_q, hq)``."""
    return _sizes(case).lse


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out (``torch.OutOfMemoryError``, ``MemoryError``, or a
    ``RuntimeError`` whose message says so, as CPU allocators and some libraries raise it)."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def free_bytes(device: torch.device | str | int | None = None) -> int | None:
    """Free memory of a CUDA device (``torch.cuda.mem_get_info``); None on the CPU or where it cannot be read."""
    if not torch.cuda.is_available():
        return None
    if isinstance(device, str) and device.startswith("cpu"):
        return None
    try:
        free, _ = torch.cuda.mem_get_info(device)
    except Exception:  # noqa: BLE001 - no free figure: no limit
        return None
    return int(free)


def total_bytes(device: torch.device | str | int | None = None) -> int | None:
    """A CUDA device's whole memory (``torch.cuda.get_device_properties``); None on the CPU or where it cannot be read."""
    if not torch.cuda.is_available() or (isinstance(device, str) and device.startswith("cpu")):
        return None
    try:
        return int(torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device).total_memory)
    except Exception:  # noqa: BLE001 - no figure: no refusal
        return None


def card_bytes(device: torch.device | str | int | None = None) -> int | None:
    """What one row can use on its card: the card's whole memory less two CUDA contexts (:data:`CONTEXT_BYTES`:
    the row's worker and the harness process). A property of the card, not of what other lanes hold now, so a
    row's verdict does not depend on the run's lanes. None where there is no CUDA device."""
    total = total_bytes(device)
    return None if total is None else max(0, total - 2 * CONTEXT_BYTES)


def card_refusal(est: MemoryEstimate, card: int | None, total: int | None = None) -> str | None:
    """Why a row whose worker needs ``est.worker_bytes`` cannot run on a card where a row can use ``card`` bytes
    (:func:`card_bytes`; ``total``: the card's whole memory, for the words); None when it fits or there is no card.

    ======================================  =================================================
    the row's worker estimate               the row
    ======================================  =================================================
    no card (CPU, no CUDA)                  runs
    <= what a row can use on the card       runs (the memory gate places it: beside others,
                                            or alone after the card drains)
    >  what a row can use on the card       ``unsupported``: this reason; nothing is run
    ======================================  =================================================
    """
    if card is None or est.worker_bytes <= card:
        return None
    what = est.words or ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in est.parts.items() if k not in HARNESS_PARTS and v >= GIB // 10)
    has = f"the card has {(total if total is not None else card + 2 * CONTEXT_BYTES) / GIB:.1f} GiB"
    return f"needs ~{est.worker_bytes / GIB:.1f} GiB by estimate ({what}); {has}, {card / GIB:.1f} GiB for a row beside its CUDA contexts"


def oom_detail(exc: BaseException | str, est: MemoryEstimate | None, free: int | None) -> str:
    """An out-of-memory row's detail: the error's first line, the row's estimate and the free memory."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    bits = [f"out of memory: {first}"]
    if est is not None:
        bits.append(f"estimated {est.text()}")
    bits.append(f"free before the row {free / MIB:.0f} MiB" if free is not None else "free device memory unknown")
    return "; ".join(bits)


# -- host memory ------------------------------------------------------------------------------------------

#: Host memory one process holds before any tensor: Python, torch and a backend imported (0.22 GiB RSS measured on
#: a CPU machine, 2026-12-07; a compiling backend imports more), rounded up. A row can use the machine less two of
#: them: its worker's and the harness process's (:attr:`HostMemory.usable`).
PROCESS_BYTES = GIB // 2
#: ``TOTAL[,AVAILABLE]`` (bytes, or with a K / M / G / T suffix): the host memory the harness counts on instead of
#: what it reads (a share of a shared machine; a small machine in the tests). Its workers inherit it.
HOST_ENV = "PARITY_HOST_MEMORY"
#: The cgroup's memory limit and what the group uses now: v2, then v1 (containers and CI runners set them).
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)
MEMINFO = "/proc/meminfo"
#: Address space one process maps before any tensor (0.6-0.7 GiB VmSize measured with torch imported and its
#: threads started, 2026-12-07), rounded up: under an address-space limit (``ulimit -v``, ``prlimit --as``) a
#: process's tensors get that limit less this (:attr:`HostMemory.per_process`).
PROCESS_MAP_BYTES = GIB


def draw_bytes(case: Case) -> int:
    """The host peak of making ``case``'s inputs (:func:`parity.case.draw_qkv`, on the CPU whatever the device):
    float32 q, k and v (twice where the input regime copies them) beside their casts to the case's dtype (a
    200k-key bfloat16 decode: 2346 MiB measured, 2343 by this)."""
    elements = sum(case.q_lens) * case.hq * case.head_dim + 2 * sum(case.k_lens) * case.hkv * case.head_dim
    return elements * 4 * (1 if case.regime == "normal" else 2) + _sizes(case).inputs


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """What the machine has: ``total`` (physical memory, or the cgroup's limit where lower), ``available`` now
    (MemAvailable, or the cgroup's room where smaller; None where unknown) and where ``total`` comes from."""

    total: int
    available: int | None
    source: str
    address_space: int | None = None  # each process's limit (RLIMIT_AS: ulimit -v, prlimit --as), None: none

    @property
    def usable(self) -> int:
        """What one row can use: the total less two processes (:data:`PROCESS_BYTES`)."""
        return max(0, self.total - 2 * PROCESS_BYTES)

    @property
    def per_process(self) -> int | None:
        """What one process's tensors can map under its address-space limit (None: no limit)."""
        return None if self.address_space is None else max(0, self.address_space - PROCESS_MAP_BYTES)


def _address_space() -> int | None:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        return None if soft == resource.RLIM_INFINITY else int(soft)
    except (ImportError, OSError, ValueError):  # not a POSIX system
        return None


def parse_bytes(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1.5GB"``, ``"1048576"`` -> bytes; ValueError for anything else."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    value = float(t[:-1] if scale > 1 else t)
    if not value > 0:
        raise ValueError(f"not a positive size: {text!r}")
    return int(value * scale)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # absent, or "max": no limit
        return None


def _meminfo_available() -> int | None:
    try:
        with open(MEMINFO) as f:
            line = next((x for x in f if x.startswith("MemAvailable:")), "")
        return int(line.split()[1]) * 1024 if line else None
    except (OSError, ValueError, IndexError):
        return None


def _physical() -> int | None:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def host_memory() -> HostMemory | None:
    """The machine's memory now (:class:`HostMemory`, with this process's address-space limit), or
    :data:`HOST_ENV`'s figures; None where it cannot be read. A bad :data:`HOST_ENV` is a ValueError naming it."""
    host = _machine_memory()
    return host if host is None else dataclasses.replace(host, address_space=_address_space())


def _machine_memory() -> HostMemory | None:
    if override := os.environ.get(HOST_ENV, "").strip():
        try:
            figures = [parse_bytes(x) for x in override.split(",")]
        except ValueError:
            figures = []
        if len(figures) not in (1, 2):
            raise ValueError(f"{HOST_ENV}={override!r}: expected TOTAL[,AVAILABLE], sizes such as 8G or 512M")
        now = figures[1] if len(figures) == 2 else min(figures[0], _meminfo_available() or figures[0])
        return HostMemory(figures[0], min(now, figures[0]), HOST_ENV)
    physical, available = _physical(), _meminfo_available()
    for limit_path, used_path in CGROUP_FILES:
        limit = _read_int(limit_path)
        if limit is not None and (physical is None or limit < physical):
            used = _read_int(used_path)
            room = None if used is None else max(0, limit - used)
            known = [x for x in (available, room) if x is not None]
            return HostMemory(limit, min(known) if known else None, f"cgroup limit {limit_path}")
    return None if physical is None else HostMemory(physical, available, "physical memory")


@dataclasses.dataclass(frozen=True)
class HostNeed:
    """A row's host bytes: its worker's and the harness's (reference and baseline); ``concurrent``: at once (a
    sweep's worker computes while the harness makes the reference), else one after the other (in one process)."""

    worker: int
    harness: int
    concurrent: bool
    words: str = ""

    @property
    def bytes(self) -> int:
        return self.worker + self.harness if self.concurrent else max(self.worker, self.harness)


def host_need(est: MemoryEstimate, backend_on_host: bool, reference: str | None, concurrent: bool = True) -> HostNeed:
    """``est``'s host bytes: the worker's largest stage where its backend runs on the host, else its draw
    (:func:`draw_bytes`); the harness's reference parts where ``reference`` (its device) is the CPU, its draw where
    it is a GPU, nothing where it is None (cached, or not computed for this row)."""
    worker = max(est.worker_bytes, est.draw) if backend_on_host else est.draw
    on_cpu = reference is not None and reference.startswith("cpu")
    harness = 0 if reference is None else max(est.harness_bytes, est.draw) if on_cpu else est.draw
    bits = [f"its worker {worker / GIB:.1f} GiB" + _host_words(est, est.worker_bytes if backend_on_host else 0, worker)]
    if harness:
        bits.append(f"the reference {harness / GIB:.1f} GiB" + _host_words(est, est.harness_bytes if on_cpu else 0, harness))
    return HostNeed(worker, harness, concurrent, ("; " if concurrent else ", then ").join(bits))


def _host_words(est: MemoryEstimate, stages: int, most: int) -> str:
    """What dominates a process's host bytes ``most``: drawing the inputs, or its stages (the backend's words)."""
    if most and most == est.draw and est.draw > stages:
        return ": its inputs drawn in float32, then cast"
    if stages == est.worker_bytes:
        return f": {est.words or f'its {est.stage} stage'}"
    return ""


def host_refusal(need: HostNeed, host: HostMemory | None) -> str | None:
    """Why a row that needs ``need`` host bytes cannot run on a machine that has ``host`` (:func:`host_memory`);
    None when it runs. The total is a property of the machine; what is available now is asked only of a large row
    (:data:`LARGE_ROW_BYTES`): a busy machine is no reason to refuse a small one, and a large one past what is free
    now would take the machine's memory (no swap: the kernel's OOM killer ends the harness, and every row with it).

    ===================  =============================================  ==========================================
    host figures         the row's host need ``n``                      the row
    ===================  =============================================  ==========================================
    none (not read)      any                                            runs
    read                 ``n`` <= usable, under 1 GiB                   runs
    read                 ``n`` <= usable, <= available now (or unknown) runs
    read                 1 GiB <= ``n`` <= usable, > available now      ``unsupported``: available now, of the total
    read                 ``n`` > usable (total less two processes)      ``unsupported``: the total
    an address-space     its worker's or the harness's part > the       ``unsupported``: each process's limit
    limit (ulimit -v)    limit less one process's own mappings
    ===================  =============================================  ==========================================
    """
    n = need.bytes
    head = f"needs ~{n / GIB:.1f} GiB of host memory by estimate ({need.words})"
    most = max(need.worker, need.harness)
    if host is not None and host.per_process is not None and most > host.per_process:
        assert host.address_space is not None
        limit = f"{host.address_space / GIB:.1f} GiB (ulimit -v), {host.per_process / GIB:.1f} GiB for its tensors"
        return f"{head}; a process here may map {limit}"
    if host is None or (n <= host.usable and (n < LARGE_ROW_BYTES or host.available is None or n <= host.available)):
        return None
    if n > host.usable:
        usable = f"{host.usable / GIB:.1f} GiB for a row beside its worker and harness processes"
        return f"{head}; the machine has {host.total / GIB:.1f} GiB in all ({host.source}), {usable}"
    assert host.available is not None
    return f"{head}; the machine has {host.available / GIB:.1f} GiB available now, of {host.total / GIB:.1f} GiB in all ({host.source})"


def row_host_refusal(need: HostNeed, host: HostMemory | None, own: Callable[[], str | None] | None = None) -> str | None:
    """Why a row is refused before it runs, where its caller asks the host (the sweep before it sends the row,
    :func:`parity.evaluate` before its call): :func:`host_refusal`, unless the backend refuses the case itself.
    ``own``: the backend's own refusal (``refusal_reason`` of :mod:`parity.backends.base` on the case; None
    where no backend object is at hand), asked only of a row the machine cannot hold. The one rule of both callers:

    =======================  =============================================================================
    the row                  its refusal
    =======================  =============================================================================
    the machine holds it     None (``own`` is not asked)
    ``own`` says why not     the backend's words (as its worker would say them)
    ``own`` says nothing     the host's words
    ``own`` raises           the host's words stand, the exception's appended (nothing is lost):
                             ``...; its unsupported_reason() raised ValueError: ...``
    =======================  =============================================================================
    """
    why = host_refusal(need, host)
    if why is None or own is None:
        return why
    try:
        return own() or why
    except Exception as exc:  # noqa: BLE001 - the host refuses the row either way; the backend's words kept
        return f"{why}; its unsupported_reason() raised {type(exc).__name__}: {exc}"
