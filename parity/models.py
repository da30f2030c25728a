"""The models profile: the attention calls of real sliding-window models, at the lengths a serving engine uses.

Three parts:

* :func:`parse_config` / :func:`load_config` - a Hugging Face ``config.json`` to the model's
  attention: heads, kv heads, head dim (``head_dim``, else ``hidden_size / num_attention_heads``),
  the softmax scale (``query_pre_attn_scalar ** -0.5`` where it differs from ``head_dim ** -0.5``),
  ``attn_logit_softcapping``, and which layers are local, from (first that applies) ``layer_types``,
  a per-layer ``sliding_window`` list, ``sliding_window_pattern`` (local unless ``(i + 1) % p == 0``),
  ``use_sliding_window`` + ``max_window_layers`` (Qwen2: local from layer ``max_window_layers`` on),
  the ``model_type``'s own default pattern (Gemma-2 and gpt-oss alternate, Cohere2 3:1, Gemma-3
  5:1), else every layer local. ``use_sliding_window: false`` or ``sliding_window: null`` make every
  layer global. A multimodal config's ``text_config`` is read. A config that cannot be read is one
  :class:`parity.errors.UserError` naming the key.
* :data:`TABLE` - well-known windowed models, each as the keys of its ``config.json`` that decide
  attention, with where the numbers come from (and what could not be confirmed).
* :func:`model_cases` - per distinct layer kind (local window / global), the calls an engine makes:
  prefill 4k and 32k, a 2k chunk continuing a 10k cache, decode rows at 1k-32k and at 128k,
  5-token speculative decode, a vLLM-style mixed batch (decode rows beside a prefill chunk) and
  paged KV at 16, 32 and 256-token pages, seeded per (model, layer, call), some in other input
  regimes (:mod:`parity.regimes`). ``scale_down`` divides every length and window (a CPU run).

The window: Hugging Face masks a sliding layer with ``q_idx - kv_idx < sliding_window``
(``masking_utils.sliding_window_overlay``): ``sliding_window`` tokens including the current one,
``Window.tokens(sliding_window)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .case import Case
from .errors import UserError
from .files import read_text
from .window import INT_MAX, Window

#: ``model_type`` -> the period of its local/global pattern when a config names none
#: (transformers' own default: layer ``i`` is global when ``(i + 1) % period == 0``).
DEFAULT_PATTERN = {"gemma2": 2, "gpt_oss": 2, "cohere2": 4, "gemma3_text": 6, "gemma3": 6}
#: Reduction of lengths and windows when no backend of the run is on a GPU (128k keys -> 1k): the
#: whole table (240 cases) on the reference backend took 5 min wall, 2 min CPU, on 2 shared cores (32: 54 s for one model).
CPU_SCALE_DOWN = 128
#: A reduced window keeps at least this many tokens (gpt-oss's 128 / 128 would be the token itself).
MIN_SCALED_WINDOW = 8


@dataclasses.dataclass(frozen=True)
class LayerKind:
    """The layers of a model that make the same attention call: ``name`` ``local`` / ``global``
    (``local-wN`` where a model has several windows), ``window`` (None: global), ``layers``."""

    name: str
    window: int | None
    layers: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelAttention:
    """A model's attention, as :func:`parse_config` reads it."""

    name: str
    hq: int
    hkv: int
    head_dim: int
    scale: float | None  # None: 1 / sqrt(head_dim)
    softcap: float | None
    kinds: tuple[LayerKind, ...]
    source: str = ""
    notes: tuple[str, ...] = ()
    sinks: bool = False  # learned attention sinks (one logit per query head): every call's Case.sinks

    def describe(self) -> str:
        kinds = ", ".join(f"{k.name} x{len(k.layers)}" + (f" (window {k.window})" if k.window else "") for k in self.kinds)
        extra = (f", scale {self.scale:g}" if self.scale else "") + (f", softcap {self.softcap:g}" if self.softcap else "")
        extra += ", learned sinks" if self.sinks else ""
        return f"{self.name}: {self.hq}/{self.hkv} heads, d{self.head_dim}{extra}; {kinds}"


def _get(cfg: dict[str, Any], key: str, where: str, required: bool = False) -> Any:
    if required and cfg.get(key) is None:
        raise UserError(f"{where}: config key {key!r} is missing (needed for the attention shape)")
    return cfg.get(key)


#: The most layers a config may name: the parser keeps one window per layer (a config naming 10**9 layers took
#: 8 GiB, then a MemoryError traceback, or the machine's memory).
MAX_LAYERS = 1_000_000


def _int(cfg: dict[str, Any], key: str, where: str, required: bool = False, minimum: int = 1, maximum: int = INT_MAX) -> int | None:
    v = _get(cfg, key, where, required)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise UserError(f"{where}: config key {key!r} must be an integer >= {minimum}, got {v!r}")
    if v > maximum:
        raise UserError(f"{where}: config key {key!r} must be at most {maximum}, got {v!r}")
    return v


def _positive(cfg: dict[str, Any], key: str, where: str) -> float | None:
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise UserError(f"{where}: config key {key!r} must be a number > 0 or null, got {v!r}")
    return float(v)


def _head_dim(cfg: dict[str, Any], hq: int, where: str) -> int:
    d = _int(cfg, "head_dim", where)
    if d is not None:
        return d
    hidden = _int(cfg, "hidden_size", where)
    if hidden is None:
        raise UserError(f"{where}: config keys 'head_dim' and 'hidden_size' are both missing (no head dim)")
    if hidden % hq:
        raise UserError(f"{where}: config key 'hidden_size' ({hidden}) is not a multiple of num_attention_heads ({hq})")
    return hidden // hq


def _layer_windows(cfg: dict[str, Any], n: int, where: str) -> list[int | None]:
    """Per layer, its window (None: global). See the module docstring for the order of the keys."""
    raw = cfg.get("sliding_window")
    if isinstance(raw, list):  # a per-layer window list (None / 0: a global layer)
        if len(raw) != n or any(w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0) for w in raw):
            raise UserError(f"{where}: config key 'sliding_window' as a list must hold {n} integers >= 0 or nulls, got {raw!r}")
        return [w or None for w in raw]
    window = _int(cfg, "sliding_window", where)
    if cfg.get("use_sliding_window") is False:
        window = None
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            raise UserError(f"{where}: config key 'layer_types' must be a list of {n} layer types, got {types!r}")
        bad = sorted({repr(t) for t in types if not isinstance(t, str) or t not in ("sliding_attention", "full_attention")})
        if bad:
            raise UserError(f"{where}: config key 'layer_types' holds {', '.join(bad)}: only sliding_attention / full_attention are known")
        if window is None and "sliding_attention" in types:
            raise UserError(f"{where}: config key 'sliding_window' is missing or null but 'layer_types' names sliding_attention layers")
        return [window if t == "sliding_attention" else None for t in types]
    if window is None:
        return [None] * n
    pattern = _int(cfg, "sliding_window_pattern", where) or DEFAULT_PATTERN.get(str(cfg.get("model_type")))
    if pattern is not None:
        return [window if (i + 1) % pattern else None for i in range(n)]
    if "use_sliding_window" in cfg and cfg.get("max_window_layers") is not None:
        first = _int(cfg, "max_window_layers", where, minimum=0)
        return [window if i >= (first or 0) else None for i in range(n)]
    return [window] * n


def _kinds(windows: list[int | None]) -> tuple[LayerKind, ...]:
    sizes = sorted({w for w in windows if w is not None})
    out = []
    for w in sizes:
        name = "local" if len(sizes) == 1 else f"local-w{w}"
        out.append(LayerKind(name, w, tuple(i for i, x in enumerate(windows) if x == w)))
    full = tuple(i for i, x in enumerate(windows) if x is None)
    if full:
        out.append(LayerKind("global", None, full))
    return tuple(out)


def parse_config(cfg: Any, name: str, where: str | None = None, source: str = "") -> ModelAttention:
    """A Hugging Face ``config.json`` (as a dict) to the model's attention; ``where`` names it in errors."""
    where = where or name
    if not isinstance(cfg, dict):
        raise UserError(f"{where}: a config.json must be a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), dict):  # multimodal (Gemma-3 4b+): the language model's attention
        cfg = {"model_type": cfg.get("model_type"), **cfg["text_config"]}
    hq = _int(cfg, "num_attention_heads", where, required=True)
    assert hq is not None
    hkv = _int(cfg, "num_key_value_heads", where) or hq
    if hq % hkv:
        raise UserError(f"{where}: config key 'num_key_value_heads' ({hkv}) does not divide num_attention_heads ({hq})")
    d = _head_dim(cfg, hq, where)
    n = _int(cfg, "num_hidden_layers", where, required=True, maximum=MAX_LAYERS)
    assert n is not None
    qpas = _positive(cfg, "query_pre_attn_scalar", where)
    scale = None if qpas is None or math.isclose(qpas, d) else qpas**-0.5
    notes = []
    # gpt-oss's attention has a learned sink logit per head (its config has no key for it: the model type says so)
    sinks = cfg.get("model_type") == "gpt_oss" or "sinks" in str(cfg.get("attention_type", ""))
    kinds = _kinds(_layer_windows(cfg, n, where))
    if not any(k.window for k in kinds):
        notes.append("no sliding-window layer (sliding_window null or use_sliding_window false): global layers only")
    return ModelAttention(name, hq, hkv, d, scale, _positive(cfg, "attn_logit_softcapping", where), kinds, source, tuple(notes), sinks)


def load_config(path: Path | str) -> ModelAttention:
    """``PATH/config.json`` (or a folder holding one) to the model's attention; the model's name is its folder's."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise UserError(f"--model {path}: no such file")
    try:
        cfg = json.loads(read_text(p))
    except json.JSONDecodeError as exc:
        raise UserError(f"--model {p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_config(cfg, p.parent.name or p.stem, where=str(p), source=str(p))


def _m(
    model_type: str,
    heads: int,
    kv: int,
    layers: int,
    window: int | None,
    head_dim: int | None = None,
    hidden: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": layers,
        "sliding_window": window,
    }
    cfg.update({k: v for k, v in (("head_dim", head_dim), ("hidden_size", hidden)) if v is not None}, **extra)
    return cfg


_TF = "transformers (commit 008e574) src/transformers/models"
#: name -> (the config.json keys that decide attention, where the numbers come from).
TABLE: dict[str, tuple[dict[str, Any], str]] = {
    "mistral-7b-v0.1": (
        _m("mistral", 32, 8, 32, 4096, hidden=4096),
        "mistralai/Mistral-7B-v0.1 config.json: num_attention_heads 32, num_key_value_heads 8, hidden_size 4096 "
        "(head_dim 128), sliding_window 4096, 32 layers (window confirmed in a public config copy; heads as "
        "the Mistral paper, not confirmed here against the hub file)",
    ),
    "mixtral-8x7b-v0.1": (
        _m("mixtral", 32, 8, 32, None, hidden=4096),
        "mistralai/Mixtral-8x7B-v0.1 config.json (as copied in TensorRT-LLM's tests): num_attention_heads 32, "
        "num_key_value_heads 8, hidden_size 4096, 32 layers, sliding_window null: NO window, global layers only",
    ),
    "gemma-2-2b": (
        _m("gemma2", 8, 4, 26, 4096, head_dim=256, query_pre_attn_scalar=256, attn_logit_softcapping=50.0),
        f"{_TF}/gemma2/configuration_gemma2.py defaults (hidden 2304 = gemma-2-2b): 8/4 heads, head_dim 256, 26 layers, "
        "sliding_window 4096, query_pre_attn_scalar 256, attn_logit_softcapping 50.0, layer i local when (i+1) % 2",
    ),
    "gemma-2-9b": (
        _m("gemma2", 16, 8, 42, 4096, head_dim=256, query_pre_attn_scalar=256, attn_logit_softcapping=50.0),
        "google/gemma-2-9b config.json: 16/8 heads, head_dim 256, 42 layers (not confirmed here; the issue's "
        "H200 measurements used 16/8, d256, window 4096, softcap 50, scale 1/16); pattern and softcap as gemma-2-2b",
    ),
    "gemma-2-27b": (
        _m("gemma2", 32, 16, 46, 4096, head_dim=128, query_pre_attn_scalar=144, attn_logit_softcapping=50.0),
        "google/gemma-2-27b config.json: 32/16 heads, head_dim 128, 46 layers, query_pre_attn_scalar 144 "
        "(= hidden 4608 / 32; scale 1/12) - NOT confirmed here, from memory of the hub file",
    ),
    "gemma-3-1b": (
        _m("gemma3_text", 4, 1, 26, 512, head_dim=256, query_pre_attn_scalar=256, sliding_window_pattern=6),
        "google/gemma-3-1b-pt config.json as mlx-lm's gemma3_text defaults copy it: 4/1 heads, head_dim 256, 26 layers, "
        "sliding_window 512, sliding_window_pattern 6, query_pre_attn_scalar 256",
    ),
    "gemma-3-4b": (
        _m("gemma3_text", 8, 4, 34, 1024, head_dim=256, query_pre_attn_scalar=256, sliding_window_pattern=6),
        f"{_TF}/gemma3/configuration_gemma3.py Gemma3TextConfig defaults (8/4 heads, head_dim 256, pattern 6; its "
        "default window is 4096, the released gemma-3-4b text_config has 1024 and 34 layers: not confirmed here)",
    ),
    "gemma-3-12b": (
        _m("gemma3_text", 16, 8, 48, 1024, head_dim=256, query_pre_attn_scalar=256, sliding_window_pattern=6),
        "google/gemma-3-12b text_config as a public copy has it: 16/8 heads, head_dim 256, 48 layers, sliding_window "
        "1024, sliding_window_pattern 6, query_pre_attn_scalar 256, attn_logit_softcapping null",
    ),
    "gemma-3-27b": (
        _m("gemma3_text", 32, 16, 62, 1024, head_dim=128, query_pre_attn_scalar=168, sliding_window_pattern=6),
        "google/gemma-3-27b text_config: 32/16 heads, head_dim 128, 62 layers, query_pre_attn_scalar 168 - NOT "
        "confirmed here (from memory of the hub file); window 1024 and pattern 6 as the other Gemma-3 sizes",
    ),
    "phi-3-mini-4k": (
        _m("phi3", 32, 32, 32, 2047, hidden=3072),
        "microsoft/Phi-3-mini-4k-instruct config.json (public copies): num_attention_heads 32, num_key_value_heads "
        "32, hidden_size 3072 (head_dim 96), 32 layers, sliding_window 2047",
    ),
    "qwen2-7b-swa": (
        _m("qwen2", 28, 4, 28, 4096, hidden=3584, use_sliding_window=True, max_window_layers=21),
        "Qwen/Qwen2-7B config.json: 28/4 heads, hidden_size 3584 (head_dim 128), 28 layers; released with "
        "use_sliding_window false (and max_window_layers 28: no layer would slide). Here use_sliding_window true, "
        f"sliding_window 4096 ({_TF}/qwen2/configuration_qwen2.py default) and max_window_layers 21 (a "
        "user's setting, NOT a released config): layers 21-27 local, as Qwen2Config derives layer_types",
    ),
    "gpt-oss-20b": (
        _m("gpt_oss", 64, 8, 24, 128, head_dim=64),
        f"{_TF}/gpt_oss/configuration_gpt_oss.py defaults: 64/8 heads, head_dim 64, sliding_window 128, layers "
        "alternate sliding/full from layer 0; 24 layers for gpt-oss-20b (36 is the 120b default; 24 not "
        "confirmed here). Learned attention sinks (GptOssAttention.sinks, one logit per query head): every call has them",
    ),
    "command-r7b": (
        _m("cohere2", 32, 8, 32, 4096, hidden=4096, sliding_window_pattern=4),
        f"{_TF}/cohere2/configuration_cohere2.py: sliding_window 4096 default, sliding_window_pattern 4 (3 local : "
        "1 global), head_dim = hidden_size / heads. CohereForAI/c4ai-command-r7b-12-2024's 32/8 heads, hidden 4096, "
        "32 layers: NOT confirmed here",
    ),
    "starcoder2-3b": (
        _m("starcoder2", 24, 2, 30, 4096, hidden=3072),
        "bigcode/starcoder2-3b config.json as TensorRT-LLM's and mlx tests copy it: 24/2 heads, hidden_size 3072 "
        "(head_dim 128), 30 layers, sliding_window 4096",
    ),
}


def known_names() -> list[str]:
    return list(TABLE)


def table_model(name: str) -> ModelAttention:
    """The table's entry ``name``; an unknown one is a UserError listing the known names."""
    if name not in TABLE:
        raise UserError(f"--model {name!r}: not a known model and not a config.json path; known: {', '.join(TABLE)}")
    cfg, source = TABLE[name]
    return parse_config(cfg, name, source=source)


def resolve(spec: str) -> ModelAttention:
    """``--model`` ``NAME`` (the table) or ``PATH`` (a config.json, or a folder holding one)."""
    if spec in TABLE:
        return table_model(spec)
    if spec.endswith(".json") or "/" in spec or Path(spec).is_dir():
        return load_config(spec)
    return table_model(spec)


@dataclasses.dataclass(frozen=True)
class Call:
    """One call an engine makes: per-sequence query / key lengths, page size, input regime."""

    name: str
    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    page_size: int | None = None
    regime: str = "normal"


CALLS: tuple[Call, ...] = (
    Call("prefill-4k", (4096,), (4096,)),
    Call("prefill-32k", (32768,), (32768,)),
    Call("chunk-2k-after-10k", (2048,), (12288,), regime="outliers"),
    Call("decode-1k-32k", (1, 1, 1, 1), (32768, 30001, 4097, 1000), regime="sink"),
    Call("decode-128k", (1,), (131072,)),
    Call("spec-5", (5, 5), (32768, 20000)),
    Call("mixed-batch", (1, 1, 1, 2048), (32768, 16384, 5000, 6144), regime="large_logits"),
    Call("paged16-decode", (1, 1), (32768, 9000), page_size=16),
    Call("paged32-chunk", (512,), (8192,), page_size=32),
    Call("paged256-mixed", (1, 1, 1024), (32768, 4097, 5120), page_size=256),
)


def _scaled(n: int, by: int, keep_small: int = 8) -> int:
    """``n`` divided by ``by`` (a length of ``keep_small`` or fewer tokens - decode, speculative - kept)."""
    return n if n <= keep_small else max(keep_small + 1, round(n / by))


def model_cases(
    model: ModelAttention, dtypes: Sequence[str] = ("bfloat16",), scale_down: int = 1, seed: int = 0, calls: Sequence[Call] = CALLS
) -> list[Case]:
    """Per layer kind of ``model`` and per call, one case in each dtype; lengths and windows divided by ``scale_down``."""
    out = []
    for kind in model.kinds:
        w = kind.window
        window = Window.causal() if w is None else Window.tokens(max(min(w, MIN_SCALED_WINDOW), round(w / scale_down)))
        for call in calls:
            q = tuple(_scaled(n, scale_down) for n in call.q_lens)
            k = tuple(max(a, _scaled(n, scale_down)) for a, n in zip(q, call.k_lens))
            for dt in dtypes:
                s = (seed * 1_000_003 + zlib.crc32(f"{model.name}/{kind.name}/{call.name}/{dt}".encode())) % (2**31)
                out.append(
                    Case(
                        q_lens=q,
                        k_lens=k,
                        hq=model.hq,
                        hkv=model.hkv,
                        head_dim=model.head_dim,
                        dtype=dt,
                        window=window,
                        scale=model.scale,
                        softcap=model.softcap,
                        page_size=call.page_size,
                        seed=s,
                        regime=call.regime,
                        sinks=model.sinks,
                        model=model.name,
                        layer=kind.name,
                    )
                )
    return out


def call_key(case: Case) -> str:
    """What a backend is asked by ``case``: everything but its seed and the model and layer it is named after."""
    return json.dumps({k: v for k, v in case.to_dict().items() if k not in ("seed", "model", "layer")}, sort_keys=True)


def shared_calls(cases: Sequence[Case]) -> dict[str, str]:
    """``model/layer`` -> the earlier ``model/layer`` making every one of its calls (:func:`call_key`)."""
    first: dict[str, str] = {}
    kinds: dict[str, list[str]] = {}
    for c in cases:
        name = f"{c.model}/{c.layer}"
        kinds.setdefault(name, []).append(first.setdefault(call_key(c), name))
    return {k: v[0] for k, v in kinds.items() if v[0] != k and all(x == v[0] for x in v)}


def without_shared(cases: Sequence[Case]) -> tuple[list[Case], dict[str, str]]:
    """``cases`` less the layer kinds :func:`shared_calls` names, and those kinds (``model/layer`` -> the one run)."""
    shared = shared_calls(cases)
    return [c for c in cases if f"{c.model}/{c.layer}" not in shared], shared


def profile_cases(
    specs: Sequence[str], dtypes: Sequence[str] = ("bfloat16",), scale_down: int = 1, seed: int = 0, dedupe: bool = True
) -> tuple[list[Case], list[ModelAttention]]:
    """The cases of ``specs`` (``--model`` values; empty: the whole table) and the models they came from. ``dedupe``:
    without the kinds :func:`shared_calls` names (their seeds would only draw other inputs for the same calls)."""
    models = [resolve(s) for s in (specs or list(TABLE))]
    cases: dict[str, Case] = {}
    for m in models:
        for c in model_cases(m, dtypes, scale_down, seed):
            cases.setdefault(c.case_id, c)
    out = list(cases.values())
    return (without_shared(out)[0] if dedupe else out), models
