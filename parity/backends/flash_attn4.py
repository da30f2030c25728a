"""FlashAttention-4, the CuTe-DSL interface ``flash_attn.cute`` (PyPI ``flash-attn-4``).

Entry points: ``flash_attn_func`` (dense ``(B, S, H, D)``) for uniform cases,
``flash_attn_varlen_func`` (packed, ``cu_seqlens_q`` / ``cu_seqlens_k``) otherwise, and for
paged cases ``flash_attn_varlen_func`` with ``page_table`` ``(B, max_pages)`` and
``seqused_k`` ``(B,)`` over a ``(num_pages, page_size, hkv, d)`` cache (``cu_seqlens_k``
must then be None). GQA is native (``hq`` a multiple of ``hkv``). Softcap is ``softcap=c``.

Window translation: ``window_size=(left, right)``, inclusive, bottom-right aligned (the
flash-attn convention), and, unlike FA2/FA3, **the unbounded sentinel is None, not -1**:
the canonical ``None`` passes through unchanged. ``causal`` stays False; a ``(None, 0)``
window is FA4's own causal path. Learned sinks (``Case.sinks``) are ``learnable_sink`` ``(hq,)``,
passed in bfloat16 (FA4 before float32 sinks asserts "learnable_sink must be bfloat16"; the
harness's sinks are bfloat16 values, so nothing is rounded). No ``attention_chunk``: chunked
cases are unsupported. No top-left alignment: ``top_left`` is exact only where
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

import torch

from ..case import Case, Inputs
from ..memory import lse_bytes, output_bytes, paged_bytes
from ..results import HALF_DTYPES
from ..window import Window
from .base import (
    GRAD_REFUSALS,
    Backend,
    BackendError,
    Unsupported,
    cu_seqlens,
    cuda_unavailable_reason,
    import_error_reason,
    lse_rows,
    refusals,
)
from .graphing import PreparedCall, cache_or_inputs, cu_lens, paged_fill

#: FA4's own words when it declines a configuration; see the module docstring.
FA4_REFUSALS: tuple[str, ...] = (
    "does not support",
    "not yet supported",
    "head_dim must be",
    "head_dim_v must be",
    "Unsupported compute capability",
)


#: FA4's words when its backward declines (an architecture or feature its backward kernels lack).
FA4_GRAD_REFUSALS: tuple[str, ...] = ("not supported", "only supports", "not implemented")


def fa4_window(window: Window, q_lens, k_lens) -> tuple[int | None, int | None]:
    """``window_size`` for FA4: None = unbounded. Raises :class:`Unsupported`."""
    if window.align == "top_left" and any(q != k for q, k in zip(q_lens, k_lens)):
        raise Unsupported("FA4 windows are bottom-right aligned; top_left with Sq != Sk has no translation")
    return window.native_sides(q_lens, k_lens)  # a side past a C int (2**62) passed as Sq + Sk


def fa4_attention(
    q, k, v, q_lens, k_lens, scale, window_size, softcap, dense, page_table=None, seqused_k=None, learnable_sink=None, return_lse=False,
    cu=None,
):  # fmt: skip
    """FA4 (``flash_attn.cute``) on a packed batch: ``flash_attn_func`` (``dense``: one ``(Sq, Sk)`` for
    every sequence), else ``flash_attn_varlen_func``.

    ``q`` ``(total_q, hq, d)``; ``k`` / ``v`` ``(total_k, hkv, d)``, or with ``page_table`` ``(B,
    max_pages)`` int32 and ``seqused_k`` ``(B,)`` int32 the paged caches ``(pages, page_size, hkv, d)``
    (``cu_seqlens_k`` then None). Returns ``(total_q, hq, d)``. ``window_size``: ``(left, right)``,
    inclusive, bottom-right aligned, ``None`` = unbounded (not -1); ``causal`` stays False.
    ``learnable_sink``: ``(hq,)`` sink logits (natural-log units), or None.
    inclusive, bottom-right aligned, ``None`` = unbounded (not -1); ``causal`` stays False. ``return_lse``:
    FA4's ``return_lse=True``, and ``(out, lse)`` returned, the LSE as it comes (``(B, hq, Sq)`` dense,
    ``(hq, total_q)`` varlen; natural log). ``cu``: the ``(cu_seqlens_q, cu_seqlens_k)`` device tensors built once
    already (a CUDA graph's call; ``cu_seqlens_k`` unused when paged), else built here from the lengths.
    """
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    kw = dict(softmax_scale=scale, causal=False, window_size=window_size, softcap=softcap)
    if learnable_sink is not None:
        kw["learnable_sink"] = learnable_sink.to(device=q.device, dtype=torch.bfloat16).contiguous()  # (hq,)
    if return_lse:
        kw.update(return_lse=True)
    if cu is None and not (dense and page_table is None):
        cu = (cu_seqlens(q_lens, q.device), None if page_table is not None else cu_seqlens(k_lens, q.device))  # (B + 1,) int32
    if page_table is not None:
        o = flash_attn_varlen_func(
            q,  # (total_q, hq, d)
            k,  # (pages, page_size, hkv, d)
            v,  # (pages, page_size, hkv, d)
            cu_seqlens_q=cu[0],  # (B + 1,) int32
            max_seqlen_q=max(q_lens),
            max_seqlen_k=max(k_lens),
            seqused_k=seqused_k,  # (B,) int32
            page_table=page_table,  # (B, max_pages) int32
            **kw,
        )
    elif dense:
        b, sq, sk = len(q_lens), q_lens[0], k_lens[0]
        o = flash_attn_func(
            q.view(b, sq, *q.shape[1:]),  # (B, Sq, hq, d)
            k.view(b, sk, *k.shape[1:]),  # (B, Sk, hkv, d)
            v.view(b, sk, *v.shape[1:]),  # (B, Sk, hkv, d)
            **kw,
        )
    else:
        o = flash_attn_varlen_func(
            q,  # (total_q, hq, d)
            k,  # (total_k, hkv, d)
            v,  # (total_k, hkv, d)
            cu_seqlens_q=cu[0],  # (B + 1,) int32
            cu_seqlens_k=cu[1],  # (B + 1,) int32
            max_seqlen_q=max(q_lens),
            max_seqlen_k=max(k_lens),
            **kw,
        )
    lse = None
    if isinstance(o, tuple):
        o, lse = o[0], o[1]  # (out, lse)
    return (o.reshape(q.shape), lse) if return_lse else o.reshape(q.shape)  # (total_q, hq, d)


class Fa4Backend(PreparedCall, Backend):
    """CUDA graphs: cu_seqlens and the paged layout built once (:meth:`_prepare`), the CuTe kernel launched on the inputs'
    tensors (:meth:`_launch`); its first call of a configuration compiles (the capture's warm-up, outside the graph).
    That the compiled call itself does no host sync rests on reading flash_attn/cute/interface.py, not on a GPU run."""

    cost_hint = 18  # relative sweep cost, for --jobs lanes: CuTe DSL compiles each new kernel configuration
    first_use_compile = True  # (cold on the H100 of 2026-12-06c: 7.0 s per row, flex-cuda 11.5: hints 18 and 30)
    name = "fa4-cuda"
    device = "cuda"
    supports_paged = True
    supports_sinks = True  # learnable_sink
    no_chunk = "flash_attn.cute's flash_attn_func / flash_attn_varlen_func take no attention_chunk"
    description = "flash_attn.cute (FA4): flash_attn_func when uniform, else flash_attn_varlen_func; page_table for paged KV"
    always_varlen = False
    #: The backward: autograd through :func:`fa4_attention` (flash_attn.cute's functions are autograd Functions
    #: whose backward takes the same ``window_size``); where its release has no backward for this GPU or
    #: configuration, its assert / NotImplementedError words make the gradient check ``unsupported``.
    supports_grad = True

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with refusals(FA4_REFUSALS + GRAD_REFUSALS + FA4_GRAD_REFUSALS, "flash-attn-4 backward"):
            return super().backward(case, inputs, dout)

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

    def compile_key(self, case: Case) -> tuple | None:
        """FA4's kernel cache key, as far as a case decides it (flash_attn/cute/interface.py ``compile_key``):
        dtype, head dim, GQA ratio, the softcap value (its score_mod closes over it), which window sides are set
        and whether the window is its causal path, dense / varlen / paged (with the page size), learned sinks,
        and a single-tile variant for short key ranges. LSE asked or not is a second kernel of the same row
        (the measured call asks, the probes do not)."""
        window = (case.window.left, case.window.right)
        sides = (window[0] is not None, window[1] is not None, window == (None, 0))
        dense = case.is_uniform and not self.always_varlen and case.page_size is None
        return (case.dtype, case.head_dim, case.hq // case.hkv, case.softcap or 0.0, *sides, dense, case.page_size,
                bool(case.sinks), max(case.k_lens) <= 128)  # fmt: skip

    def kernels_built(self) -> int | None:
        """Entries of flash_attn.cute's in-memory compile caches (forward and backward)."""
        try:
            from flash_attn.cute import interface
        except Exception:  # noqa: BLE001 - not importable here
            return None
        n, found = 0, False
        for name in ("_flash_attn_fwd", "_flash_attn_bwd"):
            cache = getattr(getattr(interface, name, None), "compile_cache", None)
            cache = getattr(cache, "cache", cache)
            if cache is not None and hasattr(cache, "__len__"):
                n, found = n + len(cache), True
        return n if found else None

    def native(self, case: Case) -> dict:
        """:func:`fa4_attention`'s arguments for ``case`` besides the tensors, lengths and scale."""
        window = fa4_window(case.window, case.q_lens, case.k_lens)
        return dict(window_size=window, softcap=case.softcap or 0.0, dense=case.is_uniform and not self.always_varlen)

    returns_lse = True
    #: flash_attn/cute/softmax.py finalize: -inf for a row with no key (row sum 0); seqlen_k == 0: lse.fill_(-inf)
    lse_empty = ("-inf",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, False)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` with ``return_lse=True``: the LSE in the canonical ``(total_q, hq)``."""
        out, lse = self._attend(case, inputs, out, True)
        if lse is None:
            raise BackendError("flash_attn.cute with return_lse=True returned no LSE")
        return out, lse_rows(lse, case.q_lens, case.hq)

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, return_lse: bool):
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, return_lse)

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the native arguments, varlen or paged ``cu`` and for paged KV the cache with its key slots,
        page table and ``seqused_k``. No padded batch (``_pads``): FA4's handling of empty sequences and ``-1`` page-table
        slots was not read here."""
        kw, dev = self.native(case), inputs.q.device
        if case.page_size is not None or not kw["dense"]:
            kw["cu"] = (cu_lens(case.q_lens, dev), None if case.page_size is not None else cu_lens(case.k_lens, dev))  # (B + 1,)
        if case.page_size is not None:
            kw["fill"], kw["page_table"], kw["seqused_k"] = paged_fill(inputs, case.page_size, pad, graph)  # (B, P), (B,)
        return kw

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: the keys into the paged cache (``refill``), then :func:`fa4_attention` on ``inputs``' tensors."""
        kw = dict(prep)
        k, v = cache_or_inputs(kw, inputs, refill)  # (pages, page_size, hkv, d) paged, else (total_k, hkv, d)
        if inputs.sinks is not None:
            kw["learnable_sink"] = inputs.sinks  # (hq,)
        with refusals(FA4_REFUSALS, "flash-attn-4"):
            got = fa4_attention(inputs.q, k, v, case.q_lens, case.k_lens, case.softmax_scale, return_lse=return_lse, **kw)
        o, lse = got if return_lse else (got, None)
        out.copy_(o)  # (total_q, hq, d)
        return (out, lse) if return_lse else out

    def workspace_bytes(self, case: Case) -> int:
        """Its own output (copied into ``out``) and LSE, and for paged KV the k / v caches it is given."""
        return output_bytes(case) + lse_bytes(case) + (2 * paged_bytes(case) if case.page_size is not None else 0)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`fa4_attention` as ``run`` calls it,
        ``window_size`` from :func:`fa4_window`."""
        from ..repro_script import embed

        kw = self.native(case)
        paged, pages = "", ""
        if case.page_size is not None:
            paged = "k, v, page_table, seqused_k = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)  # as the harness pages them"
            pages = ", page_table=page_table, seqused_k=seqused_k"
        if case.sinks:
            pages += ", learnable_sink=torch.tensor(SINKS, dtype=torch.float32)"
        return embed(
            [cu_seqlens, fa4_attention],
            f"""\
            def attention(q, k, v):
                {paged}
                # FA4's window_size: (left, right), inclusive, bottom-right aligned; None = unbounded (not -1)
                return fa4_attention(q, k, v, Q_LENS, K_LENS, SCALE, window_size={kw["window_size"]!r},
                                     softcap={kw["softcap"]!r}, dense={kw["dense"]!r}{pages})
            """,
            head="import flash_attn.cute  # noqa: F401 - the backend's package (exit 2 here when it does not import)",
        )


class Fa4VarlenBackend(Fa4Backend):
    name = "fa4-varlen-cuda"
    description = "flash_attn.cute (FA4) flash_attn_varlen_func for every case (page_table for paged KV)"
    always_varlen = True
