"""FlashAttention-4, the CuTe-DSL interface ``flash_attn.cute`` (PyPI ``flash-attn-4``).

Entry points: ``flash_attn_func`` (dense ``(B, S, H, D)``) for uniform cases,
``flash_attn_varlen_func`` (packed, ``cu_seqlens_q`` / ``cu_seqlens_k``) otherwise, and for
paged cases ``flash_attn_varlen_func`` with ``page_table`` ``(B, max_pages)`` and
``seqused_k`` ``(B,)`` over a ``(num_pages, page_size, hkv, d)`` cache (``cu_seqlens_k``
must then be None). GQA is native (``hq`` a multiple of ``hkv``). Softcap is ``softcap=c``.

Window translation: ``window_size=(left, right)``, inclusive, bottom-right aligned (the
flash-attn convention), and, unlike FA2/FA3, **the unbounded sentinel is None, not -1**:
the canonical ``None`` passes through unchanged. ``causal`` stays False; a ``(None, 0)``
window is FA4's own causal path. No top-left alignment: ``top_left`` is exact only where
every sequence has ``Sq == Sk``; otherwise unsupported.

Refusals (:data:`FA4_REFUSALS`): FA4 guards its Python interface and its kernel classes with
``assert`` (and a few ``NotImplementedError``); those that decline a configuration:

==================================  =========================================================
``does not support``                "Paged KV does not support irregular head dim" (paged KV
                                    with d = 72 on the H200, flash_fwd_sm90.py)
``not yet supported``               "Block sparsity is not yet supported with SplitKV ..."
``head_dim must be``                "head_dim must be less than or equal to 256", "head_dim
                                    must be divisible by 8"
``head_dim_v must be``              the same for V's head dim
``Unsupported compute capability``  "Unsupported compute capability. Supported: 9.x, 10.x,
                                    11.x"
==================================  =========================================================

Shape and dtype asserts on what the harness passes ("page_table must be int32") are not
refusals: they would be a bug here, and stay errors.

It compiles one kernel per configuration on first use (a few seconds), then caches it.
It cannot share a ``sys.path`` with xformers: run its worker with
``--worker-path fa4-cuda=/path/to/site-fa4``.
"""

from __future__ import annotations

import textwrap

import torch

from ..case import Case, Inputs
from ..results import HALF_DTYPES
from ..window import Window
from .base import Backend, Unsupported, cuda_unavailable_reason, import_error_reason, refusals

#: FA4's own words when it declines a configuration; see the module docstring.
FA4_REFUSALS: tuple[str, ...] = (
    "does not support",
    "not yet supported",
    "head_dim must be",
    "head_dim_v must be",
    "Unsupported compute capability",
)


def fa4_window(window: Window, q_lens, k_lens) -> tuple[int | None, int | None]:
    """``window_size`` for FA4: None = unbounded. Raises :class:`Unsupported`."""
    if window.align == "top_left" and any(q != k for q, k in zip(q_lens, k_lens)):
        raise Unsupported("FA4 windows are bottom-right aligned; top_left with Sq != Sk has no translation")
    return window.left, window.right


class Fa4Backend(Backend):
    cost_hint = 8  # relative sweep cost, for --jobs lanes: CuTe DSL compiles each new kernel configuration
    name = "fa4-cuda"
    device = "cuda"
    supports_paged = True
    description = "flash_attn.cute (FA4): flash_attn_func when uniform, else flash_attn_varlen_func; page_table for paged KV"
    always_varlen = False

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason("flash_attn.cute"):
            return r + " (pip install flash-attn-4)"
        major, _ = torch.cuda.get_device_capability()
        if major < 9:
            return f"FA4 targets compute capability 9.x/10.x; this GPU is {major}.x"
        return None

    def version(self) -> str:
        import importlib.metadata

        try:
            return f"flash-attn-4 {importlib.metadata.version('flash-attn-4')}"
        except importlib.metadata.PackageNotFoundError:
            import flash_attn.cute as cute

            return f"flash_attn.cute {getattr(cute, '__version__', 'unknown')}"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES:
            return f"FA4 takes float16/bfloat16 only, not {case.dtype}"
        if case.head_dim % 8 or not 8 <= case.head_dim <= 256:
            return f"head_dim {case.head_dim}: FA4 on SM90 needs a multiple of 8 in 8..256"
        try:
            fa4_window(case.window, case.q_lens, case.k_lens)
        except Unsupported as exc:
            return str(exc)
        return None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        window = fa4_window(case.window, case.q_lens, case.k_lens)
        kw = dict(softmax_scale=case.softmax_scale, causal=False, window_size=window, softcap=case.softcap or 0.0)
        with refusals(FA4_REFUSALS, "flash-attn-4"):
            o = self._forward(case, inputs, kw)
        if isinstance(o, tuple):
            o = o[0]  # (out, lse)
        out.copy_(o.reshape(out.shape))  # (total_q, hq, d)
        return out

    def _forward(self, case: Case, inputs: Inputs, kw: dict):
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

        if case.page_size is not None:
            paged = inputs.paged()
            return flash_attn_varlen_func(
                inputs.q,  # (total_q, hq, d)
                paged.k_cache,  # (pages, page_size, hkv, d)
                paged.v_cache,  # (pages, page_size, hkv, d)
                cu_seqlens_q=inputs.cu_seqlens_q,  # (B + 1,) int32
                max_seqlen_q=max(case.q_lens),
                max_seqlen_k=max(case.k_lens),
                seqused_k=paged.seqlens_k,  # (B,) int32
                page_table=paged.block_table,  # (B, max_pages) int32
                **kw,
            )
        if case.is_uniform and not self.always_varlen:
            q, k, v = inputs.dense()  # (B, Sq, hq, d), (B, Sk, hkv, d), (B, Sk, hkv, d)
            return flash_attn_func(q, k, v, **kw)
        return flash_attn_varlen_func(
            inputs.q,  # (total_q, hq, d)
            inputs.k,  # (total_k, hkv, d)
            inputs.v,  # (total_k, hkv, d)
            cu_seqlens_q=inputs.cu_seqlens_q,  # (B + 1,) int32
            cu_seqlens_k=inputs.cu_seqlens_k,  # (B + 1,) int32
            max_seqlen_q=max(case.q_lens),
            max_seqlen_k=max(case.k_lens),
            **kw,
        )


    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: this call, ``window_size`` from :func:`fa4_window`."""
        from ..repro_script import fill

        if case.page_size is not None:
            fn, call = "flash_attn_varlen_func", """\
                k_cache, v_cache, page_table, seqused_k = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)  # as the harness pages them
                o = flash_attn_varlen_func(
                    q,  # (total_q, hq, d)
                    k_cache,  # (pages, page_size, hkv, d)
                    v_cache,  # (pages, page_size, hkv, d)
                    cu_seqlens_q=torch.tensor(CU_Q, dtype=torch.int32, device=q.device),  # (B + 1,)
                    max_seqlen_q=max(Q_LENS),
                    max_seqlen_k=max(K_LENS),
                    seqused_k=seqused_k,  # (B,) int32
                    page_table=page_table,  # (B, max_pages) int32
                    **kw,
                )"""
        elif case.is_uniform and not self.always_varlen:
            fn, call = "flash_attn_func", """\
                b, sq, sk = len(Q_LENS), Q_LENS[0], K_LENS[0]
                o = flash_attn_func(
                    q.view(b, sq, HQ, HEAD_DIM),  # (B, Sq, hq, d)
                    k.view(b, sk, HKV, HEAD_DIM),  # (B, Sk, hkv, d)
                    v.view(b, sk, HKV, HEAD_DIM),  # (B, Sk, hkv, d)
                    **kw,
                )"""
        else:
            fn, call = "flash_attn_varlen_func", """\
                o = flash_attn_varlen_func(
                    q,  # (total_q, hq, d)
                    k,  # (total_k, hkv, d)
                    v,  # (total_k, hkv, d)
                    cu_seqlens_q=torch.tensor(CU_Q, dtype=torch.int32, device=q.device),  # (B + 1,)
                    cu_seqlens_k=torch.tensor(CU_K, dtype=torch.int32, device=q.device),  # (B + 1,)
                    max_seqlen_q=max(Q_LENS),
                    max_seqlen_k=max(K_LENS),
                    **kw,
                )"""
        return fill(
            """\
            from flash_attn.cute import $fn


            def attention(q, k, v):
                # FA4's window_size: (left, right), inclusive, bottom-right aligned; None = unbounded (not -1)
                kw = dict(softmax_scale=SCALE, causal=False, window_size=$window, softcap=$softcap)
                $call
                if isinstance(o, tuple):
                    o = o[0]  # (out, lse)
                return o.reshape(q.shape)  # (total_q, hq, d)
            """,
            fn=fn,
            window=repr(fa4_window(case.window, case.q_lens, case.k_lens)),
            softcap=repr(case.softcap or 0.0),
            call=textwrap.dedent(call),
        )


class Fa4VarlenBackend(Fa4Backend):
    name = "fa4-varlen-cuda"
    description = "flash_attn.cute (FA4) flash_attn_varlen_func for every case (page_table for paged KV)"
    always_varlen = True
