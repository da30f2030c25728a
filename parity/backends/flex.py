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


@functools.lru_cache(maxsize=64)
def softcap_score_mod(cap: float):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


@functools.lru_cache(maxsize=256)
def _block_mask(window: Window, sq: int, sk: int, bq: int, bk: int, device: str, bucketed: bool):
    """The BlockMask of one (window, Sq, Sk), built once: a batched mask probe repeats the same
    lengths many times, and a sweep revisits them across cases."""
    from torch.nn.attention.flex_attention import create_block_mask

    mod = bucketed_mask_mod(window, sq, sk, device) if bucketed else window_mask_mod(window, sq, sk)
    return create_block_mask(mod, None, None, bq, bk, device=device)


@functools.cache
def _tensor_softcap(device: str):
    """One softcap score_mod per device, its cap a tensor set per call (no recompile per value)."""
    cap = torch.ones((), dtype=torch.float32, device=device)  # ()

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    score_mod.cap = cap  # type: ignore[attr-defined]
    return score_mod


#: Recompiles allowed per code object. Dynamo's default (8) would, after 8 distinct
#: (dtype, heads, head dim, bucket) combinations, silently run flex_attention eagerly:
#: an unfused path, not the compiled kernel this backend stands for.
RECOMPILE_LIMIT = 4096


@functools.cache
def _compiled_flex():
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), RECOMPILE_LIMIT))
    return torch.compile(flex_attention, dynamic=False)


class FlexBackend(Backend):
    cost_hint = 10  # relative sweep cost, for --jobs lanes: dynamo traces each new shape
    name = "flex"
    description = "FlexAttention with a window mask_mod; eager on CPU, compiled on CUDA"
    compiled: bool | None = None  # None: compiled on CUDA, eager on CPU
    #: Pad lengths to power-of-two buckets and pass the window and softcap as tensors,
    #: so one compiled kernel serves every case of a bucket (see FlexCudaBackend).
    bucketed = False

    def unavailable_reason(self) -> str | None:
        if self.device == "cuda" and (r := cuda_unavailable_reason()):
            return r
        return import_error_reason("torch.nn.attention.flex_attention")

    def _use_compiled(self) -> bool:
        return self.compiled if self.compiled is not None else self.device == "cuda"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        fn = _compiled_flex() if self._use_compiled() else flex_attention
        dev = str(inputs.q.device)
        score_mod = None
        if case.softcap is not None and self.bucketed:
            score_mod = _tensor_softcap(dev)
            score_mod.cap.fill_(case.softcap)  # type: ignore[attr-defined]
        elif case.softcap is not None:
            score_mod = softcap_score_mod(case.softcap)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager flex warns that it is unfused
            for _, q, k, v, qs in inputs.sequences():
                sq, sk = q.shape[0], k.shape[0]
                bq, bk = (bucket_len(sq), bucket_len(sk)) if self.bucketed else (sq, sk)
                block_mask = _block_mask(case.window, sq, sk, bq, bk, dev, self.bucketed)
                o = fn(
                    _pad_rows(q, bq).transpose(0, 1)[None],  # (1, hq, bq, d), zero rows appended
                    _pad_rows(k, bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                    _pad_rows(v, bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                    score_mod=score_mod,
                    block_mask=block_mask,
                    scale=case.softmax_scale,
                    enable_gqa=case.hq != case.hkv,
                )  # (1, hq, bq, d)
                out[qs] = o[0, :, :sq].transpose(0, 1)  # (Sq, hq, d)
        return out


def _pad_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x`` (S, H, d) with zero rows appended up to ``n`` (itself when already ``n`` long)."""
    return x if x.shape[0] == n else torch.nn.functional.pad(x, (0, 0, 0, 0, 0, n - x.shape[0]))


class FlexCompiledBackend(FlexBackend):
    cost_hint = 30  # inductor compiles each new shape
    name = "flex-compiled"
    compiled = True
    description = "FlexAttention through torch.compile (CPU inductor here: slow first call)"


def bucket_len(n: int, minimum: int = 128) -> int:
    """The compile bucket of a length: the next power of two, at least ``minimum``."""
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


def bucketed_mask_mod(window: Window, sq: int, sk: int, device):
    """The window rule with the case's numbers as tensors (no recompile when they change),
    over a padded ``(bucket(Sq), bucket(Sk))`` grid: padded keys ``kv_idx >= Sk`` are masked."""
    d = window.offset(sq, sk)
    big = 4 * (sq + sk) + 8
    t = torch.tensor(
        [d, big if window.left is None else window.left, big if window.right is None else window.right, sk],
        dtype=torch.int32,
        device=device,
    )  # (4,): offset, left, right, Sk

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < t[3]) & (kv_idx >= q_idx + t[0] - t[1]) & (kv_idx <= q_idx + t[0] + t[2])

    return mask_mod


class FlexCudaBackend(FlexBackend):
    cost_hint = 30  # compiles each new (dtype, heads, head dim, bucket)
    name = "flex-cuda"
    device = "cuda"
    description = (
        "FlexAttention compiled on CUDA, BlockMask per (Sq, Sk); lengths padded to power-of-two buckets and the "
        "window passed as tensors, so one compiled kernel serves every case of a bucket"
    )
    bucketed = True
