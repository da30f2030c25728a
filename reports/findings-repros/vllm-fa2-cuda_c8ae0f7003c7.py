"""vllm-fa2-cuda vs a float64 reference: bf16 MQA 2:1 d64 Sq=[63] Sk=[17] win(35,18) scale=0.05 inputs=large_logits

Harness verdict on bf16 MQA 2:1 d64 Sq=[63] Sk=[17] win(35,18) scale=0.05 inputs=large_logits: fail [max_err mean_err mask]
  error: max|err| 4.31192, budget 0.470874 (err ratio 18.93)
  mask probe: row should see no key but sees every key: 88 of 126 (head, row) pairs differ [56 x row should see no key but sees every key; 30 x row sees every key: window ignored; 2 x window is one token wider on the right]. First: seq 0 head 0 row 0 sees keys 0..16, spec says none
  worst element: worst |err| 4.31 at head 1 dim 15, seq 0 row 39 (Sq=63, Sk=17): keys 0..11 visible; window still filling (42 key(s) short of full, left edge clipped at 0): got 2.26562, want -2.04629

Library seen by the run: vllm 0.26.0 vllm_flash_attn FA2 (vllm_flash_attn subpackage only)
torch seen by the run: 2.11.0+cu130; GPU: NVIDIA H200
From: reports/h200-2026-12-05/default-sweep/results.csv row 6312 (case c8ae0f7003c7, run of 2026-12-05T04:07:37+00:00)
Case (attn-parity JSON): {"q_lens":[63],"k_lens":[17],"hq":2,"hkv":1,"head_dim":64,"dtype":"bfloat16","window":{"left":35,"right":18,"align":"bottom_right"},"scale":0.05,"softcap":null,"page_size":null,"seed":654546326,"regime":"large_logits"}

Run: PYTHONPATH=/tmp/site-vllm-fa python vllm-fa2-cuda_c8ae0f7003c7.py
Exit status: 1 when the output differs from the float64 reference beyond the tolerance printed
(K_MAX x the same naive computation's error in the case's dtype + a floor; and the mean error, K_MEAN x), when the mask
probe finds other keys than the spec, or when the backend raises; 2 when this machine cannot
run it (the backend's package does not import, no CUDA device); 0 otherwise.

The spec: query i of a sequence with Sq queries and Sk keys sees key j iff
i + d - left <= j <= i + d + right (inclusive; d = Sk - Sq for bottom_right, 0 for top_left;
None = unbounded); a query that sees no key outputs 0. Needs torch and the backend's package
only (written by attn-parity's export-repro; it does not import attn-parity).
"""

from __future__ import annotations

import os
import sys

import torch

# -- the case (bf16 MQA 2:1 d64 Sq=[63] Sk=[17] win(35,18) scale=0.05 inputs=large_logits) --
Q_LENS = [63]  # queries per sequence (packed along dim 0)
K_LENS = [17]  # keys per sequence
HQ, HKV, HEAD_DIM = 2, 1, 64  # query head h reads kv head h // (HQ // HKV)
DTYPE = torch.bfloat16
WINDOW = (35, 18, 'bottom_right')  # (left, right, align) of the spec; None = unbounded
SCALE = 0.05  # softmax scale
SOFTCAP = None  # tanh softcap of the scores (None: none)
PAGE_SIZE = None  # KV page size (None: contiguous)
SEED = 654546326
DEVICE = 'cuda'
DRAW_ARGS = {'seed': 654546326, 'total_q': 63, 'total_k': 17, 'hq': 2, 'hkv': 1, 'head_dim': 64, 'dtype': 'bfloat16', 'regime': 'large_logits', 'starts': [0], 'scale': 0.05}
K_MAX, ABS_FLOOR = 2.0, 0.001  # the harness's max-error budget for bfloat16
K_MEAN, MEAN_FLOOR = 1.5, 0.0001  # and its mean-error budget
SUMMARY = 'bf16 MQA 2:1 d64 Sq=[63] Sk=[17] win(35,18) scale=0.05 inputs=large_logits'


def cannot_run(kind, exc, tb):
    """Exit 2, not Python's 1, when this machine lacks what the script needs (1 means: diverges)."""
    if issubclass(kind, ImportError) or (DEVICE == "cuda" and not torch.cuda.is_available()):
        print(f"CANNOT RUN on this machine (exit 2): {kind.__name__}: {exc}", flush=True)
        os._exit(2)
    sys.__excepthook__(kind, exc, tb)


sys.excepthook = cannot_run  # the backend's imports below run when the script starts

# -- input regimes (as in attn-parity's regimes.py) --


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
apply_regime = apply


def draw_qkv(seed: int, total_q: int, total_k: int, hq: int, hkv: int, head_dim: int, dtype: str,
             regime: str = "normal", starts: list | None = None, scale: float = 1.0):
    """Packed ``q``, ``k``, ``v``: standard normal from a CPU generator seeded with ``seed``
    (``q`` first, then ``k``, then ``v``), reshaped by the input ``regime`` (``starts``: each
    sequence's first key row; ``scale``: the softmax scale), rounded to ``dtype`` (``"bfloat16"``...)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(total_q, hq, head_dim, generator=gen)  # (total_q, hq, d)
    k = torch.randn(total_k, hkv, head_dim, generator=gen)  # (total_k, hkv, d)
    v = torch.randn(total_k, hkv, head_dim, generator=gen)  # (total_k, hkv, d)
    q, k, v = apply_regime(regime, q, k, v, starts or [0], scale, dt, seed)
    return q.to(dt), k.to(dt), v.to(dt)


def cu(lens):
    """Prefix sums: [0, l0, l0 + l1, ...]."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


CU_Q, CU_K = cu(Q_LENS), cu(K_LENS)

# -- the backend's call, as the harness makes it --
# vLLM's flash-attention build; only its vllm/vllm_flash_attn subfolder is needed (with a stub vllm/__init__.py)
from vllm.vllm_flash_attn.flash_attn_interface import flash_attn_varlen_func


def attention(q, k, v):
    out = torch.empty_like(q)  # (total_q, hq, d); vLLM passes its output buffer
    # window_size: (left, right), inclusive, bottom-right aligned; -1 = unbounded; causal=True forces right = 0
    kw = dict(
        max_seqlen_q=max(Q_LENS),
        cu_seqlens_q=torch.tensor(CU_Q, dtype=torch.int32, device=q.device),  # (B + 1,)
        max_seqlen_k=max(K_LENS),
        softmax_scale=SCALE,
        causal=False,
        window_size=[35, 18],
        softcap=0.0,
        fa_version=2,
        out=out,
    )
    flash_attn_varlen_func(
        q,  # (total_q, hq, d)
        k,  # (total_k, hkv, d)
        v,  # (total_k, hkv, d)
        cu_seqlens_k=torch.tensor(CU_K, dtype=torch.int32, device=q.device),  # (B + 1,)
        **kw,
    )
    return out


# -- the spec, the float64 reference, the mask probe --


def band(sq, sk):
    """Per query row, the first and last key the spec lets it see (lo > hi: none)."""
    left, right, align = WINDOW
    d = sk - sq if align == "bottom_right" else 0
    i = torch.arange(sq)
    lo = torch.zeros(sq, dtype=torch.long) if left is None else (i + d - left).clamp(min=0)
    hi = torch.full((sq,), sk - 1, dtype=torch.long) if right is None else (i + d + right).clamp(max=sk - 1)
    return lo, hi


def reference(q, k, v, dtype):
    """Masked attention in ``dtype`` on the CPU, per the spec; a row that sees no key is 0."""
    out = torch.zeros(q.shape, dtype=dtype)  # (total_q, hq, d)
    g = HQ // HKV
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        lo, hi = band(sq, sk)
        j = torch.arange(sk)
        visible = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)
        for h in range(HQ):
            qh = q[CU_Q[b] : CU_Q[b + 1], h].to(dtype)  # (Sq, d)
            kh = k[CU_K[b] : CU_K[b + 1], h // g].to(dtype)  # (Sk, d)
            vh = v[CU_K[b] : CU_K[b + 1], h // g].to(dtype)  # (Sk, d)
            s = (qh * SCALE) @ kh.T  # (Sq, Sk)
            if SOFTCAP is not None:
                s = torch.tanh(s / SOFTCAP) * SOFTCAP
            p = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)  # (Sq, Sk)
            out[CU_Q[b] : CU_Q[b + 1], h] = p @ vh  # (Sq, d)
    return out


MAX_PROBE_PASSES = 64


def probe_keys(k):
    """Which keys each (head, row) saw, per sequence as (hq, Sq, Sk) bool; None if too many passes.

    q = 0 makes every score 0 (also after a softcap), so softmax is uniform over the keys a row
    sees; V one-hot per key (pass p: key j carries e_(j - p*d) for p*d <= j < (p+1)*d) makes
    output [i, h, c] of pass p non-zero exactly when key p*d + c is visible to row i of head h.
    """
    passes = -(-max(K_LENS) // HEAD_DIM)
    if passes > MAX_PROBE_PASSES:
        return None
    q0 = torch.zeros(CU_Q[-1], HQ, HEAD_DIM, dtype=DTYPE)  # (total_q, hq, d)
    outs = []
    for p in range(passes):
        v = torch.zeros(CU_K[-1], HKV, HEAD_DIM, dtype=DTYPE)  # (total_k, hkv, d)
        for b, sk in enumerate(K_LENS):
            for j in range(p * HEAD_DIM, min(sk, (p + 1) * HEAD_DIM)):
                v[CU_K[b] + j, :, j - p * HEAD_DIM] = 1
        o = attention(q0.to(DEVICE), k.to(DEVICE), v.to(DEVICE))  # (total_q, hq, d)
        outs.append(o.detach().to("cpu", torch.float32).nan_to_num(nan=1.0))  # NaN: counted as seen
    seen = []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        w = torch.cat([o[CU_Q[b] : CU_Q[b + 1]] for o in outs], dim=-1)[..., :sk].permute(1, 0, 2).abs()  # (hq, Sq, Sk)
        rowmax = w.amax(dim=-1, keepdim=True)  # (hq, Sq, 1)
        seen.append((w > rowmax * 2.0**-20) & (rowmax > 0))  # (hq, Sq, Sk)
    return seen


def ranges(keys):
    """[0, 1, 2, 5] -> '0..2, 5'; [] -> 'none'."""
    parts, run = [], []
    for j in keys:
        if run and j != run[-1] + 1:
            parts.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else f"{run[0]}")
            run = []
        run.append(j)
    if run:
        parts.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(parts) or "none"


def keys_text(seen, b, h, i):
    """'sees keys 0..16, spec says 1..16' for row i of head h in sequence b."""
    lo, hi = band(Q_LENS[b], K_LENS[b])
    spec = f"{int(lo[i])}..{int(hi[i])}" if lo[i] <= hi[i] else "none"
    if seen is None:
        return f"spec says keys {spec} (mask probe not run: too many passes)"
    got = ranges(seen[b][h, i].nonzero().flatten().tolist())
    return f"sees keys {got}, spec says {spec}"


def locate(t):
    """Packed query row t -> (sequence, row within it)."""
    b = max(n for n in range(len(Q_LENS)) if CU_Q[n] <= t)
    return b, t - CU_Q[b]


def report_errors(got, ref, tol, seen, shown=5):
    """Print the (row, head) pairs that differ most; the count over the tolerance."""
    err = (got - ref).abs().nan_to_num(nan=float("inf"))  # (total_q, hq, d); NaN: infinitely wrong
    per = err.amax(dim=-1)  # (total_q, hq)
    over = int((per > tol).sum())
    print(f"max |backend - reference| = {float(err.max()):.6g}; mean {float(err.mean()):.6g}; tolerance {tol:.6g}")
    print(f"{over} of {per.numel()} (row, head) pairs differ beyond the tolerance")
    flat = per.flatten().argsort(descending=True)[: shown if over else 0].tolist()
    for n in flat:
        t, h = divmod(n, HQ)
        b, i = locate(t)
        c = int(err[t, h].argmax())
        print(f"  seq {b} row {i} head {h}: |err| {float(per[t, h]):.4g} (dim {c}: got {float(got[t, h, c]):.6g}, "
              f"want {float(ref[t, h, c]):.6g}); {keys_text(seen, b, h, i)}")
    return over


def report_mean(got, ref, q, k, v):
    """The harness's second rule: the mean error against K_MEAN x the same-dtype baseline's + a floor."""
    mean = float((got - ref).abs().nan_to_num(nan=float("inf")).mean())
    base = float((reference(q, k, v, DTYPE).double() - ref).abs().mean())  # same naive math in DTYPE
    tol = K_MEAN * base + MEAN_FLOOR
    print(f"mean |backend - reference| = {mean:.6g}; mean tolerance {K_MEAN:g} x same-dtype baseline {base:.4g} "
          f"+ floor {MEAN_FLOOR:.4g} = {tol:.4g} ({mean / tol if tol else float('inf'):.3g} of it)")
    return mean > tol


def report_mask(seen, shown=5):
    """Print the (head, row) pairs whose keys differ from the spec's; their count."""
    if seen is None:
        print(f"mask probe not run: it needs more than {MAX_PROBE_PASSES} passes")
        return 0
    bad, total, first = 0, 0, []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        lo, hi = band(sq, sk)
        j = torch.arange(sk)
        spec = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)
        diff = (seen[b] != spec[None]).any(dim=-1)  # (hq, Sq)
        bad += int(diff.sum())
        total += diff.numel()
        first += [(b, h, i) for h, i in diff.nonzero().tolist()][: shown - len(first)]
    print(f"mask probe: {bad} of {total} (head, row) pairs see other keys than the spec")
    for b, h, i in first:
        print(f"  seq {b} head {h} row {i} {keys_text(seen, b, h, i)}")
    return bad


def main():
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print(f"CANNOT RUN on this machine (exit 2): no CUDA device (torch {torch.__version__})")
        return 2
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    print(f"torch {torch.__version__}, device {DEVICE}{gpu}")
    print(f"case: {SUMMARY}")
    q, k, v = draw_qkv(**DRAW_ARGS)  # on the CPU, in DTYPE
    got = attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE))  # (total_q, hq, d)
    if tuple(got.shape) != tuple(q.shape):
        print(f"DIFFERS: output shape {tuple(got.shape)}, expected {tuple(q.shape)}")
        return 1
    got = got.detach().to("cpu", torch.float64)
    ref = reference(q, k, v, torch.float64)  # (total_q, hq, d)
    baseline = float((reference(q, k, v, DTYPE).double() - ref).abs().max())  # same naive math in DTYPE
    floor = max(ABS_FLOOR, 2 * float((ref.to(DTYPE).double() - ref).abs().max()))  # >= twice the rounding
    tol = K_MAX * baseline + floor
    print(f"tolerance = {K_MAX:g} x same-dtype baseline {baseline:.4g} + floor {floor:.4g} = {tol:.4g}")
    seen = probe_keys(k)
    over = report_errors(got, ref, tol, seen)
    mean_over = report_mean(got, ref, q, k, v)
    bad = report_mask(seen)
    if over or mean_over or bad:
        print("DIFFERS from the float64 reference (exit 1)")
        return 1
    print("AGREES with the float64 reference (exit 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
