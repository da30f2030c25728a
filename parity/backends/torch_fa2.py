"""PyTorch's vendored FlashAttention-2: ``torch.ops.aten._flash_attention_forward``.

This is the kernel behind SDPA's FLASH_ATTENTION backend, called directly so that its
``window_size_left`` / ``window_size_right`` arguments (which SDPA does not expose) are
reachable, in the dense ``(B, S, H, D)`` layout and the varlen packed layout
(``cum_seq_q`` / ``cum_seq_k``).

Window translation (flash-attn convention, inclusive, bottom-right aligned): query ``i``
sees key ``j`` iff ``i + Sk - Sq - left <= j <= i + Sk - Sq + right``; ``-1`` means
unbounded on that side. The canonical ``None`` becomes ``-1``. FlashAttention-2 has no
top-left alignment: a ``top_left`` window is exact only where every sequence has
``Sq == Sk`` (then both offsets are 0); otherwise the case is unsupported.

Version: ``torch.nn.attention._get_flash_version()`` (the vendored FA2 release) and torch's.

Refusal phrases (:data:`FA2_REFUSALS`, shared with the ``flash-attn`` package, whose C++ API
the vendored copy keeps; ``TORCH_CHECK`` raises them as ``RuntimeError``):

==============================================  ==============================================
``FlashAttention only support``                 "FlashAttention only supports Ampere GPUs or
                                                newer." / "... only support fp16 and bf16 data
                                                type"
``FlashAttention forward only supports``        "... head dimension at most 256"
``does not support``                            "This flash attention build does not support
                                                ..." (features compiled out)
``Paged KV cache block size must be divisible``  flash-attn's kvcache path, page size
``head_size should be a multiple of``           FA3's head-dim alignment
==============================================  ==============================================
"""

from __future__ import annotations

import torch

from ..case import Case, Inputs
from ..memory import lse_bytes, output_bytes
from ..results import HALF_DTYPES
from ..window import Window
from .base import GRAD_REFUSALS, Backend, Unsupported, cu_seqlens, cuda_unavailable_reason, lse_rows, refusals
from .graphing import PreparedCall, cu_lens

UNBOUNDED = -1  # FA2's sentinel for "no limit on this side"

#: FlashAttention-2's (and 3's) own words when it declines inputs; see the module docstring.
FA2_REFUSALS: tuple[str, ...] = (
    "FlashAttention only support",
    "FlashAttention forward only supports",
    "does not support",
    "Paged KV cache block size must be divisible",
    "head_size should be a multiple of",
)


def flash_forward_op():
    """``torch.ops.aten._flash_attention_forward`` (a function, so tests can stand in for it)."""
    return torch.ops.aten._flash_attention_forward


def fa2_window(window: Window, q_lens, k_lens) -> tuple[int, int]:
    """``(window_size_left, window_size_right)`` for FA2; raises :class:`Unsupported`."""
    if window.align == "top_left" and any(q != k for q, k in zip(q_lens, k_lens)):
        raise Unsupported("FlashAttention-2 windows are bottom-right aligned; top_left with Sq != Sk has no translation")
    left, right = window.native_sides(q_lens, k_lens)  # a side past a C int (2**62) passed as Sq + Sk
    return UNBOUNDED if left is None else left, UNBOUNDED if right is None else right


def fa2_case_reason(case: Case, softcap_ok: bool = False, max_head_dim: int = 256) -> str | None:
    """Limits FlashAttention-2 (and 3) document for the forward pass."""
    if case.dtype not in HALF_DTYPES:
        return f"FlashAttention takes float16/bfloat16 only, not {case.dtype}"
    if case.head_dim % 8 or case.head_dim > max_head_dim:
        return f"head_dim {case.head_dim}: FlashAttention needs a multiple of 8 up to {max_head_dim}"
    if case.softcap is not None and not softcap_ok:
        return "this FlashAttention entry point has no softcap"
    try:
        fa2_window(case.window, case.q_lens, case.k_lens)
    except Unsupported as exc:
        return str(exc)
    return None


def torch_fa2_attention(q, k, v, q_lens, k_lens, scale, window_size_left, window_size_right, dense, op=None, return_lse=False, cu=None):
    """PyTorch's vendored FlashAttention-2 (``aten._flash_attention_forward``) on a packed batch.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; returns ``(total_q, hq, d)``.
    ``dense``: every sequence has one ``(Sq, Sk)``: the ``(B, S, H, d)`` layout, else varlen with
    ``cum_seq_q`` / ``cum_seq_k``. Window sides: inclusive, bottom-right aligned, ``-1`` = unbounded.
    ``op``: the operator (None: ``torch.ops.aten._flash_attention_forward``). ``return_lse``: also return
    its ``logsumexp`` (the op's second output, natural log) as it comes: ``(B, hq, Sq)`` dense; varlen
    ``(hq, total_q)`` or, in builds before flash-attn 2.6's layout, ``(B, hq, max Sq)``. ``cu``: varlen, the
    ``(cum_seq_q, cum_seq_k)`` device tensors built once already (a CUDA graph's call), else built here.
    """
    op = op or torch.ops.aten._flash_attention_forward
    kw = dict(scale=scale, window_size_left=window_size_left, window_size_right=window_size_right)
    if dense:
        b, sq, sk = len(q_lens), q_lens[0], k_lens[0]
        qd = q.view(b, sq, *q.shape[1:])  # (B, Sq, hq, d)
        kd, vd = k.view(b, sk, *k.shape[1:]), v.view(b, sk, *v.shape[1:])  # (B, Sk, hkv, d)
        o, lse = op(qd, kd, vd, None, None, sq, sk, 0.0, False, False, **kw)[:2]  # (B, Sq, hq, d), (B, hq, Sq)
    else:
        cu_q, cu_k = cu if cu is not None else (cu_seqlens(q_lens, q.device), cu_seqlens(k_lens, q.device))  # (B + 1,) int32
        o, lse = op(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), 0.0, False, False, **kw)[:2]  # (total_q, hq, d), see above
    if return_lse:
        return o.reshape(q.shape), lse
    return o.reshape(q.shape)  # (total_q, hq, d)


class TorchFa2Backend(PreparedCall, Backend):
    """CUDA graphs: the varlen call's cum_seq tensors built once (:meth:`_prepare`), the op launched on the inputs'
    tensors (:meth:`_launch`); the dense call is device work only. Varlen also runs padded (empty sequences)."""

    name = "torch-fa2-cuda"
    no_sinks = "aten._flash_attention_forward (FlashAttention-2) has no sink argument"
    no_chunk = "aten._flash_attention_forward (FlashAttention-2) has no attention_chunk"
    device = "cuda"
    description = "torch.ops.aten._flash_attention_forward (PyTorch's vendored FA2), dense layout when uniform, else varlen"
    always_varlen = False
    #: The backward: autograd through :func:`torch_fa2_attention`, i.e. ``aten._flash_attention_backward`` with
    #: the same ``window_size_left`` / ``_right`` (derivatives.yaml passes them through).
    supports_grad = True

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with refusals(FA2_REFUSALS + GRAD_REFUSALS, "FlashAttention-2 backward (vendored in torch)"):
            return super().backward(case, inputs, dout)

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if not hasattr(torch.ops.aten, "_flash_attention_forward"):
            return f"torch {torch.__version__} has no aten._flash_attention_forward"
        if not torch.backends.cuda.is_flash_attention_available():
            return "this torch build has no FlashAttention kernels (torch.backends.cuda.is_flash_attention_available() is False)"
        schema = str(torch.ops.aten._flash_attention_forward.default._schema)
        if "window_size_left" not in schema:
            return f"aten._flash_attention_forward in torch {torch.__version__} takes no window_size_left"
        major, _ = torch.cuda.get_device_capability()
        if major < 8:
            return f"FlashAttention-2 needs compute capability >= 8.0, this GPU has {major}.x"
        return None

    def version(self) -> str:
        try:
            fa = torch.nn.attention._get_flash_version()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            fa = "unknown"
        return f"FlashAttention {fa} vendored in torch {torch.__version__}"

    def unsupported_reason(self, case: Case) -> str | None:
        return fa2_case_reason(case)

    def native(self, case: Case) -> dict:
        """:func:`torch_fa2_attention`'s arguments for ``case`` besides the tensors, lengths and scale."""
        left, right = fa2_window(case.window, case.q_lens, case.k_lens)
        return dict(window_size_left=left, window_size_right=right, dense=case.is_uniform and not self.always_varlen)

    returns_lse = True
    #: flash-attn 2's softmax.h / flash_fwd_kernel.h: +inf for a row with no key (split-KV's combine too)
    lse_empty = ("+inf",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` and the op's ``logsumexp`` (natural log), in the canonical ``(total_q, hq)``."""
        out, lse = self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, return_lse=True)
        return out, lse_rows(lse, case.q_lens, case.hq)

    def _pads(self, case: Case) -> bool:
        return not self.native(case)["dense"]  # varlen: empty sequences (FA2's early exit for a row block with no key block)

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: the window and, varlen, ``cu`` (``pad`` empty sequences appended)."""
        kw, dev = self.native(case), inputs.q.device
        if not kw["dense"]:
            kw["cu"] = (cu_lens(case.q_lens, dev, pad), cu_lens(case.k_lens, dev, pad))  # (B + pad + 1,) int32 x2
        return kw

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: :func:`torch_fa2_attention` on ``inputs``' tensors into ``out`` (and its raw LSE)."""
        with refusals(FA2_REFUSALS, "FlashAttention-2 (vendored in torch)"):
            got = torch_fa2_attention(
                inputs.q, inputs.k, inputs.v, case.q_lens, case.k_lens, case.softmax_scale, op=flash_forward_op(),
                return_lse=return_lse, **prep,
            )  # fmt: skip
        o, lse = got if return_lse else (got, None)
        out.copy_(o)  # (total_q, hq, d)
        return (out, lse) if return_lse else out

    def workspace_bytes(self, case: Case) -> int:
        """The op's own output (copied into ``out``) and its LSE."""
        return output_bytes(case) + lse_bytes(case)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`torch_fa2_attention` as ``run`` calls it,
        the window from :func:`fa2_window`."""
        from ..repro_script import embed

        kw = self.native(case)
        return embed(
            [cu_seqlens, torch_fa2_attention],
            f"""\
            def attention(q, k, v):
                # window_size_left / _right: inclusive, bottom-right aligned; -1 = unbounded
                return torch_fa2_attention(q, k, v, Q_LENS, K_LENS, SCALE,
                                           window_size_left={kw["window_size_left"]}, window_size_right={kw["window_size_right"]},
                                           dense={kw["dense"]!r})
            """,
        )


class TorchFa2VarlenBackend(TorchFa2Backend):
    name = "torch-fa2-varlen-cuda"
    description = "torch.ops.aten._flash_attention_forward, always the varlen (cum_seq_q / cum_seq_k) path"
    always_varlen = True
