"""The float64 reference itself, rounded to the case's dtype: a sanity backend.

It must always pass; if it does not, the harness (not a kernel) is broken.
"""

from __future__ import annotations

import torch

from ..case import FP8_DTYPES, FP8_SCALES, Case, Inputs, pages_seen
from ..memory import paged_bytes, paged_keys
from ..reference import attention_reference, reference_workspace_bytes
from .base import Backend, cuda_unavailable_reason


class ReferenceBackend(Backend):
    name = "reference"
    description = "naive banded attention in float64, rounded to the case dtype"
    supports_paged = True
    kv_dtypes = tuple(FP8_DTYPES)  # fp8 inputs: the reference of their dequantized values (a sanity check, not a kernel test)
    fp8_scale_layouts = FP8_SCALES  # every descale layout: per element (Inputs.dequantized)
    fp8_queries = True
    supports_sinks = True
    supports_chunk = True
    supports_grad = True  # the float64 reference gradients (parity.grad), rounded to the dtype
    grad_sinks = True

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from ..grad import grad_reference

        g = grad_reference(inputs, dout, torch.float64, stop=self.stop)  # --no-isolate: a stop signal ends it (as run_lse)
        dq, dk, dv = g["dq"].to(inputs.q.dtype), g["dk"].to(inputs.k.dtype), g["dv"].to(inputs.v.dtype)
        if inputs.sinks is None:
            return dq, dk, dv
        return dq, dk, dv, g["dsinks"].to(inputs.sinks.dtype)  # (hq,): the sinks' own gradient

    returns_lse = True
    lse_empty = ("-inf",)  # the reference's own convention
    #: not made capturable: the harness's own sanity backend, not an engine's call (see the words)
    no_graph = (
        "the float64 reference copies each block's band bounds from the host (parity/reference.py) and pages through "
        "PagedKV.gather (.tolist()): not capturable as written; it is the harness's sanity backend, not an engine's call"
    )

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self.run_lse(case, inputs, out)[0]

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if case.page_size is not None:  # read K/V back through the paged cache: only the pages some row sees
            k, v = inputs.paged().gather([pages_seen(case, case.page_size, b) for b in range(case.batch)])
            inputs = inputs.with_tensors(inputs.q, k, v)
        lse = torch.empty(inputs.q.shape[:2], dtype=torch.float64, device=inputs.q.device)  # (total_q, hq)
        # a stop signal in this process (--no-isolate) ends it within a block of rows (ReferenceStopped: the row is dropped)
        out.copy_(attention_reference(inputs, torch.float64, lse=lse, stop=self.stop))
        return out, lse.float()

    def workspace_bytes(self, case: Case) -> int:
        """The float64 output, one band block's temporaries and its K / V copies (:func:`reference_workspace_bytes`);
        paged: first the paged caches, :meth:`parity.case.PagedKV.gather`'s zero-filled pages of every sequence
        and the keys it packs again, then those packed keys beside the reference's own."""
        if case.page_size is None:
            return reference_workspace_bytes(case)
        packed = 2 * sum(case.k_lens) * (paged_bytes(case) // max(1, paged_keys(case)))  # k and v, bytes per key slot
        return max(4 * paged_bytes(case) + packed, packed + reference_workspace_bytes(case))


class ReferenceCudaBackend(ReferenceBackend):
    name = "reference-cuda"
    device = "cuda"
    description = "the float64 reference computed on the GPU"

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason()
