"""FlashInfer ``single_prefill_with_kv_cache``, per sequence, where FlashInfer is installed.

Layout NHD: ``q`` ``(Sq, hq, d)``, ``k``/``v`` ``(Sk, hkv, d)``; GQA native.

Window translation: FlashInfer has a left window only, ``window_left`` (keys
``i + Sk - Sq - window_left .. `` stay visible; ``-1`` = unbounded), bottom-right aligned,
combined with ``causal=True`` for ``right == 0``. So ``(L, 0)`` -> ``causal=True,
window_left=L``; ``(None, 0)`` -> ``causal=True, window_left=-1``; ``(None, None)`` ->
``causal=False, window_left=-1``. A bounded right side other than 0, a bounded left with
an unbounded right, and ``top_left`` with ``Sq != Sk`` are unsupported. Softcap is
``logits_soft_cap``.

Refusal phrases (:data:`FLASHINFER_REFUSALS`): FlashInfer's dispatch macros raise
``RuntimeError`` when no kernel was generated for a configuration:

========================  ==================================================================
``Unsupported head_dim``  "Unsupported head_dim: 80" (``DISPATCH_HEAD_DIM``)
``failed to dispatch``    "BatchPrefillWithPagedKVCache failed to dispatch with dtype Half"
                          (0.0.2, built without head_dim 256 kernels)
========================  ==================================================================

A CUDA error raised through FlashInfer ("... failed with error: an illegal memory access")
is not a refusal.
"""

from __future__ import annotations

import torch

from ..case import Case, Inputs
from ..window import Window
from .base import Backend, Unsupported, cuda_unavailable_reason, import_error_reason, refusals

#: FlashInfer's own words when it has no kernel for a configuration; see the module docstring.
FLASHINFER_REFUSALS: tuple[str, ...] = ("Unsupported head_dim", "failed to dispatch")


def flashinfer_window(window: Window, sq: int, sk: int) -> tuple[bool, int]:
    """``(causal, window_left)``; raises :class:`Unsupported`."""
    if window.align == "top_left" and sq != sk:
        raise Unsupported("FlashInfer aligns bottom-right; top_left with Sq != Sk has no translation")
    if window.right == 0:
        return True, -1 if window.left is None else window.left
    if window.right is None and window.left is None:
        return False, -1
    raise Unsupported(f"FlashInfer has a left window only (with causal); window {window.describe()} has no translation")


class FlashInferBackend(Backend):
    name = "flashinfer-cuda"
    device = "cuda"
    description = "flashinfer.single_prefill_with_kv_cache with window_left"

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason("flashinfer"):
            return r + " (pip install flashinfer-python; it JIT-compiles its kernels with nvcc)"
        return None

    def version(self) -> str:
        import flashinfer

        return f"flashinfer {getattr(flashinfer, '__version__', 'unknown')}"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.dtype not in ("float16", "bfloat16"):
            return f"FlashInfer prefill takes float16/bfloat16, not {case.dtype}"
        try:
            for sq, sk in zip(case.q_lens, case.k_lens):
                flashinfer_window(case.window, sq, sk)
        except Unsupported as exc:
            return str(exc)
        return None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        import flashinfer

        for _, q, k, v, qs in inputs.sequences():
            causal, left = flashinfer_window(case.window, q.shape[0], k.shape[0])
            with refusals(FLASHINFER_REFUSALS, "FlashInfer"):
                o = flashinfer.single_prefill_with_kv_cache(
                    q,  # (Sq, hq, d)
                    k,  # (Sk, hkv, d)
                    v,  # (Sk, hkv, d)
                    causal=causal,
                    window_left=left,
                    sm_scale=case.softmax_scale,
                    logits_soft_cap=case.softcap or 0.0,
                )  # (Sq, hq, d)
            out[qs] = o
        return out

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: this call, per sequence from :func:`flashinfer_window`."""
        from ..repro_script import fill

        native = [flashinfer_window(case.window, sq, sk) for sq, sk in zip(case.q_lens, case.k_lens)]
        return fill(
            """\
            import flashinfer

            NATIVE = $native  # per sequence (causal, window_left): keys from i + Sk - Sq - window_left on; -1 = unbounded


            def attention(q, k, v):
                out = torch.empty_like(q)  # (total_q, hq, d)
                for b, (causal, window_left) in enumerate(NATIVE):
                    out[CU_Q[b] : CU_Q[b + 1]] = flashinfer.single_prefill_with_kv_cache(
                        q[CU_Q[b] : CU_Q[b + 1]],  # (Sq, hq, d)
                        k[CU_K[b] : CU_K[b + 1]],  # (Sk, hkv, d)
                        v[CU_K[b] : CU_K[b + 1]],  # (Sk, hkv, d)
                        causal=causal,
                        window_left=window_left,
                        sm_scale=SCALE,
                        logits_soft_cap=$softcap,
                    )  # (Sq, hq, d)
                return out
            """,
            native=repr(native),
            softcap=repr(case.softcap or 0.0),
        )
