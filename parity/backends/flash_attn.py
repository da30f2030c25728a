"""The ``flash-attn`` package: FlashAttention-2 (``flash_attn``) and FlashAttention-3
(``flash_attn_interface``, the Hopper build), where installed.

Entry points, one variant each:

* ``fa2-cuda``: ``flash_attn_func`` (dense) for uniform cases, ``flash_attn_varlen_func``
  (``cu_seqlens_q/k``) otherwise;
* ``fa2-kvcache-cuda``: ``flash_attn_with_kvcache`` (decode / chunked prefill against a
  cache; ``cache_seqlens``; paged through ``block_table`` over a
  ``(num_blocks, page_size, hkv, d)`` cache, FA2 wants ``page_size % 256 == 0``);
* ``fa3-cuda``: ``flash_attn_interface.flash_attn_func`` / ``flash_attn_varlen_func``.

Window translation: ``window_size=(left, right)``, inclusive, bottom-right aligned, and
``-1`` = unbounded (FA2 and FA3; FA4 uses None, see :mod:`.flash_attn4`). ``causal`` stays
False: ``(-1, 0)`` is causal. No top-left alignment: ``top_left`` only where ``Sq == Sk``.

Refusals: the package's ``TORCH_CHECK`` sentences, the same as PyTorch's vendored copy
(:data:`.torch_fa2.FA2_REFUSALS`: "FlashAttention only supports Ampere GPUs or newer.",
"FlashAttention forward only supports head dimension at most 256", "Paged KV cache block size
must be divisible by ...", FA3's "head_size should be a multiple of 8").
"""

from __future__ import annotations

import textwrap

import torch

from ..case import Case, Inputs
from .base import Backend, cuda_unavailable_reason, import_error_reason, refusals
from .torch_fa2 import FA2_REFUSALS, fa2_case_reason, fa2_window

#: The flash-attn package (FA2 and FA3) and PyTorch's vendored FA2 share one convention.
flash_window = fa2_window


class FlashAttnBackend(Backend):
    name = "fa2-cuda"
    device = "cuda"
    module = "flash_attn"
    install_hint = "pip install flash-attn: a wheel built for this torch and CUDA, or a source build with nvcc"
    description = "flash_attn.flash_attn_func / flash_attn_varlen_func (FA2 package)"
    softcap_ok = True

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason(self.module):
            return r + f" ({self.install_hint})"
        mod = __import__(self.module)
        if not hasattr(mod, "flash_attn_func"):
            return f"{self.module} has no flash_attn_func (is this the FA4-only flash_attn namespace package?)"
        return None

    def version(self) -> str:
        mod = __import__(self.module)
        return f"{self.module} {getattr(mod, '__version__', 'unknown')}"

    def unsupported_reason(self, case: Case) -> str | None:
        return fa2_case_reason(case, softcap_ok=self.softcap_ok)

    def _kw(self, case: Case) -> dict:
        return dict(
            softmax_scale=case.softmax_scale,
            causal=False,
            window_size=flash_window(case.window, case.q_lens, case.k_lens),
            softcap=case.softcap or 0.0,
        )

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        with refusals(FA2_REFUSALS, self.module):
            o = self._forward(case, inputs)
        out.copy_(o.reshape(out.shape))  # (total_q, hq, d)
        return out

    def _forward(self, case: Case, inputs: Inputs) -> torch.Tensor:
        mod = __import__(self.module)
        if case.is_uniform:
            q, k, v = inputs.dense()  # (B, Sq, hq, d), (B, Sk, hkv, d), (B, Sk, hkv, d)
            o = mod.flash_attn_func(q, k, v, **self._kw(case))
        else:
            o = mod.flash_attn_varlen_func(
                inputs.q,  # (total_q, hq, d)
                inputs.k,  # (total_k, hkv, d)
                inputs.v,  # (total_k, hkv, d)
                inputs.cu_seqlens_q,  # (B + 1,) int32
                inputs.cu_seqlens_k,  # (B + 1,) int32
                max(case.q_lens),
                max(case.k_lens),
                **self._kw(case),
            )
        return o[0] if isinstance(o, tuple) else o  # FA3 returns (out, lse)


    def _repro(self, imports: str, call: str, case: Case) -> str:
        from ..repro_script import fill

        return fill(
            """\
            $imports


            def attention(q, k, v):
                # flash-attn's window_size: (left, right), inclusive, bottom-right aligned; -1 = unbounded
                kw = dict(softmax_scale=SCALE, causal=False, window_size=$window, softcap=$softcap)
                $call
                if isinstance(o, tuple):
                    o = o[0]  # (out, lse)
                return o.reshape(q.shape)  # (total_q, hq, d)
            """,
            imports=imports,
            window=repr(self._kw(case)["window_size"]),
            softcap=repr(self._kw(case)["softcap"]),
            call=textwrap.dedent(call),
        )

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: this call, ``window_size`` from :func:`flash_window`."""
        if case.is_uniform:
            return self._repro(f"from {self.module} import flash_attn_func", """\
                b, sq, sk = len(Q_LENS), Q_LENS[0], K_LENS[0]
                o = flash_attn_func(
                    q.view(b, sq, HQ, HEAD_DIM),  # (B, Sq, hq, d)
                    k.view(b, sk, HKV, HEAD_DIM),  # (B, Sk, hkv, d)
                    v.view(b, sk, HKV, HEAD_DIM),  # (B, Sk, hkv, d)
                    **kw,
                )""", case)
        return self._repro(f"from {self.module} import flash_attn_varlen_func", """\
            o = flash_attn_varlen_func(
                q,  # (total_q, hq, d)
                k,  # (total_k, hkv, d)
                v,  # (total_k, hkv, d)
                torch.tensor(CU_Q, dtype=torch.int32, device=q.device),  # cu_seqlens_q (B + 1,)
                torch.tensor(CU_K, dtype=torch.int32, device=q.device),  # cu_seqlens_k (B + 1,)
                max(Q_LENS),
                max(K_LENS),
                **kw,
            )""", case)


class FlashAttnKvcacheBackend(FlashAttnBackend):
    name = "fa2-kvcache-cuda"
    supports_paged = True
    description = "flash_attn.flash_attn_with_kvcache (cache_seqlens; block_table for paged KV)"

    def unsupported_reason(self, case: Case) -> str | None:
        if len(set(case.q_lens)) != 1:
            return "flash_attn_with_kvcache takes one Sq for the whole batch"
        if case.page_size is not None and case.page_size % 256:
            return f"FA2 paged KV needs page_size % 256 == 0, got {case.page_size}"
        return super().unsupported_reason(case)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        from flash_attn import flash_attn_with_kvcache

        b, sq = case.batch, case.q_lens[0]
        q = inputs.q.view(b, sq, case.hq, case.head_dim)  # (B, Sq, hq, d)
        if case.page_size is not None:
            paged = inputs.paged()
            k_cache, v_cache, table = paged.k_cache, paged.v_cache, paged.block_table  # (pages, ps, hkv, d) x2, (B, P)
        else:
            smax = max(case.k_lens)
            k_cache = inputs.k.new_zeros(b, smax, case.hkv, case.head_dim)  # (B, Sk_max, hkv, d)
            v_cache = torch.zeros_like(k_cache)  # (B, Sk_max, hkv, d)
            for bi, _, k, v, _ in inputs.sequences():
                k_cache[bi, : k.shape[0]] = k
                v_cache[bi, : v.shape[0]] = v
            table = None
        seqlens = torch.tensor(case.k_lens, dtype=torch.int32, device=q.device)  # (B,)
        with refusals(FA2_REFUSALS, "flash_attn"):
            o = flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table, **self._kw(case))
        out.copy_(o.reshape(out.shape))  # (B, Sq, hq, d) -> (total_q, hq, d)
        return out

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: this call (paged: the harness's page layout)."""
        if case.page_size is not None:
            caches = "k_cache, v_cache, table, _ = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)  # (pages, ps, hkv, d) x2, (B, P)"
        else:
            caches = textwrap.dedent("""\
                k_cache = k.new_zeros(b, max(K_LENS), HKV, HEAD_DIM)  # (B, Sk_max, hkv, d)
                v_cache = torch.zeros_like(k_cache)  # (B, Sk_max, hkv, d)
                for n, sk in enumerate(K_LENS):
                    k_cache[n, :sk] = k[CU_K[n] : CU_K[n + 1]]
                    v_cache[n, :sk] = v[CU_K[n] : CU_K[n + 1]]
                table = None""")
        call = "\n".join([
            "b, sq = len(Q_LENS), Q_LENS[0]",
            caches,
            "seqlens = torch.tensor(K_LENS, dtype=torch.int32, device=q.device)  # (B,)",
            "o = flash_attn_with_kvcache(q.view(b, sq, HQ, HEAD_DIM), k_cache, v_cache, cache_seqlens=seqlens, block_table=table, **kw)",
        ])
        return self._repro("from flash_attn import flash_attn_with_kvcache", call, case)


class FlashAttn3Backend(FlashAttnBackend):
    name = "fa3-cuda"
    module = "flash_attn_interface"
    install_hint = "FA3: build flash-attention's hopper/ folder (python setup.py install) for this torch and CUDA"
    description = "flash_attn_interface.flash_attn_func / flash_attn_varlen_func (FA3, Hopper)"
