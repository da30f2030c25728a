"""vLLM's own FlashAttention build: ``vllm.vllm_flash_attn`` (FA2 and FA3 in one wheel).

vLLM ships its fork of flash-attention as compiled extensions inside its wheel
(``vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so``, ``_vllm_fa3_C.abi3.so``) with a Python
wrapper, ``vllm.vllm_flash_attn.flash_attn_interface.flash_attn_varlen_func(...,
fa_version=2|3)``. These backends call that wrapper the way vLLM's FlashAttention attention
backend (``vllm/v1/attention/backends/flash_attn.py``) does:

* ``vllm-fa2-cuda`` (``fa_version=2``), ``vllm-fa3-cuda`` (``fa_version=3``, Hopper only);
* packed ``q`` ``(total_q, hq, d)``, ``cu_seqlens_q``, ``max_seqlen_q`` / ``max_seqlen_k``;
* paged cases (``page_size``): ``k`` / ``v`` are the ``(num_pages, page_size, hkv, d)`` cache,
  ``block_table`` ``(B, max_pages)`` int32 and ``seqused_k`` ``(B,)`` int32, as vLLM's decoder
  path passes them; cases without a page size: packed ``k`` / ``v`` with ``cu_seqlens_k``
  (the wrapper's non-paged varlen path, vLLM's encoder path);
* ``out=`` the harness's poisoned buffer (vLLM passes its own output buffer the same way), so
  elements the kernel leaves unwritten are reported;
* GQA native (``hq`` a multiple of ``hkv``), ``softcap`` (0 = off), ``softmax_scale``.

Window translation (:func:`vllm_fa_window`): flash-attn's ``window_size=(left, right)``,
inclusive, bottom-right aligned (query ``i`` sees keys ``i + Sk - Sq - left .. i + Sk - Sq +
right``), ``-1`` = unbounded; ``causal=True`` forces ``right = 0``. As vLLM builds it:
a decoder layer with ``sliding_window = W`` passes ``causal=True, window_size=(W - 1, 0)``,
a full causal layer ``causal=True, window_size=(-1, -1)``, an encoder-only layer
``causal=False, window_size=(W - 1, W - 1)``. So:

=========================  ===============  =========================
canonical ``Window``       ``causal``       ``window_size``
=========================  ===============  =========================
``(L, 0)``                 True             ``(L, 0)``
``(None, 0)``              True             ``(-1, -1)``
``(L, R)``, ``R > 0``      False            ``(L, R)``
``(None, R)``              False            ``(-1, R)``
``(L, None)``              False            ``(L, -1)``
``(None, None)``           False            ``(-1, -1)``
``top_left``, Sq == Sk     as above         as above (the offset is 0 either way)
``top_left``, Sq != Sk     unsupported      no top-left alignment
=========================  ===============  =========================

What the kernels cannot do, recorded ``unsupported`` up front: dtypes other than float16 /
bfloat16 (FA3 also takes fp8, not float32), head dims that are not a multiple of 8 or above
256, top-left alignment with ``Sq != Sk``, and for FA2 a page size that is not a multiple of
16 (vLLM's FA2 build: "Paged KV cache block size must be divisible by 16"; upstream FA2 wants
256).

fp8 (``vllm-fa3-cuda``, ``case.kv_dtype`` e4m3 with ``case.q_fp8``): fp8 ``q`` / ``k`` / ``v`` (or the
fp8 paged cache) and ``q_descale`` / ``k_descale`` / ``v_descale`` ``(B, hkv)``: per-tensor descales expanded
as vLLM expands its layer scales, per-kv-head ones along the batch, per-(sequence, kv head) ones as they are
(``case.fp8_scales``); e5m2 is refused (FA3 takes e4m3 only); FA3 takes fp8 only for all three inputs and writes
bfloat16 output, so an fp8 KV without an fp8 query and float16 cases are unsupported. FA2: no fp8.
Learned sinks: FA3's ``s_aux`` ``(hq,)`` (gpt-oss), passed in bfloat16 as vLLM's FA3 build asks
("We only support bf16 dtype for S aux."; the harness's sinks are bfloat16 values); Hopper only,
at most 64 query heads ("We only support query heads <= 64 with S aux": a refusal). FA2's wrapper
raises "FA2 does not support s_aux": ``vllm-fa2-cuda`` records sink cases unsupported. Chunked
local attention: the wrapper's ``flash_attn_varlen_func`` takes no ``attention_chunk`` (vLLM runs
Llama 4's chunks as "virtual batches" it builds before the kernel), so chunk cases are
unsupported unless the installed wrapper's signature has ``attention_chunk``
(:func:`takes_attention_chunk`), which is then passed.

Split-KV forced (``vllm-fa3-split{2,4,256}-cuda``): the wrapper's ``num_splits`` (0: FA3's heuristic, as vLLM
leaves it unless it captures CUDA graphs, where it passes ``max_num_splits``), forced to 2, 4 and 256, FA3's
most ("num_splits > 256 not supported"); FA3 cuts the window's key blocks into that many splits, so with more
splits than blocks most are empty and its combine must give them no weight. The FA2 build has no such
variant: its wrapper raises ``NotImplementedError("FA2 does not support num_splits > 1")``.

Refusal phrases (:data:`VLLM_FA_REFUSALS`): the ``TORCH_CHECK`` sentences of the two
extensions (read from the 0.26.0 wheel's binaries), FA2's shared with :data:`.torch_fa2.FA2_REFUSALS`
("FlashAttention only supports Ampere GPUs or newer.", "FlashAttention only support fp16 and
bf16 data type", FA3's "FlashAttention only supports fp16, bf16, and fp8_e4m3 data type",
"FlashAttention forward only supports head dimension at most 256", "Paged KV cache block size
must be divisible by 16", "head_size should be a multiple of 8", "This flash attention build
does not support ..."), plus FA3's "This flash attention build only supports varlen (for build
size reasons)." and the wrapper's own ``NotImplementedError("FA2 does not support ...")``.

First calls (FA2): the FA2 extension carries no sm_90 code, so on Hopper the driver JIT-compiles each of its
``flash_fwd*.cu`` modules from PTX when a kernel of it is first launched (6-145 s each); the compile key is that module
(:func:`fa2_module`, :meth:`VllmFa2Backend.compile_key`). FA3's extension has sm_90 SASS: it builds nothing.

Loading without the rest of vLLM. ``vllm/vllm_flash_attn/__init__.py`` imports its
interface as ``vllm.vllm_flash_attn.flash_attn_interface`` and the interface loads the
extensions relatively (``from . import _vllm_fa2_C``); only ``is_fa_version_supported`` reaches
into ``vllm.platforms``, and these backends never call it (they check the GPU themselves).
``device/prepare.sh`` therefore stages just that subfolder with a stub ``vllm/__init__.py``
(``__version__`` of the wheel it came from, ``_parity_stub = True``); with a full vLLM install
the same import path works unchanged. The extensions link ``libtorch*`` and ``libcudart.so.13``
by soname: they load into a process that imported torch 2.11 built for CUDA 13.
"""

from __future__ import annotations

import importlib
import math
import struct
import sys

import torch

from ..case import Case, Inputs
from ..memory import lse_bytes, paged_bytes
from ..results import HALF_DTYPES
from ..window import Window
from .base import (
    Backend,
    BackendError,
    Unsupported,
    cu_seqlens,
    cuda_unavailable_reason,
    import_error_reason,
    lse_rows,
    refusals,
)
from .flash_attn import SplitVariant, fa3_descale
from .graphing import PreparedCall, cache_or_inputs, cu_lens, paged_fill
from .torch_fa2 import FA2_REFUSALS

UNBOUNDED = -1
INTERFACE = "vllm.vllm_flash_attn.flash_attn_interface"

#: vLLM's FlashAttention builds' own words when they decline inputs; see the module docstring.
VLLM_FA_REFUSALS: tuple[str, ...] = (
    *FA2_REFUSALS,
    "This flash attention build only supports",
    "FA2 does not support",
    "FA3 does not support",
    "We only support",  # FA3 s_aux: "We only support query heads <= 64 with S aux", "... bf16 dtype for S aux."
    "S aux is currently only supported",
)


def vllm_fa_window(window: Window, q_lens, k_lens) -> tuple[bool, tuple[int, int]]:
    """``(causal, window_size)`` as vLLM passes them to ``flash_attn_varlen_func``; raises :class:`Unsupported`."""
    if window.align == "top_left" and any(q != k for q, k in zip(q_lens, k_lens)):
        raise Unsupported("vLLM's FlashAttention windows are bottom-right aligned; top_left with Sq != Sk has no translation")
    left, right = window.native_sides(q_lens, k_lens)  # a side past a C int (2**62) passed as Sq + Sk
    if right == 0:
        return True, ((UNBOUNDED, UNBOUNDED) if left is None else (left, 0))
    return False, (UNBOUNDED if left is None else left, UNBOUNDED if right is None else right)


#: FA2's head-dim buckets: ``HEADDIM_SWITCH`` of csrc/flash_attn/src/static_switch.h (flash-attention and vLLM's
#: fork alike; 160 and 224 are not instantiated there), the first bucket >= the head dim.
FA2_HEAD_DIMS = (32, 64, 96, 128, 192, 256)
#: SMs :func:`fa2_module` runs FA2's split-KV heuristic for: an H100 SXM's and an H200's 132 (the lab's cards).
FA2_KEY_SMS = 132


def _f32(x: float) -> float:
    """``x`` rounded to a C ``float`` (the heuristic's arithmetic is in float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def fa2_num_splits(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int = 128) -> int:
    """flash_api.cpp's ``num_splits_heuristic`` (vLLM's fork as flash-attention): the fewest splits within 85% of the
    best wave efficiency; 1 where the blocks almost fill the SMs (``num_sms`` as passed: twice the card's SMs)."""
    if batch_nheads_mblocks >= _f32(0.8) * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    eligible = [s == 1 or -(-num_n_blocks // s) != -(-num_n_blocks // (s - 1)) for s in range(1, max_splits + 1)]
    eff = []
    for s, ok in zip(range(1, max_splits + 1), eligible):
        waves = _f32(_f32(batch_nheads_mblocks * s) / num_sms)
        eff.append(_f32(waves / math.ceil(waves)) if ok else 0.0)
    best = max(eff, default=0.0)
    return next((s for s, ok, e in zip(range(1, max_splits + 1), eligible, eff) if ok and e >= 0.85 * best), 1)


def fa2_module(case: Case, sms: int = FA2_KEY_SMS) -> str | None:
    """The source file (one fatbin module, one PTX the driver JIT-compiles) of vLLM's FA2 build whose kernels
    ``varlen_fwd`` launches for ``case`` as :class:`VllmFa2Backend` calls it, e.g. ``flash_fwd_hdim64_fp16_sm80.cu``;
    None where it launches none (no key). Pure. csrc/flash_attn/flash_api.cpp ``mha_varlen_fwd`` and ``run_mha_fwd``
    decide it (see :meth:`VllmFa2Backend.compile_key`). Raises :class:`Unsupported` where the window has no translation."""
    causal, (left, right) = vllm_fa_window(case.window, case.q_lens, case.k_lens)
    max_q, max_k = max(case.q_lens), max(case.k_lens)
    if max_k <= 0:
        return None  # "If seqlen_k == 0 ... set the output to 0": no kernel
    causal = causal and max_q != 1  # "causal=true is the same as causal=false in this case"
    right = 0 if causal else right
    swapped = max_q == 1 and case.hq > case.hkv and left < 0 and right < 0  # seqlenq_ngroups_swapped, before the clamp
    left, right = (-1 if w >= max_k else w for w in (left, right))
    is_causal = left < 0 and right == 0  # set_params_fprop; run_mha_fwd's BOOL_SWITCH picks the _causal file
    splits = 0  # params.num_splits: 0 unless set_params_splitkv runs (the swap), the wrapper's 0 when paged
    if swapped:  # set_params_splitkv: batch x kv heads x ceil(groups / 64) blocks, keys in blocks of block_n
        block_n = 256 if case.head_dim <= 64 else 128 if case.head_dim <= 128 else 64
        m_blocks = -(-(case.hq // case.hkv) // 64)
        splits = fa2_num_splits(len(case.q_lens) * case.hkv * m_blocks, 2 * sms, -(-max_k // block_n))
    if case.page_size is None and splits <= 1:
        family = "flash_fwd"  # run_mha_fwd_: flash_fwd_kernel
    elif splits == 1:
        family = "flash_fwd_split_align"  # paged (force_split_kernel), one split: run_mha_fwd_splitkv_align
    else:
        family = "flash_fwd_split"  # run_flash_splitkv_fwd: paged with num_splits 0, or split (and its combine kernel)
    bucket = next(b for b in FA2_HEAD_DIMS if case.head_dim <= b)
    dtype = {"float16": "fp16", "bfloat16": "bf16"}.get(case.dtype, case.dtype)
    return f"{family}_hdim{bucket}_{dtype}{'_causal' if is_causal else ''}_sm80.cu"


def _interface():
    """``vllm.vllm_flash_attn.flash_attn_interface`` (a function, so tests can stand in for it)."""
    return importlib.import_module(INTERFACE)


def takes_attention_chunk(name: str = "attention_chunk") -> bool:
    """Does the installed ``flash_attn_varlen_func`` take the argument ``name`` (``attention_chunk``, ``s_aux``)?
    False where it does not import."""
    import inspect

    try:
        return name in inspect.signature(_interface().flash_attn_varlen_func).parameters
    except Exception:  # noqa: BLE001 - not importable here: the backend is unavailable anyway
        return False


def vllm_fa_attention(
    q, k, v, out, q_lens, k_lens, scale, causal, window_size, softcap, fa_version, block_table=None, seqused_k=None, descales=None,
    s_aux=None, attention_chunk=None, return_lse=False, num_splits=None, cu=None,
):  # fmt: skip
    """``vllm.vllm_flash_attn``'s ``flash_attn_varlen_func`` as vLLM's FlashAttention backend calls it.

    ``q`` ``(total_q, hq, d)``; ``k`` / ``v`` ``(total_k, hkv, d)`` with ``cu_seqlens_k``, or with
    ``block_table`` ``(B, max_pages)`` int32 and ``seqused_k`` ``(B,)`` int32 the paged caches
    ``(pages, page_size, hkv, d)``. ``out`` ``(total_q, hq, d)``: passed as vLLM passes its output
    buffer, and returned. ``window_size``: ``(left, right)``, inclusive, bottom-right aligned, ``-1`` =
    unbounded; ``causal=True`` forces ``right = 0``. ``descales``: fp8 inputs (FA3), the ``(q_descale,
    k_descale, v_descale)`` float32 descales as the harness lays them out (``()``, ``(hkv,)`` or ``(B, hkv)``),
    passed as the ``(B, hkv)`` FA3 takes (:func:`.flash_attn.fa3_descale`; a per-tensor one expanded as vLLM expands its
    layer scales). ``s_aux``: ``(hq,)`` sink logits (FA3), or None; ``attention_chunk``: chunk
    size, or None (passed only when given). ``return_lse``: ``return_softmax_lse=True``, and
    ``(out, softmax_lse)`` returned, the LSE as the library gives it (``(hq, total_q)``, natural log).
    ``num_splits``: the split-KV count forced (FA3), or None (not passed: the library's heuristic). ``cu``: the
    ``(cu_seqlens_q, cu_seqlens_k)`` device tensors built once already (a CUDA graph's call, ``cu_seqlens_k`` unused
    when paged; a padded batch's repeat the total), else built here from the lengths.
    """
    import importlib

    fai = importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    if cu is None:
        cu = (cu_seqlens(q_lens, q.device), None if block_table is not None else cu_seqlens(k_lens, q.device))  # (B + 1,) int32
    kw = dict(
        max_seqlen_q=max(q_lens),
        cu_seqlens_q=cu[0],  # (B + 1,) int32
        max_seqlen_k=max(k_lens),
        softmax_scale=scale,
        causal=causal,
        window_size=list(window_size),
        softcap=softcap,
        fa_version=fa_version,
        out=out,  # (total_q, hq, d)
    )
    if descales is not None:  # (B, hkv) float32 each
        kw.update({f"{n}_descale": fa3_descale(d, len(q_lens), k.shape[-2]) for n, d in zip("qkv", descales)})
    if s_aux is not None:
        kw["s_aux"] = s_aux.to(device=q.device, dtype=torch.bfloat16).contiguous()  # (hq,)
    if attention_chunk is not None:
        kw["attention_chunk"] = attention_chunk
    if num_splits is not None:
        kw["num_splits"] = num_splits
    if return_lse:
        kw.update(return_softmax_lse=True)
    if block_table is not None:
        kw.update(seqused_k=seqused_k, block_table=block_table)  # (B,), (B, max_pages) int32
    else:
        kw.update(cu_seqlens_k=cu[1])  # (B + 1,) int32
    o = fai.flash_attn_varlen_func(q, k, v, **kw)  # (total_q, hq, d), or (it, softmax_lse)
    lse = None
    if isinstance(o, tuple):
        o, lse = o[0], o[1]
    if o.data_ptr() != out.data_ptr():
        out.copy_(o.reshape(out.shape))
    return (out, lse) if return_lse else out


class VllmFa2Backend(PreparedCall, Backend):
    """CUDA graphs (vLLM captures this call): cu_seqlens and the paged layout are built once (:meth:`_prepare`), the kernel
    launched on the inputs' tensors (:meth:`_launch`); a padded batch as vLLM pads one (empty sequences, slots -1:
    the kernels' early exit for a sequence with no key block, read in flash-attention's code, not run here)."""

    name = "vllm-fa2-cuda"
    cost_hint = 8  # first calls of its configurations: 329 s over 38, cold, on the H100 of 2026-12-06c
    first_use_compile = True  # its very first call took 185 s on the H100 of 2026-12-05d
    no_grad_reason = "vLLM's flash_attn_varlen_func is an inference kernel (forward only): no backward"
    device = "cuda"
    supports_paged = True
    fa_version = 2
    no_sinks = "vLLM's FA2 build has no s_aux (its wrapper raises 'FA2 does not support s_aux')"
    supports_chunk = True  # checked against the installed wrapper in unsupported_reason
    description = "vllm.vllm_flash_attn flash_attn_varlen_func(fa_version=2): cu_seqlens_q, block_table + seqused_k for paged KV"
    install_hint = (
        "pip install vllm (a build for this torch and CUDA; only its vllm.vllm_flash_attn package is imported), "
        "or put that package's folder on --worker-path vllm-fa2-cuda=DIR"
    )

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason(INTERFACE):
            # vllm_flash_attn/__init__ raises when no extension loads; the interface module, loaded
            # first, keeps the loader's own words (e.g. a missing libcudart.so.13)
            why = getattr(sys.modules.get(INTERFACE), f"FA{self.fa_version}_UNAVAILABLE_REASON", None)
            return f"{r}" + (f"; FA{self.fa_version}: {why}" if why else "") + f" ({self.install_hint})"
        fai = _interface()
        if not getattr(fai, f"FA{self.fa_version}_AVAILABLE", False):
            why = getattr(fai, f"FA{self.fa_version}_UNAVAILABLE_REASON", None) or "unknown"
            return f"vllm_flash_attn has no FA{self.fa_version} extension: {why}"
        return self._gpu_reason()

    def _gpu_reason(self) -> str | None:
        major, minor = torch.cuda.get_device_capability()
        if major < 8:
            return f"vLLM's FA2 needs compute capability >= 8.0, this GPU has {major}.{minor}"
        return None

    def version(self) -> str:
        try:
            import vllm

            ver = getattr(vllm, "__version__", "unknown")
            how = " (vllm_flash_attn subpackage only)" if getattr(vllm, "_parity_stub", False) else ""
        except Exception:  # noqa: BLE001 - a version string must not fail the run
            ver, how = "unknown", ""
        return f"vllm {ver} vllm_flash_attn FA{self.fa_version}{how}"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES:
            return f"vLLM's FlashAttention takes float16/bfloat16 here, not {case.dtype}"
        if case.head_dim % 8 or case.head_dim > 256:
            return f"head_dim {case.head_dim}: vLLM's FlashAttention needs a multiple of 8 up to 256"
        if case.kv_dtype is not None and self.fa_version == 3 and case.kv_dtype != "float8_e4m3fn":
            why = "its check: 'FlashAttention only supports fp16, bf16, and fp8_e4m3 data type'"
            return f"FA3 takes fp8 e4m3 only ({why}), not {case.kv_dtype}"
        if case.kv_dtype is not None and self.fa_version == 3 and not case.q_fp8:
            return "FA3 takes fp8 K/V only with an fp8 query (q, k, v one dtype; vLLM quantizes q for its fp8 cache): needs q_fp8"
        if case.kv_dtype is not None and self.fa_version == 3 and case.dtype != "bfloat16":
            return f"FA3's fp8 path writes bfloat16 output (its check: 'For FP8 input, output must have dtype BF16'), not {case.dtype}"
        if case.page_size is not None and self.fa_version == 2 and case.page_size % 16:
            return f"vLLM's FA2 paged KV needs page_size % 16 == 0, got {case.page_size}"
        if case.sinks and self.supports_sinks and not takes_attention_chunk("s_aux"):
            return "this vllm_flash_attn's flash_attn_varlen_func takes no s_aux (learned sinks)"
        if case.chunk is not None and not takes_attention_chunk():
            return (
                "vllm_flash_attn's flash_attn_varlen_func takes no attention_chunk (vLLM builds Llama 4's chunked "
                "local attention as virtual batches before the kernel)"
            )
        try:
            vllm_fa_window(case.window, case.q_lens, case.k_lens)
        except Unsupported as exc:
            return str(exc)
        return None

    def compile_key(self, case: Case) -> tuple | None:
        """FA2: the one module of vLLM's FA2 build the case launches from (:func:`fa2_module`, its source file's name).

        That extension holds sm_80 SASS and compute_80 PTX only, one entry per ``flash_fwd*.cu`` (76 in 0.26.0's
        wheel: 3 families x 24 + 4 sparse; lab/runs/h100-2026-12-07-versions), so on Hopper the driver JIT-compiles a
        module's PTX on its first launch, the whole file at once: in the H200 default sweep of 2026-12-05 (329 rows,
        lab/runs/h200-2026-12-05/default-sweep) exactly one row per key here was slow (26 keys, 26 rows of 6-111 s,
        1014 s in all) and none of the rest; a key per template instantiation would be 59, 33 of them never slow.
        A file is one template instantiation of ``run_mha_fwd_`` / ``run_mha_fwd_splitkv_dispatch`` /
        ``run_mha_fwd_splitkv_align`` (csrc/flash_attn/src/flash_fwd_launch_template.h, flash-attention and vLLM's
        fork), picked in csrc/flash_attn/flash_api.cpp (``mha_varlen_fwd``, the one entry point of
        ``flash_attn_varlen_func(fa_version=2)``, paged or not; an LSE picks no other) by:

        * dtype (``FP16_SWITCH``) and the head dim rounded up to 32/64/96/128/192/256 (static_switch.h
          ``HEADDIM_SWITCH``; no 160 or 224 file): 72 and 80 share the 96 file;
        * ``Is_causal``, from :func:`vllm_fa_window`'s arguments as ``mha_varlen_fwd`` rewrites them: ``causal`` dropped
          when ``max_seqlen_q == 1``, a window side ``>= max_seqlen_k`` made -1, then causal = ``left < 0 and
          right == 0`` (lengths decide it: a window wider than the keys is causal);
        * the family: ``flash_fwd`` (packed K/V), ``flash_fwd_split`` (paged: ``force_split_kernel``; or more than one
          split, with its combine kernel), ``flash_fwd_split_align`` (paged, one split). Splits come only from the
          decode swap (``max_seqlen_q == 1``, hq > hkv, no window): ``num_splits_heuristic``, for
          :data:`FA2_KEY_SMS` SMs (a card with another count may choose otherwise).

        Not in the key: what selects kernels inside one file (``Is_local``, ``Is_softcap``, ``Is_even_K``,
        ``Is_even_MN``, ``Split``, the combine's ``Log_max_splits``: BOOL_SWITCH template arguments, JIT-compiled with
        their file), the heads (a run-time ratio, but for the swap), the page size and the softcap value (run time).
        FA3 (:class:`VllmFa3Backend`, SASS for sm_90) builds nothing: None."""
        if self.fa_version != 2:
            return super().compile_key(case)
        try:
            module = fa2_module(case)
        except Unsupported:
            return None
        return None if module is None else (module,)

    def native(self, case: Case) -> dict:
        """:func:`vllm_fa_attention`'s arguments for ``case`` besides the tensors, lengths and scale."""
        causal, window = vllm_fa_window(case.window, case.q_lens, case.k_lens)
        kw = dict(causal=causal, window_size=window, softcap=case.softcap or 0.0, fa_version=self.fa_version)
        if case.chunk is not None:
            kw["attention_chunk"] = case.chunk
        if self.num_splits is not None:
            kw["num_splits"] = self.num_splits
        return kw

    #: the split-KV count forced on FA3 (the split variants); None: the library's own choice
    num_splits: int | None = None

    returns_lse = True
    #: FA2's kernels write +inf for a row with no key (softmax.h, flash_fwd_kernel.h, the split-KV combine)
    lse_empty: tuple[str, ...] = ("+inf",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, False)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` with ``return_softmax_lse=True``: the LSE ``(hq, total_q)`` -> ``(total_q, hq)``."""
        out, lse = self._attend(case, inputs, out, True)
        if lse is None:
            raise BackendError("flash_attn_varlen_func(return_softmax_lse=True) returned no LSE")
        return out, lse_rows(lse, case.q_lens, case.hq)

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, return_lse: bool):
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, return_lse)

    def _pads(self, case: Case) -> bool:
        return case.kv_dtype is None  # seqlen 0 sequences, block-table slots -1; fp8's (B, hkv) descales have no padded rows

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the native arguments, ``cu`` (``pad`` empty sequences appended) and for paged KV the cache
        with its key slots, block table and ``seqused_k``."""
        kw, dev = self.native(case), inputs.q.device
        cu_k = None if case.page_size is not None else cu_lens(case.k_lens, dev, pad)  # (B + pad + 1,) int32: paged reads seqused_k
        kw["cu"] = (cu_lens(case.q_lens, dev, pad), cu_k)  # (B + pad + 1,) int32
        if case.page_size is not None:
            kw["fill"], kw["block_table"], kw["seqused_k"] = paged_fill(inputs, case.page_size, pad, graph)  # (B + pad, P), (B + pad,)
        return kw

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: the keys into the paged cache (``refill``), then :func:`vllm_fa_attention` on ``inputs``' tensors."""
        kw = dict(prep)
        k, v = cache_or_inputs(kw, inputs, refill)  # (pages, page_size, hkv, d) paged, else (total_k, hkv, d)
        if inputs.k_descale is not None:
            kw.update(descales=(inputs.q_descale, inputs.k_descale, inputs.v_descale))  # () float32 each
        if inputs.sinks is not None:
            kw["s_aux"] = inputs.sinks  # (hq,)
        with refusals(VLLM_FA_REFUSALS, f"vllm_flash_attn FA{self.fa_version}"):
            return vllm_fa_attention(inputs.q, k, v, out, case.q_lens, case.k_lens, case.softmax_scale, return_lse=return_lse, **kw)

    def workspace_bytes(self, case: Case) -> int:
        """It writes into ``out``: its LSE, and for paged KV the k / v caches it is given."""
        return lse_bytes(case) + (2 * paged_bytes(case) if case.page_size is not None else 0)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`vllm_fa_attention` as ``run`` calls it,
        ``(causal, window_size)`` from :func:`vllm_fa_window`."""
        from ..repro_script import embed

        kw = self.native(case)
        paged, pages = "", ""
        if case.page_size is not None:
            paged = "k, v, block_table, seqused_k = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)  # as the harness pages them"
            pages = ", block_table=block_table, seqused_k=seqused_k"
        if case.sinks:
            pages += ", s_aux=torch.tensor(SINKS, dtype=torch.float32)"
        if case.chunk is not None:
            pages += f", attention_chunk={case.chunk}"
        if self.num_splits is not None:
            pages += f", num_splits={self.num_splits}"
        args = "q, k, v"
        if case.kv_dtype is not None:  # fp8 (FA3): the descales as run passes them; the output in DTYPE (bfloat16), not q's fp8
            args, pages = "q, k, v, descales", pages + ", descales=descales"
        return embed(
            [cu_seqlens, fa3_descale, vllm_fa_attention],
            f"""\
            def attention({args}):
                {paged}
                # window_size: (left, right), inclusive, bottom-right aligned; -1 = unbounded; causal=True forces right = 0
                return vllm_fa_attention(q, k, v, torch.empty(q.shape, dtype=DTYPE, device=q.device), Q_LENS, K_LENS, SCALE,
                                         causal={kw["causal"]!r},
                                         window_size={list(kw["window_size"])!r}, softcap={kw["softcap"]!r},
                                         fa_version={self.fa_version}{pages})
            """,
            head="""\
            # vLLM's flash-attention build; only its vllm/vllm_flash_attn subfolder is needed (with a stub vllm/__init__.py)
            import vllm.vllm_flash_attn.flash_attn_interface  # noqa: F401 - exit 2 here when it does not import""",
        )


class VllmFa3Backend(VllmFa2Backend):
    name = "vllm-fa3-cuda"
    cost_hint = 1
    first_use_compile = False  # 0.38 s of first calls over 149 configurations (12-06c)
    fa_version = 3
    kv_dtypes = ("float8_e4m3fn",)  # q_descale / k_descale / v_descale, an fp8 query with it (unsupported_reason)
    fp8_queries = True
    fp8_scale_layouts = ("tensor", "kv_head", "batch_kv_head")  # all as (B, hkv) descales (fa3_descale)
    supports_sinks = True  # s_aux
    no_sinks = ""
    description = "vllm.vllm_flash_attn flash_attn_varlen_func(fa_version=3, Hopper): cu_seqlens_q, block_table + seqused_k for paged KV"
    install_hint = VllmFa2Backend.install_hint.replace("vllm-fa2-cuda", "vllm-fa3-cuda")
    #: FA3 (hopper/): the softmax's finalize writes +inf for a row with no key, the epilogue of a tile with
    #: no key block and the split-KV combine -inf
    lse_empty = ("+inf", "-inf")

    def _gpu_reason(self) -> str | None:
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return f"vLLM's FA3 runs on compute capability 9.x (Hopper) only, this GPU has {major}.{minor}"
        return None


class _VllmFa3Split(SplitVariant, VllmFa3Backend):
    """vLLM's FA3 with ``num_splits`` forced (each subclass sets it); forward only, as vLLM's FA3 is."""

    description = "vllm.vllm_flash_attn flash_attn_varlen_func(fa_version=3, num_splits forced): split-KV on purpose"
    no_grad_reason = VllmFa3Backend.no_grad_reason  # vLLM's words: its kernel has no backward at any split count
    num_splits: int  # set by each subclass (the base's None: the library's heuristic)


class VllmFa3Split2(_VllmFa3Split):
    name, num_splits = "vllm-fa3-split2-cuda", 2


class VllmFa3Split4(_VllmFa3Split):
    name, num_splits = "vllm-fa3-split4-cuda", 4


class VllmFa3Split256(_VllmFa3Split):
    name, num_splits = "vllm-fa3-split256-cuda", 256
