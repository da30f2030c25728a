"""The canonical test case, and the deterministic inputs it stands for.

A :class:`Case` is everything needed to rebuild one attention call: per-sequence
query and key lengths (so varlen batches, decode ``Sq = 1`` and ``Sq != Sk`` are
first class), head layout (``hq`` query heads share ``hkv`` key/value heads:
query head ``h`` uses kv head ``h // (hq // hkv)``), head dim, dtype, window,
softmax scale, optional tanh softcap, an optional KV page size, and the seed of
the random inputs. It round-trips through JSON and prints as a one-line
reproduction command.

Canonical tensor layout (the flash-attn "varlen" layout): sequences packed along
the first dimension,

* ``q``: ``(total_q, hq, d)``, ``k`` / ``v``: ``(total_k, hkv, d)``,
* ``cu_seqlens_q`` / ``cu_seqlens_k``: ``(batch + 1,)`` int32 prefix sums,
* the output has ``q``'s shape and the case's dtype.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shlex
from typing import Any

import torch

from . import regimes
from .regimes import apply as apply_regime
from .results import DTYPES as DTYPE_NAMES
from .window import INT_MAX, SpecError, Window, chunk_band

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
_DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16"}

FAMILIES = ("dense", "varlen", "decode", "chunked", "prefill_long_q", "paged")

#: The fp8 dtypes a case's KV cache (``Case.kv_dtype``) may hold, with the largest finite value of
#: each (a scale maps a slice's amax onto it). e4m3: vLLM's FA3 and FlashInfer; e5m2: FlashInfer's KV
#: caches (vLLM's ``fp8_e5m2``); FA3 takes no e5m2 and says so.
FP8_DTYPES: dict[str, float] = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}

#: How fp8 descales are laid out (``Case.fp8_scales``): one per tensor ``()``; one per kv head ``(hkv,)``;
#: one per sequence and kv head ``(B, hkv)``, FA3's ``q_descale`` / ``k_descale`` / ``v_descale``. The
#: query's descale is per kv head too: one for the query heads of a kv head's group.
FP8_SCALES = ("tensor", "kv_head", "batch_kv_head")


def _int_field(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"Case.{name} must be an int, got {value!r}")
    if value < minimum:
        raise SpecError(f"Case.{name} must be >= {minimum}, got {value}")
    if value > INT_MAX:
        raise SpecError(f"Case.{name} must be at most 2**63 - 1 (an int64), got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Case:
    """One attention call. See the module docstring for the layout and GQA mapping."""

    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    hq: int
    hkv: int
    head_dim: int
    dtype: str = "bfloat16"
    window: Window = dataclasses.field(default_factory=Window)
    scale: float | None = None  # None: 1 / sqrt(head_dim)
    softcap: float | None = None  # None: no tanh softcap; else scores = c * tanh(scores / c)
    page_size: int | None = None  # None: contiguous KV; else a paged cache with this block size
    seed: int = 0
    regime: str = "normal"  # input regime (parity.regimes): normal, large_logits, outliers, sink, ...
    model: str | None = None  # the model this call came from (parity.models), e.g. "gemma-2-9b"; None: none
    layer: str | None = None  # which of its layers: "local" / "global" (a model's windowed or full layers)
    # fp8 KV cache: k and v quantized to this dtype with per-tensor descales (None: k, v in ``dtype``)
    kv_dtype: str | None = None
    q_fp8: bool = False  # the query quantized too (FA3 takes fp8 K/V only with an fp8 query); needs kv_dtype
    sinks: bool = False  # learned attention sinks: one logit per query head (Inputs.sinks), drawn from the seed
    chunk: int | None = None  # chunked local attention (Llama 4's attention_chunk): chunks of this many keys
    fp8_scales: str = "tensor"  # the fp8 descales' layout (FP8_SCALES): per tensor, per kv head, per (sequence, kv head)

    def __post_init__(self) -> None:
        object.__setattr__(self, "q_lens", tuple(self.q_lens))
        object.__setattr__(self, "k_lens", tuple(self.k_lens))
        if not self.q_lens:
            raise SpecError("Case.q_lens must hold at least one sequence length, got ()")
        if len(self.q_lens) != len(self.k_lens):
            raise SpecError(f"Case.q_lens and Case.k_lens must have one entry per sequence; got {len(self.q_lens)} and {len(self.k_lens)}")
        for name, lens in (("q_lens", self.q_lens), ("k_lens", self.k_lens)):
            for n in lens:
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= INT_MAX:
                    raise SpecError(f"Case.{name} entries must be ints >= 1 and at most 2**63 - 1 (an int64), got {n!r} in {lens}")
        _int_field("hq", self.hq, 1)
        _int_field("hkv", self.hkv, 1)
        _int_field("head_dim", self.head_dim, 1)
        _int_field("seed", self.seed, 0)
        if self.hq % self.hkv:
            raise SpecError(
                f"Case.hq ({self.hq}) must be divisible by Case.hkv ({self.hkv}) for GQA/MQA (query head h uses kv head h // (hq // hkv))"
            )
        dtype = _DTYPE_ALIASES.get(self.dtype, self.dtype) if isinstance(self.dtype, str) else self.dtype
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise SpecError(f"Case.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype)
        if isinstance(self.window, dict):
            object.__setattr__(self, "window", Window.from_dict(self.window))
        if not isinstance(self.window, Window):
            raise SpecError(f"Case.window must be a parity.Window, got {self.window!r}")
        for name in ("scale", "softcap"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise SpecError(f"Case.{name} must be a finite number > 0 or None, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.page_size is not None:
            _int_field("page_size", self.page_size, 1)
        if self.regime not in regimes.REGIMES:
            raise SpecError(f"Case.regime must be one of {', '.join(regimes.REGIMES)}, got {self.regime!r}")
        for name in ("model", "layer"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise SpecError(f"Case.{name} must be a non-empty string or None, got {value!r}")
        self._check_fp8()
        if not isinstance(self.sinks, bool):
            raise SpecError(f"Case.sinks must be true or false, got {self.sinks!r}")
        if self.chunk is not None:
            _int_field("chunk", self.chunk, 1)
        # No "empty band" check is needed: Window's sides are >= 0, so the aligned
        # diagonal key j = i + d is always in the band, and the last (bottom-right) or
        # first (top-left) query row always sees a key.

    def _check_fp8(self) -> None:
        if self.kv_dtype is not None:
            if not isinstance(self.kv_dtype, str) or self.kv_dtype not in FP8_DTYPES:
                raise SpecError(f"Case.kv_dtype must be None or one of {', '.join(FP8_DTYPES)} (an fp8 KV cache), got {self.kv_dtype!r}")
            if self.dtype not in ("float16", "bfloat16"):
                raise SpecError(f"Case.kv_dtype {self.kv_dtype} needs Case.dtype float16 or bfloat16 (the compute dtype), got {self.dtype}")
        if not isinstance(self.q_fp8, bool):
            raise SpecError(f"Case.q_fp8 must be true or false, got {self.q_fp8!r}")
        if self.q_fp8 and self.kv_dtype is None:
            raise SpecError("Case.q_fp8 needs Case.kv_dtype (an fp8 query goes with an fp8 KV cache)")
        if self.fp8_scales not in FP8_SCALES:
            raise SpecError(f"Case.fp8_scales must be one of {', '.join(FP8_SCALES)} (the fp8 descales' layout), got {self.fp8_scales!r}")
        if self.fp8_scales != "tensor" and self.kv_dtype is None:
            raise SpecError(f"Case.fp8_scales {self.fp8_scales} needs Case.kv_dtype (descales belong to an fp8 KV cache)")

    # -- derived ------------------------------------------------------------------------
    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.hq // self.hkv

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def is_uniform(self) -> bool:
        """All sequences share one (Sq, Sk): the case fits a dense (B, S, H, D) layout."""
        return len(set(self.q_lens)) == 1 and len(set(self.k_lens)) == 1

    @property
    def layout(self) -> str:
        return "MHA" if self.hq == self.hkv else ("MQA" if self.hkv == 1 else "GQA")

    @property
    def family(self) -> str:
        """The case family the reports group by."""
        if self.page_size is not None:
            return "paged"
        if all(q == 1 for q in self.q_lens) or (max(self.q_lens) <= 8 and min(self.k_lens) >= 4 * max(self.q_lens)):
            return "decode"
        if not self.is_uniform:
            return "varlen"
        if any(q < k for q, k in zip(self.q_lens, self.k_lens)):
            return "chunked"
        if any(q > k for q, k in zip(self.q_lens, self.k_lens)):
            return "prefill_long_q"
        return "dense"

    def band(self, sq: int, sk: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Per query row of an ``(Sq, Sk)`` sequence, its first and last visible key ``(Sq,)`` each:
        the window's band intersected with the query's chunk (:func:`parity.window.chunk_band`)."""
        lo, hi = self.window.band(sq, sk, device)  # (Sq,), (Sq,)
        return chunk_band(lo, hi, sq, sk, self.chunk)

    def mask(self, sq: int, sk: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Dense boolean mask ``(Sq, Sk)``, ``True`` = visible (window and chunk)."""
        lo, hi = self.band(sq, sk, device)
        j = torch.arange(sk, device=device, dtype=torch.int64)  # (Sk,)
        return (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)

    def band_counts(self) -> list[int]:
        """Per sequence, how many (query, key) pairs are visible."""
        out = []
        for sq, sk in zip(self.q_lens, self.k_lens):
            lo, hi = self.band(sq, sk)
            out.append(int((hi - lo + 1).clamp(min=0).sum()))
        return out

    def cu_seqlens(self) -> tuple[list[int], list[int]]:
        cq, ck = [0], [0]
        for sq, sk in zip(self.q_lens, self.k_lens):
            cq.append(cq[-1] + sq)
            ck.append(ck[-1] + sk)
        return cq, ck

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "q_lens": list(self.q_lens),
            "k_lens": list(self.k_lens),
            "hq": self.hq,
            "hkv": self.hkv,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "window": self.window.to_dict(),
            "scale": self.scale,
            "softcap": self.softcap,
            "page_size": self.page_size,
            "seed": self.seed,
            # omitted when normal, so the ids of cases from before regimes existed stay the same
            **({} if self.regime == "normal" else {"regime": self.regime}),
            # where a models-profile case came from; omitted when None (ids of other cases unchanged)
            **({} if self.model is None else {"model": self.model}),
            **({} if self.layer is None else {"layer": self.layer}),
            # fp8 KV (and query); omitted when off (ids of other cases unchanged)
            **({} if self.kv_dtype is None else {"kv_dtype": self.kv_dtype}),
            **({"q_fp8": True} if self.q_fp8 else {}),
            **({} if self.fp8_scales == "tensor" else {"fp8_scales": self.fp8_scales}),
            # learned sinks and chunked attention: omitted when off (ids of other cases unchanged)
            **({"sinks": True} if self.sinks else {}),
            **({} if self.chunk is None else {"chunk": self.chunk}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        if not isinstance(data, dict):
            raise SpecError(f"a case must be a JSON object, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise SpecError(f"case has unknown field(s) {sorted(unknown)}; known: {sorted(fields)}")
        missing = {"q_lens", "k_lens", "hq", "hkv", "head_dim"} - set(data)
        if missing:
            raise SpecError(f"case is missing required field(s) {sorted(missing)}")
        kw = dict(data)
        kw["window"] = Window.from_dict(kw.get("window") or {})
        for name in ("q_lens", "k_lens"):
            if not isinstance(kw[name], (list, tuple)):
                raise SpecError(f"Case.{name} must be a list of ints, got {kw[name]!r}")
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str) -> Case:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"case is not valid JSON ({exc.msg} at char {exc.pos}): {text[:80]!r}") from None
        return cls.from_dict(data)

    @property
    def case_id(self) -> str:
        """Stable short id: a hash of the JSON form."""
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:12]

    def summary(self) -> str:
        """One short human line, e.g. ``bf16 GQA 8:2 d64 Sq=[1] Sk=[300] win(255,0)``."""
        short = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[self.dtype]
        qs = self.q_lens if len(self.q_lens) <= 4 else (*self.q_lens[:3], "...")
        ks = self.k_lens if len(self.k_lens) <= 4 else (*self.k_lens[:3], "...")
        parts = [
            short,
            f"{self.layout} {self.hq}:{self.hkv}",
            f"d{self.head_dim}",
            f"Sq={list(qs)}",
            f"Sk={list(ks)}",
            f"win{self.window.describe()}",
        ]
        if self.softcap is not None:
            parts.append(f"softcap={self.softcap:g}")
        if self.scale is not None:
            parts.append(f"scale={self.scale:g}")
        if self.page_size is not None:
            parts.append(f"page={self.page_size}")
        if self.chunk is not None:
            parts.append(f"chunk={self.chunk}")
        if self.sinks:
            parts.append("sinks")
        if self.regime != "normal":
            parts.append(f"inputs={self.regime}")
        if self.kv_dtype is not None:
            scales = "" if self.fp8_scales == "tensor" else f" scales={self.fp8_scales}"
            parts.append(f"{'q+' if self.q_fp8 else ''}kv={self.kv_dtype.replace('float8_', 'fp8-')}{scales}")
        if self.model is not None:
            parts.append(f"[{self.model}{'/' + self.layer if self.layer else ''}]")
        return " ".join(parts)

    def repro(self, backend: str) -> str:
        """A one-line shell command that re-runs exactly this case on ``backend``."""
        return f"python -m parity run --backend {shlex.quote(backend)} --case {shlex.quote(self.to_json())}"


# -- inputs ----------------------------------------------------------------------------------


@dataclasses.dataclass
class PagedKV:
    """A paged KV cache (see :meth:`Inputs.paged`)."""

    k_cache: torch.Tensor  # (num_pages, page_size, hkv, d)
    v_cache: torch.Tensor  # (num_pages, page_size, hkv, d)
    block_table: torch.Tensor  # (B, max_pages_per_seq) int32
    seqlens_k: torch.Tensor  # (B,) int32
    page_size: int

    def gather(self, need: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Back to packed ``(total_k, hkv, d)`` keys and values (for tests and CPU paths).

        ``need``: per sequence, which of its logical pages to load (bool ``(pages_b,)``, as
        :func:`pages_seen` gives); the others are zeros, never read (a windowed kernel skips
        pages no row sees; engines free them). ``None``: every page of the block table."""
        ks, vs = [], []
        for b, sk in enumerate(self.seqlens_k.tolist()):
            pages = self.block_table[b, : -(-sk // self.page_size)].long()  # (pages_b,) logical -> physical
            keep = need[b].to(pages.device) if need is not None else torch.ones_like(pages, dtype=torch.bool)  # (pages_b,)
            shape = (len(pages), self.page_size, *self.k_cache.shape[2:])
            k = torch.zeros(shape, dtype=self.k_cache.dtype, device=self.k_cache.device)  # (pages_b, ps, hkv, d)
            v = torch.zeros_like(k)  # (pages_b, ps, hkv, d)
            idx = keep.nonzero()[:, 0]  # (kept,) integer rows: a bool mask over one element is masked_fill, which fp8 lacks on the CPU
            k[idx], v[idx] = self.k_cache[pages[idx]], self.v_cache[pages[idx]]
            ks.append(k.flatten(0, 1)[:sk])
            vs.append(v.flatten(0, 1)[:sk])
        return torch.cat(ks), torch.cat(vs)


@dataclasses.dataclass
class PaddedKV:
    """A padded KV cache with used lengths (see :meth:`Inputs.padded`): the layout of
    ``flash_attn_with_kvcache``'s ``cache_seqlens`` and of ``seqused_k``-style caches."""

    k_cache: torch.Tensor  # (B, capacity, hkv, d)
    v_cache: torch.Tensor  # (B, capacity, hkv, d)
    seqlens_k: torch.Tensor  # (B,) int32: the used length of each row of the cache


@dataclasses.dataclass
class Inputs:
    """Packed tensors for one case (see the module docstring for shapes)."""

    case: Case
    q: torch.Tensor  # (total_q, hq, d)
    k: torch.Tensor  # (total_k, hkv, d)
    v: torch.Tensor  # (total_k, hkv, d)
    cu_seqlens_q: torch.Tensor  # (B + 1,) int32
    cu_seqlens_k: torch.Tensor  # (B + 1,) int32
    #: The read probe's inputs: :meth:`paged` and :meth:`padded` fill what a real engine holds
    #: garbage in with NaN (:func:`poison_paged`, :func:`poison_padded`); the packed ``k``/``v`` stay finite.
    poison_kv: bool = False
    #: Which part of a paged cache the read probe poisons (:data:`POISON_PARTS`): both, or one alone
    #: (the probe's passes that tell a padding slot from pages outside the window).
    poison_parts: tuple[str, ...] = ("window", "null")
    #: fp8 cases (``case.kv_dtype``): ``k``/``v`` (and ``q`` where ``case.q_fp8``) hold fp8 values and
    #: these float32 tensors their descales, laid out as ``case.fp8_scales`` says: ``()`` per tensor, ``(hkv,)``
    #: per kv head, ``(B, hkv)`` per sequence and kv head (the query's: per kv head's group of query heads);
    #: ``k.double() * k_descale`` (per element, :func:`descale_rows`) is the key the reference sees. ``None``: not quantized.
    q_descale: torch.Tensor | None = None
    k_descale: torch.Tensor | None = None
    v_descale: torch.Tensor | None = None
    sinks: torch.Tensor | None = None  # (hq,) float32: learned sink logits (Case.sinks), natural-log units

    @property
    def device(self) -> torch.device:
        return self.q.device

    def sequences(self):
        """Yield ``(b, q_b, k_b, v_b, q_slice)`` per sequence; ``q_b`` is ``(Sq_b, hq, d)``."""
        cq, ck = self.case.cu_seqlens()
        for b in range(self.case.batch):
            qs = slice(cq[b], cq[b + 1])
            ks = slice(ck[b], ck[b + 1])
            yield b, self.q[qs], self.k[ks], self.v[ks], qs

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(B, S, H, D)`` views for uniform cases."""
        if not self.case.is_uniform:
            raise ValueError("dense() needs a case whose sequences share one (Sq, Sk)")
        b = self.case.batch
        return (
            self.q.view(b, self.case.q_lens[0], self.case.hq, self.case.head_dim),
            self.k.view(b, self.case.k_lens[0], self.case.hkv, self.case.head_dim),
            self.v.view(b, self.case.k_lens[0], self.case.hkv, self.case.head_dim),
        )

    def paged(self, page_size: int | None = None) -> PagedKV:
        """The keys and values as a paged cache, physical pages in a seeded random order.

        Layout of flash-attn's ``flash_attn_with_kvcache`` / FA4's ``page_table``:
        ``k_cache``/``v_cache`` ``(num_pages, page_size, hkv, d)``, ``block_table``
        ``(B, max_pages_per_seq)`` int32 (unused slots point at a null page past the others, as an
        engine's point at its null block), ``seqlens_k`` ``(B,)`` int32. Placement must not change the result.
        """
        ps = page_size or self.case.page_size
        if ps is None:
            raise ValueError("paged() needs a page size (the case has none)")
        k_cache, v_cache, table, seqlens = paged_layout(self.k, self.v, list(self.case.k_lens), ps, self.case.seed)
        cache = PagedKV(k_cache, v_cache, table, seqlens, ps)
        return poison_paged(self.case, cache, self.poison_parts) if self.poison_kv else cache

    def padded(self) -> PaddedKV:
        """The keys and values as a padded cache ``(B, capacity, hkv, d)`` with used lengths
        ``seqlens_k`` = ``k_lens`` (:func:`padded_layout`; ``capacity`` = :func:`padded_capacity`, so
        every sequence has unused slots, as in an engine's preallocated cache). Zeros past each
        used length; NaN there in the read probe (:func:`poison_padded`)."""
        cap = padded_capacity(self.case.k_lens)
        k_cache, v_cache, seqlens = padded_layout(self.k, self.v, list(self.case.k_lens), cap)
        cache = PaddedKV(k_cache, v_cache, seqlens)
        return poison_padded(cache) if self.poison_kv else cache

    def with_tensors(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Inputs:
        return dataclasses.replace(self, q=q, k=k, v=v)

    def to(self, device: torch.device | str) -> Inputs:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return Inputs(
            self.case,
            self.q.to(device),
            self.k.to(device),
            self.v.to(device),
            self.cu_seqlens_q.to(device),
            self.cu_seqlens_k.to(device),
            self.poison_kv,
            self.poison_parts,
            move(self.q_descale),
            move(self.k_descale),
            move(self.v_descale),
            None if self.sinks is None else self.sinks.to(device),
        )

    def descale(self, name: str) -> float:
        """The per-tensor descale of ``q``, ``k`` or ``v`` as a float (1.0 where that tensor is not quantized).
        A layout with one descale per head (``case.fp8_scales``) has no single float: :meth:`head_descales`."""
        t = getattr(self, f"{name}_descale")
        if t is not None and t.dim():
            raise ValueError(f"{name}_descale is {tuple(t.shape)} (fp8_scales={self.case.fp8_scales}), not one float: use head_descales")
        return 1.0 if t is None else float(t)

    def head_descales(self, name: str, b: int) -> torch.Tensor:
        """Sequence ``b``'s descales of ``q``, ``k`` or ``v``, one per head of that tensor (``(hq,)`` for ``q``,
        ``(hkv,)`` for ``k`` / ``v``), float64 on the CPU; ones where that tensor is not quantized."""
        t = getattr(self, f"{name}_descale")
        heads = self.case.hq if name == "q" else self.case.hkv
        if t is None:
            return torch.ones(heads, dtype=torch.float64)
        t = t.detach().to("cpu", torch.float64)
        t = t[b] if t.dim() == 2 else t.expand(self.case.hkv)  # (hkv,)
        return t.repeat_interleave(heads // self.case.hkv)  # (heads,): query head h takes kv head h // group's

    def dequantized(self, dtype: torch.dtype) -> Inputs:
        """The values the inputs stand for, in ``dtype``: each fp8 tensor times its descale, computed
        in float64 (exact) and rounded once to ``dtype``; descales dropped. Unquantized tensors are cast."""

        ql, kl = list(self.case.q_lens), list(self.case.k_lens)
        q = dequantize_fp8(self.q, self.q_descale, dtype, ql)  # (total_q, hq, d)
        k = dequantize_fp8(self.k, self.k_descale, dtype, kl)  # (total_k, hkv, d)
        v = dequantize_fp8(self.v, self.v_descale, dtype, kl)  # (total_k, hkv, d)
        return dataclasses.replace(self, q=q, k=k, v=v, q_descale=None, k_descale=None, v_descale=None)


def pages_seen(case: Case, page_size: int, b: int) -> torch.Tensor:
    """Which logical pages of sequence ``b`` some query row's window reaches: bool ``(pages_b,)`` (:func:`window_pages`)."""
    sq, sk = case.q_lens[b], case.k_lens[b]
    lo, hi = case.band(sq, sk)  # (Sq,), (Sq,)
    return window_pages(lo, hi, sk, page_size)


#: Null pages at the end of :func:`paged_layout`'s pool: no sequence's own pages use them; every unused
#: (padding) block-table slot points at the first. Zeros in the case's run, NaN in the read probe.
UNREFERENCED_PAGES = 1
#: The parts of a paged cache the read probe poisons: ``"window"``, pages wholly outside every window and
#: the unused tail of each last page; ``"null"``, the null page padding slots point at.
POISON_PARTS = ("window", "null")


def poison_paged(case: Case, cache: PagedKV, parts: tuple[str, ...] = POISON_PARTS) -> PagedKV:
    """``cache`` as a real engine holds it: NaN in pages wholly outside every window of their
    sequence (engines free or reuse them) and in the unused tail of each sequence's last page
    (``"window"`` in ``parts``), and in the :data:`UNREFERENCED_PAGES` null page that unused block-table
    slots point at (``"null"``: an engine's null block holds garbage). Keys some row sees, and the rest
    of their pages, are unchanged (:func:`poison_pages`)."""
    seen = [pages_seen(case, cache.page_size, b) for b in range(case.batch)]  # (pages_b,) bool each
    k, v = poison_pages(
        cache.k_cache, cache.v_cache, cache.block_table, list(case.k_lens), cache.page_size, seen, UNREFERENCED_PAGES, parts
    )
    return dataclasses.replace(cache, k_cache=k, v_cache=v)


def padded_capacity(k_lens) -> int:
    """The capacity of :meth:`Inputs.padded`'s cache: the longest sequence plus at least one
    unused slot, rounded up to a multiple of 16 (so the read probe has positions to poison in
    every sequence)."""
    return -(-(max(k_lens) + 1) // 16) * 16


def poison_padded(cache: PaddedKV) -> PaddedKV:
    """``cache`` as a real engine holds it: NaN past each sequence's used length (slots that
    hold another request's or stale keys); the used positions are unchanged."""
    k, v = poison_slots(cache.k_cache, cache.v_cache, cache.seqlens_k.tolist())  # (B, capacity, hkv, d) each
    return dataclasses.replace(cache, k_cache=k, v_cache=v)


def make_inputs(case: Case, device: torch.device | str = "cpu") -> Inputs:
    """Deterministic random inputs: drawn on the CPU from ``case.seed``, then cast and moved.

    Values are standard normal, reshaped by the case's input regime (:mod:`parity.regimes`),
    rounded to the case's dtype, so the float64 reference sees exactly what the backend sees.
    How they are drawn is :func:`draw_qkv` with :func:`draw_args`; change it there, and the
    standalone repro scripts follow.
    """
    q, k, v = draw_qkv(**draw_args(case))
    cq, ck = case.cu_seqlens()
    inputs = Inputs(
        case,
        q,
        k,
        v,
        torch.tensor(cq, dtype=torch.int32),
        torch.tensor(ck, dtype=torch.int32),
        sinks=draw_sinks(case.seed, case.hq) if case.sinks else None,
    )
    if case.kv_dtype is not None:  # an fp8 KV cache: k and v (and q where q_fp8) quantized, descales as fp8_scales says
        lay, ql, kl = case.fp8_scales, list(case.q_lens), list(case.k_lens)
        k, kd = quantize_fp8(k, case.kv_dtype, lay, kl, case.hkv)
        v, vd = quantize_fp8(v, case.kv_dtype, lay, kl, case.hkv)
        q, qd = quantize_fp8(q, case.kv_dtype, lay, ql, case.hkv) if case.q_fp8 else (q, None)
        inputs = dataclasses.replace(inputs, q=q, k=k, v=v, q_descale=qd, k_descale=kd, v_descale=vd)
    return inputs if str(device) == "cpu" else inputs.to(device)


#: Seed offset of the sink logits' generator: q, k and v stay those of the case without sinks.
SINK_SEED_OFFSET = 104729


def draw_sinks(seed: int, hq: int) -> torch.Tensor:
    """One learned sink logit per query head, ``(hq,)`` float32: ``2 x N(0, 1)`` from a CPU generator
    seeded ``seed + SINK_SEED_OFFSET``: a sink from well below a row's scores (little weight) to well
    above them (most of the weight). Rounded to bfloat16 values, so a library that takes its sinks in
    bfloat16 (vLLM's FA3 ``s_aux``, FA4 before float32 sinks) gets exactly the reference's."""
    gen = torch.Generator(device="cpu").manual_seed(seed + SINK_SEED_OFFSET)
    return (torch.randn(hq, generator=gen) * 2.0).to(torch.bfloat16).to(torch.float32)  # (hq,)


# -- the two functions standalone scripts copy -------------------------------------------------
# ``python -m parity export-repro`` writes the source of draw_qkv and paged_layout (and, where a
# script needs them, quantize_fp8 / dequantize_fp8, padded_layout and the read probe's window_pages /
# poison_pages / poison_slots) into its scripts as it is (inspect.getsource), so they use torch and
# their arguments only: no other name from this package. A new input knob (say, a value "regime") goes into draw_args and
# draw_qkv, and the scripts reproduce it with no other change.


def draw_args(case: Case) -> dict[str, Any]:
    """The arguments :func:`make_inputs` passes to :func:`draw_qkv` for ``case`` (plain values)."""
    return {
        "seed": case.seed,
        "total_q": sum(case.q_lens),
        "total_k": sum(case.k_lens),
        "hq": case.hq,
        "hkv": case.hkv,
        "head_dim": case.head_dim,
        "dtype": case.dtype,
        "regime": case.regime,
        "starts": case.cu_seqlens()[1][:-1],
        "scale": case.softmax_scale,
        # descales per head: k and v spread per (sequence, kv head) so the descales differ (omitted when per tensor)
        **({"spread": True} if case.fp8_scales != "tensor" else {}),
    }


def draw_qkv(
    seed: int,
    total_q: int,
    total_k: int,
    hq: int,
    hkv: int,
    head_dim: int,
    dtype: str,
    regime: str = "normal",
    starts: list | None = None,
    scale: float = 1.0,
    spread: bool = False,
):
    """Packed ``q``, ``k``, ``v``: standard normal from a CPU generator seeded with ``seed``
    (``q`` first, then ``k``, then ``v``), reshaped by the input ``regime`` (``starts``: each
    sequence's first key row; ``scale``: the softmax scale), rounded to ``dtype`` (``"bfloat16"``...).
    ``spread``: ``k`` and ``v`` of sequence ``b``, kv head ``j`` times powers of two that differ from one
    ``(b, j)`` to the next (k: ``2 ** ((b + 2j) % 3 - 1)``, v: ``2 ** ((2b + j) % 4 - 2)``), so per-head fp8
    descales differ by construction."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(total_q, hq, head_dim, generator=gen)  # (total_q, hq, d)
    k = torch.randn(total_k, hkv, head_dim, generator=gen)  # (total_k, hkv, d)
    v = torch.randn(total_k, hkv, head_dim, generator=gen)  # (total_k, hkv, d)
    q, k, v = apply_regime(regime, q, k, v, starts or [0], scale, dt, seed)
    if spread:
        bounds = list(starts or [0]) + [total_k]
        for b in range(len(bounds) - 1):
            j = torch.arange(hkv)  # (hkv,)
            rows = slice(bounds[b], bounds[b + 1])
            k[rows] = k[rows] * (2.0 ** ((b + 2 * j) % 3 - 1))[None, :, None]  # (Sk_b, hkv, d)
            v[rows] = v[rows] * (2.0 ** ((2 * b + j) % 4 - 2))[None, :, None]  # (Sk_b, hkv, d)
    return q.to(dt), k.to(dt), v.to(dt)


def quantize_fp8(x, fp8_dtype: str, layout: str = "tensor", lens=None, hkv=None):
    """Packed ``x`` ``(total, heads, d)`` quantized to ``fp8_dtype`` (``"float8_e4m3fn"``): ``(x8, descale)``.

    One scale per slice of ``layout``: ``"tensor"``, the whole tensor (``descale`` ``()``); ``"kv_head"``, each
    kv head's slice (``(hkv,)``); ``"batch_kv_head"``, each sequence's (``lens``: rows per sequence) slice of
    each kv head (``(B, hkv)``). A query's kv-head slice holds the ``heads // hkv`` query heads of its group.
    ``descale = amax(|slice|) / max(fp8_dtype)`` in float32 (1.0 for an all-zero slice), ``x8 = round(x /
    descale)`` (round to nearest, saturated); ``x8.double() * descale`` (:func:`descale_rows`) are the values
    the quantized tensor stands for (the dequantized ``x``)."""
    dt = getattr(torch, fp8_dtype)
    top = torch.finfo(dt).max
    if layout == "tensor":
        amax = float(x.float().abs().max()) if x.numel() else 0.0
        descale = torch.tensor(amax / top if amax > 0 else 1.0, dtype=torch.float32)  # ()
        return (x.float() / descale).clamp(-top, top).to(dt), descale  # x's shape, fp8
    hkv = hkv or x.shape[1]
    a = x.float().abs().unflatten(1, (hkv, x.shape[1] // hkv))  # (total, hkv, group, d)
    if layout == "kv_head":
        amaxes = a.amax(dim=(0, 2, 3))  # (hkv,)
    else:
        amaxes = torch.stack([part.amax(dim=(0, 2, 3)) for part in a.split(list(lens))])  # (B, hkv)
    descale = torch.where(amaxes > 0, amaxes.double() / top, 1.0).float()  # (hkv,) or (B, hkv)
    per_row = descale_rows(descale, lens, x.shape[1]).float()  # (total, heads, 1)
    return (x.float() / per_row).clamp(-top, top).to(dt), descale


def descale_rows(descale, lens, heads: int):
    """A descale as it applies to each element of a packed ``(total, heads, d)`` tensor, broadcastable to it:
    ``()`` stays ``()``; ``(hkv,)`` becomes ``(1, heads, 1)`` and ``(B, hkv)`` ``(total, heads, 1)`` (``lens``:
    rows per sequence), head ``h`` taking kv head ``h // (heads // hkv)``'s descale."""
    if descale.dim() == 0:
        return descale
    d = descale[None, :] if descale.dim() == 1 else descale.repeat_interleave(torch.tensor(list(lens), device=descale.device), dim=0)
    return d.repeat_interleave(heads // d.shape[1], dim=1)[..., None]  # (1 or total, heads, 1)


def paged_layout(k, v, k_lens: list, page_size: int, seed: int):
    """Packed ``k``, ``v`` ``(total_k, hkv, d)`` as a paged cache, physical pages in a seeded random order.

    Returns ``(k_cache, v_cache, block_table, seqlens_k)`` on ``k``'s device: caches
    ``(num_pages + 1, page_size, hkv, d)`` (zero-filled past each sequence's end), the last page a null
    page no sequence's own pages use; ``block_table`` ``(B, max_pages_per_seq)`` int32, its unused slots
    (padding, past a sequence's pages) pointing at the null page ``num_pages``, as engines point them at a
    null block; ``seqlens_k`` ``(B,)`` int32. Logical page ``n`` (sequences in order) is physical page
    ``randperm(num_pages)[n]``, the permutation drawn from a CPU generator seeded ``seed + 7919``.
    """
    ps = page_size
    per_seq = [-(-sk // ps) for sk in k_lens]  # ceil
    total = sum(per_seq)
    gen = torch.Generator(device="cpu").manual_seed(seed + 7919)
    perm = torch.randperm(total, generator=gen)  # logical page n -> physical page perm[n]
    dev = k.device
    k_cache = torch.zeros(total + 1, ps, k.shape[1], k.shape[2], dtype=k.dtype, device=dev)  # (pages + 1, ps, hkv, d)
    v_cache = torch.zeros_like(k_cache)  # (pages + 1, ps, hkv, d): the last, the null page
    table = torch.full((len(k_lens), max(per_seq)), total, dtype=torch.int32)  # (B, max_pages): padding -> null page
    n, start = 0, 0
    for b, sk in enumerate(k_lens):
        for p in range(per_seq[b]):
            phys = int(perm[n])
            n += 1
            table[b, p] = phys
            j0, j1 = p * ps, min(sk, (p + 1) * ps)
            k_cache[phys, : j1 - j0] = k[start + j0 : start + j1]
            v_cache[phys, : j1 - j0] = v[start + j0 : start + j1]
        start += sk
    return k_cache, v_cache, table.to(dev), torch.tensor(k_lens, dtype=torch.int32, device=dev)


def padded_layout(k, v, k_lens: list, capacity: int):
    """Packed ``k``, ``v`` ``(total_k, hkv, d)`` as padded caches ``(B, capacity, hkv, d)``, zero past
    each sequence's end, and the used lengths ``seqlens_k`` ``(B,)`` int32, on ``k``'s device."""
    k_cache = k.new_zeros(len(k_lens), capacity, *k.shape[1:])  # (B, capacity, hkv, d)
    v_cache = torch.zeros_like(k_cache)  # (B, capacity, hkv, d)
    k0 = 0
    for b, sk in enumerate(k_lens):
        k_cache[b, :sk] = k[k0 : k0 + sk]
        v_cache[b, :sk] = v[k0 : k0 + sk]
        k0 += sk
    return k_cache, v_cache, torch.tensor(k_lens, dtype=torch.int32, device=k.device)


def dequantize_fp8(x, descale, dtype, lens=None):
    """The values packed ``x`` ``(total, heads, d)`` stands for, in ``dtype``: ``x`` times ``descale`` (float32
    ``()``, ``(hkv,)`` or ``(B, hkv)`` with ``lens`` the rows per sequence, as :func:`quantize_fp8` gives it; or
    None: ``x`` not quantized, only cast) computed in float64 (exact for an fp8 value) and rounded once to ``dtype``."""
    if descale is None:
        return x.to(dtype)
    return (x.to(torch.float64) * descale_rows(descale.to(x.device, torch.float64), lens, x.shape[1])).to(dtype)


def window_pages(lo, hi, sk: int, page_size: int):
    """Which logical pages of a sequence of ``sk`` keys some query row reaches, its rows seeing keys
    ``lo .. hi`` (``(Sq,)`` each, inclusive; ``lo > hi``: none): bool ``(pages,)``."""
    start = torch.arange(-(-sk // page_size)) * page_size  # (pages,) first key of each page
    end = (start + page_size).clamp(max=sk) - 1  # (pages,) its last key
    hit = (lo[:, None] <= hi[:, None]) & (lo[:, None] <= end[None, :]) & (hi[:, None] >= start[None, :])  # (Sq, pages)
    return hit.any(0)


def poison_pages(k_cache, v_cache, block_table, k_lens: list, page_size: int, seen: list, extra: int, parts=("window", "null")):
    """Copies of paged caches ``(pages, page_size, hkv, d)`` with NaN in each sequence's pages that ``seen[b]``
    (bool ``(pages_b,)``, its logical pages) leaves out and in the unused tail of its last page (``"window"`` in
    ``parts``), and in the last ``extra`` physical pages of the pool, the null pages no sequence's own pages use
    and unused block-table slots point at (``"null"`` in ``parts``): ``(k_cache, v_cache)``."""
    k, v = k_cache.clone(), v_cache.clone()  # (pages, ps, hkv, d) each
    if "null" in parts:
        k[len(k) - extra :], v[len(v) - extra :] = float("nan"), float("nan")
    for b, sk in enumerate(k_lens if "window" in parts else []):
        pages = block_table[b, : -(-sk // page_size)].long()  # (pages_b,) logical -> physical
        unseen = pages[~seen[b].to(pages.device)]  # (n,) physical pages no row sees
        k[unseen], v[unseen] = float("nan"), float("nan")
        if sk % page_size and len(pages):
            k[pages[-1], sk % page_size :] = float("nan")
            v[pages[-1], sk % page_size :] = float("nan")
    return k, v


def poison_slots(k_cache, v_cache, seqlens: list):
    """Copies of padded caches ``(B, capacity, hkv, d)`` with NaN past each sequence's used length ``seqlens[b]``."""
    k, v = k_cache.clone(), v_cache.clone()  # (B, capacity, hkv, d) each
    for b, n in enumerate(seqlens):
        k[b, n:], v[b, n:] = float("nan"), float("nan")
    return k, v
