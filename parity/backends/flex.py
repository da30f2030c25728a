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
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..case import Case, Inputs
from ..window import Window
from .base import Backend, cuda_unavailable_reason, import_error_reason


def band_mask_mod(d: int, left: int | None, right: int | None):
    """The rule ``q_idx + d - left <= kv_idx <= q_idx + d + right`` (``None``: unbounded) as a mask_mod.

    Torch only: export-repro copies this function into standalone scripts as it is.
    """

    def mask_mod(b, h, q_idx, kv_idx):
        ok = kv_idx >= 0
        if left is not None:
            ok = ok & (kv_idx >= q_idx + d - left)
        if right is not None:
            ok = ok & (kv_idx <= q_idx + d + right)
        return ok

    return mask_mod


def window_mask_mod(window: Window, sq: int, sk: int):
    """The canonical window of one (Sq, Sk) pair as a mask_mod."""
    return band_mask_mod(window.offset(sq, sk), window.left, window.right)


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


    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script (:mod:`parity.repro_script`): this call,
        with the mask_mod builder copied from this file and its numbers computed here."""
        from ..repro_script import fill

        pairs = list(zip(case.q_lens, case.k_lens))
        seqs: list[tuple[int, int, Any]]
        if self.bucketed:  # padded lengths, the numbers as tensors (see FlexCudaBackend)
            seqs = [(bucket_len(sq), bucket_len(sk), bucket_band(case.window, sq, sk)) for sq, sk in pairs]
            builder: Callable[..., Any] = tensor_band_mask_mod
            make = "tensor_band_mask_mod(torch.tensor(args, dtype=torch.int32, device=q.device))"
            cap = "torch.full((), SOFTCAP, dtype=torch.float32, device=DEVICE)  # a tensor, as the harness passes it"
        else:
            seqs = [(sq, sk, (case.window.offset(sq, sk), case.window.left, case.window.right)) for sq, sk in pairs]
            builder, make, cap = band_mask_mod, "band_mask_mod(*args)", "SOFTCAP"
        score = "SCORE_MOD = None" if case.softcap is None else fill(
            """\
            CAP = $cap


            def SCORE_MOD(score, b, h, q_idx, kv_idx):
                return CAP * torch.tanh(score / CAP)""",
            cap=cap,
        )
        return fill(
            """\
            import warnings

            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            FLEX = $flex
            SEQS = $seqs  # per sequence: (padded Sq, padded Sk, mask_mod numbers)


            $builder

            $pad_rows

            $score


            def attention(q, k, v):
                out = torch.empty_like(q)  # (total_q, hq, d)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # eager flex warns that it is unfused
                    for b, (bq, bk, args) in enumerate(SEQS):
                        block_mask = create_block_mask($make, None, None, bq, bk, device=str(q.device))
                        o = FLEX(
                            _pad_rows(q[CU_Q[b] : CU_Q[b + 1]], bq).transpose(0, 1)[None],  # (1, hq, bq, d)
                            _pad_rows(k[CU_K[b] : CU_K[b + 1]], bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                            _pad_rows(v[CU_K[b] : CU_K[b + 1]], bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                            score_mod=SCORE_MOD,
                            block_mask=block_mask,
                            scale=SCALE,
                            enable_gqa=HQ != HKV,
                        )  # (1, hq, bq, d)
                        out[CU_Q[b] : CU_Q[b + 1]] = o[0, :, : Q_LENS[b]].transpose(0, 1)
                return out
            """,
            flex="torch.compile(flex_attention, dynamic=False)" if self._use_compiled() else "flex_attention  # eager",
            seqs=repr(seqs),
            builder=inspect.getsource(builder),
            pad_rows=inspect.getsource(_pad_rows),
            score=score,
            make=make,
        )


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


def bucket_band(window: Window, sq: int, sk: int) -> list[int]:
    """``[d, left, right, Sk]`` of one (Sq, Sk) pair for :func:`tensor_band_mask_mod`; an unbounded side
    becomes a bound past every key."""
    big = 4 * (sq + sk) + 8
    return [window.offset(sq, sk), big if window.left is None else window.left, big if window.right is None else window.right, sk]


def tensor_band_mask_mod(t):
    """The rule with its numbers in a tensor ``t`` = ``[d, left, right, Sk]`` (no recompile when they
    change), over a padded grid: padded keys ``kv_idx >= Sk`` are masked. Torch only (copied by export-repro)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < t[3]) & (kv_idx >= q_idx + t[0] - t[1]) & (kv_idx <= q_idx + t[0] + t[2])

    return mask_mod


def bucketed_mask_mod(window: Window, sq: int, sk: int, device):
    """The window rule with the case's numbers as tensors, over a padded ``(bucket(Sq), bucket(Sk))`` grid."""
    t = torch.tensor(bucket_band(window, sq, sk), dtype=torch.int32, device=device)  # (4,): offset, left, right, Sk
    return tensor_band_mask_mod(t)


class FlexCudaBackend(FlexBackend):
    cost_hint = 30  # compiles each new (dtype, heads, head dim, bucket)
    name = "flex-cuda"
    device = "cuda"
    description = (
        "FlexAttention compiled on CUDA, BlockMask per (Sq, Sk); lengths padded to power-of-two buckets and the "
        "window passed as tensors, so one compiled kernel serves every case of a bucket"
    )
    bucketed = True
