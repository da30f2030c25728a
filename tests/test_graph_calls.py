"""Each backend's CUDA-graph call (``graph_call`` / ``graph_padded_call``, :mod:`parity.backends.graphing`), on the CPU with
the libraries faked. For every backend that overrides it, the function it returns

(a) gives what ``run`` gives on the same inputs;
(b) reads the values the harness writes into the inputs' tensors in place after it was built (as a replay would);
(c) does no host work: it runs under a guard that makes ``Tensor.tolist / item / cpu / nonzero / __int__ / __float__``
    and ``torch.tensor`` raise, and a library ``plan`` called inside it raise too.

The fakes return a digest of every tensor they are handed (values, block tables, cu_seqlens, in order), so a stale copy, a
layout built from old values or a wrong table changes it. No GPU here: that the libraries' own calls are capturable rests
on their docs and code (each backend's docstring says where)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types

import pytest
import torch

from parity import Case, Window, backends
from parity import graphs as graphs_mod
from parity.backends import flex as flex_mod
from parity.backends import torch_fa2, vllm_fa
from parity.backends.graphing import CacheFill
from parity.case import make_inputs
from parity.graphs import copy_values, new_values, run_graph_check, static_copy
from parity.verdict import POISON

#: every digest a fake library computed, in call order
LOG: list[torch.Tensor] = []
#: the last call's tensors, by position / keyword (the padded layout's checks)
CALLS: list[list[torch.Tensor]] = []
GUARD = {"on": False}


def _digest(tensors: list[torch.Tensor]) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors:
        x = t.detach().to(torch.float64).flatten()  # (n,)
        total = total + (x * torch.arange(1, x.numel() + 1, dtype=torch.float64)).sum() + x.numel()
    return total


def _tensors(*args, **kw) -> list[torch.Tensor]:
    flat: list = []
    for a in [*args, *kw.values()]:
        flat.extend(a if isinstance(a, (tuple, list)) else [a])
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _library(*args, out=None, **kw):
    """A library call: the digest of every tensor it is handed, broadcast over the first argument's shape (or into ``out``)."""
    seen = _tensors(*args, **kw)
    CALLS.append(seen)
    d = _digest(seen)
    LOG.append(d)
    o = torch.zeros_like(args[0], dtype=torch.float64) + d  # shaped like q
    if out is not None:
        out.copy_(o.reshape(out.shape))
        return out
    return o.to(args[0].dtype) if args[0].dtype.is_floating_point and args[0].element_size() > 1 else o.to(torch.bfloat16)


def _op(q, k, v, cu_q, cu_k, *rest, **kw):
    o = _library(q, k, v, cu_q, cu_k, **kw)
    return o, torch.zeros(1)


class _Wrapper:
    """A FlashInfer wrapper: ``plan`` keeps its tensors (and refuses to run inside the captured function), ``run`` digests."""

    def __init__(self, workspace, *args, **kw):
        self.made = _tensors(**{k: v for k, v in kw.items() if k.endswith(("buf", "buffer"))})

    def plan(self, *args, **kw):
        assert not GUARD["on"], "plan() inside the captured function"
        self.planned = _tensors(*args, **kw)

    def run(self, q, kv, *args, out=None, **kw):
        return _library(q, *kv, *self.planned, *args, out=out, **kw)


class _Bias:
    """xformers' attn_bias classes: any constructor, ``from_seqlens`` and ``make_*`` chains."""

    def __getattr__(self, name):
        return self

    def __call__(self, *a, **k):
        return self


def _flex(q, k, v, score_mod=None, block_mask=None, **kw):
    """torch's flex_attention (its eager path runs Dynamo on the CPU): the digest of q, k, v and of the score_mod at key 0
    for every head (the sink's logit, the softcap's value: tensors the score_mod closes over)."""
    mods = []
    if score_mod is not None:
        hq, zero = q.shape[1], torch.zeros((), dtype=torch.int64)
        mods.append(score_mod(torch.ones(hq), zero, torch.arange(hq), zero, zero))  # (hq,)
    return _library(q, k, v, *mods)


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@pytest.fixture
def fakes(monkeypatch):
    LOG.clear()
    CALLS.clear()
    fa = dict(flash_attn_func=_library, flash_attn_varlen_func=_library, flash_attn_with_kvcache=_library)
    wrappers = {n: _Wrapper for n in ("BatchPrefillWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper")}
    wrappers["BatchAttentionWithAttentionSinkWrapper"] = _Wrapper
    fw = type("FwOp", (), {"NAME": "fake"})
    mods = {
        "flash_attn": _module("flash_attn", **fa),
        "flash_attn_interface": _module("flash_attn_interface", **fa),
        "flash_attn.cute": _module("flash_attn.cute", **fa),
        vllm_fa.INTERFACE: _module(vllm_fa.INTERFACE, flash_attn_varlen_func=_library),
        "flashinfer": _module("flashinfer", **wrappers),
        "xformers": _module("xformers"),
        "xformers.ops": _module("xformers.ops", memory_efficient_attention_forward=_library),
        "xformers.ops.fmha": _module("xformers.ops.fmha"),
        "xformers.ops.fmha.attn_bias": _Bias(),
        "xformers.ops.fmha.cutlass": _module("c", FwOp=fw),
        "xformers.ops.fmha.flash": _module("f", FwOp=fw),
    }
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch_fa2, "flash_forward_op", lambda: _op)
    monkeypatch.setattr("torch.nn.attention.flex_attention.flex_attention", _flex)


@pytest.fixture
def guard(monkeypatch):
    """``with guard():`` host work raises (see the module docstring)."""

    def guarded(orig, name):
        def call(*a, **k):
            if GUARD["on"]:
                raise AssertionError(f"host work inside the captured function: {name}")
            return orig(*a, **k)

        return call

    for name in ("tolist", "item", "cpu", "nonzero", "__int__", "__float__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, guarded(getattr(torch.Tensor, name), f"Tensor.{name}"))
    monkeypatch.setattr(torch, "tensor", guarded(torch.tensor, "torch.tensor"))

    @contextlib.contextmanager
    def on():
        GUARD["on"] = True
        try:
            yield
        finally:
            GUARD["on"] = False

    return on


VARLEN = Case((5, 9), (12, 9), 4, 2, 32, "bfloat16", Window(7, 0), seed=3)
DENSE = Case((8, 8), (16, 16), 4, 2, 32, "bfloat16", Window(3, 0), seed=4)
DECODE = Case((1, 1), (30, 9), 4, 2, 32, "bfloat16", Window(7, 0), seed=5)
PAGED = Case((1, 1), (40, 17), 4, 2, 32, "bfloat16", Window(7, 0), page_size=16, seed=6)
PAGED_PREFILL = Case((4, 3), (40, 17), 4, 2, 32, "bfloat16", Window(7, 0), page_size=16, seed=7)
SINKS = Case((4, 3), (40, 17), 4, 2, 32, "bfloat16", Window(7, 0), page_size=16, sinks=True, seed=8)
FP8 = Case((5, 9), (12, 9), 4, 2, 32, "bfloat16", Window(7, 0), kv_dtype="float8_e4m3fn", q_fp8=True, fp8_scales="kv_head", seed=9)
#: an fp8 paged cache: the graph call refills it (:meth:`parity.backends.graphing.CacheFill.fill`) inside the captured function
FP8_PAGED = Case((1, 1), (40, 17), 4, 2, 32, "bfloat16", Window(7, 0), page_size=16, kv_dtype="float8_e4m3fn", q_fp8=True, seed=10)

#: (backend, case): every overriding backend, each layout it prepares
OVERRIDES = [
    ("fa2-cuda", VARLEN),
    ("fa2-cuda", DENSE),
    ("fa3-cuda", FP8),
    ("fa3-split2-cuda", VARLEN),
    ("fa2-kvcache-cuda", DECODE),
    ("fa2-kvcache-cuda", PAGED),
    ("fa2-kvcache-split4-cuda", PAGED),
    ("fa4-cuda", PAGED),
    ("fa4-varlen-cuda", DENSE),
    ("vllm-fa2-cuda", VARLEN),
    ("vllm-fa3-cuda", SINKS),
    ("vllm-fa3-cuda", FP8),
    ("vllm-fa3-cuda", FP8_PAGED),
    ("vllm-fa3-split4-cuda", FP8_PAGED),
    ("vllm-fa3-split2-cuda", PAGED),
    ("torch-fa2-cuda", DENSE),
    ("torch-fa2-varlen-cuda", VARLEN),
    ("xformers-cutlass-cuda", VARLEN),
    ("xformers-flash-cuda", DENSE),
    ("flashinfer-paged-cuda", PAGED_PREFILL),
    ("flashinfer-paged-cuda", SINKS),
    ("flashinfer-paged-cuda", VARLEN),
    ("flashinfer-decode-cuda", PAGED),
    ("flex", VARLEN),
]
#: the padded calls: (backend, case)
PADDED = [
    ("fa2-cuda", VARLEN),
    ("fa2-kvcache-cuda", DECODE),
    ("fa2-kvcache-cuda", PAGED),
    ("vllm-fa2-cuda", VARLEN),
    ("vllm-fa3-cuda", PAGED),
    ("torch-fa2-varlen-cuda", VARLEN),
]


def _poison(inputs) -> torch.Tensor:
    return torch.full(inputs.q.shape, POISON, dtype=inputs.case.torch_dtype)  # (total_q, hq, d)


def _call(fn, out, guard) -> tuple[torch.Tensor, torch.Tensor | None]:
    n = len(LOG)
    with guard():
        got = fn(out).clone()
    return got, (LOG[-1] if len(LOG) > n else None)


def _eager(backend, case, inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    n = len(LOG)
    got = backend.run(case, inputs, _poison(inputs)).clone()
    return got, (LOG[-1] if len(LOG) > n else None)


def _same(a, b) -> bool:
    return torch.equal(a[0], b[0]) and (a[1] is None) == (b[1] is None) and (a[1] is None or torch.equal(a[1], b[1]))


@pytest.mark.parametrize("name, case", OVERRIDES, ids=[f"{n}-{c.family}{i}" for i, (n, c) in enumerate(OVERRIDES)])
def test_the_graph_call_is_run_reads_new_values_and_does_no_host_work(name, case, fakes, guard):
    backend = backends.get(name)
    assert type(backend).graph_call is not type(backends.get("sdpa")).graph_call, "this backend does not override graph_call"
    static = static_copy(make_inputs(case))
    fn = backend.graph_call(case, static)  # host work here, once
    out = _poison(static)
    first = _call(fn, out, guard)
    assert _same(first, _eager(backend, case, static))  # (a) what run gives
    fresh = new_values(case, torch.device("cpu"))
    copy_values(static, fresh)  # as the harness refills the buffers between replays
    again = _call(fn, out, guard)  # (c) under the guard, (b) on the new values
    assert _same(again, _eager(backend, case, fresh)) and not _same(again, first)


def _padded_layout_seen(seen: list[torch.Tensor], case: Case, pad: int) -> bool:
    """Among the tensors the library got: cu_seqlens repeating the total, lengths 0, or block-table rows of -1 for the pad."""
    b = case.batch
    for t in (t for t in seen if not t.dtype.is_floating_point):
        if t.dim() == 1 and t.numel() == b + pad + 1 and bool((t[-pad:] == t[-pad - 1]).all()) and t[-1] > 0:
            return True
        if t.dim() == 1 and t.numel() == b + pad and bool((t[-pad:] == 0).all()) and bool((t[:b] > 0).all()):
            return True
    return False


@pytest.mark.parametrize("name, case", PADDED, ids=[f"{n}-{c.family}{i}" for i, (n, c) in enumerate(PADDED)])
def test_the_padded_call_appends_empty_sequences_and_reads_new_values(name, case, fakes, guard):
    backend, pad = backends.get(name), 2
    static = static_copy(make_inputs(case))
    fn = backend.graph_padded_call(case, static, pad)
    out = _poison(static)
    first = _call(fn, out, guard)
    assert first[0].shape == static.q.shape and _padded_layout_seen(CALLS[-1], case, pad)
    tables = [t for t in CALLS[-1] if t.dim() == 2 and not t.dtype.is_floating_point]  # (B + pad, P) block tables
    assert all(t.shape[0] == case.batch + pad and bool((t[-pad:] == -1).all()) for t in tables)
    fresh = new_values(case, torch.device("cpu"))
    copy_values(static, fresh)
    again = _call(fn, out, guard)
    rebuilt = _call(backend.graph_padded_call(case, static_copy(fresh), pad), _poison(fresh), guard)
    assert _same(again, rebuilt) and not _same(again, first)


def test_padded_calls_where_the_layout_has_none():
    for name, case in (("fa2-cuda", DENSE), ("fa3-cuda", FP8), ("fa4-cuda", PAGED), ("xformers-cutlass-cuda", VARLEN)):
        assert backends.get(name).graph_padded_call(case, make_inputs(case), 1) is None, name
    assert backends.get("flashinfer-paged-cuda").graph_padded_call(PAGED_PREFILL, make_inputs(PAGED_PREFILL), 1) is None


@pytest.mark.parametrize("name, case", [("sdpa", VARLEN), ("sdpa-math", DENSE)])
def test_capture_safe_backends_run_as_they_are_under_the_guard(name, case, guard):
    backend = backends.get(name)
    inputs = make_inputs(case)
    with guard():
        backend.graph_call(case, inputs)(_poison(inputs))


def test_a_bucketed_flex_with_sinks_reads_the_new_sinks(fakes, guard):
    """flex-cuda's path (bucketed, the sinks copied into the score_mod's tensor) in eager mode on the CPU."""
    backend = type("EagerFlexCuda", (flex_mod.FlexCudaBackend,), {"compiled": False, "device": "cpu"})()
    case = dataclasses.replace(VARLEN, sinks=True, softcap=20.0)
    static = static_copy(make_inputs(case))
    fn = backend.graph_call(case, static)
    first = _call(fn, _poison(static), guard)
    assert _same(first, _eager(backend, case, static))
    fresh = new_values(case, torch.device("cpu"))
    fresh = dataclasses.replace(static_copy(static), sinks=fresh.sinks * 2)  # new sinks alone (q, k, v as they were)
    copy_values(static, fresh)
    again = _call(fn, _poison(static), guard)
    assert _same(again, _eager(backend, case, fresh)) and not _same(again, first)


def test_refusals_say_why():
    assert "k_scale" in backends.get("flashinfer-paged-cuda").graph_unsupported_reason(dataclasses.replace(PAGED, kv_dtype="float8_e4m3fn"))
    assert "k_scale" in backends.get("flashinfer-cuda").graph_unsupported_reason(dataclasses.replace(VARLEN, kv_dtype="float8_e5m2"))
    assert backends.get("flashinfer-paged-cuda").graph_unsupported_reason(PAGED) is None
    assert "sanity backend" in backends.get("reference-cuda").graph_unsupported_reason(VARLEN)


def test_the_guard_and_the_digest_catch_a_broken_override(fakes, guard, monkeypatch):
    """A test that cannot fail is worth nothing: the layout built inside the function (``.tolist()``), and a cache filled
    once outside it, are both caught."""
    from parity.backends.flash_attn import FlashAttnBackend, FlashAttnKvcacheBackend

    def inside(self, case, inputs, prep, out, return_lse=False, refill=False):
        inputs.cu_seqlens_q.tolist()  # the layout from the lengths, inside the captured function
        return launch(self, case, inputs, prep, out, return_lse, refill)

    launch = FlashAttnBackend._launch
    monkeypatch.setattr(FlashAttnBackend, "_launch", inside)
    with pytest.raises(AssertionError, match="host work inside the captured function: Tensor.tolist"):
        test_the_graph_call_is_run_reads_new_values_and_does_no_host_work("fa2-cuda", VARLEN, None, guard)
    monkeypatch.setattr(FlashAttnBackend, "_launch", launch)
    test_the_graph_call_is_run_reads_new_values_and_does_no_host_work("fa2-cuda", VARLEN, None, guard)  # mended: passes

    def stale(self, case, inputs):  # the cache filled once, when prepared: never refilled inside the function
        prep = self._prepare(case, inputs, 0, True)
        return lambda out: self._launch(case, inputs, prep, out, refill=False)

    monkeypatch.setattr(FlashAttnKvcacheBackend, "graph_call", stale)
    with pytest.raises(AssertionError) as caught:
        test_the_graph_call_is_run_reads_new_values_and_does_no_host_work("fa2-kvcache-cuda", PAGED, None, guard)
    assert "host work" not in str(caught.value)  # (b): the replay read the old keys


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_an_fp8_cache_fill_copies_the_bits_into_their_slots(dtype):
    """``CacheFill.fill`` on fp8 caches (torch has no float8 ``index_copy_``, on CUDA or the CPU): every key's bits land in
    its slot, the other rows keep theirs, each cache keeps its storage (a captured graph reads those addresses)."""
    fp8 = getattr(torch, dtype)
    k_cache = torch.full((4, 4, 2, 8), 3.0).to(fp8)  # (pages, page_size, hkv, d)
    v_cache = torch.full((4, 4, 2, 8), -3.0).to(fp8)
    slots = torch.tensor([5, 0, 14, 9])  # (total_k,)
    k, v = torch.randn(4, 2, 8).to(fp8), torch.randn(4, 2, 8).to(fp8)  # (total_k, hkv, d)
    ptrs = (k_cache.data_ptr(), v_cache.data_ptr())
    CacheFill(k_cache, v_cache, slots).fill(k, v)
    assert (k_cache.data_ptr(), v_cache.data_ptr()) == ptrs and k_cache.dtype == v_cache.dtype == fp8
    for cache, x, old in ((k_cache, k, 3.0), (v_cache, v, -3.0)):
        rows = cache.view(-1, 2, 8)  # (rows, hkv, d)
        assert torch.equal(rows[slots].view(torch.uint8), x.view(torch.uint8))
        rest = torch.ones(len(rows), dtype=torch.bool)
        rest[slots] = False
        assert bool((rows[rest].float() == old).all())


def test_graph_replay_of_an_fp8_paged_cache_runs_on_the_cpu(fakes, monkeypatch):
    """The whole ``--graph-replay`` check (:func:`parity.graphs.run_graph_check`, capture faked) of vLLM's FA3 on an fp8
    paged cache: on an H100 its cache refill raised ``"index_copy_cuda" not implemented for 'Float8_e4m3fn'`` (an
    ``error`` row); the CPU's ``index_copy_`` has the same gap."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(graphs_mod, "capture", lambda fn: (fn(), fn)[1])  # a replay reruns the captured work
    for case in (FP8_PAGED, dataclasses.replace(FP8_PAGED, fp8_scales="batch_kv_head")):
        got = run_graph_check(backends.get("vllm-fa3-cuda"), case, make_inputs(case))
        assert got["status"] == "ok", got
