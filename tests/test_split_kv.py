"""Split-KV on purpose (issue 49 item 4): decode rows over long caches whose splits mostly lie outside the window,
in every dtype of every profile; a planted merge that weighs empty splits, and its honest twin; backend variants
that force each library's ``num_splits`` (2, 4, the most), run on the CPU with the library stood in for by a
split-KV kernel that follows the documented contract (its merge right, or weighing empty splits)."""

from __future__ import annotations

import functools
import math
import sys
import types

import pytest
import torch

from parity import Case, Window, backends
from parity.api import evaluate
from parity.backends import flash_attn, flashinfer, vllm_fa
from parity.backends.base import Unsupported
from parity.selftest.bugs import BUGS, SPLIT_KV_KEYS, SplitKvDecode, SplitKvMergeWeighsEmptySplits
from parity.selftest.honest import HONEST, SplitKV, band_mask
from parity.strategies import ALL_DTYPES, PROFILES, generate, split_kv_cases

NEW = {c.dtype: c for c in split_kv_cases(2048)}  # the rows every profile holds, one per dtype


@functools.cache
def quick() -> list[Case]:
    return generate(PROFILES["quick"], 0)


def _empty(case: Case, b: int, ranges) -> int:
    """How many of ``ranges`` hold no key the decode query of sequence ``b`` sees."""
    ok = band_mask(case, 1, case.k_lens[b])[0]  # (Sk,)
    return sum(not bool(ok[j0:j1].any()) for j0, j1 in ranges)


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_profile_holds_long_decode_rows_in_every_dtype_with_most_splits_outside_the_window(name):
    cases = generate(PROFILES[name], 0)
    for dt in ALL_DTYPES:
        rows = [c for c in cases if c.dtype == dt and max(c.q_lens) == 1 and min(c.k_lens) >= 1500 and c.kv_dtype is None]
        assert any(c.window.left is not None and c.window.left < min(c.k_lens) / 4 for c in rows), (name, dt)
    assert set(NEW.values()) <= set(cases)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_the_honest_split_kv_variants_run_8_splits_or_more_mostly_empty_on_the_new_rows(dtype):
    case = NEW[dtype]
    for b, sk in enumerate(case.k_lens):
        for ranges in (SplitKV().split_ranges(sk, None), SplitKvDecode().split_ranges(sk)):
            assert len(ranges) >= 8 and _empty(case, b, ranges) > len(ranges) / 2, (sk, len(ranges))
    assert max(case.k_lens) > SPLIT_KV_KEYS  # SplitKvDecode takes its split path


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_honest_split_kv_variants_pass_the_new_rows(dtype):
    """Within the error budget (the probes too: tests/test_selftest.py's slow honest-variant run holds these rows)."""
    for be in (SplitKV(), SplitKvDecode()):
        row = evaluate(be, NEW[dtype], probes=False)
        assert row["verdict"] == "pass", (be.name, row["reasons"], row["worst_where"])


def test_the_planted_merge_passes_the_old_long_decode_rows_and_fails_the_new_float32_row():
    """The bug changes only decode over more than SPLIT_KV_KEYS contiguous keys (every other path is the honest
    eager kernel's): of the quick profile's such rows, the old one (bfloat16, 2048 keys, a 1k window: half the splits
    empty, the weight they get under bfloat16's rounding) passes; the new float32 row fails (seen with the split cases
    left out: the bug escaped the quick profile)."""
    bug = SplitKvMergeWeighsEmptySplits()
    assert any(b.backend is SplitKvMergeWeighsEmptySplits for b in BUGS) and any(h.backend is SplitKvDecode for h in HONEST)
    long_decode = [c for c in quick() if max(c.q_lens) == 1 and c.page_size is None and max(c.k_lens) > SPLIT_KV_KEYS]
    old = [c for c in long_decode if c not in NEW.values()]
    assert [c.dtype for c in old] == ["bfloat16"]
    assert evaluate(bug, old[0], probes=False)["verdict"] == "pass"
    row = evaluate(bug, NEW["float32"], probes=False)
    assert row["verdict"] == "fail" and "max_err" in row["reasons"], row["reasons"]


# -- the libraries, stood in for by a split-KV kernel --------------------------------------------------------------


def split_kv(q, k, v, left, right, scale, ranges, empty_lse):
    """A split-KV kernel's answer for one sequence in float64: ``q`` ``(Sq, hq, d)``, ``k`` / ``v`` ``(Sk, hkv, d)``,
    FA's ``(left, right)`` (``-1`` unbounded, bottom-right), ``ranges`` its splits ``[j0, j1)``; an empty split's
    log-sum-exp is ``empty_lse`` (``-inf`` right). -> output ``(Sq, hq, d)``, LSE ``(hq, Sq)`` (``+inf`` no key)."""
    sq, sk = q.shape[0], k.shape[0]
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i + sk - sq - left
    if right >= 0:
        ok &= j <= i + sk - sq + right
    g = q.shape[1] // k.shape[1]
    kx, vx = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)  # (Sk, hq, d)
    s = (torch.einsum("qhd,khd->hqk", q.double(), kx) * scale).masked_fill(~ok, -math.inf)  # (hq, Sq, Sk)
    outs, lses = [], []
    for j0, j1 in ranges:
        part = s[..., j0:j1]
        if not bool(ok[:, j0:j1].any()):  # nothing to do: nothing loaded
            outs.append(torch.zeros(q.shape[1], sq, q.shape[2], dtype=torch.float64))
            lses.append(torch.full((q.shape[1], sq, 1), empty_lse, dtype=torch.float64))
            continue
        seen = ok[:, j0:j1].any(0)[:, None, None]  # a windowed kernel loads only keys some row sees (the read probe)
        lse = torch.logsumexp(part, -1, keepdim=True)  # (hq, Sq, 1)
        p = torch.exp(part - lse.nan_to_num(neginf=0.0)).nan_to_num(0.0)
        outs.append(torch.einsum("hqk,khd->hqd", p, torch.where(seen, vx[j0:j1], 0.0)))
        lses.append(lse)
    lse = torch.stack(lses)  # (splits, hq, Sq, 1)
    top = lse.amax(0).nan_to_num(neginf=0.0)
    w = torch.exp(lse - top)
    tot = w.sum(0)
    o = (w * torch.stack(outs)).sum(0) / torch.where(tot > 0, tot, 1.0)  # (hq, Sq, d)
    merged = torch.where(tot > 0, top + torch.log(tot), math.inf)[..., 0]  # (hq, Sq)
    return o.transpose(0, 1), merged


def fa2_ranges(sk: int, d: int, num_splits: int) -> list[tuple[int, int]]:
    """flash-attn 2's splits: ``num_splits`` ranges of key blocks over the whole cache (empty ones past it)."""
    block = 256 if d <= 64 else 128 if d <= 128 else 64
    n_blocks = -(-sk // block)
    per = -(-n_blocks // num_splits) * block  # keys a split
    return [(min(s * per, sk), min((s + 1) * per, sk)) for s in range(num_splits)]


class Kernel:
    """The stand-in's state: the split counts it was asked for, and whether its merge weighs empty splits."""

    def __init__(self, empty_lse: float = -math.inf):
        self.calls: list[dict] = []
        self.empty_lse = empty_lse

    def one(self, q, k, v, window_size, scale, num_splits, causal=False):
        left, right = window_size
        right = 0 if causal else right
        return split_kv(q, k, v, left, right, scale, fa2_ranges(k.shape[0], q.shape[-1], max(num_splits, 1)), self.empty_lse)

    def with_kvcache(self, q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
                     window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, num_splits=0):  # fmt: skip
        assert block_table is None and softcap == 0.0, "the stand-in covers contiguous caches without softcap"
        self.calls.append(dict(num_splits=num_splits))
        got = [self.one(q[b], k_cache[b, :n], v_cache[b, :n], window_size, softmax_scale, num_splits) for b, n in enumerate(cache_seqlens)]
        out = torch.stack([o for o, _ in got]).to(q.dtype)  # (B, Sq, hq, d)
        return (out, torch.stack([lse for _, lse in got]).float()) if return_softmax_lse else out  # lse (B, hq, Sq)

    def varlen(self, q, k, v, cu_q, cu_k, softmax_scale, causal, window_size, num_splits, out=None):
        self.calls.append(dict(num_splits=num_splits))
        out = torch.empty_like(q) if out is None else out
        lse = torch.empty(q.shape[1], q.shape[0])  # (hq, total_q)
        for b in range(cu_q.numel() - 1):
            q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            o, lse[:, q0:q1] = self.one(q[q0:q1], k[k0:k1], v[k0:k1], tuple(window_size), softmax_scale, num_splits, causal)
            out[q0:q1] = o.to(out.dtype)
        return out, lse


def _cpu(cls):
    return type(f"Cpu{cls.__name__}", (cls,), {"device": "cpu", "unavailable_reason": lambda self: None})()


def _module(monkeypatch, name: str, **attrs) -> None:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)


def _fa2(monkeypatch, kernel: Kernel):
    _module(monkeypatch, "flash_attn", flash_attn_with_kvcache=kernel.with_kvcache)


def _fa3(monkeypatch, kernel: Kernel):
    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
               num_splits=1, return_attn_probs=False):  # fmt: skip
        out, lse = kernel.varlen(q, k, v, cu_q, cu_k, softmax_scale, causal, window_size, num_splits)
        return (out, lse) if return_attn_probs else out

    _module(monkeypatch, "flash_attn_interface", flash_attn_varlen_func=varlen)


def _vllm(monkeypatch, kernel: Kernel):
    def varlen(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, softmax_scale=None, causal=False,
               window_size=None, softcap=0.0, out=None, fa_version=2, return_softmax_lse=False, num_splits=0):  # fmt: skip
        assert fa_version == 3
        out, lse = kernel.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, num_splits, out)
        return (out, lse) if return_softmax_lse else out

    _module(monkeypatch, vllm_fa.INTERFACE, flash_attn_varlen_func=varlen)


VARIANTS = [
    ("fa2-kvcache-split2-cuda", flash_attn.Fa2KvcacheSplit2, _fa2, 2),
    ("fa2-kvcache-split4-cuda", flash_attn.Fa2KvcacheSplit4, _fa2, 4),
    ("fa2-kvcache-split128-cuda", flash_attn.Fa2KvcacheSplit128, _fa2, 128),
    ("fa3-split2-cuda", flash_attn.Fa3Split2, _fa3, 2),
    ("fa3-split4-cuda", flash_attn.Fa3Split4, _fa3, 4),
    ("fa3-split256-cuda", flash_attn.Fa3Split256, _fa3, 256),
    ("vllm-fa3-split2-cuda", vllm_fa.VllmFa3Split2, _vllm, 2),
    ("vllm-fa3-split4-cuda", vllm_fa.VllmFa3Split4, _vllm, 4),
    ("vllm-fa3-split256-cuda", vllm_fa.VllmFa3Split256, _vllm, 256),
]


@pytest.mark.parametrize("spec, cls, setup, n", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_a_split_variant_forces_its_count_and_passes_with_an_honest_merge(spec, cls, setup, n, monkeypatch):
    assert type(backends.get(spec)) is cls and backends.get(spec).device == "cuda"
    kernel = Kernel()
    setup(monkeypatch, kernel)
    be, case = _cpu(cls), NEW["float16"]
    assert be.unsupported_reason(case) is None and "float16/bfloat16" in (be.unsupported_reason(NEW["float32"]) or "float16/bfloat16")
    row = evaluate(be, case, probes=n > 4)  # the probes (reads, masks) with the most splits only: 5 s a row
    assert row["verdict"] == "pass", (row["reasons"], row["worst_where"], row["detail"])
    assert {c["num_splits"] for c in kernel.calls} == {n}
    assert f"num_splits={n}" in be.repro_call(case)


@pytest.mark.parametrize("spec, cls, setup, n", VARIANTS[2::3], ids=[v[0] for v in VARIANTS[2::3]])
def test_a_kernel_whose_merge_weighs_empty_splits_fails_the_new_rows(spec, cls, setup, n, monkeypatch):
    setup(monkeypatch, Kernel(empty_lse=0.0))
    row = evaluate(_cpu(cls), NEW["bfloat16"], probes=False)
    assert row["verdict"] == "fail" and "max_err" in row["reasons"], row["reasons"]


def test_the_base_backends_leave_the_split_count_to_the_library():
    def call(spec: str) -> str:  # the script's attention(), not the copied library call's signature
        return backends.get(spec).repro_call(NEW["bfloat16"]).split("def attention(")[1]

    assert "num_splits" not in call("fa3-cuda") + call("vllm-fa3-cuda") + call("fa2-kvcache-cuda")
    assert "split_pages" not in call("flashinfer-decode-cuda") and "num_splits=128" in call("fa2-kvcache-split128-cuda")


# -- FlashInfer: fixed_split_size on its tensor-core decode path ----------------------------------------------------


def test_decode_split_pages_cuts_the_windows_reach_into_the_splits_asked():
    # a 128-key window at pages of 16 reaches ceil((127 + 16) / 16) = 9 pages of a 4096-key cache
    assert [flashinfer.decode_split_pages((4096, 1500), 16, 127, n) for n in (2, 4, 0)] == [4, 2, 1]
    assert flashinfer.decode_split_pages((100,), 16, -1, 4) == 1  # no window: the 7 pages of the cache
    with pytest.raises(Unsupported, match="too few to cut into 4 splits"):
        flashinfer.decode_split_pages((40, 9), 16, -1, 4)
    with pytest.raises(Unsupported, match="too few to cut into 2 splits"):
        flashinfer.decode_split_pages((300,), 256, 10, 0)


class _Decode:
    """FlashInfer's decode wrapper: ``fixed_split_size`` taken only with ``use_tensor_cores`` (its own ValueError)."""

    kernel = Kernel()

    def __init__(self, workspace, layout, use_tensor_cores=False):
        self.tc = use_tensor_cores

    def plan(self, indptr, indices, last, hq, hkv, d, page_size, window_left=-1, logits_soft_cap=None, sm_scale=None,
             q_data_type=None, kv_data_type=None, fixed_split_size=None):  # fmt: skip
        if fixed_split_size is not None and not self.tc:
            raise ValueError("fixed_split_size is only supported by tensor core decode for now.")
        self.p = (indptr, indices, last, page_size, window_left, sm_scale, fixed_split_size)

    def run(self, q, kv, return_lse=False):
        indptr, indices, last, ps, wl, scale, fixed = self.p
        self.kernel.calls.append(dict(fixed_split_size=fixed))
        outs, lses = [], []
        for b in range(q.shape[0]):
            pages = indices[indptr[b] : indptr[b + 1]].long()
            n = (len(pages) - 1) * ps + int(last[b])
            kb, vb = (c[pages].flatten(0, 1)[:n] for c in kv)
            ranges = [(j0, min(n, j0 + fixed * ps)) for j0 in range(0, n, fixed * ps)]
            o, lse = split_kv(q[b : b + 1], kb, vb, wl, 0, scale, ranges, self.kernel.empty_lse)
            outs.append(o.to(q.dtype))
            lses.append(lse.transpose(0, 1) / math.log(2.0))  # (1, hq), log2
        out = torch.cat(outs)  # (B, hq, d)
        return (out, torch.cat(lses).float()) if return_lse else out


@pytest.mark.parametrize("cls, fixed", [(flashinfer.FlashInferDecodeSplit2, 4), (flashinfer.FlashInferDecodeSplitMax, 1)])
def test_flashinfer_split_variant_plans_a_fixed_split_size_on_tensor_cores(cls, fixed, monkeypatch):
    _Decode.kernel = Kernel()
    _module(monkeypatch, "flashinfer", BatchDecodeWithPagedKVCacheWrapper=_Decode)
    be, case = _cpu(cls), NEW["bfloat16"]
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["worst_where"], row["detail"])
    # a 256-key window at the default pages of 16: 17 pages planned -> 8 pages a split (3 splits), or 1 (a split a page)
    assert {c["fixed_split_size"] for c in _Decode.kernel.calls} == {8 if fixed == 4 else 1}
    assert "split_pages=" in be.repro_call(case)
    _Decode.kernel.empty_lse = 0.0  # the stand-in splits the whole cache: a merge that weighs its empty splits fails
    assert evaluate(be, case, probes=False)["verdict"] == "fail"


def test_flashinfer_without_fixed_split_size_is_unsupported_with_the_reason(monkeypatch):
    class Old(_Decode):
        def plan(self, indptr, indices, last, hq, hkv, d, page_size, window_left=-1, logits_soft_cap=None, sm_scale=None,
                 q_data_type=None, kv_data_type=None):  # fmt: skip
            raise AssertionError("not called")

    _module(monkeypatch, "flashinfer", BatchDecodeWithPagedKVCacheWrapper=Old, __version__="0.2.0")
    row = evaluate(_cpu(flashinfer.FlashInferDecodeSplit4), NEW["float16"])
    assert row["verdict"] == "unsupported" and "takes no fixed_split_size" in row["detail"]


def test_flashinfer_split_variants_refuse_caches_too_short_to_split_and_have_compile_keys():
    be = backends.get("flashinfer-decode-split4-cuda")
    short = Case((1, 1), (40, 9), 4, 2, 64, "bfloat16", Window(None, 0))
    assert "too few to cut into 4 splits" in be.unsupported_reason(short)
    keys = {backends.get(f"flashinfer-decode-split{n}-cuda").compile_key(NEW["float16"]) for n in ("2", "4", "max")}
    assert len(keys) == 1 and next(iter(keys))[0] == "tensor-cores"
    assert backends.get("flashinfer-decode-cuda").compile_key(NEW["float16"]) not in keys


def test_a_forced_split_count_is_in_the_memory_estimate():
    """FA2 / FA3 allocate float32 accumulators per split: 256 splits of a 16k-query prefill are 32 GiB, which the
    memory gate must hold for (the base backends' estimates have none)."""
    prefill = Case((16384,), (16384,), 16, 2, 128, "bfloat16", Window(4095, 0))
    for base, split, n in (("fa3-cuda", "fa3-split256-cuda", 256), ("vllm-fa3-cuda", "vllm-fa3-split256-cuda", 256),
                           ("fa2-kvcache-cuda", "fa2-kvcache-split128-cuda", 128)):  # fmt: skip
        extra = backends.get(split).workspace_bytes(prefill) - backends.get(base).workspace_bytes(prefill)
        assert extra == flash_attn.split_accum_bytes(prefill, n) >= 4 * n * 16384 * 16 * 128


@pytest.mark.parametrize("spec", ["fa2-kvcache-split4-cuda", "fa3-split256-cuda", "vllm-fa3-split2-cuda"])
def test_split_variants_take_decode_shaped_cases_only_and_say_why(spec):
    """A split-KV variant refuses a prefill case with the reason (its base backend's rows cover prefill: a variant per
    split count over every prefill case would multiply a GPU sweep for nothing new); a decode row is not refused for its shape."""
    be = backends.get(spec)
    prefill = Case((17, 40), (64, 40), 4, 2, 64, "float16", Window(31, 0))
    reason = be.unsupported_reason(prefill) or ""
    assert reason.startswith("split-KV variants run decode-shaped cases only") and "has 40" in reason, reason
    decode = NEW["float16"]
    assert "decode-shaped" not in (be.unsupported_reason(decode) or ""), be.unsupported_reason(decode)
