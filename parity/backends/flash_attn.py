"""The ``flash-attn`` package: FlashAttention-2 (``flash_attn``) and FlashAttention-3
(``flash_attn_interface``, the Hopper build), where installed.

Entry points, one variant each:

* ``fa2-cuda``: ``flash_attn_func`` (dense) for uniform cases, ``flash_attn_varlen_func``
  (``cu_seqlens_q/k``) otherwise;
* ``fa2-kvcache-cuda``: ``flash_attn_with_kvcache`` (decode / chunked prefill against a
  cache; ``cache_seqlens``; paged through ``block_table`` over a
  ``(num_blocks, page_size, hkv, d)`` cache, FA2 wants ``page_size % 256 == 0``);
* ``fa3-cuda``: ``flash_attn_interface.flash_attn_func`` / ``flash_attn_varlen_func``;
* split-KV forced, ``num_splits`` passed (the libraries' own heuristic otherwise: ``0`` in
  ``flash_attn_with_kvcache``, ``1`` = no split in FA3's ``flash_attn_func`` / ``_varlen_func``):
  ``fa2-kvcache-split{2,4,128}-cuda`` (128: FA2's ``TORCH_CHECK(num_splits <= 128)``; FA2 cuts the whole
  cache into ``num_splits`` ranges of key blocks, so splits past the sequence or outside the window are
  empty and its combine must give them no weight) and ``fa3-split{2,4,256}-cuda`` (256: FA3's limit; FA3
  cuts the window's key blocks, so splits beyond their count are empty). FA2's ``flash_attn_func`` /
  ``_varlen_func`` take no ``num_splits``.

Window translation: ``window_size=(left, right)``, inclusive, bottom-right aligned, and
``-1`` = unbounded (FA2 and FA3; FA4 uses None, see :mod:`.flash_attn4`). ``causal`` stays
False: ``(-1, 0)`` is causal. No top-left alignment: ``top_left`` only where ``Sq == Sk``.

Refusals: the package's ``TORCH_CHECK`` sentences, the same as PyTorch's vendored copy
(:data:`.torch_fa2.FA2_REFUSALS`: "FlashAttention only supports Ampere GPUs or newer.",
"FlashAttention forward only supports head dimension at most 256", "Paged KV cache block size
must be divisible by ...", FA3's "head_size should be a multiple of 8").
"""

from __future__ import annotations

import torch

from ..case import Case, Inputs, padded_capacity, padded_layout
from ..memory import lse_bytes, output_bytes, padded_bytes, paged_bytes
from .base import GRAD_REFUSALS, Backend, cu_seqlens, cuda_unavailable_reason, import_error_reason, lse_rows, refusals, split_scope_reason
from .graphing import PreparedCall, cu_lens, padded_fill, padded_rows, paged_fill
from .torch_fa2 import FA2_REFUSALS, fa2_case_reason, fa2_window

#: The flash-attn package (FA2 and FA3) and PyTorch's vendored FA2 share one convention.
flash_window = fa2_window


def fa3_descale(d, batch: int, hkv: int):
    """A descale as FA3's ``q_descale`` / ``k_descale`` / ``v_descale`` ``(B, hkv)`` float32: per tensor ``()``
    and per kv head ``(hkv,)`` expanded (stride 0 where they repeat, as vLLM expands its layer scales), per
    sequence and kv head ``(B, hkv)`` as it is."""
    if d.dim() == 2:
        return d  # (B, hkv)
    return (d.reshape(1, 1) if d.dim() == 0 else d.reshape(1, hkv)).expand(batch, hkv)  # (B, hkv)


def flash_attn_attention(
    q, k, v, q_lens, k_lens, scale, window_size, softcap, dense, module="flash_attn", descales=None, return_lse=False, num_splits=None,
    cu=None,
):  # fmt: skip
    """The flash-attn package's ``flash_attn_func`` (``dense``: one ``(Sq, Sk)`` for every sequence) or
    ``flash_attn_varlen_func`` (``cu_seqlens_q`` / ``cu_seqlens_k``) on a packed batch.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; returns ``(total_q, hq, d)``.
    ``window_size``: ``(left, right)``, inclusive, bottom-right aligned, ``-1`` = unbounded; ``causal``
    stays False. ``module``: ``flash_attn`` (FA2) or ``flash_attn_interface`` (FA3, Hopper). ``descales``:
    fp8 ``q`` / ``k`` / ``v`` (FA3), their ``(q_descale, k_descale, v_descale)`` float32 descales as the
    harness lays them out (``()``, ``(hkv,)`` or ``(B, hkv)``), passed as the ``(B, hkv)`` FA3 takes (:func:`fa3_descale`). ``return_lse``:
    ``return_attn_probs=True`` (FA2: ``(out, softmax_lse, S_dmask)``; FA3: ``(out, softmax_lse)``) and
    ``(out, softmax_lse)`` returned, the LSE as it comes (``(B, hq, Sq)`` dense, ``(hq, total_q)`` varlen).
    ``num_splits``: FA3's split-KV count forced (None: not passed, the library's default). ``cu``: varlen, the
    ``(cu_seqlens_q, cu_seqlens_k)`` device tensors built once already (a CUDA graph's call; a padded batch's
    repeat the total), else built here from the lengths.
    """
    import importlib

    mod = importlib.import_module(module)
    kw = dict(softmax_scale=scale, causal=False, window_size=window_size, softcap=softcap)
    if num_splits is not None:
        kw.update(num_splits=num_splits)
    if descales is not None:  # (B, hkv) float32 each
        kw.update({f"{n}_descale": fa3_descale(d, len(q_lens), k.shape[-2]) for n, d in zip("qkv", descales)})
    if return_lse:
        kw.update(return_attn_probs=True)
    if cu is None and not dense:
        cu = (cu_seqlens(q_lens, q.device), cu_seqlens(k_lens, q.device))  # (B + 1,) int32 each
    if dense:
        b, sq, sk = len(q_lens), q_lens[0], k_lens[0]
        o = mod.flash_attn_func(
            q.view(b, sq, *q.shape[1:]),  # (B, Sq, hq, d)
            k.view(b, sk, *k.shape[1:]),  # (B, Sk, hkv, d)
            v.view(b, sk, *v.shape[1:]),  # (B, Sk, hkv, d)
            **kw,
        )
    else:
        o = mod.flash_attn_varlen_func(
            q,  # (total_q, hq, d)
            k,  # (total_k, hkv, d)
            v,  # (total_k, hkv, d)
            cu[0],  # cu_seqlens_q (B + 1,) int32
            cu[1],  # cu_seqlens_k (B + 1,) int32
            max(q_lens),
            max(k_lens),
            **kw,
        )
    lse = None
    if isinstance(o, tuple):
        o, lse = o[0], o[1]  # FA3 returns (out, lse); FA2 with return_attn_probs (out, lse, S_dmask)
    return (o.reshape(q.shape), lse) if return_lse else o.reshape(q.shape)  # (total_q, hq, d)


def flash_attn_kvcache_attention(
    q, k_cache, v_cache, q_lens, k_lens, block_table, scale, window_size, softcap, return_lse=False, num_splits=0, cache_seqlens=None
):  # fmt: skip
    """``flash_attn.flash_attn_with_kvcache``: packed ``q`` ``(total_q, hq, d)`` with one ``Sq`` for every
    sequence against caches ``(B, capacity, hkv, d)`` (``block_table`` None) or paged caches ``(pages,
    page_size, hkv, d)`` with ``block_table`` ``(B, max_pages)`` int32; ``cache_seqlens`` = ``k_lens``.
    Returns ``(total_q, hq, d)``, with ``return_lse`` also ``softmax_lse`` ``(B, hq, Sq)`` (``return_softmax_lse``).
    ``window_size`` as in :func:`flash_attn_attention`; ``num_splits``: the split-KV count (0: FA2's heuristic).
    ``cache_seqlens``: ``(B,)`` int32 built once already (a CUDA graph's call; ``q`` then may hold more sequences
    of ``Sq`` rows, a padded batch, their lengths 0), else ``k_lens`` as a tensor."""
    from flash_attn import flash_attn_with_kvcache

    sq = q_lens[0]
    b = q.shape[0] // sq
    seqlens = torch.tensor(k_lens, dtype=torch.int32, device=q.device) if cache_seqlens is None else cache_seqlens  # (B,)
    o = flash_attn_with_kvcache(
        q.view(b, sq, *q.shape[1:]),  # (B, Sq, hq, d)
        k_cache,
        v_cache,
        cache_seqlens=seqlens,
        block_table=block_table,
        softmax_scale=scale,
        causal=False,
        window_size=window_size,
        softcap=softcap,
        return_softmax_lse=return_lse,
        num_splits=num_splits,
    )  # (B, Sq, hq, d), or (it, softmax_lse (B, hq, Sq))
    if return_lse:
        return o[0].reshape(q.shape), o[1]
    return o.reshape(q.shape)  # (total_q, hq, d)


def _splits(kw: dict) -> str:
    """The ``num_splits`` keyword of a repro template: forced as ``run`` forces it, else nothing."""
    return f", num_splits={kw['num_splits']}" if "num_splits" in kw else ""


class FlashAttnBackend(PreparedCall, Backend):
    """CUDA graphs: the varlen call's cu_seqlens are built once (:meth:`_prepare`), the kernel launched on the inputs'
    tensors (:meth:`_launch`); a varlen case also runs padded (empty sequences: the kernels' early exit for a row
    block with no key block, ``flash_fwd_kernel.h`` / FA3's mainloop, read in the libraries' code, not run here)."""

    name = "fa2-cuda"
    no_sinks = "flash-attn 2 has no learned-sink argument (FA4 has learnable_sink)"
    no_chunk = "flash-attn 2 has no attention_chunk (not wired here for FA3 either)"
    device = "cuda"
    module = "flash_attn"
    install_hint = "pip install flash-attn: a wheel built for this torch and CUDA, or a source build with nvcc"
    description = "flash_attn.flash_attn_func / flash_attn_varlen_func (FA2 package)"
    softcap_ok = True
    #: The backward: autograd through :func:`flash_attn_attention` (flash_attn_func / _varlen_func are autograd
    #: Functions; their backward takes the same ``window_size``).
    supports_grad = True

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with refusals(FA2_REFUSALS + GRAD_REFUSALS, f"{self.module} backward"):
            return super().backward(case, inputs, dout)

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

    #: the split-KV count forced on the library (the split variants); None: its own choice
    num_splits: int | None = None

    def _kw(self, case: Case) -> dict:
        kw = dict(window_size=flash_window(case.window, case.q_lens, case.k_lens), softcap=case.softcap or 0.0)
        return kw if self.num_splits is None else {**kw, "num_splits": self.num_splits}

    returns_lse = True
    #: flash-attn 2: +inf for a row with no key (softmax.h, flash_fwd_kernel.h, the split-KV combine)
    lse_empty: tuple[str, ...] = ("+inf",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, False)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` and the library's ``softmax_lse`` (natural log) in the canonical ``(total_q, hq)``."""
        out, lse = self._attend(case, inputs, out, True)
        return out, lse_rows(lse, case.q_lens, case.hq)

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, return_lse: bool):
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, return_lse)

    def _pads(self, case: Case) -> bool:
        return not case.is_uniform and case.kv_dtype is None  # varlen; fp8's (B, hkv) descales have no padded rows

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the window arguments and, varlen, ``cu`` (``pad`` empty sequences appended)."""
        kw = dict(self._kw(case), dense=case.is_uniform)
        if not case.is_uniform:
            kw["cu"] = (cu_lens(case.q_lens, inputs.q.device, pad), cu_lens(case.k_lens, inputs.q.device, pad))  # (B + pad + 1,) x2
        return kw

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: :func:`flash_attn_attention` on ``inputs``' tensors (descales included) into ``out``."""
        kw = dict(prep)
        if inputs.k_descale is not None:  # fp8 q/k/v (FA3: kv_dtypes): float32 descales, () / (hkv,) / (B, hkv) each
            kw.update(descales=(inputs.q_descale, inputs.k_descale, inputs.v_descale))
        with refusals(FA2_REFUSALS, self.module):
            got = flash_attn_attention(
                inputs.q, inputs.k, inputs.v, case.q_lens, case.k_lens, case.softmax_scale, module=self.module, return_lse=return_lse, **kw
            )
        o, lse = got if return_lse else (got, None)
        out.copy_(o)  # (total_q, hq, d)
        return (out, lse) if return_lse else out

    def workspace_bytes(self, case: Case) -> int:
        """Its own output (copied into ``out``) and LSE (no measured peak yet: the flash-attn package was not on
        the H100 images of 2026-12-06)."""
        return output_bytes(case) + lse_bytes(case)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`flash_attn_attention` as ``run`` calls it,
        ``window_size`` from :func:`flash_window`; fp8 cases (FA3): ``attention(q, k, v, descales)``, the
        ``(q, k, v)`` descales passed as ``run`` passes them."""
        from ..repro_script import embed

        kw = self._kw(case)
        args, fp8 = ("q, k, v, descales", ", descales=descales") if case.kv_dtype is not None else ("q, k, v", "")
        return embed(
            [cu_seqlens, fa3_descale, flash_attn_attention],
            f"""\
            def attention({args}):
                # flash-attn's window_size: (left, right), inclusive, bottom-right aligned; -1 = unbounded
                return flash_attn_attention(q, k, v, Q_LENS, K_LENS, SCALE, window_size={kw["window_size"]!r},
                                            softcap={kw["softcap"]!r}, dense={case.is_uniform!r}, module={self.module!r}{fp8}{_splits(kw)})
            """,
            head=f"import {self.module}  # noqa: F401 - the backend's package (exit 2 here when it does not import)",
        )


class FlashAttnKvcacheBackend(FlashAttnBackend):
    name = "fa2-kvcache-cuda"
    supports_paged = True
    description = "flash_attn.flash_attn_with_kvcache (cache_seqlens; block_table for paged KV)"
    supports_grad = False
    no_grad_reason = "flash_attn_with_kvcache is inference-only: no backward"

    def padded_kv(self, case: Case) -> bool:
        return case.page_size is None  # contiguous cases: a padded cache with cache_seqlens

    def unsupported_reason(self, case: Case) -> str | None:
        if len(set(case.q_lens)) != 1:
            return "flash_attn_with_kvcache takes one Sq for the whole batch"
        if case.page_size is not None and case.page_size % 256:
            return f"FA2 paged KV needs page_size % 256 == 0, got {case.page_size}"
        return super().unsupported_reason(case)

    def workspace_bytes(self, case: Case) -> int:
        """Its own output and LSE, and the paged or padded k / v caches it is given."""
        caches = 2 * (paged_bytes(case) if case.page_size is not None else padded_bytes(case))
        return output_bytes(case) + lse_bytes(case) + caches

    def _pads(self, case: Case) -> bool:
        return True  # cache_seqlens 0 (and block-table slots -1): the split-KV kernel's early exit before its loads

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the paged (or padded) cache with its key slots, block table and ``cache_seqlens``; a padded
        batch's query buffer (``pad`` more sequences of ``Sq`` rows)."""
        if case.page_size is not None:
            fill, table, seqlens = paged_fill(inputs, case.page_size, pad, graph)  # caches (pages, ps, hkv, d), (B + pad, P)
        else:
            (fill, seqlens), table = padded_fill(inputs, pad, graph), None  # caches (B + pad, capacity, hkv, d)
        q = padded_rows(inputs.q, (case.batch + pad) * case.q_lens[0]) if pad else None  # ((B + pad) * Sq, hq, d)
        return dict(fill=fill, table=table, seqlens=seqlens, q=q)

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: the keys into the cache (``refill``), the queries into a padded batch's buffer, the kernel."""
        fill, q = prep["fill"], prep["q"]
        if refill:
            fill.fill(inputs.k, inputs.v)
        if q is None:
            q = inputs.q  # (total_q, hq, d)
        else:
            q[: inputs.q.shape[0]].copy_(inputs.q)  # ((B + pad) * Sq, hq, d): the real sequences first
        with refusals(FA2_REFUSALS, "flash_attn"):
            got = flash_attn_kvcache_attention(
                q, fill.k_cache, fill.v_cache, case.q_lens, case.k_lens, prep["table"], case.softmax_scale, return_lse=return_lse,
                cache_seqlens=prep["seqlens"], **self._kw(case),
            )  # fmt: skip
        o, lse = got if return_lse else (got, None)
        out.copy_(o[: out.shape[0]])  # (total_q, hq, d): the real sequences' rows
        return (out, lse) if return_lse else out

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`flash_attn_kvcache_attention` as ``run``
        calls it (paged: the harness's page layout)."""
        from ..repro_script import embed

        if case.page_size is not None:
            caches = "k_cache, v_cache, table, _ = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)  # (pages, ps, hkv, d) x2, (B, P)"
        else:
            cap = padded_capacity(case.k_lens)
            caches = f"k_cache, v_cache, _ = padded_layout(k, v, K_LENS, {cap}); table = None  # (B, {cap}, hkv, d) x2"
        kw = self._kw(case)
        return embed(
            [padded_layout, flash_attn_kvcache_attention],
            f"""\
            def attention(q, k, v):
                {caches}
                # flash-attn's window_size: (left, right), inclusive, bottom-right aligned; -1 = unbounded
                return flash_attn_kvcache_attention(q, k_cache, v_cache, Q_LENS, K_LENS, table, SCALE,
                                                    window_size={kw["window_size"]!r}, softcap={kw["softcap"]!r}{_splits(kw)})
            """,
            head="import flash_attn  # noqa: F401 - the backend's package (exit 2 here when it does not import)",
        )


class FlashAttn3Backend(FlashAttnBackend):
    """FA3 also takes fp8 e4m3 ``q``, ``k`` and ``v`` (all three: "query and key must have the same dtype")
    with ``q_descale`` / ``k_descale`` / ``v_descale`` ``(B, hkv)`` float32, and writes bfloat16 then
    ("For FP8 input, output must have dtype BF16"): fp8 cases with ``q_fp8`` and dtype bfloat16. Every
    descale layout (``case.fp8_scales``) becomes that ``(B, hkv)`` (:func:`fa3_descale`); e5m2 is refused."""

    name = "fa3-cuda"
    module = "flash_attn_interface"
    install_hint = "FA3: build flash-attention's hopper/ folder (python setup.py install) for this torch and CUDA"
    description = "flash_attn_interface.flash_attn_func / flash_attn_varlen_func (FA3, Hopper)"
    kv_dtypes = ("float8_e4m3fn",)
    fp8_queries = True
    fp8_scale_layouts = ("tensor", "kv_head", "batch_kv_head")  # all as (B, hkv) descales

    def unsupported_reason(self, case: Case) -> str | None:
        if case.kv_dtype is not None and case.kv_dtype != "float8_e4m3fn":
            return f"FA3 takes fp8 e4m3 only ('FlashAttention only supports fp16, bf16, and fp8_e4m3 data type'), not {case.kv_dtype}"
        if case.kv_dtype is not None and not case.q_fp8:
            return "FA3 takes fp8 K/V only with an fp8 query (q, k, v one dtype): needs q_fp8"
        if case.kv_dtype is not None and case.dtype != "bfloat16":
            return f"FA3's fp8 path writes bfloat16 output ('For FP8 input, output must have dtype BF16'), not {case.dtype}"
        return super().unsupported_reason(case)

    #: FA3 (hopper/): the softmax's finalize writes +inf for a row with no key, the epilogue of a tile with
    #: no key block and the split-KV combine -inf
    lse_empty = ("+inf", "-inf")


def split_accum_bytes(case: Case, num_splits: int) -> int:
    """The float32 split-KV accumulators flash-attn allocates for ``num_splits`` splits: ``out_accum`` ``(splits, B,
    hq, Sq_max, d rounded up to 64)`` and ``softmax_lse_accum`` ``(splits, B, hq, Sq_max)`` (the padded layout is the
    larger of FA3's two; FA2's ``set_params_splitkv``, FA3's ``mha_fwd``)."""
    rows = num_splits * case.batch * case.hq * max(case.q_lens)
    return 4 * rows * (-(-case.head_dim // 64) * 64 + 1)


class SplitVariant:
    """A split-KV variant, mixed in before its base backend: ``num_splits`` forced (set by each subclass); the
    backward is the base backend's (the split count changes the forward only). Its rows: decode-shaped cases only
    (:func:`.base.split_scope_reason`); its memory: the base's and the split accumulators. Its ``variant_of``: the
    base backend's name (the class after this mixin), whose worker path it takes."""

    supports_grad = False
    no_grad_reason = "a forced split count changes the forward only: the base backend's rows check the backward"
    num_splits: int
    variant_of: str | None = None

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        mro = cls.__mro__
        cls.variant_of = mro[mro.index(SplitVariant) + 1].name  # type: ignore[attr-defined]

    def unsupported_reason(self, case: Case) -> str | None:
        return split_scope_reason(case) or super().unsupported_reason(case)  # type: ignore[misc]

    def workspace_bytes(self, case: Case) -> int:
        return super().workspace_bytes(case) + split_accum_bytes(case, self.num_splits)  # type: ignore[misc]


class Fa2KvcacheSplit2(SplitVariant, FlashAttnKvcacheBackend):
    name, num_splits = "fa2-kvcache-split2-cuda", 2
    description = "flash_attn.flash_attn_with_kvcache(num_splits=2): split-KV forced"


class Fa2KvcacheSplit4(SplitVariant, FlashAttnKvcacheBackend):
    name, num_splits = "fa2-kvcache-split4-cuda", 4
    description = "flash_attn.flash_attn_with_kvcache(num_splits=4): split-KV forced"


class Fa2KvcacheSplit128(SplitVariant, FlashAttnKvcacheBackend):
    name, num_splits = "fa2-kvcache-split128-cuda", 128
    description = "flash_attn.flash_attn_with_kvcache(num_splits=128, FA2's most): split-KV forced, most splits empty"


class Fa3Split2(SplitVariant, FlashAttn3Backend):
    name, num_splits = "fa3-split2-cuda", 2
    description = "flash_attn_interface.flash_attn_func / _varlen_func(num_splits=2) (FA3): split-KV forced"


class Fa3Split4(SplitVariant, FlashAttn3Backend):
    name, num_splits = "fa3-split4-cuda", 4
    description = "flash_attn_interface.flash_attn_func / _varlen_func(num_splits=4) (FA3): split-KV forced"


class Fa3Split256(SplitVariant, FlashAttn3Backend):
    name, num_splits = "fa3-split256-cuda", 256
    description = "flash_attn_interface.flash_attn_func / _varlen_func(num_splits=256, FA3's most): split-KV forced, most splits empty"
