"""FlashInfer, where installed (checked against flashinfer-python 0.7.2.post1's API):

* ``flashinfer-cuda``: ``single_prefill_with_kv_cache``, per sequence;
* ``flashinfer-paged-cuda``: ``BatchPrefillWithPagedKVCacheWrapper`` (``plan`` then ``run``),
  the whole batch over a paged cache: the path vLLM's and SGLang's FlashInfer backends take for
  prefill and chunked prefill;
* ``flashinfer-decode-cuda``: ``BatchDecodeWithPagedKVCacheWrapper``, cases whose every
  sequence has ``Sq = 1``;
* ``flashinfer-decode-split{2,4,max}-cuda``: the same wrapper with split-KV forced, ``plan(...,
  fixed_split_size=P)`` (``P`` pages a split; FlashInfer takes it only on its tensor-core decode path,
  ``use_tensor_cores=True``, which runs the batch prefill kernel and merges the splits with
  ``merge_states``). Its scheduler plans chunks over the pages a window can reach only
  (``ceil((window_left + cta_tile_q) / page_size)``, :func:`decode_split_pages`), so ``P`` is chosen to
  cut the longest sequence's planned pages into at least 2 or 4 splits, or one page a split (``max``); a
  case whose planned pages cannot be cut so is unsupported, with that reason, as is a FlashInfer whose
  ``plan`` takes no ``fixed_split_size``.

Layout NHD: ``q`` ``(Sq, hq, d)``, ``k``/``v`` ``(Sk, hkv, d)``; GQA native. The paged
backends take the harness's page layout (:meth:`parity.case.Inputs.paged`: ``(num_pages,
page_size, hkv, d)`` caches, pages in a seeded random order) and, for cases without a page
size, page the keys themselves at :data:`DEFAULT_PAGE` (vLLM's default block size); the
layout becomes FlashInfer's CSR form in :func:`flashinfer_paged_args` (``paged_kv_indptr``,
``paged_kv_indices``, ``paged_kv_last_page_len``).

Kernels. FlashInfer builds its prefill / decode kernels just in time with nvcc (cached under
``~/.cache/flashinfer``), or loads them from the ``flashinfer-jit-cache`` wheel (FlashInfer's
own index, not PyPI); the ``flashinfer-cubin`` wheel only carries downloaded cubins for other
kernels. So the backends are unavailable, with that reason, where neither nvcc
(``$CUDA_HOME/bin/nvcc``, ``nvcc`` on ``PATH``, ``/usr/local/cuda/bin/nvcc``: FlashInfer's own
search order), nor ``flashinfer_jit_cache``, nor an already built kernel is found.

Window translation: FlashInfer has a left window only, ``window_left`` (its sliding-window
predicate, ``kv_idx + qo_len + window_left >= kv_len + qo_idx``, keeps keys
``i + Sk - Sq - window_left ..``; ``-1`` = unbounded), bottom-right aligned, applied with or
without the causal mask (``causal=True`` is the right side 0):

==========================================  =====================================
window (bottom-right, or top-left Sq = Sk)  call
==========================================  =====================================
``(L, 0)``, ``Sq <= Sk``                    ``causal=True, window_left=L``
``(None, 0)``, ``Sq <= Sk``                 ``causal=True, window_left=-1``
``(L, None)``, or ``(L, R)``, ``R >= Sq-1`` ``causal=False, window_left=L``
``(None, None)``                            ``causal=False, window_left=-1``
``(L, R)``, ``0 < R < Sq - 1``              unsupported (no right bound but 0)
``right == 0`` with ``Sq > Sk``             unsupported (FlashInfer's own check)
``top_left`` with ``Sq != Sk``              unsupported
==========================================  =====================================

(``L`` may be ``None`` in the third row: ``window_left=-1``.) A right side ``R >= Sq - 1``
reaches the last key from every query row, so no right bound is the same mask. FlashInfer's
own check for the causal case reads "When mask_mode is set to MaskMode::kCausal, kv_len must
be greater than or equal to qo_len". Softcap is
``logits_soft_cap``. Decode (``Sq = 1``, bottom-right): the query sees keys
``Sk - 1 - window_left .. Sk - 1``, so any right side is exact (no key lies beyond
``Sk - 1``) and only ``window_left`` is passed (:func:`flashinfer_decode_window`).

fp8 KV (``case.kv_dtype`` e4m3 or e5m2, the query in the case's dtype): the fp8 ``k`` / ``v`` (or paged caches)
with ``kv_data_type`` their dtype in ``plan``, and the per-tensor descales as ``k_scale`` / ``v_scale``
floats of ``run`` (``single_prefill_with_kv_cache``'s own keywords), as vLLM's FlashInfer backend passes
``layer._k_scale_float``; FlashInfer folds ``k_scale`` into ``sm_scale`` and multiplies the output by
``v_scale``. fp8 queries are not taken (``q_scale`` belongs to its fa3 / trtllm-gen paths), nor descales
per kv head or per sequence (``case.fp8_scales``, :func:`flashinfer_fp8_reason`): these kernels take one
float each, and the per-head ``scale_q`` / ``scale_k`` / ``scale_v`` tensors belong to the fa3 fp8-query prefill.
Learned sinks (``Case.sinks``): ``flashinfer-paged-cuda`` runs sink cases through
``BatchAttentionWithAttentionSinkWrapper`` (FlashInfer's AttentionSink variant: constructor with
``window_left``, ``plan`` like the paged prefill wrapper's, ``run(q, (k_cache, v_cache), sink,
sm_scale)``, ``sink`` ``(hq,)`` float32, natural-log units), as FlashInfer's own
tests/attention/test_attention_sink.py calls it; a FlashInfer without that wrapper, or a softcap
with sinks (the variant has no ``logits_soft_cap``), is unsupported. ``single_prefill_with_kv_cache``
and the decode wrapper here take no sinks. No chunked local attention (``attention_chunk``).

Refusal phrases (:data:`FLASHINFER_REFUSALS`): FlashInfer's dispatch macros raise
``RuntimeError`` when no kernel was generated for a configuration:

==========================  ================================================================
``Unsupported head_dim``    "Unsupported head_dim: 80" (``DISPATCH_HEAD_DIM``)
``failed to dispatch``      "BatchPrefillWithPagedKVCache failed to dispatch with dtype Half"
                            (0.0.2, built without head_dim 256 kernels)
``Unsupported group_size``  "... batch_decode.cu:63: Unsupported group_size: 12"
                            (``DISPATCH_GQA_GROUP_SIZE``: the decode wrapper without tensor cores
                            has kernels for a few query heads per kv head only, which ones varies
                            by version; 0.7.2.post1 refused 7 and 12 on the H100 on 2026-12-07,
                            lab/runs/h100-2026-12-07g-models)
==========================  ================================================================

A CUDA error raised through FlashInfer ("... failed with error: an illegal memory access")
is not a refusal.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from pathlib import Path

import torch

from ..case import Case, Inputs, PagedKV
from ..memory import MIB, lse_bytes, output_bytes, paged_bytes, sequence_output_bytes
from ..results import HALF_DTYPES
from ..window import Window
from .base import Backend, Unsupported, cu_seqlens, cuda_unavailable_reason, import_error_reason, refusals
from .graphing import PreparedCall, paged_fill

#: FlashInfer's ``return_lse`` is base 2 (its kernels fold log2(e) into the scale and run exp2); natural log = it x ln 2.
LN2 = math.log(2.0)

#: Page size the paged backends use for cases that have none (vLLM's default block size).
DEFAULT_PAGE = 16
#: FlashInfer's float workspace for the batch wrappers (its examples use 128 MiB).
WORKSPACE_BYTES = 128 << 20

#: The int workspace each batch wrapper allocates when it is made (a wrapper per call here).
INT_WORKSPACE_BYTES = 8 * MIB
#: What ``single_prefill_with_kv_cache`` allocates per call beside its output (its split-KV buffer; measured on
#: the H100 of 2026-12-06: 32 MiB over the harness's own on every row, whatever the lengths).
SINGLE_PREFILL_TMP_BYTES = 32 * MIB

#: FlashInfer's own words when it has no kernel for a configuration; see the module docstring.
FLASHINFER_REFUSALS: tuple[str, ...] = ("Unsupported head_dim", "failed to dispatch", "Unsupported group_size")


def flashinfer_window(window: Window, sq: int, sk: int) -> tuple[bool, int]:
    """``(causal, window_left)``; raises :class:`Unsupported`."""
    if window.align == "top_left" and sq != sk:
        raise Unsupported("FlashInfer aligns bottom-right; top_left with Sq != Sk has no translation")
    if window.right == 0:
        if sq > sk:  # FlashInfer raises "When mask_mode is set to MaskMode::kCausal, kv_len must be >= qo_len"
            raise Unsupported(f"FlashInfer's causal mask needs Sk >= Sq (kv_len >= qo_len); Sq={sq} > Sk={sk}")
        return True, _window_left(window, sq, sk)
    if window.right is None or window.right >= sq - 1:  # every row reaches the last key: no right bound
        return False, _window_left(window, sq, sk)
    raise Unsupported(f"FlashInfer has a left window only (with causal); window {window.describe()} has no translation")


def flashinfer_decode_window(window: Window, sq: int, sk: int) -> int:
    """``window_left`` for a decode query (``Sq = 1``); raises :class:`Unsupported`."""
    if sq != 1:
        raise Unsupported(f"FlashInfer's batch decode takes one query per sequence, not Sq = {sq}")
    if window.align == "top_left" and sk != 1:
        raise Unsupported("FlashInfer's decode aligns bottom-right; top_left with Sq != Sk has no translation")
    return _window_left(window, sq, sk)


def _window_left(window: Window, sq: int, sk: int) -> int:
    """``window_left``: the left side as :meth:`Window.native_sides` passes it (past a C int: ``Sq + Sk``), ``-1`` = unbounded."""
    left = window.native_sides([sq], [sk])[0]
    return -1 if left is None else left


def flashinfer_csr(block_table, seqlens_k, page_size):
    """FlashInfer's CSR page table of a ``block_table`` ``(B, max_pages)``: ``(paged_kv_indptr (B + 1,),
    paged_kv_indices (pages,), paged_kv_last_page_len (B,))``, int32."""
    seqlens = [int(n) for n in seqlens_k]
    n_pages = [-(-sk // page_size) for sk in seqlens]
    dev = block_table.device
    indptr = torch.tensor([0, *torch.tensor(n_pages).cumsum(0).tolist()], dtype=torch.int32, device=dev)  # (B + 1,)
    indices = torch.cat([block_table[b, :n] for b, n in enumerate(n_pages)]).to(torch.int32)  # (pages,)
    last = torch.tensor([sk - (n - 1) * page_size for sk, n in zip(seqlens, n_pages)], dtype=torch.int32, device=dev)  # (B,)
    return indptr, indices, last


def flashinfer_paged_args(paged: PagedKV) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`flashinfer_csr` of the harness's paged layout."""
    return flashinfer_csr(paged.block_table, paged.seqlens_k.tolist(), paged.page_size)


def flashinfer_prefill_attention(q, k, v, out, q_lens, k_lens, natives, scale, softcap, kv_scales=None, lse=None):
    """``flashinfer.single_prefill_with_kv_cache``, one call per sequence of a packed batch.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)`` (NHD); ``out`` ``(total_q, hq, d)``
    written and returned. ``natives``: per sequence ``(causal, window_left)`` (:func:`flashinfer_window`):
    keys from ``i + Sk - Sq - window_left`` on, ``-1`` = unbounded; causal: up to ``i + Sk - Sq``.
    ``kv_scales``: fp8 ``k`` / ``v``, their ``(k_scale, v_scale)`` floats. ``lse`` ``(total_q, hq)`` float32,
    if given, gets FlashInfer's ``return_lse`` value as it comes: base 2.
    """
    import flashinfer

    scales = {} if kv_scales is None else dict(k_scale=kv_scales[0], v_scale=kv_scales[1])
    q0 = k0 = 0
    for (sq, sk), (causal, window_left) in zip(zip(q_lens, k_lens), natives):
        o = flashinfer.single_prefill_with_kv_cache(
            q[q0 : q0 + sq],  # (Sq, hq, d)
            k[k0 : k0 + sk],  # (Sk, hkv, d)
            v[k0 : k0 + sk],  # (Sk, hkv, d)
            causal=causal,
            window_left=window_left,
            sm_scale=scale,
            logits_soft_cap=softcap,
            return_lse=lse is not None,
            **scales,
        )  # (Sq, hq, d), or (it, its lse (Sq, hq), log2)
        if lse is not None:
            o, lse[q0 : q0 + sq] = o[0], o[1]
        out[q0 : q0 + sq] = o
        q0, k0 = q0 + sq, k0 + sk
    return out


def flashinfer_paged_plan(
    q_lens, block_table, seqlens_k, page_size, heads, dtypes, scale, window_left, softcap, workspace,
    causal=None, split_pages=None, sinks=False, graph=False,
):  # fmt: skip
    """The planned wrapper of :func:`flashinfer_paged_attention` / :func:`flashinfer_sink_attention` (host work: the CSR
    page table, the wrapper, its ``plan``). ``heads``: ``(hq, hkv, d)``; ``dtypes``: ``(q dtype, kv dtype)``;
    ``causal`` None: ``BatchDecodeWithPagedKVCacheWrapper``; ``sinks``: ``BatchAttentionWithAttentionSinkWrapper``;
    ``graph``: the wrapper made with ``use_cuda_graph=True`` and the page table as its buffers, as FlashInfer documents
    for a call captured in a CUDA graph (``plan`` once, outside; ``run`` inside)."""
    import flashinfer

    indptr, indices, last = flashinfer_csr(block_table, seqlens_k, page_size)  # (B + 1,), (pages,), (B,) int32
    hq, hkv, d = heads
    types = dict(q_data_type=dtypes[0], kv_data_type=dtypes[1])
    if causal is None:
        made = {"use_tensor_cores": True} if split_pages is not None else {}
        if graph:
            bufs = dict(paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices, paged_kv_last_page_len_buffer=last)
            made.update(use_cuda_graph=True, **bufs)
        split = {} if split_pages is None else dict(fixed_split_size=split_pages)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", **made)
        wrapper.plan(
            indptr, indices, last, hq, hkv, d, page_size, window_left=window_left, logits_soft_cap=softcap, sm_scale=scale, **types, **split
        )
        return wrapper
    qo = cu_seqlens(q_lens, block_table.device)  # (B + 1,) int32
    bufs = dict(qo_indptr_buf=qo, paged_kv_indptr_buf=indptr, paged_kv_indices_buf=indices, paged_kv_last_page_len_buf=last)
    made = dict(use_cuda_graph=True, **bufs) if graph else {}
    if sinks:
        wrapper = flashinfer.BatchAttentionWithAttentionSinkWrapper(
            workspace, kv_layout="NHD", backend="fa2", head_dim_qk=d, head_dim_vo=d, window_left=window_left, **types, **made
        )
        wrapper.plan(qo, indptr, indices, last, hq, hkv, d, page_size, causal=causal, window_left=window_left, **types)
        return wrapper
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", **made)
    wrapper.plan(
        qo, indptr, indices, last, hq, hkv, d, page_size, causal=causal, sm_scale=scale, window_left=window_left,
        logits_soft_cap=softcap, **types,
    )  # fmt: skip
    return wrapper


def flashinfer_paged_run(wrapper, q, k_cache, v_cache, out, decode, kv_scales=None, lse=None, sinks=None, scale=None):
    """Device work: a planned wrapper's ``run`` (:func:`flashinfer_paged_plan`) on ``q`` ``(total_q, hq, d)`` and the caches
    ``(pages, page_size, hkv, d)`` into ``out`` ``(total_q, hq, d)``, returned. ``decode``: the decode wrapper (one query
    per sequence); ``kv_scales``: ``(k_scale, v_scale)`` floats of an fp8 cache; ``lse`` ``(total_q, hq)`` float32, if
    given, gets ``return_lse``'s value as it comes (base 2); ``sinks`` ``(hq,)``: the AttentionSink wrapper's run, with ``scale``."""
    if sinks is not None:
        o = wrapper.run(q, (k_cache, v_cache), sinks.to(device=q.device, dtype=torch.float32).contiguous(), scale)  # (total_q, hq, d)
        out.copy_(o.reshape(out.shape))
        return out
    scales = {} if kv_scales is None else dict(k_scale=kv_scales[0], v_scale=kv_scales[1])
    lse_kw = dict(return_lse=True) if lse is not None else {}
    if decode:
        o = wrapper.run(q, (k_cache, v_cache), **scales, **lse_kw)  # (B, hq, d): one query per sequence; or (it, lse (B, hq))
    else:
        o = wrapper.run(q, (k_cache, v_cache), out=out, **scales, **lse_kw)  # (total_q, hq, d), or (it, lse (total_q, hq))
    if lse is not None:
        o, lse[:] = o[0], o[1]
    if o.data_ptr() != out.data_ptr():
        out.copy_(o.reshape(out.shape))
    return out


def flashinfer_paged_attention(
    q, k_cache, v_cache, out, q_lens, block_table, seqlens_k, page_size, scale, window_left, softcap, workspace,
    causal=None, kv_scales=None, lse=None, split_pages=None,
):  # fmt: skip
    """FlashInfer over a paged cache ``(pages, page_size, hkv, d)`` (NHD) with ``block_table`` ``(B,
    max_pages)`` and ``seqlens_k``: ``BatchPrefillWithPagedKVCacheWrapper`` (plan + run) when ``causal`` is
    a bool, ``BatchDecodeWithPagedKVCacheWrapper`` (one query per sequence) when it is None.

    ``q`` ``(total_q, hq, d)``; ``out`` ``(total_q, hq, d)`` written and returned. ``workspace``: the
    wrappers' float buffer (uint8). ``window_left``: keys from ``i + Sk - Sq - window_left`` on, ``-1`` =
    unbounded; ``causal``: up to ``i + Sk - Sq``. ``kv_scales``: an fp8 cache (``kv_data_type`` its dtype),
    its ``(k_scale, v_scale)`` floats, passed to ``run``. ``lse`` ``(total_q, hq)`` float32, if given, gets
    the wrapper's ``return_lse`` value as it comes: base 2. ``split_pages``: batch decode with split-KV forced,
    ``fixed_split_size`` pages a split (the tensor-core decode path, the only one taking it). The plan is
    :func:`flashinfer_paged_plan`, the run :func:`flashinfer_paged_run`.
    """
    heads = (q.shape[1], k_cache.shape[2], q.shape[2])
    wrapper = flashinfer_paged_plan(
        q_lens, block_table, seqlens_k, page_size, heads, (q.dtype, k_cache.dtype), scale, window_left, softcap, workspace,
        causal=causal, split_pages=split_pages,
    )  # fmt: skip
    return flashinfer_paged_run(wrapper, q, k_cache, v_cache, out, causal is None, kv_scales, lse)


def flashinfer_sink_attention(
    q, k_cache, v_cache, out, q_lens, block_table, seqlens_k, page_size, scale, window_left, causal, sinks, workspace
):
    """FlashInfer's ``BatchAttentionWithAttentionSinkWrapper`` over a paged cache ``(pages, page_size, hkv,
    d)`` (NHD): learned sinks ``sinks`` ``(hq,)`` (natural-log units) in every row's softmax denominator.
    ``q`` ``(total_q, hq, d)``; ``out`` ``(total_q, hq, d)`` written and returned; ``window_left`` / ``causal``
    as for :func:`flashinfer_paged_attention`."""
    heads = (q.shape[1], k_cache.shape[2], q.shape[2])
    wrapper = flashinfer_paged_plan(
        q_lens, block_table, seqlens_k, page_size, heads, (q.dtype, k_cache.dtype), scale, window_left, 0.0, workspace,
        causal=causal, sinks=True,
    )  # fmt: skip
    return flashinfer_paged_run(wrapper, q, k_cache, v_cache, out, False, sinks=sinks, scale=scale)


def flashinfer_jit_reason() -> str | None:
    """``None`` when FlashInfer can get its attention kernels here (nvcc, flashinfer-jit-cache, or built ones), else why not."""
    if importlib.util.find_spec("flashinfer_jit_cache") is not None:
        return None
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is not None:  # FlashInfer's own order: CUDA_HOME / CUDA_PATH, else `which nvcc`, else /usr/local/cuda
        if (Path(home) / "bin" / "nvcc").exists():
            return None
    elif shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists():
        return None
    try:
        from flashinfer.jit import env

        if any(Path(env.FLASHINFER_JIT_DIR).rglob("*.so")):
            return None  # kernels built earlier on this machine
    except Exception:  # noqa: BLE001 - then only nvcc counts
        pass
    where = f"CUDA_HOME={home}" if home else "nvcc on PATH, /usr/local/cuda"
    return (
        f"FlashInfer JIT-compiles its attention kernels with nvcc and none was found ({where}); "
        "no flashinfer-jit-cache is installed and no kernel was built here before"
    )


def flashinfer_fp8_reason(case: Case) -> str | None:
    """Why the FlashInfer calls here cannot take ``case``'s fp8 descale layout (``case.fp8_scales``); None if they can."""
    if case.kv_dtype is None or case.fp8_scales == "tensor":
        return None
    return (
        f"FlashInfer's fa2 prefill / decode take k_scale / v_scale as one float each, not descales per {case.fp8_scales} "
        "(its per-head scale_k / scale_v tensors belong to the fa3 fp8-query prefill, not called here)"
    )


def kv_scales(inputs: Inputs) -> tuple[float, float] | None:
    """FlashInfer's ``(k_scale, v_scale)`` of fp8 inputs (the per-tensor descales as floats); None otherwise."""
    return None if inputs.k_descale is None else (inputs.descale("k"), inputs.descale("v"))


class FlashInferBackend(Backend):
    name = "flashinfer-cuda"
    cost_hint = 10  # nvcc JIT-builds each kernel configuration: decode's 16 took 549 s, cold, on the H100 of 12-06c
    first_use_compile = True  # an SM90 prefill module took over 4 minutes with 14 lanes compiling (12-06c)
    # a module is several .cu files (a batch prefill's: its paged and ragged kernels per mask mode) that ninja
    # compiles MAX_JOBS at a time: with one job a prefill module did not build in 254 s on the H100 of 2026-12-07 (d4)
    compile_threads = 4
    no_grad_reason = "FlashInfer is an inference library (forward only): no backward"
    device = "cuda"
    kv_dtypes = ("float8_e4m3fn", "float8_e5m2")  # kv_data_type / k_scale / v_scale; the query stays in the case's dtype
    no_sinks = "single_prefill_with_kv_cache takes no sinks (flashinfer-paged-cuda runs BatchAttentionWithAttentionSinkWrapper)"
    no_chunk = "FlashInfer has no chunked local attention (attention_chunk)"
    description = "flashinfer.single_prefill_with_kv_cache with window_left"

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason("flashinfer"):
            return r + " (pip install flashinfer-python; it JIT-compiles its kernels with nvcc)"
        return flashinfer_jit_reason()

    def version(self) -> str:
        import flashinfer

        return f"flashinfer {getattr(flashinfer, '__version__', 'unknown')}"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES:
            return f"FlashInfer prefill takes float16/bfloat16, not {case.dtype}"
        if r := flashinfer_fp8_reason(case):
            return r
        try:
            for sq, sk in zip(case.q_lens, case.k_lens):
                flashinfer_window(case.window, sq, sk)
        except Unsupported as exc:
            return str(exc)
        return None

    def compile_key(self, case: Case) -> tuple | None:
        """A FlashInfer JIT module (flashinfer/jit/attention/modules.py): query and KV dtypes, head dim, sliding
        window on or off, softcap on or off, sinks (another module); window size, softcap value, causal and the
        GQA ratio are run-time arguments. One key per backend class (prefill, paged prefill, decode)."""
        return (case.dtype, case.kv_dtype, case.head_dim, case.window.left is not None, case.softcap is not None, bool(case.sinks))

    returns_lse = True
    #: FlashInfer documents no value for a row with no key; the LSE there is recorded (lse_detail), not judged
    lse_empty = ("any",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, None)

    def graph_unsupported_reason(self, case: Case) -> str | None:
        """fp8 KV: FlashInfer takes ``k_scale`` / ``v_scale`` as Python floats (read from the descales on the host), which a
        captured graph freezes: a replay on new descales would run the old ones. Otherwise device work only (the
        single-prefill kernels per sequence; the paged backends plan outside the graph)."""
        if case.kv_dtype is not None:
            return "fp8 KV: FlashInfer's k_scale / v_scale are Python floats read on the host; a captured graph keeps the old ones"
        return super().graph_unsupported_reason(case)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` with ``return_lse=True``; FlashInfer's LSE is base 2 (log2 e folded into its scale): times ln 2."""
        lse = torch.empty(inputs.q.shape[:2], dtype=torch.float32, device=inputs.q.device)  # (total_q, hq), log2
        out = self._attend(case, inputs, out, lse)
        return out, lse * LN2  # natural log

    def workspace_bytes(self, case: Case) -> int:
        """One sequence's output at a time, its split-KV buffer, the LSE (base 2, then scaled)."""
        return sequence_output_bytes(case) + SINGLE_PREFILL_TMP_BYTES + 2 * lse_bytes(case)

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, lse: torch.Tensor | None) -> torch.Tensor:
        natives = [flashinfer_window(case.window, sq, sk) for sq, sk in zip(case.q_lens, case.k_lens)]
        with refusals(FLASHINFER_REFUSALS, "FlashInfer"):
            return flashinfer_prefill_attention(
                inputs.q,
                inputs.k,
                inputs.v,
                out,
                case.q_lens,
                case.k_lens,
                natives,
                case.softmax_scale,
                case.softcap or 0.0,
                kv_scales(inputs),
                lse,
            )

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`flashinfer_prefill_attention` as ``run``
        calls it, per sequence from :func:`flashinfer_window`."""
        from ..repro_script import embed

        natives = [flashinfer_window(case.window, sq, sk) for sq, sk in zip(case.q_lens, case.k_lens)]
        args, scales = _fp8_template_args(case)
        return embed(
            [flashinfer_prefill_attention],
            f"""\
            NATIVE = {natives!r}  # per sequence (causal, window_left): keys from i + Sk - Sq - window_left on; -1 = unbounded


            def attention({args}):
                return flashinfer_prefill_attention(q, k, v, torch.empty_like(q), Q_LENS, K_LENS, NATIVE, SCALE,
                                                    {case.softcap or 0.0!r}{scales})
            """,
            head="import flashinfer  # noqa: F401 - the backend's package (exit 2 here when it does not import)",
        )


def _fp8_template_args(case: Case) -> tuple[str, str]:
    """``(attention's parameters, the call's fp8 keyword)`` of a template: fp8 cases take the ``(q, k, v)``
    descales and pass ``kv_scales`` = the K and V descales as floats, as ``run`` does (:func:`kv_scales`)."""
    if case.kv_dtype is None:
        return "q, k, v", ""
    return "q, k, v, descales", ", kv_scales=(float(descales[1]), float(descales[2]))"


def _split_arg(kw: dict) -> str:
    """The ``split_pages`` keyword of a repro template: forced as ``run`` forces it, else nothing."""
    return f", split_pages={kw['split_pages']}" if "split_pages" in kw else ""


def _paged_template_head(case: Case) -> tuple[str, str]:
    """``(module-level source, page-size name)`` for the paged templates: the case's ``PAGE_SIZE``, or
    :data:`DEFAULT_PAGE` and a copy of ``paged_layout`` (the script has it only for paged cases)."""
    import inspect

    from ..case import paged_layout

    if case.page_size is not None:
        return "", "PAGE_SIZE"
    src = f"PAGE = {DEFAULT_PAGE}  # the case has no page size: the backend pages the keys itself\n\n\n"
    return src + inspect.getsource(paged_layout), "PAGE"


class FlashInferPagedBackend(PreparedCall, FlashInferBackend):
    """``BatchPrefillWithPagedKVCacheWrapper``: one ``plan`` + ``run`` for the whole batch over a paged cache. CUDA graphs:
    ``plan`` once outside the captured function (:meth:`_prepare`), ``run`` inside it (:meth:`_launch`), as FlashInfer's
    ``use_cuda_graph`` wrappers are meant to be used (its docs; not run on a GPU here)."""

    name = "flashinfer-paged-cuda"
    supports_paged = True
    supports_sinks = True  # BatchAttentionWithAttentionSinkWrapper
    description = "flashinfer.BatchPrefillWithPagedKVCacheWrapper (plan + run, window_left), paged KV"
    _workspace: torch.Tensor | None = None
    #: its float workspace, kept by the backend object from its first call on (:meth:`_buffer`)
    resident_bytes = WORKSPACE_BYTES

    def _buffer(self, device: torch.device) -> torch.Tensor:
        if self._workspace is None or self._workspace.device != device:
            self._workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        return self._workspace

    def workspace_bytes(self, case: Case) -> int:
        """The paged k / v caches (contiguous cases too: pages of :data:`DEFAULT_PAGE`), the wrapper's int
        workspace, an output of its own (the decode wrapper's) and the LSE (base 2, then scaled)."""
        caches = 2 * paged_bytes(case, case.page_size or DEFAULT_PAGE)
        return caches + INT_WORKSPACE_BYTES + output_bytes(case) + 2 * lse_bytes(case)

    def native(self, case: Case) -> dict:
        """:func:`flashinfer_paged_attention`'s window and softcap for ``case``: one ``(causal, left)`` for the batch (a side
        past a C int passed as the longest Sq plus the longest Sk, :meth:`Window.native_sides`; every sequence's own
        translation is checked in :meth:`unsupported_reason`)."""
        causal, left = flashinfer_window(case.window, max(case.q_lens), max(case.k_lens))
        return dict(window_left=left, softcap=case.softcap or 0.0, causal=causal)

    def unsupported_reason(self, case: Case) -> str | None:
        if case.sinks and case.softcap is not None:
            return "FlashInfer's AttentionSink variant (BatchAttentionWithAttentionSinkWrapper) has no logits_soft_cap"
        if case.sinks and case.kv_dtype is not None:  # its run() is called without k_scale / v_scale: not the fp8 call
            return "the AttentionSink wrapper is called here without k_scale / v_scale (fp8 KV with sinks)"
        return super().unsupported_reason(case)

    def lse_unsupported(self, case: Case) -> str | None:
        return "the AttentionSink wrapper is called without return_lse" if case.sinks else None

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, lse: torch.Tensor | None) -> torch.Tensor:
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, lse)

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the paged cache (its key slots for a ``graph`` call), the wrapper and its ``plan``
        (:func:`flashinfer_paged_plan`; ``graph``: ``use_cuda_graph=True`` with the page table as its buffers). No padded
        batch (``_pads``): FlashInfer's CSR page table has no ``-1`` slots, and an empty sequence's plan was not checked."""
        import flashinfer

        if inputs.sinks is not None and not hasattr(flashinfer, "BatchAttentionWithAttentionSinkWrapper"):
            raise Unsupported(f"flashinfer {getattr(flashinfer, '__version__', '?')} has no BatchAttentionWithAttentionSinkWrapper (sinks)")
        kw, ps = self.native(case), case.page_size or DEFAULT_PAGE
        fill, table, _ = paged_fill(inputs, ps, 0, graph)  # caches (pages, ps, hkv, d), (B, P) int32
        heads, dtypes = (case.hq, case.hkv, case.head_dim), (inputs.q.dtype, fill.k_cache.dtype)
        with refusals(FLASHINFER_REFUSALS, "FlashInfer"):
            wrapper = flashinfer_paged_plan(
                case.q_lens, table, list(case.k_lens), ps, heads, dtypes, case.softmax_scale, kw["window_left"], kw["softcap"],
                self._buffer(inputs.q.device), causal=kw["causal"], split_pages=kw.get("split_pages"), sinks=inputs.sinks is not None,
                graph=graph,
            )  # fmt: skip
        return dict(wrapper=wrapper, fill=fill, decode=kw["causal"] is None)

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, lse: torch.Tensor | None = None, refill: bool = False):
        """Device work: the keys into the paged cache (``refill``), then the planned wrapper's ``run`` (:func:`flashinfer_paged_run`)."""
        fill = prep["fill"]
        if refill:
            fill.fill(inputs.k, inputs.v)
        scales = kv_scales(inputs)  # fp8: floats read from the descales (graph calls refuse fp8: graph_unsupported_reason)
        with refusals(FLASHINFER_REFUSALS, "FlashInfer"):
            return flashinfer_paged_run(
                prep["wrapper"], inputs.q, fill.k_cache, fill.v_cache, out, prep["decode"], scales, lse, inputs.sinks, case.softmax_scale
            )

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`flashinfer_paged_attention` as ``run`` calls
        it, over the harness's page layout."""
        from ..repro_script import embed

        kw = self.native(case)
        head, page = _paged_template_head(case)
        args, scales = _fp8_template_args(case)
        if case.sinks:  # the AttentionSink wrapper, as run calls it (no k_scale / v_scale there)
            return embed(
                [cu_seqlens, flashinfer_csr, flashinfer_paged_plan, flashinfer_paged_run, flashinfer_sink_attention],
                f"""\
                def attention({args}):
                    k_cache, v_cache, table, _ = paged_layout(k, v, K_LENS, {page}, SEED)  # (pages, page, hkv, d) x2, (B, P)
                    workspace = torch.empty({WORKSPACE_BYTES}, dtype=torch.uint8, device=q.device)
                    return flashinfer_sink_attention(q, k_cache, v_cache, torch.empty_like(q), Q_LENS, table, K_LENS, {page}, SCALE,
                                                     {kw["window_left"]}, {kw["causal"]!r}, torch.tensor(SINKS), workspace)
                """,
                head="import flashinfer  # noqa: F401 - the backend's package (exit 2 here when it does not import)\n\n" + head,
            )
        return embed(
            [cu_seqlens, flashinfer_csr, flashinfer_paged_plan, flashinfer_paged_run, flashinfer_paged_attention],
            f"""\
            def attention({args}):
                k_cache, v_cache, table, _ = paged_layout(k, v, K_LENS, {page}, SEED)  # (pages, page, hkv, d) x2, (B, P)
                workspace = torch.empty({WORKSPACE_BYTES}, dtype=torch.uint8, device=q.device)
                # keys from i + Sk - Sq - window_left on (-1 = unbounded); causal: up to i + Sk - Sq; None: batch decode
                return flashinfer_paged_attention(q, k_cache, v_cache, torch.empty_like(q), Q_LENS, table, K_LENS, {page}, SCALE,
                                                  window_left={kw["window_left"]}, softcap={kw["softcap"]!r},
                                                  workspace=workspace, causal={kw["causal"]!r}{scales}{_split_arg(kw)})
            """,
            head="import flashinfer  # noqa: F401 - the backend's package (exit 2 here when it does not import)\n\n" + head,
        )


class FlashInferDecodeBackend(FlashInferPagedBackend):
    """``BatchDecodeWithPagedKVCacheWrapper``: one query per sequence over a paged cache."""

    name = "flashinfer-decode-cuda"
    supports_sinks = False
    no_sinks = "BatchDecodeWithPagedKVCacheWrapper is called without sinks here (flashinfer-paged-cuda runs them)"
    description = "flashinfer.BatchDecodeWithPagedKVCacheWrapper (plan + run, window_left), Sq = 1, paged KV"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES:
            return f"FlashInfer decode takes float16/bfloat16, not {case.dtype}"
        if r := flashinfer_fp8_reason(case):
            return r
        try:
            for sq, sk in zip(case.q_lens, case.k_lens):
                flashinfer_decode_window(case.window, sq, sk)
        except Unsupported as exc:
            return str(exc)
        return None

    def native(self, case: Case) -> dict:
        """:func:`flashinfer_paged_attention`'s window and softcap for ``case``; ``causal`` None: batch decode (a side
        past a C int passed as the longest Sk plus 1, :meth:`Window.native_sides`)."""
        left = flashinfer_decode_window(case.window, max(case.q_lens), max(case.k_lens))
        return dict(window_left=left, softcap=case.softcap or 0.0, causal=None)


#: The query tile FlashInfer's scheduler adds to ``window_left`` when it plans the pages a window reaches
#: (``PrefillSplitQOKVIndptr``: ``ceil_div(window_left + cta_tile_q, page_size)``): 16 for one decode query per
#: sequence and up to 16 query heads a kv head (``FA2DetermineCtaTileQ``).
DECODE_CTA_TILE_Q = 16


def decode_split_pages(k_lens, page_size: int, window_left: int, splits: int) -> int:
    """``fixed_split_size`` (pages a split) that cuts the longest sequence's planned pages (those its window can
    reach, as FlashInfer's scheduler counts them) into at least ``splits`` splits; ``0`` splits: one page a split,
    the most there can be. Raises :class:`Unsupported` where those pages are fewer than the splits (2 at least)."""
    reach = -(-(window_left + DECODE_CTA_TILE_Q) // page_size) if window_left >= 0 else None
    planned = max(min(-(-sk // page_size), reach or sk) for sk in k_lens)
    want = splits or 2
    if planned < want:
        raise Unsupported(
            f"FlashInfer plans {planned} page(s) of {page_size} keys for this decode (its window's reach): "
            f"too few to cut into {want} splits"
        )
    return 1 if not splits else planned // splits


class _FlashInferDecodeSplit(FlashInferDecodeBackend):
    """``BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)`` with ``plan(fixed_split_size=...)``: split-KV
    forced into at least :attr:`splits` splits (0: one page a split); see the module docstring."""

    splits = 0
    variant_of = FlashInferDecodeBackend.name  # the same library: its worker path applies

    def unsupported_reason(self, case: Case) -> str | None:
        why = super().unsupported_reason(case)
        if why is None:
            try:
                self.native(case)
            except Unsupported as exc:
                return str(exc)
        return why

    def native(self, case: Case) -> dict:
        """The decode call's arguments and ``split_pages`` (:func:`decode_split_pages`)."""
        kw = super().native(case)
        return {**kw, "split_pages": decode_split_pages(case.k_lens, case.page_size or DEFAULT_PAGE, kw["window_left"], self.splits)}

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        import inspect

        import flashinfer

        if "fixed_split_size" not in inspect.signature(flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan).parameters:
            raise Unsupported(f"flashinfer {getattr(flashinfer, '__version__', '?')}: the decode wrapper's plan takes no fixed_split_size")
        return super()._prepare(case, inputs, pad, graph)

    #: the split variants build the same modules into FlashInfer's one JIT cache: the pre-pass builds each once
    build_group = "flashinfer-decode-tensor-cores"

    def compile_key(self, case: Case) -> tuple | None:
        """The tensor-core decode path builds FlashInfer's batch prefill module (``get_batch_prefill_module``, "fa2"),
        keyed on the same fields as the decode module; the split size is a ``plan`` argument, not a build one."""
        return ("tensor-cores", *(super().compile_key(case) or ()))


class FlashInferDecodeSplit2(_FlashInferDecodeSplit):
    name, splits = "flashinfer-decode-split2-cuda", 2
    description = "flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), plan(fixed_split_size): 2+ splits"


class FlashInferDecodeSplit4(_FlashInferDecodeSplit):
    name, splits = "flashinfer-decode-split4-cuda", 4
    description = "flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), plan(fixed_split_size): 4+ splits"


class FlashInferDecodeSplitMax(_FlashInferDecodeSplit):
    name, splits = "flashinfer-decode-splitmax-cuda", 0
    description = "flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), plan(fixed_split_size=1): a split a page"
