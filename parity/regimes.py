"""Input regimes: the numerics of real models, not only standard normal inputs.

With ``scale = 1/sqrt(d)`` and standard normal ``q``/``k`` the logits are about ``N(0, 1)``
and the softmax is nearly flat: a kernel without a running max, a low-precision
accumulator over long key ranges or one that breaks on a peaked softmax passes unseen.
Each regime below reshapes the standard normal draw of :func:`parity.make_inputs`
deterministically (no extra random draws of the case's generator, so the ``normal``
regime's inputs are exactly those of earlier versions):

================  =====================================================================
regime            what changes (applied before rounding to the case's dtype)
================  =====================================================================
``normal``        nothing: ``q, k, v ~ N(0, 1)``
``large_logits``  ``q`` and ``k`` scaled so the scaled logits have std ``LOGIT_STD`` (40):
                  peaked softmax, logits beyond +-88 (``exp`` overflows float32 without a
                  running max)
``outliers``      ``OUTLIER_CHANNELS`` head-dim channels of ``k`` and ``v`` times 20
                  (the outlier features of LLM activations)
``sink``          key 0 of every sequence points along a direction every query shares:
                  score about ``SINK_LOGIT`` above the rest (an attention sink); a window
                  that excludes key 0 must still exclude it
``near_dup``      keys come in groups of 4 copies plus noise of 1e-3 (near ties)
``large_values``  ``v`` scaled to ``min(max/4, float32 max / (4 * Sk))`` of the dtype: near
                  the largest finite number where a float32 accumulator of ``Sk`` terms
                  still stays finite; the output must be finite
================  =====================================================================

The float64 reference and the same-dtype baseline see the same (rounded) inputs, so the
error budget stays calibrated in every regime.
"""

from __future__ import annotations

import math

import torch

REGIMES = ("normal", "large_logits", "outliers", "sink", "near_dup", "large_values")
LOGIT_STD = 40.0
OUTLIER_CHANNELS = 2
OUTLIER_GAIN = 20.0
SINK_LOGIT = 8.0
DUP_GROUP = 4
DUP_NOISE = 1e-3


def check(regime: str) -> str:
    if regime not in REGIMES:
        raise ValueError(f"unknown input regime {regime!r}; known: {', '.join(REGIMES)}")
    return regime


def _sub_seed(seed: int, salt: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed((seed * 1_000_003 + salt) % (2**63))


def apply(
    regime: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    starts: list[int],
    scale: float,
    dtype: torch.dtype,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reshape float32 ``q`` ``(total_q, hq, d)``, ``k``/``v`` ``(total_k, hkv, d)`` for ``regime``.

    ``starts``: the first packed key row of each sequence; ``scale``: the softmax scale.
    """
    check(regime)
    d = q.shape[-1]
    if regime == "large_logits":
        a = math.sqrt(LOGIT_STD / (math.sqrt(d) * scale))  # std(q.k * scale) = a^2 sqrt(d) scale
        return q * a, k * a, v
    if regime == "outliers":
        ch = torch.randperm(d, generator=_sub_seed(seed, 1))[: min(OUTLIER_CHANNELS, d)]
        k, v = k.clone(), v.clone()
        k[..., ch] *= OUTLIER_GAIN  # (total_k, hkv, d)
        v[..., ch] *= OUTLIER_GAIN  # (total_k, hkv, d)
        return q, k, v
    if regime == "sink":
        u = torch.randn(d, generator=_sub_seed(seed, 2))
        u = u / u.norm()  # (d,) unit
        q = q + math.sqrt(d) * u  # (total_q, hq, d): every query shares u
        k = k.clone()
        k[starts] = (SINK_LOGIT / (scale * math.sqrt(d))) * u  # (B, hkv, d) rows: q.k_sink * scale ~ SINK_LOGIT
        return q, k, v
    if regime == "near_dup":
        idx = torch.arange(k.shape[0]) // DUP_GROUP * DUP_GROUP  # (total_k,) the group's first key
        noise = torch.randn(k.shape, generator=_sub_seed(seed, 3)) * DUP_NOISE
        return q, k[idx] + noise, v
    if regime == "large_values":
        top = min(torch.finfo(dtype).max / 4, torch.finfo(torch.float32).max / (4 * max(1, k.shape[0])))
        return q, k, v * (top / max(float(v.abs().max()), 1e-30))
    return q, k, v
