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

import warnings

import torch
import torch.nn.functional as F

from ..case import Case, Inputs
from ..window import Window
from .base import Backend, cuda_unavailable_reason, refusals
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


class SdpaBackend(Backend):
    name = "sdpa"
    description = "torch SDPA with an explicit boolean mask, PyTorch's own kernel choice"
    kernel: str | None = None  # None: let PyTorch choose; else an SDPBackend member name
    causal_path = False
    gqa_native = True  # enable_gqa=True; False: repeat kv heads before the call
    refusal_phrases = SDPA_REFUSALS

    def unsupported_reason(self, case: Case) -> str | None:
        if case.softcap is not None:
            return "SDPA has no softcap"
        if self.causal_path:
            return causal_path_fits(case)
        return None

    def mask_window(self, case: Case) -> Window:
        """The window the boolean mask is built from: the spec's own (``Window.mask``)."""
        return case.window

    def _call(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # q: (1, hq, Sq, d); k, v: (1, hkv, Sk, d)
        sq, sk = q.shape[2], k.shape[2]
        kw: dict = {"scale": case.softmax_scale}
        if case.hq != case.hkv:
            if self.gqa_native:
                kw["enable_gqa"] = True
            else:
                k = k.repeat_interleave(case.group, dim=1)  # (1, hq, Sk, d)
                v = v.repeat_interleave(case.group, dim=1)  # (1, hq, Sk, d)
        if self.causal_path:
            kw["is_causal"] = True
        else:
            kw["attn_mask"] = self.mask_window(case).mask(sq, sk, q.device)  # (Sq, Sk) bool, True = attend
        return F.scaled_dot_product_attention(q, k, v, **kw)  # (1, hq, Sq, d)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        library = f"SDPA kernel {self.kernel}" if self.kernel else "SDPA"
        with _kernel_context(self.kernel), refusals(self.refusal_phrases, library):
            for _, q, k, v, qs in inputs.sequences():
                o = self._call(
                    case,
                    q.transpose(0, 1)[None],  # (1, hq, Sq, d)
                    k.transpose(0, 1)[None],  # (1, hkv, Sk, d)
                    v.transpose(0, 1)[None],  # (1, hkv, Sk, d)
                )
                out[qs] = o[0].transpose(0, 1)  # (Sq, hq, d)
        return out

    def unavailable_reason(self) -> str | None:
        return cuda_unavailable_reason() if self.device == "cuda" else None

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script (:mod:`parity.repro_script`): this call,
        the boolean mask from :meth:`mask_window`'s bands."""
        from ..repro_script import fill

        w = self.mask_window(case)
        gqa = ""
        if case.hq != case.hkv and self.gqa_native:
            gqa = 'kw["enable_gqa"] = True'
        elif case.hq != case.hkv:
            gqa = "kb, vb = kb.repeat_interleave(HQ // HKV, dim=1), vb.repeat_interleave(HQ // HKV, dim=1)  # (1, hq, Sk, d)"
        if self.causal_path:
            mask = 'kw["is_causal"] = True  # top-left aligned: only where that is the spec'
        else:
            mask = 'kw["attn_mask"] = band_mask(sq, sk, *MASK_BANDS[b]).to(q.device)  # (Sq, Sk) bool, True = attend'
        return fill(
            """\
            import contextlib

            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel

            KERNEL = $kernel  # the SDPA kernel pinned (None: PyTorch's own choice)
            MASK_BANDS = $bands  # per sequence (d, left, right): key j visible iff i + d - left <= j <= i + d + right


            def band_mask(sq, sk, d, left, right):
                i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
                ok = torch.ones(sq, sk, dtype=torch.bool)
                if left is not None:
                    ok &= j >= i + d - left
                if right is not None:
                    ok &= j <= i + d + right
                return ok  # (Sq, Sk)


            def attention(q, k, v):
                out = torch.empty_like(q)  # (total_q, hq, d)
                ctx = sdpa_kernel([getattr(SDPBackend, KERNEL)]) if KERNEL else contextlib.nullcontext()
                with ctx:
                    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
                        qb = q[CU_Q[b] : CU_Q[b + 1]].transpose(0, 1)[None]  # (1, hq, Sq, d)
                        kb = k[CU_K[b] : CU_K[b + 1]].transpose(0, 1)[None]  # (1, hkv, Sk, d)
                        vb = v[CU_K[b] : CU_K[b + 1]].transpose(0, 1)[None]  # (1, hkv, Sk, d)
                        kw = {"scale": SCALE}
                        $gqa
                        $mask
                        out[CU_Q[b] : CU_Q[b + 1]] = F.scaled_dot_product_attention(qb, kb, vb, **kw)[0].transpose(0, 1)
                return out
            """,
            kernel=repr(self.kernel),
            bands=repr([(w.offset(sq, sk), w.left, w.right) for sq, sk in zip(case.q_lens, case.k_lens)]),
            gqa=gqa,
            mask=mask,
        )


def _kernel_context(kernel: str | None):
    import contextlib

    if kernel is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sdpa_kernel([getattr(SDPBackend, kernel)])


class SdpaCausalBackend(SdpaBackend):
    name = "sdpa-causal"
    description = "torch SDPA is_causal=True path (top-left aligned), only where it equals the spec"
    causal_path = True


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
