"""A small decoder-only model with sliding-window attention, built from a seed.

Two architectures, both with RoPE, RMSNorm, a gated MLP and grouped-query attention:

* ``mistral``: every layer local (``Window.tokens(window)``), no softcap;
* ``gemma2``: layers alternate local / global (global = plain causal), a tanh softcap on
  the attention scores and on the final logits, GeGLU MLP, embeddings scaled by sqrt(d).

The attention itself is not in this module: every layer calls an :data:`AttnFn` with
packed ``(S, heads, head_dim)`` tensors, the layer's canonical :class:`parity.Window`
and softcap. ``parity.decode.run`` routes that call through a backend under test, or
through the float64 reference. Training (:mod:`parity.decode.task`) uses the naive
differentiable attention in :func:`naive_attention`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable

import torch
from torch import nn

from ..window import Window

#: ``attn(layer, q, k, v, window, softcap, scale=None) -> out``; q ``(Sq, hq, hd)``, k/v ``(Sk, hkv, hd)``,
#: out ``(Sq, hq, hd)``. The window is bottom-right aligned (query ``Sq-1`` is key ``Sk-1``);
#: ``scale`` ``None`` means ``1/sqrt(hd)``.
AttnFn = Callable[..., torch.Tensor]

ARCHS = ("mistral", "gemma2")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    arch: str = "mistral"
    vocab: int = 32
    d_model: int = 64
    n_layers: int = 2
    hq: int = 4
    hkv: int = 2
    head_dim: int = 16
    d_ff: int = 128
    window: int = 16  # tokens including the current one: Window.tokens(window)
    attn_softcap: float | None = None
    final_softcap: float | None = None
    global_every: int = 0  # 0: every layer local; 2: layers 1, 3, ... global (Gemma-2)
    rope_theta: float = 10000.0
    seed: int = 0

    def layer_window(self, layer: int) -> Window:
        if self.global_every and layer % self.global_every == self.global_every - 1:
            return Window.causal()
        return Window.tokens(self.window)

    def layer_kinds(self) -> list[str]:
        return ["global" if self.layer_window(i).left is None else "local" for i in range(self.n_layers)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        return hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:10]


def config_for(arch: str, window: int = 16, seed: int = 0) -> ModelConfig:
    if arch == "mistral":
        return ModelConfig(arch="mistral", window=window, seed=seed)
    if arch == "gemma2":
        return ModelConfig(arch="gemma2", window=window, seed=seed, attn_softcap=20.0, final_softcap=30.0, global_every=2)
    raise ValueError(f"unknown model architecture {arch!r}; known: {', '.join(ARCHS)}")


class RMSNorm(nn.Module):
    def __init__(self, d: int, gemma: bool) -> None:
        super().__init__()
        self.gemma = gemma  # Gemma stores (weight - 1)
        self.weight = nn.Parameter(torch.zeros(d) if gemma else torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        xf = x.float() if dt in (torch.float16, torch.bfloat16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        w = (1.0 + self.weight.to(y.dtype)) if self.gemma else self.weight.to(y.dtype)
        return (y * w).to(dt)


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE. ``x`` ``(S, H, D)``, ``pos`` ``(S,)`` absolute positions."""
    d = x.shape[-1]
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=cdt, device=x.device) / d))  # (D/2,)
    ang = pos.to(cdt)[:, None] * inv[None, :]  # (S, D/2)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]  # (S, 1, D)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]  # (S, 1, D)
    xf = x.to(cdt)
    x1, x2 = xf[..., : d // 2], xf[..., d // 2 :]
    rot = torch.cat([-x2, x1], -1)
    return (xf * cos + rot * sin).to(x.dtype)


def naive_attention(q, k, v, window: Window, softcap: float | None) -> torch.Tensor:
    """Differentiable masked attention for training. q ``(B, hq, T, D)``, k/v ``(B, hkv, T, D)``."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, 1)
    v = v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, hq, T, T)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    t = q.shape[2]
    s = s.masked_fill(~window.mask(t, t, q.device), float("-inf"))
    return torch.softmax(s, -1) @ v


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        g = cfg.arch == "gemma2"
        d, hd = cfg.d_model, cfg.head_dim
        self.norm1 = RMSNorm(d, g)
        self.norm2 = RMSNorm(d, g)
        self.wq = nn.Linear(d, cfg.hq * hd, bias=False)
        self.wk = nn.Linear(d, cfg.hkv * hd, bias=False)
        self.wv = nn.Linear(d, cfg.hkv * hd, bias=False)
        self.wo = nn.Linear(cfg.hq * hd, d, bias=False)
        self.gate = nn.Linear(d, cfg.d_ff, bias=False)
        self.up = nn.Linear(d, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, d, bias=False)
        self.act = (lambda x: nn.functional.gelu(x, approximate="tanh")) if g else nn.functional.silu

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class TinyDecoder(nn.Module):
    """The model. ``cache`` (from :meth:`new_cache`) holds per layer preallocated k / v."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.d_model, cfg.arch == "gemma2")
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * (0.02 if "embed" in name else 1.0 / math.sqrt(p.shape[1])))

    def blocks(self) -> list[Layer]:
        return [layer for layer in self.layers if isinstance(layer, Layer)]

    @property
    def windows(self) -> list[Window]:
        return [self.cfg.layer_window(i) for i in range(self.cfg.n_layers)]

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        return x * math.sqrt(self.cfg.d_model) if self.cfg.arch == "gemma2" else x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        z = self.lm_head(self.norm(x))
        if self.cfg.final_softcap is not None:
            z = self.cfg.final_softcap * torch.tanh(z / self.cfg.final_softcap)
        return z

    # -- training: batched, naive attention -------------------------------------------------
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, T, vocab)``."""
        cfg = self.cfg
        b, t = tokens.shape
        pos = torch.arange(t, device=tokens.device)
        x = self._embed(tokens)  # (B, T, d)
        for i, layer in enumerate(self.blocks()):
            h = layer.norm1(x)
            q = layer.wq(h).view(b * t, cfg.hq, cfg.head_dim)
            k = layer.wk(h).view(b * t, cfg.hkv, cfg.head_dim)
            v = layer.wv(h).view(b, t, cfg.hkv, cfg.head_dim)
            q = rope(q, pos.repeat(b), cfg.rope_theta).view(b, t, cfg.hq, cfg.head_dim)
            k = rope(k, pos.repeat(b), cfg.rope_theta).view(b, t, cfg.hkv, cfg.head_dim)
            o = naive_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), cfg.layer_window(i), cfg.attn_softcap)
            x = x + layer.wo(o.transpose(1, 2).reshape(b, t, -1))
            x = x + layer.mlp(layer.norm2(x))
        return self._logits(x)

    # -- inference: one sequence, KV cache, attention routed through attn ---------------------
    def new_cache(self, max_len: int, dtype: torch.dtype, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.cfg
        shape = (max_len, cfg.hkv, cfg.head_dim)
        return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)) for _ in self.layers]

    def fork_cache(self, cache):
        return [(k.clone(), v.clone()) for k, v in cache]

    @torch.no_grad()
    def extend(self, tokens: torch.Tensor, start: int, cache, attn: AttnFn) -> torch.Tensor:
        """Run ``tokens`` ``(S,)`` at positions ``start..start+S-1`` against the cache.

        Writes their keys / values into ``cache`` and returns the logits of the last
        token ``(vocab,)``. ``S > 1`` is a prefill (Sq = Sk = start + S when start = 0),
        ``S = 1`` a decode step (Sq = 1 against ``start + 1`` cached keys).
        """
        cfg = self.cfg
        s = tokens.shape[0]
        end = start + s
        pos = torch.arange(start, end, device=tokens.device)
        x = self._embed(tokens)  # (S, d)
        for i, layer in enumerate(self.blocks()):
            h = layer.norm1(x)
            q = rope(layer.wq(h).view(s, cfg.hq, cfg.head_dim), pos, cfg.rope_theta)
            k = rope(layer.wk(h).view(s, cfg.hkv, cfg.head_dim), pos, cfg.rope_theta)
            v = layer.wv(h).view(s, cfg.hkv, cfg.head_dim)
            kc, vc = cache[i]
            kc[start:end] = k
            vc[start:end] = v
            o = attn(i, q.contiguous(), kc[:end], vc[:end], cfg.layer_window(i), cfg.attn_softcap)  # (S, hq, hd)
            x = x + layer.wo(o.reshape(s, cfg.hq * cfg.head_dim).to(x.dtype))
            x = x + layer.mlp(layer.norm2(x))
        return self._logits(x[-1])
