"""PyTorch FlexAttention.

Window translation: a ``mask_mod`` that encodes the canonical rule
``q + d - left <= kv <= q + d + right`` (``d`` from the window's alignment), and a
``BlockMask`` rebuilt for every (Sq, Sk) pair, since a BlockMask is tied to its
Q_LEN / KV_LEN. The softcap is a ``score_mod`` (FlexAttention applies ``scale``
before ``score_mod``, and masking after it, as the spec does).

``flex`` runs eagerly on the CPU (an unfused reference path PyTorch keeps for
debugging) and compiled on CUDA. ``flex-compiled`` asks for ``torch.compile``
wherever it runs; on the CPU that compiles C++ through inductor (slow to start).
"""

from __future__ import annotations

import functools
import warnings

import torch

from ..case import Case, Inputs
from ..window import Window
from .base import Backend, cuda_unavailable_reason, import_error_reason


def window_mask_mod(window: Window, sq: int, sk: int):
    d = window.offset(sq, sk)
    left, right = window.left, window.right

    def mask_mod(b, h, q_idx, kv_idx):
        ok = kv_idx >= 0
        if left is not None:
            ok = ok & (kv_idx >= q_idx + d - left)
        if right is not None:
            ok = ok & (kv_idx <= q_idx + d + right)
        return ok

    return mask_mod


def softcap_score_mod(cap: float):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


class FlexBackend(Backend):
    name = "flex"
    description = "FlexAttention with a window mask_mod; eager on CPU, compiled on CUDA"
    compiled: bool | None = None  # None: compiled on CUDA, eager on CPU

    def unavailable_reason(self) -> str | None:
        if self.device == "cuda" and (r := cuda_unavailable_reason()):
            return r
        return import_error_reason("torch.nn.attention.flex_attention")

    def _use_compiled(self) -> bool:
        return self.compiled if self.compiled is not None else self.device == "cuda"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        fn = _compiled_flex() if self._use_compiled() else flex_attention
        score_mod = softcap_score_mod(case.softcap) if case.softcap is not None else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager flex warns that it is unfused
            for _, q, k, v, qs in inputs.sequences():
                sq, sk = q.shape[0], k.shape[0]
                block_mask = create_block_mask(
                    window_mask_mod(case.window, sq, sk), None, None, sq, sk, device=str(q.device)
                )
                o = fn(
                    q.transpose(0, 1)[None],  # (1, hq, Sq, d)
                    k.transpose(0, 1)[None],  # (1, hkv, Sk, d)
                    v.transpose(0, 1)[None],  # (1, hkv, Sk, d)
                    score_mod=score_mod,
                    block_mask=block_mask,
                    scale=case.softmax_scale,
                    enable_gqa=case.hq != case.hkv,
                )
                out[qs] = o[0].transpose(0, 1)  # (Sq, hq, d)
        return out


class FlexCompiledBackend(FlexBackend):
    name = "flex-compiled"
    compiled = True
    description = "FlexAttention through torch.compile (CPU inductor here: slow first call)"


class FlexCudaBackend(FlexBackend):
    name = "flex-cuda"
    device = "cuda"
    description = "FlexAttention compiled on CUDA, BlockMask per (Sq, Sk)"
