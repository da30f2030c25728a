"""xformers ``memory_efficient_attention`` with its local attention masks, one operator each.

Each variant pins one forward operator (``op=``), so each is reported separately:
``xformers-cutlass-cuda`` (``fmha.cutlass.FwOp``) and ``xformers-flash-cuda``
(``fmha.flash.FwOp``). An operator that refuses the inputs/mask is recorded unsupported
with xformers' own reasons. GQA uses xformers' 5-D ``(B, M, G, H, K)`` layout: ``G = hkv``
groups of ``H = hq // hkv`` query heads, keys/values expanded (stride 0) over ``H``.

Window translation (the canonical window to an ``attn_bias`` object), uniform cases:

==============================  ====================================================
``(None, None)``                ``None`` (no mask)
``(None, 0)`` top-left          ``LowerTriangularMask``
``(None, 0)`` bottom-right      ``LowerTriangularFromBottomRightMask``
``(L, 0)`` bottom-right         ``LowerTriangularFromBottomRightLocalAttentionMask(L+1)``
                                (xformers counts W tokens including the current one)
``(L, R)`` bottom-right         ``LocalAttentionFromBottomRightMask(L, R)``: query ``q``
                                sees ``k`` iff ``q - L <= k + Sq - Sk <= q + R``; an
                                unbounded side becomes ``Sq + Sk`` (covers every key)
``(L, 0)`` top-left             ``BlockDiagonalCausalLocalAttentionMask`` (window L+1)
==============================  ====================================================

Varlen (packed, ``B = 1``, ``M = total``): ``BlockDiagonalMask``, ``BlockDiagonalCausalMask``
(top-left), ``BlockDiagonalCausalFromBottomRightMask``,
``BlockDiagonalCausalLocalAttentionMask`` / ``...FromBottomRightMask`` (window ``L+1``),
built with ``from_seqlens``. Anything else (two-sided varlen, top-left two-sided) is
unsupported: xformers has no mask for it.

Refusals (:data:`XFORMERS_REFUSALS`). With ``op=`` pinned, xformers checks the inputs against
the operator's ``not_supported_reasons`` and raises ``ValueError("Operator
`memory_efficient_attention` does not support inputs: ... `cutlassF-pt` is not supported
because: attn_bias type is ...")``; without ``op=`` its dispatcher raises
``NotImplementedError("No operator found for `memory_efficient_attention_forward` with
inputs: ...")``. Both are recorded with those words, and so is the precondition of its
bottom-right block-diagonal masks, ``ValueError("Block #0 has num_keys=10 and num_queries=16.
Expected `num_keys >= num_queries`")`` (a varlen batch with a sequence whose Sq > Sk, seen on
the H200 with xformers 0.0.35); any other ``ValueError`` (a mask that fails to build, a shape)
stays an error.

Compatibility shim (explicit opt-in): the PyPI xformers wheel's C++ extension is built for
one torch release; on another, ``xformers._cpp_lib`` fails to load and every operator
refuses to run ("xFormers wasn't build with CUDA support") although the ``-pt`` operators
(``cutlassF-pt``, ``fa2F-pt``) only call PyTorch's own kernels. ``PARITY_XFORMERS_SHIM=1``
sets ``xformers.ops.fmha.common._built_with_cuda = True`` after import so they run; the
backend's version string then says so, and the run should list it in ``PARITY_SHIMS``
(recorded in environment.json).
"""

from __future__ import annotations

import os

import torch

from ..case import Case, Inputs
from ..memory import lse_bytes, output_bytes
from ..window import Window
from .base import (
    GRAD_REFUSALS,
    Backend,
    BackendError,
    Unsupported,
    autograd_grads,
    cuda_unavailable_reason,
    import_error_reason,
    packed_lse,
    refusals,
)
from .graphing import PreparedCall

SHIM_ENV = "PARITY_XFORMERS_SHIM"

#: xformers' own words when an operator declines the inputs; see the module docstring.
XFORMERS_REFUSALS: tuple[str, ...] = (
    "does not support inputs",
    "is not supported because",
    "No operator found for",
    "Expected `num_keys >= num_queries`",
)


def xformers_bias_spec(window: Window, q_lens, k_lens) -> tuple[str, dict]:
    """``(attn_bias class name, constructor kwargs)``; ``("None", {})`` for no mask.

    Varlen classes take ``q_seqlen``/``kv_seqlen`` from the caller (``from_seqlens``).
    Raises :class:`Unsupported` where xformers has no mask for the window.
    """
    uniform = len(set(q_lens)) == 1 and len(set(k_lens)) == 1
    left, right = window.native_sides(q_lens, k_lens)  # a side past a C int (2**62) passed as Sq + Sk
    tl = window.align == "top_left"
    square = all(q == k for q, k in zip(q_lens, k_lens))
    if tl and square:
        tl = False  # both offsets are 0: the bottom-right masks are the same function
    if left is None and right is None:
        return ("None", {}) if uniform else ("BlockDiagonalMask", {})
    if uniform:
        if left is None and right == 0:
            return ("LowerTriangularMask", {}) if tl else ("LowerTriangularFromBottomRightMask", {})
        if tl:
            if right == 0:
                assert left is not None  # (None, 0) returned above
                return "BlockDiagonalCausalLocalAttentionMask", {"window_size": left + 1}
            raise Unsupported(f"xformers has no top-left mask for window {window.describe()} with Sq != Sk")
        if right == 0:
            assert left is not None  # (None, 0) returned above
            return "LowerTriangularFromBottomRightLocalAttentionMask", {"window_size": left + 1}
        big = max(q_lens) + max(k_lens)
        return "LocalAttentionFromBottomRightMask", {
            "window_left": big if left is None else left,
            "window_right": big if right is None else right,
        }
    if right != 0:
        raise Unsupported(f"xformers has no block-diagonal (varlen) mask for window {window.describe()}")
    if not tl and any(q > k for q, k in zip(q_lens, k_lens)):
        # its own check: "Block #0 has num_keys=145 and num_queries=256. Expected `num_keys >= num_queries`"
        raise Unsupported("xformers' bottom-right block-diagonal (varlen) masks need Sk >= Sq in every sequence")
    if left is None:
        return ("BlockDiagonalCausalMask", {}) if tl else ("BlockDiagonalCausalFromBottomRightMask", {})
    name = "BlockDiagonalCausalLocalAttentionMask" if tl else "BlockDiagonalCausalLocalAttentionFromBottomRightMask"
    return name, {"window_size": left + 1}


#: Varlen (``BlockDiagonal*``) masks: the method applied to ``BlockDiagonalMask.from_seqlens(...)``.
_BLOCK_DIAGONAL = {
    "BlockDiagonalMask": "",
    "BlockDiagonalCausalMask": ".make_causal()",
    "BlockDiagonalCausalFromBottomRightMask": ".make_causal_from_bottomright()",
    "BlockDiagonalCausalLocalAttentionMask": ".make_local_attention({window_size})",
    "BlockDiagonalCausalLocalAttentionFromBottomRightMask": ".make_local_attention_from_bottomright({window_size})",
}


def bias_expr(name: str, kw: dict, q_lens, k_lens) -> str:
    """The ``attn_bias`` for :func:`xformers_bias_spec`'s answer, as Python source over ``ab``
    (``xformers.ops.fmha.attn_bias``): :func:`_make_bias` evaluates it, repro scripts contain it."""
    if name == "None":
        return "None"
    if name in _BLOCK_DIAGONAL:
        base = f"ab.BlockDiagonalMask.from_seqlens(q_seqlen={list(q_lens)!r}, kv_seqlen={list(k_lens)!r})"
        return base + _BLOCK_DIAGONAL[name].format(**kw)
    if name == "LowerTriangularFromBottomRightLocalAttentionMask":
        return f"ab.{name}({kw['window_size']!r})"
    return f"ab.{name}(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")"


def _make_bias(name: str, kw: dict, q_lens, k_lens):
    from xformers.ops.fmha import attn_bias as ab

    return eval(bias_expr(name, kw, q_lens, k_lens), {"ab": ab})  # our own constructor text, see bias_expr


def xformers_layout(q, k, v, q_lens, k_lens, packed):
    """``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)`` in xformers' 5-D GQA layout ``(B, M, G, H, K)``:
    ``G = hkv`` groups of ``H = hq // hkv`` query heads, K / V expanded over ``H`` with stride 0 (so autograd sums
    ``dk`` / ``dv`` over a group); ``packed``: the batch as one row ``(1, total, ...)``, else ``(B, S, ...)``."""
    b, sq, sk = (1, sum(q_lens), sum(k_lens)) if packed else (len(q_lens), q_lens[0], k_lens[0])
    hkv, d = k.shape[1], k.shape[2]
    g = q.shape[1] // hkv
    qx = q.view(b, sq, hkv, g, d)  # (B, Mq, G, H, K)
    kx = k.view(b, sk, hkv, 1, d).expand(b, sk, hkv, g, d)  # (B, Mk, G, H, K), stride 0 over H
    vx = v.view(b, sk, hkv, 1, d).expand(b, sk, hkv, g, d)  # (B, Mk, G, H, K)
    return qx, kx, vx


def xformers_attention(q, k, v, q_lens, k_lens, scale, bias, op_module, packed, return_lse=False):
    """``xformers.ops.memory_efficient_attention_forward`` with operator ``fmha.<op_module>.FwOp`` pinned.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; returns ``(total_q, hq, d)``.
    ``bias``: the ``attn_bias`` (:func:`bias_expr`). ``packed``: the batch as one row ``(1, total, ...)``
    (block-diagonal masks), else ``(B, S, ...)`` with one ``(Sq, Sk)`` for every sequence. GQA in
    xformers' 5-D layout ``(B, M, G, H, K)``: ``G = hkv`` groups of ``H = hq // hkv`` query heads.
    ``return_lse``: ``memory_efficient_attention_forward_requires_grad`` instead, and ``(out, lse)``
    returned, the LSE as the operator gives it (``(B, G, H, M)``, ``M`` padded; varlen padded per
    sequence or packed; natural log).
    """
    import importlib

    import xformers.ops as xops

    op = importlib.import_module(f"xformers.ops.fmha.{op_module}").FwOp
    qx, kx, vx = xformers_layout(q, k, v, q_lens, k_lens, packed)  # (B, M, G, H, K) each
    if return_lse:
        o, lse = xops.memory_efficient_attention_forward_requires_grad(qx, kx, vx, attn_bias=bias, scale=scale, op=op)
        return o.reshape(q.shape), lse  # (total_q, hq, d), (B, G, H, M) as the operator gives it
    o = xops.memory_efficient_attention_forward(qx, kx, vx, attn_bias=bias, scale=scale, op=op)  # (B, Mq, G, H, K)
    return o.reshape(q.shape)  # (total_q, hq, d)


def xformers_layout_trained(q, k, v, q_lens, k_lens, packed):
    """``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)`` in the 4-D layout ``(B, M, hq, K)`` that
    xformers' backward takes: K / V repeated to ``hq`` heads (query head ``h`` reads kv head ``h // (hq // hkv)``),
    so autograd sums ``dk`` / ``dv`` over a group. xformers 0.0.35's backward refuses the 5-D GQA layout of
    :func:`xformers_layout` (``bmk2bmhk`` reshapes the 5-D gradient as 3-D; the LSE check wants ``(B, G, H, M)``:
    measured on an H100, 2026-12-05, every GQA and MHA row), as a trainer would find it."""
    b, sq, sk = (1, sum(q_lens), sum(k_lens)) if packed else (len(q_lens), q_lens[0], k_lens[0])
    hq, hkv, d = q.shape[1], k.shape[1], k.shape[2]
    qx = q.view(b, sq, hq, d)  # (B, Mq, hq, K)
    kx = k.repeat_interleave(hq // hkv, dim=1).view(b, sk, hq, d)  # (B, Mk, hq, K)
    vx = v.repeat_interleave(hq // hkv, dim=1).view(b, sk, hq, d)  # (B, Mk, hq, K)
    return qx, kx, vx


def xformers_attention_trained(q, k, v, q_lens, k_lens, scale, bias, op_module, packed):
    """:func:`xformers_attention` through ``xformers.ops.memory_efficient_attention`` (differentiable) with the
    operator pair ``(fmha.<op_module>.FwOp, fmha.<op_module>.BwOp)`` pinned: its backward runs ``BwOp`` with
    the same ``attn_bias``, in the 4-D layout of :func:`xformers_layout_trained`. Same shapes as
    :func:`xformers_attention`."""
    import importlib

    import xformers.ops as xops

    mod = importlib.import_module(f"xformers.ops.fmha.{op_module}")
    qx, kx, vx = xformers_layout_trained(q, k, v, q_lens, k_lens, packed)  # (B, M, hq, K) each
    o = xops.memory_efficient_attention(qx, kx, vx, attn_bias=bias, scale=scale, op=(mod.FwOp, mod.BwOp))  # (B, Mq, hq, K)
    return o.reshape(q.shape)  # (total_q, hq, d)


def xformers_lse_rows(lse: torch.Tensor, q_lens, hq: int) -> torch.Tensor:
    """An xformers LSE -> the canonical ``(total_q, hq)``: ``(B', G, H, M')``, ``(B', hq, M')`` or ``(hq, M')``
    (heads ``g * H + h``, as the query's ``(hkv, g)`` view); ``B'`` the sequences (dense, or varlen padded
    per sequence, ``M' >= max Sq``) or 1 (varlen packed, ``M' >= total_q``)."""
    rows = lse.flatten(1, 2) if lse.dim() == 4 else (lse[None] if lse.dim() == 2 else lse)  # (B', hq, M')
    total = sum(q_lens)
    if rows.dim() == 3 and rows.shape[1] == hq:
        if rows.shape[0] == len(q_lens) and rows.shape[2] >= max(q_lens):
            return packed_lse(rows, q_lens)  # (total_q, hq)
        if rows.shape[0] == 1 and rows.shape[2] >= total:
            return rows[0, :, :total].transpose(0, 1).float()  # (total_q, hq)
    raise BackendError(f"xformers LSE of shape {tuple(lse.shape)}: no layout for hq={hq}, q_lens={list(q_lens)}")


def apply_shim() -> bool:
    """Apply the opt-in compatibility shim; True when it is in force."""
    if os.environ.get(SHIM_ENV) != "1":
        return False
    import xformers.ops.fmha.common as common

    common._built_with_cuda = True
    return True


class XformersBackend(PreparedCall, Backend):
    """CUDA graphs: the ``attn_bias`` built once (:meth:`_prepare`; a block-diagonal one from the lengths), the operator
    launched inside the graph (:meth:`_launch`). That the pinned operator's forward reads the bias's sequence starts
    without a host sync rests on reading xformers' fmha code, not on a GPU run."""

    name = "xformers-cuda"
    no_sinks = "memory_efficient_attention has no sink argument"
    no_chunk = "xformers' local attention masks have no chunks (attention_chunk)"
    device = "cuda"
    op_module = ""  # xformers.ops.fmha.<op_module>.FwOp
    description = "xformers memory_efficient_attention"

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        if r := import_error_reason("xformers.ops"):
            return r
        import importlib

        shim = apply_shim()
        import xformers.ops.fmha.common as common

        if not common._built_with_cuda and not shim:
            return (
                "xformers' C++ extension does not load on this torch "
                f"({torch.__version__}); set {SHIM_ENV}=1 to run its operators that call PyTorch's kernels"
            )
        try:
            mod = importlib.import_module(f"xformers.ops.fmha.{self.op_module}")
        except Exception as exc:  # noqa: BLE001
            return f"cannot import xformers.ops.fmha.{self.op_module}: {type(exc).__name__}: {exc}"
        available = getattr(mod.FwOp, "is_available", None)
        if available is not None and not available():
            return f"xformers operator {mod.FwOp.NAME} has no kernel in this build (FwOp.is_available() is False)"
        return None

    def _op(self):
        import importlib

        return importlib.import_module(f"xformers.ops.fmha.{self.op_module}").FwOp

    def version(self) -> str:
        import xformers

        shim = apply_shim()
        text = f"xformers {xformers.__version__}, op {self._op().NAME}"
        return text + (f" (shim {SHIM_ENV}=1: fmha.common._built_with_cuda forced True)" if shim else "")

    def unsupported_reason(self, case: Case) -> str | None:
        if case.softcap is not None:
            return "xformers memory_efficient_attention has no softcap"
        try:
            xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        except Unsupported as exc:
            return str(exc)
        return None

    returns_lse = True
    #: xformers documents no LSE for a row with no key: recorded (lse_detail), not judged
    lse_empty: tuple[str, ...] = ("any",)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, False)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` through ``memory_efficient_attention_forward_requires_grad``: its LSE, canonical layout."""
        out, lse = self._attend(case, inputs, out, True)
        return out, xformers_lse_rows(lse, case.q_lens, case.hq)

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, return_lse: bool):
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, return_lse)

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> tuple[str, object]:
        """Host work, once: the ``attn_bias`` (a block-diagonal one holds its sequences' starts, built from the lengths).
        No padded batch (``_pads``): an empty sequence in ``from_seqlens`` was not checked here."""
        apply_shim()
        name, kw = xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        with refusals(XFORMERS_REFUSALS, f"xformers {self._op().NAME} with {name}"):
            return name, _make_bias(name, kw, case.q_lens, case.k_lens)

    def _launch(self, case: Case, inputs: Inputs, prep: tuple, out: torch.Tensor, return_lse: bool = False, refill: bool = False):
        """Device work: :func:`xformers_attention` with the prepared bias on ``inputs``' tensors into ``out``."""
        name, bias = prep
        with refusals(XFORMERS_REFUSALS, f"xformers {self._op().NAME} with {name}"):
            o = xformers_attention(
                inputs.q, inputs.k, inputs.v, case.q_lens, case.k_lens, case.softmax_scale, bias, self.op_module,
                packed=name.startswith("BlockDiagonal"), return_lse=return_lse,
            )  # fmt: skip
        o, lse = o if return_lse else (o, None)
        out.copy_(o)  # (total_q, hq, d)
        return (out, lse) if return_lse else out

    #: The backward: autograd through :func:`xformers_attention_trained` (the operator's ``BwOp``).
    supports_grad = True

    def grad_unsupported_reason(self, case: Case) -> str | None:
        """The operator's ``BwOp`` declares the ``attn_bias`` types it takes (``SUPPORTED_ATTN_BIAS_TYPES``) and
        raises ``NotImplementedError("Unsupported attn_bias type")`` for another only inside the backward, after
        the forward ran (xformers 0.0.35's ``cutlassB-pt`` leaves its bottom-right local masks out, "TODO: Still
        some infs/nans in the BW pass for local + causal"): read up front, so such a row is unsupported."""
        if (r := super().grad_unsupported_reason(case)) or (r := self.unsupported_reason(case)):
            return r
        import importlib

        name, _ = xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        try:
            bw = importlib.import_module(f"xformers.ops.fmha.{self.op_module}").BwOp
            from xformers.ops.fmha import attn_bias as ab
        except ImportError:  # not installed here (a repro script written on the CPU): unavailable_reason says so
            return None

        taken = getattr(bw, "SUPPORTED_ATTN_BIAS_TYPES", None)
        if taken is not None and (type(None) if name == "None" else getattr(ab, name)) not in tuple(taken):
            op = getattr(bw, "NAME", self.op_module)
            return f"xformers {op} (BwOp) does not take attn_bias {name}: not in its SUPPORTED_ATTN_BIAS_TYPES"
        return None

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        apply_shim()
        name, kw = xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        with refusals(XFORMERS_REFUSALS + GRAD_REFUSALS, f"xformers {self.op_module} BwOp with {name}"):
            bias = _make_bias(name, kw, case.q_lens, case.k_lens)

            def attention(q, k, v):
                packed = name.startswith("BlockDiagonal")
                return xformers_attention_trained(q, k, v, case.q_lens, case.k_lens, case.softmax_scale, bias, self.op_module, packed)

            return autograd_grads(attention, inputs.q, inputs.k, inputs.v, dout)

    def repro_backward(self, case: Case) -> str:
        """``attention_grads(q, k, v, dout)`` for a ``--grad`` script: autograd through
        :func:`xformers_attention_trained` as :meth:`backward` calls it."""
        from ..repro_script import embed

        name, kw = xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        return embed(
            [xformers_layout_trained, xformers_attention_trained, autograd_grads],
            f"""\
            def attention_grads(q, k, v, dout):
                bias = {bias_expr(name, kw, case.q_lens, case.k_lens)}
                return autograd_grads(
                    lambda q, k, v: xformers_attention_trained(q, k, v, Q_LENS, K_LENS, SCALE, bias, {self.op_module!r},
                                                               packed={name.startswith("BlockDiagonal")!r}),
                    q, k, v, dout)
            """,
        )

    def workspace_bytes(self, case: Case) -> int:
        """Its output (copied into ``out``) and a layout copy of it, and its padded LSE (measured on the H100,
        2026-12-06: two outputs' worth beside the harness's own)."""
        return 2 * output_bytes(case) + 2 * lse_bytes(case)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`xformers_attention` as ``run`` calls it,
        the mask from :func:`xformers_bias_spec`."""
        from ..repro_script import embed

        name, kw = xformers_bias_spec(case.window, case.q_lens, case.k_lens)
        return embed(
            [xformers_layout, xformers_attention],
            f"""\
            def attention(q, k, v):
                bias = {bias_expr(name, kw, case.q_lens, case.k_lens)}
                return xformers_attention(q, k, v, Q_LENS, K_LENS, SCALE, bias, {self.op_module!r},
                                          packed={name.startswith("BlockDiagonal")!r})
            """,
            head=f"""\
            import os

            from xformers.ops.fmha import attn_bias as ab

            if os.environ.get("{SHIM_ENV}") == "1":  # the harness's opt-in shim for a wheel built for another torch
                import xformers.ops.fmha.common as common

                common._built_with_cuda = True""",
        )


class XformersCutlass(XformersBackend):
    name = "xformers-cutlass-cuda"
    op_module = "cutlass"
    description = "xformers memory_efficient_attention, op fmha.cutlass.FwOp (cutlassF-pt on PyTorch's kernel)"


class XformersFlash(XformersBackend):
    name = "xformers-flash-cuda"
    op_module = "flash"
    description = "xformers memory_efficient_attention, op fmha.flash.FwOp (fa2F, PyTorch's FA2 when -pt)"
    lse_empty = ("+inf",)  # FlashAttention-2's kernels: +inf for a row with no key
