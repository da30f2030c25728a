"""PyTorch FlexAttention.

Window translation: a ``mask_mod`` that encodes the canonical rule
``q + d - left <= kv <= q + d + right`` (``d`` from the window's alignment), and a
``BlockMask`` rebuilt for every (Sq, Sk) pair, since a BlockMask is tied to its
Q_LEN / KV_LEN. The softcap is a ``score_mod`` (FlexAttention applies ``scale``
before ``score_mod``, and masking after it, as the spec does).

Learned sinks (``Case.sinks``; this torch's ``flex_attention`` has no sink argument): one extra
key in front of each sequence's keys (index 0, key and value zero), always visible, whose score
the ``score_mod`` replaces with the head's sink logit (after the softcap, unscaled), so the
softmax denominator gains ``exp(sink_h)`` and the value it adds is 0: a second, independent
implementation of the reference's rule. Chunked local attention (``Case.chunk``) is one more
term of the ``mask_mod``: ``kv_idx // C == (q_idx + Sk - Sq) // C``
(:func:`chunk_sink_mask_mod`).

``flex`` runs eagerly on the CPU (an unfused reference path PyTorch keeps for
debugging) and compiled on CUDA. ``flex-compiled`` asks for ``torch.compile``
wherever it runs; on the CPU that compiles C++ through inductor (slow to start).
"""

from __future__ import annotations

import functools

import torch

from ..case import Case, Inputs
from ..window import Window
from .base import Backend, cuda_unavailable_reason, import_error_reason, refusals
from .graphing import PreparedCall

#: FlexAttention's words when it declines a backward ("FlexAttention does not support backward on CPU").
FLEX_GRAD_REFUSALS: tuple[str, ...] = ("does not support backward",)


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


def softcap_mod(cap):
    """The tanh softcap as a score_mod; ``cap`` a number or a 0-d tensor (set per call, no recompile)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return score_mod


softcap_score_mod = functools.lru_cache(maxsize=64)(softcap_mod)


def chunk_sink_mask_mod(t):
    """The window rule with a chunk and a sink key, its numbers in a tensor ``t`` = ``[d, left, right, Sk,
    off, chunk, sink]`` (int; ``off = Sk - Sq``; ``chunk`` 0: none; ``sink`` 1: key 0 is the sink and
    key ``j`` of the sequence sits at index ``j + 1``). Unbounded sides are bounds past every key.
    Padded keys past the sequence are masked. Torch only (copied by export-repro)."""

    def mask_mod(b, h, q_idx, kv_idx):
        j = kv_idx - t[6]  # the sequence's key index (-1: the sink key)
        c = torch.clamp(t[5], min=1)
        same_chunk = (t[5] == 0) | (torch.div(j, c, rounding_mode="floor") == torch.div(q_idx + t[4], c, rounding_mode="floor"))
        ok = (j >= 0) & (j < t[3]) & (j >= q_idx + t[0] - t[1]) & (j <= q_idx + t[0] + t[2]) & same_chunk
        return ok | ((t[6] == 1) & (kv_idx == 0))

    return mask_mod


def sink_mod(sinks, cap=None):
    """The score_mod of a case with learned sinks: key index 0 (the sink key) scores ``sinks[h]``
    (natural-log units, not scaled, not softcapped); the others the tanh softcap of their score
    when ``cap`` is given. ``sinks``: ``(hq,)`` float32. Torch only (copied by export-repro)."""

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        return torch.where(kv_idx == 0, sinks[h].to(score.dtype), score)

    return score_mod


def flex_block_mask(bq, bk, band, device):
    """The BlockMask of one sequence over its ``(bq, bk)`` grid. ``band``: ``(d, left, right)``, the rule
    of :func:`band_mask_mod`, or ``[d, left, right, Sk]`` (four numbers), :func:`tensor_band_mask_mod`'s
    over a padded grid, or seven numbers, :func:`chunk_sink_mask_mod`'s (a chunk or a sink key)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if len(band) == 7:
        mod = chunk_sink_mask_mod(torch.tensor(band, dtype=torch.int32, device=device))  # (7,)
    elif len(band) == 4:
        mod = tensor_band_mask_mod(torch.tensor(band, dtype=torch.int32, device=device))  # (4,): d, left, right, Sk
    else:
        mod = band_mask_mod(*band)
    return create_block_mask(mod, None, None, bq, bk, device=device)


def flex_attention_packed(q, k, v, out, q_lens, k_lens, scale, padded, block_masks, score_mod=None, flex=None, sink_key=False, lse=None):
    """``flex_attention``, one call per sequence of a packed batch.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; ``out`` ``(total_q, hq, d)`` is
    written and returned. ``padded``: per sequence ``(bq, bk)``, its lengths with zero rows appended
    (the real ones when not bucketed); ``block_masks``: per sequence, its BlockMask over that grid
    (:func:`flex_block_mask`). ``flex``: ``flex_attention`` or a compiled version (None: eager).
    ``sink_key``: a zero key and value row goes in front of each sequence's keys (the learned sink's
    key, scored by :func:`sink_mod`; ``bk`` counts it).
    ``lse`` ``(total_q, hq)`` float32, if given, gets flex's log-sum-exp (already natural log:
    flex converts its kernel's log2 value; ``-inf`` on rows that see no key).
    """
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    fn = flex or flex_attention
    aux = {}
    if lse is not None:
        try:  # torch >= 2.9: return_aux; return_lse before it (deprecated after)
            from torch.nn.attention.flex_attention import AuxRequest

            aux = {"return_aux": AuxRequest(lse=True)}
        except ImportError:
            aux = {"return_lse": True}
    q0 = k0 = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex warns that it is unfused
        for (sq, sk), (bq, bk), block_mask in zip(zip(q_lens, k_lens), padded, block_masks):
            ks, vs = k[k0 : k0 + sk], v[k0 : k0 + sk]  # (Sk, hkv, d) each
            if sink_key:
                ks, vs = (torch.cat([torch.zeros_like(x[:1]), x]) for x in (ks, vs))  # (Sk + 1, hkv, d): the sink's row first
            o = fn(
                _pad_rows(q[q0 : q0 + sq], bq).transpose(0, 1)[None],  # (1, hq, bq, d), zero rows appended
                _pad_rows(ks, bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                _pad_rows(vs, bk).transpose(0, 1)[None],  # (1, hkv, bk, d)
                score_mod=score_mod,
                block_mask=block_mask,
                scale=scale,
                enable_gqa=q.shape[1] != k.shape[1],
                **aux,
            )  # (1, hq, bq, d), or (it, its lse or aux) with aux
            if aux:
                o, extra = o
                seq_lse = extra if isinstance(extra, torch.Tensor) else extra.lse  # (1, hq, bq)
                lse[q0 : q0 + sq] = seq_lse[0, :, :sq].transpose(0, 1)  # (Sq, hq)
            out[q0 : q0 + sq] = o[0, :, :sq].transpose(0, 1)  # (Sq, hq, d)
            q0, k0 = q0 + sq, k0 + sk
    return out


def seq_bands(
    window: Window, q_lens, k_lens, bucketed: bool, chunk: int | None = None, sink: bool = False, minimum: int = 128
) -> list[tuple[int, int, tuple]]:
    """Per sequence ``(bq, bk, band)`` for :func:`flex_block_mask`: padded lengths (:func:`bucket_len`, at
    least ``minimum``) and tensor numbers when ``bucketed``, else the real lengths and ``(d, left, right)``;
    with a ``chunk`` or a ``sink`` key, :func:`chunk_sink_mask_mod`'s seven numbers (``bk`` counting the sink
    key)."""
    if chunk is not None or sink:
        out = []
        for sq, sk in zip(q_lens, k_lens):
            d, left, right, _ = bucket_band(window, sq, sk)
            n = sk + int(sink)
            bq, bk = (bucket_len(sq, minimum), bucket_len(n, minimum)) if bucketed else (sq, n)
            out.append((bq, bk, (d, left, right, sk, sk - sq, Window.cap(chunk, sq, sk) or 0, int(sink))))
        return out
    if bucketed:
        return [(bucket_len(sq, minimum), bucket_len(sk, minimum), tuple(bucket_band(window, sq, sk))) for sq, sk in zip(q_lens, k_lens)]
    return [(sq, sk, (window.offset(sq, sk), *window.sides(sq, sk))) for sq, sk in zip(q_lens, k_lens)]


@functools.lru_cache(maxsize=256)
def _block_mask(bq: int, bk: int, band: tuple, device: str):
    """:func:`flex_block_mask`, built once: a batched mask probe repeats the same lengths many times,
    and a sweep revisits them across cases."""
    return flex_block_mask(bq, bk, band, device)


@functools.cache
def _tensor_softcap(device: str):
    """One softcap score_mod per device, its cap a tensor set per call (no recompile per value)."""
    cap = torch.ones((), dtype=torch.float32, device=device)  # ()
    score_mod = softcap_mod(cap)
    score_mod.cap = cap  # type: ignore[attr-defined]
    return score_mod


@functools.cache
def _tensor_sinks(device: str, hq: int, capped: bool):
    """One sink score_mod per (device, heads, softcap or not), its sinks (and cap) tensors set per call."""
    sinks = torch.zeros(hq, dtype=torch.float32, device=device)  # (hq,)
    cap = torch.ones((), dtype=torch.float32, device=device) if capped else None  # ()
    score_mod = sink_mod(sinks, cap)
    score_mod.sinks, score_mod.cap = sinks, cap  # type: ignore[attr-defined]
    return score_mod


#: Recompiles allowed per code object. Dynamo's default (8) would, after 8 distinct
#: (dtype, heads, head dim, bucket) combinations, silently run flex_attention eagerly:
#: an unfused path, not the compiled kernel this backend stands for.
RECOMPILE_LIMIT = 4096


@functools.cache
def _compiled_flex(dynamic: bool = False):
    """``torch.compile(flex_attention)``; ``dynamic``: lengths symbolic, so one graph serves every length
    bucket of a (dtype, heads, head dim, score_mod) (measured on an H100, 2026-12-06: one compile served
    S = 1000, 1024 and 4096; ../shared/compile-probe-2026-12-06)."""
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), RECOMPILE_LIMIT))
    compiled = torch.compile(flex_attention, dynamic=dynamic)
    return _without_duck_shapes(compiled) if dynamic else compiled


def _without_duck_shapes(fn):
    """``fn`` compiled with Dynamo's duck shaping off: with it, lengths equal at the first call share one
    symbol and a guard (``Sq == Sk``), so the next call with other lengths builds a second graph for the
    same compile key, and another process's first call of that key may trace a different graph, missing
    the FX-graph cache (measured with the eager backend on the CPU, 2026-12-06: (256, 256) then (256, 512)
    made two graphs, one without duck shaping)."""
    import torch.fx.experimental._config as fx_config

    @functools.wraps(fn)
    def call(*args: object, **kwargs: object) -> object:
        with fx_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]
            return fn(*args, **kwargs)

    return call


def inductor_builds() -> int | None:
    """Graphs inductor lowered and compiled in this process so far (FX graph cache misses and bypasses; a
    cache hit loads a kernel another process built, and Dynamo's tracing, which every process repeats, is
    not a build); None where the counters cannot be read."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["fxgraph_cache_miss"]) + int(counters["inductor"]["fxgraph_cache_bypass"])
    except Exception:  # noqa: BLE001 - a torch without these counters
        return None


class FlexBackend(PreparedCall, Backend):
    """CUDA graphs (:class:`.graphing.PreparedCall`): the block masks are built once, outside the captured function; the
    padded copies of q / k / v, the sink tensor's copy and the (compiled) flex calls are device work inside it."""

    cost_hint = 10  # relative sweep cost, for --jobs lanes: dynamo traces each new shape
    name = "flex"
    description = "FlexAttention with a window mask_mod; eager on CPU, compiled on CUDA"
    supports_sinks = True  # one extra key scored by sink_mod (this torch's flex_attention has no sink argument)
    supports_chunk = True  # a term of the mask_mod

    compiled: bool | None = None  # None: compiled on CUDA, eager on CPU
    #: ``torch.compile(..., dynamic=True)``: one graph for every length bucket (see :func:`_compiled_flex`)
    dynamic = False
    #: Pad lengths to power-of-two buckets and pass the window and softcap as tensors,
    #: so one compiled kernel serves every case of a bucket (see FlexCudaBackend).
    bucketed = False
    #: the smallest bucket (:func:`bucket_len`) when bucketed
    min_bucket = 128
    supports_grad = True  # the backward: autograd through flex_attention_packed (flex's own backward kernel)
    grad_sinks = True  # the sink is one more key scored by sink_mod: autograd reaches q, k, v through it
    #: dsinks is not asked: the compiled path copies the sinks into a buffer (no recompile per case), which the
    #: graph does not differentiate
    grad_dsinks = False

    def unavailable_reason(self) -> str | None:
        if self.device == "cuda" and (r := cuda_unavailable_reason()):
            return r
        return import_error_reason("torch.nn.attention.flex_attention")

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Autograd through :meth:`run` (flex's own backward); its refusal (none on the CPU) is ``unsupported``."""
        with refusals(FLEX_GRAD_REFUSALS, "FlexAttention"):
            return super().backward(case, inputs, dout)

    def workspace_bytes(self, case: Case) -> int:
        """The larger of: ``create_block_mask`` evaluating the mask_mod over every (query, key) pair of a
        sequence's padded grid, an int64 index intermediate and a bool mask ``(bq, bk)`` (measured 2026-12-06 on
        an H100: a 32k prefill peaked at 10.9 GiB, and one asked for 8 GiB at once), and what a call holds
        (:meth:`workspace_again_bytes`): every sequence's block mask is built before the first call. A mask is
        built once per worker for its lengths and window (``_block_mask``): a later row of the same pays none
        (1.4-1.5x its peak in the memory benchmark of 2026-12-06, whose Gemma rows reuse Mistral's masks)."""
        seqs = self._seqs(case)
        return max(max(bq * bk * (8 + 2) for bq, bk, _ in seqs), self.workspace_again_bytes(case))

    def workspace_again_bytes(self, case: Case) -> int:
        """A call of lengths it has met: the block masks are kept (``_block_mask`` caches them), so only the
        padded copies of q, k and v (zero rows up to the bucket), its output and LSE over the padded rows; eager
        (the CPU's), its dense scores too (:meth:`_eager_bytes`)."""
        seqs = self._seqs(case)
        eager = 0 if self._use_compiled() else self._eager_bytes(case, seqs)
        return max(max(self._per_call(case, seqs), default=0), eager)

    @staticmethod
    def _eager_bytes(case: Case, seqs: list[tuple[int, int, tuple]]) -> int:
        """Eager flex (torch's ``math_attention``, one call per sequence): k and v repeated to the query heads,
        float32 copies of q and the repeated k, and about five float32 ``(hq, Sq, Sk)`` grids (the scores, scaled,
        the mask_mod's index and bool grids, the masked scores). Measured on the CPU (2026-12-07, 32 / 8 heads,
        d 128): a 100k-key decode 3.2 GiB beyond its inputs (3.1 by this), a 2k prefill at 8 / 2 heads 0.58 (0.64)."""
        e = torch.finfo(case.torch_dtype).bits // 8
        most = 0
        for bq, bk, _ in seqs:
            repeated = 2 * case.hq * bk * case.head_dim * e if case.hq != case.hkv else 0  # (hq, Sk, d) k and v
            copies = case.hq * (bq + bk) * case.head_dim * 4  # float32 q (hq, Sq, d) and k (hq, Sk, d)
            most = max(most, repeated + copies + 5 * case.hq * bq * bk * 4)  # (hq, Sq, Sk) float32 grids
        return most

    @staticmethod
    def _per_call(case: Case, seqs: list[tuple[int, int, tuple]]) -> list[int]:
        e = torch.finfo(case.torch_dtype).bits // 8
        ekv = 1 if case.kv_dtype is not None else e
        out = []
        for (sq, sk), (bq, bk, _) in zip(zip(case.q_lens, case.k_lens), seqs):
            pad_q = bq * case.hq * case.head_dim * e if bq != sq else 0
            pad_kv = 2 * bk * case.hkv * case.head_dim * ekv if bk != sk else 0
            out.append(pad_q + pad_kv + bq * case.hq * (case.head_dim * e + 4))  # its output and LSE over bq rows
        return out

    def _seqs(self, case: Case, sink: bool | None = None) -> list[tuple[int, int, tuple]]:
        """:func:`seq_bands` of ``case`` as this backend pads it (``sink``: a sink key, default ``case.sinks``)."""
        sinks = case.sinks if sink is None else sink
        return seq_bands(case.window, case.q_lens, case.k_lens, self.bucketed, case.chunk, sinks, self.min_bucket)

    def _use_compiled(self) -> bool:
        return self.compiled if self.compiled is not None else self.device == "cuda"

    def compile_key(self, case: Case) -> tuple | None:
        """Dynamo guards on dtypes, head counts and head dim, and on which score_mod / mask_mod runs (their
        numbers are tensors: no guard on values); static shapes add each sequence's (padded) lengths, and the
        unbucketed path's mask_mod closes over the window's numbers (guarded by value). The softmax scale is
        guarded by value: flex_attention takes it as a Python float, which Dynamo passes as a 0-d tensor and AOT's
        tensorify pass specialises again (``scale == 0.05``: the flex op takes a float), so each scale of a key
        is a graph of its own (lab/runs/cpu-flex-keys-2026-12-07: 29 of an H100 run's 209 graphs)."""
        if not self._use_compiled():
            return None
        mods = (case.softcap is not None, bool(case.sinks), case.chunk is not None)
        key = (case.dtype, case.hq, case.hkv, case.head_dim, case.softmax_scale, *mods)
        if self.dynamic:
            return key
        seqs = self._seqs(case)
        shapes = tuple(sorted({(bq, bk) if self.bucketed else (bq, bk, band) for bq, bk, band in seqs}))
        return (*key, shapes)

    def kernels_built(self) -> int | None:
        """Graphs inductor built in this worker so far (:func:`inductor_builds`)."""
        return inductor_builds() if self._use_compiled() else None

    def _score_mod(self, case: Case, inputs: Inputs, dev: str):
        if inputs.sinks is not None and self.bucketed:
            mod = _tensor_sinks(dev, case.hq, case.softcap is not None)
            mod.sinks.copy_(inputs.sinks)  # type: ignore[attr-defined]
            if case.softcap is not None:
                mod.cap.fill_(case.softcap)  # type: ignore[attr-defined]
            return mod
        if inputs.sinks is not None:
            return sink_mod(inputs.sinks.to(dev, torch.float32), case.softcap)
        if case.softcap is not None and self.bucketed:
            score_mod = _tensor_softcap(dev)
            score_mod.cap.fill_(case.softcap)  # type: ignore[attr-defined]
            return score_mod
        if case.softcap is not None:
            return softcap_score_mod(case.softcap)
        return None

    returns_lse = True
    lse_empty = ("-inf",)  # m = -inf, l = 0 -> log(l) + m (eager and the Triton template alike)

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        return self._attend(case, inputs, out, None)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lse = torch.empty(inputs.q.shape[:2], dtype=torch.float32, device=inputs.q.device)  # (total_q, hq)
        return self._attend(case, inputs, out, lse), lse

    def _attend(self, case: Case, inputs: Inputs, out: torch.Tensor, lse: torch.Tensor | None) -> torch.Tensor:
        return self._launch(case, inputs, self._prepare(case, inputs, 0, False), out, lse)

    def _prepare(self, case: Case, inputs: Inputs, pad: int, graph: bool) -> dict:
        """Host work, once: each sequence's padded lengths and BlockMask (built from ``torch.tensor(band)``, cached by
        ``_block_mask``) and the flex function (compiled on CUDA: its build is the capture's warm-up, outside the graph)."""
        dev, sink = str(inputs.q.device), inputs.sinks is not None
        seqs = self._seqs(case, sink)
        masks = [_block_mask(bq, bk, band, dev) for bq, bk, band in seqs]
        flex = _compiled_flex(self.dynamic) if self._use_compiled() else None
        return dict(padded=[(bq, bk) for bq, bk, _ in seqs], block_masks=masks, flex=flex, sink_key=sink)

    def _launch(self, case: Case, inputs: Inputs, prep: dict, out: torch.Tensor, lse: torch.Tensor | None = None, refill: bool = False):
        """Device work: the score_mod's tensors set from ``inputs`` (the sinks copied in, the cap filled), then
        :func:`flex_attention_packed` on ``inputs``' tensors into ``out``."""
        score_mod = self._score_mod(case, inputs, str(inputs.q.device))
        q, k, v = inputs.q, inputs.k, inputs.v  # (total_q, hq, d), (total_k, hkv, d) x2
        return flex_attention_packed(q, k, v, out, case.q_lens, case.k_lens, case.softmax_scale, score_mod=score_mod, lse=lse, **prep)

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script (:mod:`parity.repro_script`):
        :func:`flex_attention_packed` and the mask_mod builders as ``run`` calls them."""
        from ..repro_script import embed

        seqs = self._seqs(case)
        flex = f"torch.compile(flex_attention, dynamic={self.dynamic})" if self._use_compiled() else "flex_attention  # eager"
        if case.sinks:
            score = "SCORE_MOD = sink_mod(torch.tensor(SINKS, dtype=torch.float32, device=DEVICE), SOFTCAP)  # key 0: the sink"
        elif case.softcap is None:
            score = "SCORE_MOD = None"
        elif self.bucketed:
            score = "SCORE_MOD = softcap_mod(torch.full((), SOFTCAP, dtype=torch.float32, device=DEVICE))  # a tensor, as in run"
        else:
            score = "SCORE_MOD = softcap_mod(SOFTCAP)"
        extra = [chunk_sink_mask_mod, sink_mod] if case.sinks else [chunk_sink_mask_mod]  # flex_block_mask names chunk_sink_mask_mod
        sink_arg = ", sink_key=True" if case.sinks else ""
        return embed(
            [band_mask_mod, tensor_band_mask_mod, *extra, softcap_mod, flex_block_mask, _pad_rows, flex_attention_packed],
            f"""\
            FLEX = {flex}
            SEQS = {seqs!r}  # per sequence: (padded Sq, padded Sk, mask_mod numbers)
            {score}


            def attention(q, k, v):
                masks = [flex_block_mask(bq, bk, band, str(q.device)) for bq, bk, band in SEQS]
                padded = [(bq, bk) for bq, bk, _ in SEQS]
                return flex_attention_packed(q, k, v, torch.empty_like(q), Q_LENS, K_LENS, SCALE, padded, masks, SCORE_MOD, FLEX{sink_arg})
            """,
            head="from torch.nn.attention.flex_attention import flex_attention",
        )


def _pad_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x`` (S, H, d) with zero rows appended up to ``n`` (itself when already ``n`` long)."""
    return x if x.shape[0] == n else torch.nn.functional.pad(x, (0, 0, 0, 0, 0, n - x.shape[0]))


class FlexCompiledBackend(FlexBackend):
    cost_hint = 30  # inductor compiles each new shape
    first_use_compile = True
    name = "flex-compiled"
    compiled = True
    #: inductor on the CPU refuses it: "torch.compile on CPU only supports inference and `return_lse` is not
    #: supported yet" (torch 2.13): the row's LSE is not checked (lse_check none)
    returns_lse = False
    description = "FlexAttention through torch.compile (CPU inductor here: slow first call)"


def bucket_len(n: int, minimum: int = 128) -> int:
    """The compile bucket of a length: the next power of two, at least ``minimum``."""
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


def bucket_band(window: Window, sq: int, sk: int) -> list[int]:
    """``[d, left, right, Sk]`` of one (Sq, Sk) pair for :func:`tensor_band_mask_mod`; an unbounded side
    becomes a bound past every key."""
    big = 4 * (sq + sk) + 8
    left, right = window.sides(sq, sk)
    return [window.offset(sq, sk), big if left is None else left, big if right is None else right, sk]


def tensor_band_mask_mod(t):
    """The rule with its numbers in a tensor ``t`` = ``[d, left, right, Sk]`` (no recompile when they
    change), over a padded grid: padded keys ``kv_idx >= Sk`` are masked. Torch only (copied by export-repro)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < t[3]) & (kv_idx >= q_idx + t[0] - t[1]) & (kv_idx <= q_idx + t[0] + t[2])

    return mask_mod


class FlexCudaBackend(FlexBackend):
    cost_hint = 30  # compiled each new (dtype, heads, head dim, bucket) when static: cold 11.5 s per row on the H100 of 12-06c
    first_use_compile = True
    name = "flex-cuda"
    device = "cuda"
    description = (
        "FlexAttention compiled on CUDA (dynamic shapes), BlockMask per (Sq, Sk); lengths padded to power-of-two "
        "buckets and the window passed as tensors, so one compiled kernel serves every case of a (dtype, heads, head dim, softmax scale)"
    )
    bucketed = True
    dynamic = True
    #: Two blocks of 128 at least, each way: with one, Dynamo specialises the block mask's block counts to 1
    #: (its 0/1 rule) and builds a second graph for the same compile key (measured with the eager backend on the
    #: CPU, 2026-12-06: (256, 256) then (128, 1024) then (128, 128) made three graphs, 256-row buckets one)
    min_bucket = 256
