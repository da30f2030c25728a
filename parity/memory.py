"""Device memory: what one row is estimated to need, what is free, and what counts as out of memory.

:func:`estimate` adds up, per row, the pieces a sweep allocates for one case on one backend:

=================  ===============================================================  ==========
part               what                                                             where
=================  ===============================================================  ==========
``inputs``         q, k, v in the case's dtype (a paged cache: k and v once more)   worker
``output``         the poisoned output buffer and the unwritten check               worker
``workspace``      the backend's own hint (:meth:`Backend.workspace_bytes`)         worker
``probes``         the larger of the mask probe that runs (full or scaled: one      worker
                   batched call and its decoding) and the GQA probe
``reference``      inputs (drawn in float32), float64 output, one band block        harness
``baseline``       the same-dtype output, its band block, the comparison's chunks   harness
=================  ===============================================================  ==========

The harness parts are on the device only where the reference runs there
(``--reference-device cuda``). Figures are upper-bound-ish rules of thumb, not measurements:
``benchmarks/memory_estimate.py`` sets them beside measured peaks.
"""

from __future__ import annotations

import dataclasses

import torch

from .case import Case
from .maskcheck import CPU_DECODE_ELEMENTS, SCALED_CHUNK_ELEMENTS, STREAM_ELEMENTS, mask_plan, passes_per_call
from .reference import BLOCK_TEMPORARIES, band_block_bytes, block_kv_bytes, reference_workspace_bytes
from .verdict import CHUNK_ELEMENTS

MIB = 2**20
#: float64 temporaries of one row chunk of the comparison / baseline.
CHUNK_TEMPORARIES = 4
#: Bytes of a row at which a worker releases its cached blocks afterwards (``torch.cuda.empty_cache``).
LARGE_ROW_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """One row's estimated bytes, per part; ``harness_on_device``: the reference parts count."""

    parts: dict[str, int]
    harness_on_device: bool = False

    @property
    def worker_bytes(self) -> int:
        return sum(v for k, v in self.parts.items() if k not in ("reference", "baseline"))

    @property
    def harness_bytes(self) -> int:
        return self.parts.get("reference", 0) + self.parts.get("baseline", 0)

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


def _probe_bytes(case: Case, max_passes: int) -> int:
    """The larger of the mask probe that runs (:func:`parity.maskcheck.mask_plan`: the full or the scaled
    one) and the GQA probe (:mod:`parity.maskcheck`)."""
    e = torch.finfo(case.torch_dtype).bits // 8
    tq, tk = sum(case.q_lens), sum(case.k_lens)
    out = tq * case.hq * case.head_dim  # elements of one output
    kv = tk * case.hkv * case.head_dim
    gqa = (kv + 2 * out) * e  # v, the output and its poison check
    kind, passes = mask_plan(case, max_passes)
    if kind == "not_run":
        return gqa
    n = passes_per_call(case, passes=passes)
    call = n * (2 * out + 2 * kv) * e + n * out * e  # q, k, v of the batch, its output (and poison)
    if kind == "scaled":  # every residue pass's output kept, compared in row chunks (float32 copies of a chunk)
        return max(gqa, call + passes * out * e + 6 * SCALED_CHUNK_ELEMENTS * 4)
    weights = case.hq * sum(sq * sk for sq, sk in zip(case.q_lens, case.k_lens))
    if weights <= STREAM_ELEMENTS:  # every pass kept, decoded whole (on the CPU when small)
        kept = passes * out * e
        decode = 0 if weights <= CPU_DECODE_ELEMENTS else 4 * weights * 4
        return max(gqa, call + kept + decode)
    stream = 3 * out * 4 + 6 * tq * case.hq * 4  # one pass's float32 weights, the per-pair figures
    return max(gqa, call + stream)


def estimate(case: Case, probes: bool = True, max_passes: int = 64, workspace: int = 0, harness_on_device: bool = False) -> MemoryEstimate:
    """``case``'s estimated bytes per part (see the module docstring)."""
    e = torch.finfo(case.torch_dtype).bits // 8
    tq, tk = sum(case.q_lens), sum(case.k_lens)
    out = tq * case.hq * case.head_dim
    kv = tk * case.hkv * case.head_dim
    inputs = (out + 2 * kv) * e * (2 if case.page_size is None else 3)  # the worker's copy, a paged cache or repeats
    block = band_block_bytes(case)
    chunk = min(CHUNK_ELEMENTS, out) * 8 * CHUNK_TEMPORARIES
    parts = {
        "inputs": inputs,
        "output": out * (e + 1),
        "workspace": max(0, int(workspace)),
        "probes": _probe_bytes(case, max_passes) if probes else 0,
        "reference": (out + 2 * kv) * (e + 4) + reference_workspace_bytes(case),  # inputs: drawn in float32, cast
        "baseline": out * e + BLOCK_TEMPORARIES * block // 2 + out * e + chunk + block_kv_bytes(case, e),  # its K / V copies: e
    }
    return MemoryEstimate(parts, harness_on_device)


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


def oom_detail(exc: BaseException | str, est: MemoryEstimate | None, free: int | None) -> str:
    """An out-of-memory row's detail: the error's first line, the row's estimate and the free memory."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    bits = [f"out of memory: {first}"]
    if est is not None:
        bits.append(f"estimated {est.text()}")
    bits.append(f"free before the row {free / MIB:.0f} MiB" if free is not None else "free device memory unknown")
    return "; ".join(bits)
