"""Optional: Hugging Face transformers architectures with attention routed through a backend.

Needs ``transformers`` (imported lazily; >= 4.53 for ``AttentionInterface`` and the
``sliding_window`` semantics used here: ``sliding_window = W`` is ``W`` keys including the
current one, ``Window.tokens(W)``). Models:

* ``hf-mistral``: ``MistralConfig``, every layer sliding;
* ``hf-qwen2``: ``Qwen2Config`` with ``use_sliding_window``, ``max_window_layers = 1``
  (layer 0 full, layer 1 sliding);
* ``hf-gemma2``: ``Gemma2Config``, sliding / full alternating, attention softcap 20,
  final softcap 30;
* ``hf-checkpoint``: a local checkpoint directory the user names (``--hf-checkpoint DIR``),
  used as it is (no training; its window from its config).

The tiny configs are randomly initialised from a seed and then trained on the same synthetic
task as the built-in models (:mod:`parity.decode.task`, eager attention, cached), so their
predictions are confident. Every attention call goes through a function registered with
``transformers.AttentionInterface`` under the name ``"parity"``, which turns HF's
``(B, H, S, D)`` tensors, ``sliding_window``, ``softcap`` and ``scaling`` into one
:class:`parity.Case` per call for the backend under test. The KV cache is a plain
``DynamicCache()`` holding every key, so the window is applied by the backend, not by the cache.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json

import torch
from torch import nn

from ..window import Window
from .model import AttnFn

HF_ARCHS = ("hf-mistral", "hf-qwen2", "hf-gemma2", "hf-checkpoint")
_ROUTE: list[AttnFn | None] = [None]
_REGISTERED = [False]


def unavailable_reason() -> str | None:
    try:
        import transformers
        from transformers import AttentionInterface  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"transformers with AttentionInterface is needed for the hf-* models ({type(exc).__name__}: {exc})"
    del transformers
    return None


@dataclasses.dataclass(frozen=True)
class HFModelConfig:
    """The fields :mod:`parity.decode.run` reads, for an HF model."""

    arch: str
    vocab: int
    hq: int
    hkv: int
    head_dim: int
    window: int
    kinds: tuple[str, ...]
    hf_config: str  # the HF config as JSON (for the sidecar and the cache key)

    def layer_kinds(self) -> list[str]:
        return list(self.kinds)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "hf_config": json.loads(self.hf_config)}

    def digest(self) -> str:
        return hashlib.sha1(self.hf_config.encode()).hexdigest()[:10]


def _parity_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None, softcap=None, **kw):
    """HF attention function: ``query`` ``(1, H, Sq, D)``, ``key`` / ``value`` ``(1, Hkv, Sk, D)``."""
    attn = _ROUTE[0]
    if attn is None:
        raise RuntimeError("parity attention called outside HFDecoder.extend")
    if query.shape[0] != 1:
        raise ValueError("parity attention routes one sequence at a time")
    window = Window.tokens(int(sliding_window)) if sliding_window else Window.causal()
    q = query[0].transpose(0, 1).contiguous()  # (Sq, H, D)
    k = key[0].transpose(0, 1).contiguous()  # (Sk, Hkv, D)
    v = value[0].transpose(0, 1).contiguous()  # (Sk, Hkv, D)
    o = attn(getattr(module, "layer_idx", 0), q, k, v, window, softcap, scale=scaling)  # (Sq, H, D)
    return o[None], None  # (1, Sq, H, D)


def _register() -> None:
    if not _REGISTERED[0]:
        from transformers import AttentionInterface

        AttentionInterface.register("parity", _parity_attention)
        _REGISTERED[0] = True


class HFDecoder(nn.Module):
    """Wraps an HF causal LM with the interface of :class:`parity.decode.model.TinyDecoder`."""

    def __init__(self, hf_model, cfg: HFModelConfig) -> None:
        super().__init__()
        self.hf = hf_model
        self.cfg = cfg

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # training: eager attention
        self.hf.config._attn_implementation = "eager"
        return self.hf(input_ids=tokens).logits

    def _cache_arg(self) -> str:
        """``cache`` in newer transformers (``past_key_values`` is deprecated there), else ``past_key_values``."""
        import inspect

        return "cache" if "cache" in inspect.signature(self.hf.forward).parameters else "past_key_values"

    def new_cache(self, max_len: int, dtype, device):
        from transformers import DynamicCache

        return DynamicCache()

    def fork_cache(self, cache):
        return copy.deepcopy(cache)

    @torch.no_grad()
    def extend(self, tokens: torch.Tensor, start: int, cache, attn: AttnFn) -> torch.Tensor:
        _register()
        if cache.get_seq_length() != start:
            raise RuntimeError(f"HF cache holds {cache.get_seq_length()} tokens, expected {start}")
        self.hf.config._attn_implementation = "parity"
        _ROUTE[0] = attn
        try:
            out = self.hf(input_ids=tokens[None], use_cache=True, **{self._cache_arg(): cache})
        finally:
            _ROUTE[0] = None
        return out.logits[0, -1]


def _tiny_config(arch: str, window: int, vocab: int = 32):
    import transformers as tf

    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        sliding_window=window,
        tie_word_embeddings=False,
    )
    if arch == "hf-mistral":
        return tf.MistralConfig(**common)
    if arch == "hf-qwen2":
        return tf.Qwen2Config(**common, use_sliding_window=True, max_window_layers=1)
    if arch == "hf-gemma2":
        return tf.Gemma2Config(**common, query_pre_attn_scalar=16, attn_logit_softcapping=20.0, final_logit_softcapping=30.0)
    raise ValueError(f"unknown HF model {arch!r}; known: {', '.join(HF_ARCHS)}")


def _kinds(hf_config, n_layers: int) -> tuple[str, ...]:
    types = getattr(hf_config, "layer_types", None)
    if types:
        return tuple("local" if "sliding" in t else "global" for t in types)
    return tuple("local" for _ in range(n_layers)) if getattr(hf_config, "sliding_window", None) else ("global",) * n_layers


def _hf_cfg(arch: str, hf_config) -> HFModelConfig:
    hd = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    return HFModelConfig(
        arch=arch,
        vocab=hf_config.vocab_size,
        hq=hf_config.num_attention_heads,
        hkv=getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
        head_dim=hd,
        window=int(getattr(hf_config, "sliding_window", None) or 0),
        kinds=_kinds(hf_config, hf_config.num_hidden_layers),
        hf_config=hf_config.to_json_string(use_diff=False),
    )


def load(arch: str, window: int = 16, checkpoint: str | None = None, log=None, use_cache: bool = True):
    """``(cfg, model, info)`` for an ``hf-*`` model; trained (cached) unless a checkpoint is named."""
    why = unavailable_reason()
    if why:
        raise RuntimeError(why)
    import transformers
    from transformers import AutoModelForCausalLM

    from .task import load_or_train

    if arch == "hf-checkpoint":
        if not checkpoint:
            raise ValueError("hf-checkpoint needs --hf-checkpoint DIR")
        hf_model = AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager", torch_dtype=torch.float32)
        cfg = _hf_cfg(arch, hf_model.config)
        if not cfg.window:
            raise ValueError(f"{checkpoint}: its config has no sliding_window")
        model = HFDecoder(hf_model, cfg).eval()
        return (
            cfg,
            model,
            {
                "task": "none (a local checkpoint, used as it is)",
                "checkpoint": checkpoint,
                "heldout_accuracy": "",
                "heldout_median_margin": "",
            },
        )
    hf_config = _tiny_config(arch, window)
    hf_config._attn_implementation = "eager"
    cfg = _hf_cfg(arch, hf_config)

    def build() -> HFDecoder:
        torch.manual_seed(0)
        return HFDecoder(AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager"), cfg)

    trained, info = load_or_train(cfg, log=log, use_cache=use_cache, build=build, key_extra=transformers.__version__)  # type: ignore[arg-type]
    return cfg, trained.eval(), {**info, "transformers": transformers.__version__}
