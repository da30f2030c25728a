"""PyTorch ``scaled_dot_product_attention``.

Window translation: SDPA has no window argument. The canonical window becomes an
explicit boolean mask ``(Sq, Sk)`` from :meth:`Window.mask` (True = attend). The
``*-causal`` variants use ``is_causal=True`` instead, which is *top-left* aligned
(query ``i`` sees keys ``j <= i``); they claim only the cases where that is exactly the
spec: an unbounded-left causal window that is top-left aligned, or any causal window
with ``Sq == Sk``. Everything else is reported unsupported, not approximated.

CUDA variants pin one SDPA kernel with ``torch.nn.attention.sdpa_kernel``; when that
kernel refuses the case, the refusal is reported as unsupported, never a fallback.

Refusal phrases (:data:`SDPA_REFUSALS`, see :func:`.base.refusal`):

==========================  ===========================================================
``No available kernel``     PyTorch, when the pinned kernel cannot take the inputs
                            ("No available kernel. Aborting execution."; the reasons
                            go to warnings)
cuDNN's phrases             ``sdpa-cudnn-cuda`` only: the cuDNN frontend declining the
                            graph (:data:`.cudnn.CUDNN_REFUSALS`)
==========================  ===========================================================
"""

from __future__ import annotations

import torch

from ..case import Case, Inputs
from ..window import Window
from .base import GRAD_REFUSALS, Backend, Unsupported, cuda_unavailable_reason, refusals
from .cudnn import CUDNN_REFUSALS

#: PyTorch's own words when the SDPA kernel it was told to use declines the inputs.
SDPA_REFUSALS: tuple[str, ...] = ("No available kernel",)


def causal_path_fits(case: Case) -> str | None:
    w = case.window
    if w.left is not None or w.right != 0:
        return f"is_causal is a plain causal mask; window {w.describe()} is not"
    if w.align == "top_left":
        return None
    if any(q != k for q, k in zip(case.q_lens, case.k_lens)):
        return "is_causal is top-left aligned; the spec is bottom-right and Sq != Sk"
    return None


def band_mask(sq, sk, d, left, right, device="cpu"):
    """``(Sq, Sk)`` bool, True = attend: query ``i`` sees key ``j`` iff ``i + d - left <= j <= i + d + right``
    (``None``: that side unbounded); :meth:`Window.mask` with the offset ``d`` given."""
    i = torch.arange(sq, device=device)[:, None]  # (Sq, 1)
    j = torch.arange(sk, device=device)[None, :]  # (1, Sk)
    ok = torch.ones(sq, sk, dtype=torch.bool, device=device)  # (Sq, Sk)
    if left is not None:
        ok &= j >= i + d - left
    if right is not None:
        ok &= j <= i + d + right
    return ok


def sdpa_attention(q, k, v, out, q_lens, k_lens, scale, bands=None, kernel=None, repeat_kv=False):
    """``torch.nn.functional.scaled_dot_product_attention``, one call per sequence of a packed batch.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; ``out`` ``(total_q, hq, d)`` is
    written and returned. ``bands``: per sequence ``(d, left, right)`` of the boolean mask
    (:func:`band_mask`); ``None``: ``is_causal=True`` instead (top-left aligned). ``kernel``: the
    ``SDPBackend`` member pinned (``None``: PyTorch's own choice). ``repeat_kv``: kv heads repeated
    to ``hq`` before the call instead of ``enable_gqa=True``.
    """
    import contextlib
    import warnings

    import torch.nn.functional as F

    ctx = contextlib.nullcontext()
    if kernel is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = sdpa_kernel([getattr(SDPBackend, kernel)])
    g = q.shape[1] // k.shape[1]
    q0 = k0 = 0
    with ctx:
        for b, (sq, sk) in enumerate(zip(q_lens, k_lens)):
            qb = q[q0 : q0 + sq].transpose(0, 1)[None]  # (1, hq, Sq, d)
            kb = k[k0 : k0 + sk].transpose(0, 1)[None]  # (1, hkv, Sk, d)
            vb = v[k0 : k0 + sk].transpose(0, 1)[None]  # (1, hkv, Sk, d)
            kw = {"scale": scale}
            if g > 1 and repeat_kv:
                kb, vb = kb.repeat_interleave(g, dim=1), vb.repeat_interleave(g, dim=1)  # (1, hq, Sk, d)
            elif g > 1:
                kw["enable_gqa"] = True
            if bands is None:
                kw["is_causal"] = True
            else:
                kw["attn_mask"] = band_mask(sq, sk, *bands[b], device=q.device)  # (Sq, Sk) bool, True = attend
            out[q0 : q0 + sq] = F.scaled_dot_product_attention(qb, kb, vb, **kw)[0].transpose(0, 1)  # (Sq, hq, d)
            q0, k0 = q0 + sq, k0 + sk
    return out


class SdpaBackend(Backend):
    """CUDA graphs: ``run`` as it is (the default ``graph_call``): the masks are built on the device (``arange``, compares),
    one SDPA call per sequence sliced by the case's lengths; no host sync, nothing built from the values."""

    name = "sdpa"
    no_sinks = "scaled_dot_product_attention takes no sink logits (a sink is not a key of its mask or bias)"
    no_chunk = "the backend builds its mask from the window only (no attention_chunk)"
    description = "torch SDPA with an explicit boolean mask, PyTorch's own kernel choice"
    kernel: str | None = None  # None: let PyTorch choose; else an SDPBackend member name
    causal_path = False
    gqa_native = True  # enable_gqa=True; False: repeat kv heads before the call
    refusal_phrases = SDPA_REFUSALS
    supports_grad = True  # the backward: autograd through sdpa_attention (the boolean mask; the pinned kernel's own backward)

    def unsupported_reason(self, case: Case) -> str | None:
        if case.softcap is not None:
            return "SDPA has no softcap"
        if self.causal_path:
            return causal_path_fits(case)
        return None

    def mask_window(self, case: Case) -> Window:
        """The window the boolean mask is built from: the spec's own (``Window.mask``)."""
        return case.window

    def native(self, case: Case) -> dict:
        """:func:`sdpa_attention`'s arguments for ``case`` besides the tensors, lengths and scale."""
        if case.softcap is not None:
            raise Unsupported("SDPA has no softcap")
        w = self.mask_window(case)
        pairs = zip(case.q_lens, case.k_lens)
        bands = None if self.causal_path else [(w.offset(sq, sk), *w.sides(sq, sk)) for sq, sk in pairs]
        return dict(bands=bands, kernel=self.kernel, repeat_kv=not self.gqa_native)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        kw = self.native(case)
        library = f"SDPA kernel {self.kernel}" if self.kernel else "SDPA"
        with refusals(self.refusal_phrases, library):
            return sdpa_attention(inputs.q, inputs.k, inputs.v, out, case.q_lens, case.k_lens, case.softmax_scale, **kw)

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Autograd through :func:`sdpa_attention` (the pinned kernel's own backward, with the same boolean
        mask); a refusal of that kernel (or of its backward) is ``unsupported``."""
        library = f"SDPA kernel {self.kernel} backward" if self.kernel else "SDPA backward"
        with refusals(self.refusal_phrases + GRAD_REFUSALS, library):
            return super().backward(case, inputs, dout)

    def workspace_bytes(self, case: Case) -> int:
        """Per sequence (one call each; the largest counts): the boolean mask ``(Sq, Sk)``, its negation and the
        additive bias SDPA turns it into, in the case's dtype; its output (copied into ``out``); the MATH kernel's
        float32 scores and weights ``(hq, Sq, Sk)`` (2.2-2.5 of them measured at once) and its float32 copies of
        k and v, before and after the kv heads are repeated to ``hq``; the kv heads repeated where it does.
        Measured on the H100 (2026-12-06): a 32k prefill of the memory-efficient kernel 4.7 GiB (the mask and
        its bfloat16 bias 3 GiB), a MATH decode row over 128k keys 7.8 GiB (its float32 k and v 7 GiB)."""
        itemsize = torch.finfo(case.torch_dtype).bits // 8
        most = 0
        for sq, sk in zip(case.q_lens, case.k_lens):
            need = sq * case.hq * case.head_dim * itemsize  # (1, hq, Sq, d): its output
            need += 0 if self.causal_path else sq * sk * (2 + itemsize)  # (Sq, Sk) bool, its negation, the bias in the dtype
            if self.kernel == "MATH":
                need += 5 * case.hq * sq * sk * 4 // 2  # (hq, Sq, Sk) float32: scores and softmax, and 0.5 more measured
                kv = sk * case.head_dim * 4  # a float32 row of k or v per head
                need += 2 * case.hkv * kv + 2 * case.hq * (kv + sk * case.head_dim * itemsize) + case.hq * sq * case.head_dim * 4
            if not self.gqa_native and case.hq != case.hkv:
                need += 2 * case.hq * sk * case.head_dim * itemsize  # (hq, Sk, d) k and v repeated
            most = max(most, need)
        return most

    def workspace_words(self, case: Case) -> str:
        """The MATH kernel's dense scores, where they dominate."""
        if self.kernel != "MATH":
            return ""
        sq, sk = max(zip(case.q_lens, case.k_lens), key=lambda p: p[0] * p[1])
        return f"dense float32 scores {sq} x {sk} x {case.hq} heads"

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason() if self.device == "cuda" else None

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script (:mod:`parity.repro_script`): :func:`sdpa_attention`
        as ``run`` calls it, the bands from :meth:`mask_window` (None: ``is_causal``)."""
        from ..repro_script import embed

        kw = self.native(case)
        return embed(
            [band_mask, sdpa_attention],
            f"""\
            def attention(q, k, v):
                # bands: per sequence (d, left, right), key j visible iff i + d - left <= j <= i + d + right
                return sdpa_attention(q, k, v, torch.empty_like(q), Q_LENS, K_LENS, SCALE,
                                      bands={kw["bands"]!r},
                                      kernel={kw["kernel"]!r}, repeat_kv={kw["repeat_kv"]!r})
            """,
        )


class SdpaCausalBackend(SdpaBackend):
    name = "sdpa-causal"
    description = "torch SDPA is_causal=True path (top-left aligned), only where it equals the spec"
    causal_path = True


class SdpaMath(SdpaBackend):
    """SDPA's MATH kernel pinned on the CPU (``sdpa`` lets PyTorch choose: its CPU flash-attention kernel
    where it accepts the case). Not in the default sweep: the control of the CPU findings' repro scripts."""

    name = "sdpa-math"
    kernel = "MATH"
    description = "SDPA math kernel on the CPU, boolean mask (the CPU flash kernel's control)"


# -- CUDA variants, one SDPA kernel each ---------------------------------------------------------


class SdpaCudaMath(SdpaBackend):
    name = "sdpa-math-cuda"
    device = "cuda"
    kernel = "MATH"
    description = "SDPA math kernel on CUDA, boolean mask"


class SdpaCudaEfficient(SdpaBackend):
    name = "sdpa-efficient-cuda"
    device = "cuda"
    kernel = "EFFICIENT_ATTENTION"
    gqa_native = False
    description = "SDPA memory-efficient kernel on CUDA, boolean mask, kv heads repeated"


class SdpaCudaCudnn(SdpaBackend):
    cost_hint = 3  # relative sweep cost, for --jobs lanes: cuDNN builds a graph per shape
    name = "sdpa-cudnn-cuda"
    device = "cuda"
    kernel = "CUDNN_ATTENTION"
    gqa_native = False
    refusal_phrases = SDPA_REFUSALS + CUDNN_REFUSALS
    description = "SDPA cuDNN kernel on CUDA, boolean mask, kv heads repeated"


class SdpaCudaFlashCausal(SdpaBackend):
    name = "sdpa-flash-causal-cuda"
    device = "cuda"
    kernel = "FLASH_ATTENTION"
    causal_path = True
    description = "SDPA flash kernel on CUDA via is_causal (it takes no mask): plain causal cases only"
