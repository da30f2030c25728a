"""FlashInfer's batch wrappers (``flashinfer-paged-cuda``, ``flashinfer-decode-cuda``) on the CPU.

* the CSR page table (:func:`flashinfer_paged_args`) reads back the harness's keys;
* the decode translation (``window_left`` only) against FlashInfer's documented decode rule;
* the nvcc / jit-cache availability check, with the environment stood in for;
* end to end through :func:`parity.api.evaluate` with ``flashinfer`` stood in for by a module
  whose wrappers follow FlashInfer's documented semantics (NHD paged cache in CSR form; keys
  ``j <= i + Sk - Sq`` when causal, ``j >= i + Sk - Sq - window_left`` when ``window_left >= 0``).
"""

from __future__ import annotations

import itertools
import math
import sys
import types

import pytest
import torch

from parity import Case, Window, backends
from parity.api import evaluate
from parity.backends import flashinfer as fi
from parity.backends.base import Unsupported
from parity.case import make_inputs


def test_csr_page_table_reads_back_the_keys():
    case = Case((3, 1, 5), (70, 33, 16), 4, 2, 8, "float32", Window(7, 0), page_size=16, seed=3)
    inputs = make_inputs(case)
    paged = inputs.paged()
    indptr, indices, last = fi.flashinfer_paged_args(paged)
    assert indptr.tolist() == [0, 5, 8, 9] and indices.numel() == 9
    assert last.tolist() == [6, 1, 16]
    for b in range(case.batch):
        pages = indices[indptr[b] : indptr[b + 1]].long()
        n = (len(pages) - 1) * 16 + int(last[b])
        got = paged.k_cache[pages].flatten(0, 1)[:n]
        ck = inputs.cu_seqlens_k
        assert torch.equal(got, inputs.k[ck[b] : ck[b + 1]])


def test_decode_translation_matches_flashinfers_decode_rule():
    sides = [None, 0, 1, 3, 8, 31]
    checked = 0
    for left, right, align in itertools.product(sides, sides, ("bottom_right", "top_left")):
        w = Window(left, right, align)
        for sk in (1, 2, 9, 40):
            try:
                wl = fi.flashinfer_decode_window(w, 1, sk)
            except Unsupported:
                assert align == "top_left" and sk != 1
                continue
            j = torch.arange(sk)[None, :]
            want = (j <= sk - 1) & ((j >= sk - 1 - wl) if wl >= 0 else True)
            assert torch.equal(want, w.mask(1, sk)), (w, sk, wl)
            checked += 1
    assert checked > 100
    with pytest.raises(Unsupported):
        fi.flashinfer_decode_window(Window(3, 0), 2, 9)


def test_causal_with_more_queries_than_keys_is_refused_up_front():
    """FlashInfer raises "When mask_mode is set to MaskMode::kCausal, kv_len must be greater than or
    equal to qo_len" (H200, 2026-12-04: 4 rows of flashinfer-cuda errored so): a refusal, checked
    before the call."""
    assert fi.flashinfer_window(Window(None, 0), 24, 24) == (True, -1)
    assert fi.flashinfer_window(Window(8, 0), 24, 40) == (True, 8)
    for w in (Window(None, 0), Window(8, 0)):
        with pytest.raises(Unsupported, match="Sk >= Sq"):
            fi.flashinfer_window(w, 40, 24)
    assert fi.flashinfer_window(Window(None, None), 40, 24) == (False, -1)  # no causal mask: no check


def flashinfer_mask(causal: bool, window_left: int, sq: int, sk: int) -> torch.Tensor:
    """FlashInfer's own predicates, (Sq, Sk) bool: the causal mask masks ``kv_idx + qo_len >
    kv_len + qo_idx`` (prefill.cuh), the sliding window keeps ``kv_idx + qo_len + window_left >=
    kv_len + qo_idx`` (variants.cuh; ``window_left < 0``: none), each on its own."""
    i = torch.arange(sq)[:, None]  # (Sq, 1)
    j = torch.arange(sk)[None, :]  # (1, Sk)
    keep = torch.ones(sq, sk, dtype=torch.bool)  # (Sq, Sk)
    if causal:
        keep &= j + sq <= sk + i
    if window_left >= 0:
        keep &= j + sq + window_left >= sk + i
    return keep


def test_left_window_without_causal_covers_right_sides_that_reach_the_last_key():
    """``(L, None)`` and ``(L, R)`` with ``R >= Sq - 1`` are ``causal=False, window_left=L``: the
    sliding window applies without the causal mask. Checked against FlashInfer's predicates on every
    accepted (window, Sq, Sk); 0 < R < Sq - 1 stays refused."""
    assert fi.flashinfer_window(Window(5, None), 24, 40) == (False, 5)
    assert fi.flashinfer_window(Window(5, 23), 24, 40) == (False, 5)
    assert fi.flashinfer_window(Window(None, 30), 24, 24) == (False, -1)
    assert fi.flashinfer_window(Window(5, None), 40, 24) == (False, 5)  # no causal mask: Sq > Sk is fine
    with pytest.raises(Unsupported, match="left window only"):
        fi.flashinfer_window(Window(5, 22), 24, 40)
    sides = [None, 0, 1, 3, 7, 15, 23, 40]
    checked = 0
    for left, right, (sq, sk) in itertools.product(sides, sides, [(1, 9), (8, 8), (8, 30), (24, 40), (30, 8)]):
        w = Window(left, right)
        try:
            causal, wl = fi.flashinfer_window(w, sq, sk)
        except Unsupported:
            continue
        assert torch.equal(flashinfer_mask(causal, wl, sq, sk), w.mask(sq, sk)), (w, sq, sk, causal, wl)
        checked += 1
    assert checked > 150, checked


def test_jit_reason_follows_flashinfers_nvcc_search(tmp_path, monkeypatch):
    monkeypatch.setattr(fi.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", None)  # no flashinfer here: only nvcc counts
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    why = fi.flashinfer_jit_reason()
    assert why is not None and "nvcc" in why and str(tmp_path) in why
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    assert fi.flashinfer_jit_reason() is None
    monkeypatch.setattr(fi.importlib.util, "find_spec", lambda name: object() if name == "flashinfer_jit_cache" else None)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nothing"))
    assert fi.flashinfer_jit_reason() is None


# -- the wrappers, stood in for --------------------------------------------------------------------


def _attend(q, kb, vb, causal, window_left, scale, softcap, lse=False):
    """The output ``(Sq, hq, d)``; with ``lse`` also FlashInfer's LSE ``(Sq, hq)``: base 2, as its kernels return it."""
    sq, sk = q.shape[0], kb.shape[0]
    i, j, d = torch.arange(sq)[:, None], torch.arange(sk)[None, :], sk - sq
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        ok &= j <= i + d
    if window_left >= 0:
        ok &= j >= i + d - window_left
    seen = ok.any(0)[:, None, None]  # (Sk, 1, 1): a windowed kernel loads only keys some row sees (the read probe)
    kb, vb = torch.where(seen, kb, 0), torch.where(seen, vb, 0)  # (Sk, hkv, d) each
    g = q.shape[1] // kb.shape[1]
    kx, vx = kb.double().repeat_interleave(g, 1), vb.double().repeat_interleave(g, 1)
    s = torch.einsum("qhd,khd->hqk", q.double(), kx) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    p = torch.softmax(s.masked_fill(~ok, float("-inf")), -1).nan_to_num(0.0)
    o = torch.einsum("hqk,khd->qhd", p, vx)
    if lse:
        return o, (torch.logsumexp(s.masked_fill(~ok, float("-inf")), -1) / math.log(2.0)).transpose(0, 1).float()
    return o


def _gather(cache, indptr, indices, last, b):
    pages = indices[indptr[b] : indptr[b + 1]].long()
    return cache[pages].flatten(0, 1)[: (len(pages) - 1) * cache.shape[1] + int(last[b])]


class _Prefill:
    def __init__(self, workspace, layout):
        assert layout == "NHD" and workspace.dtype == torch.uint8

    def plan(
        self,
        qo_indptr,
        indptr,
        indices,
        last,
        hq,
        hkv,
        d,
        page_size,
        causal=False,
        sm_scale=None,
        window_left=-1,
        logits_soft_cap=None,
        q_data_type=None,
        kv_data_type=None,
    ):
        self.p = (qo_indptr, indptr, indices, last, causal, sm_scale, window_left, logits_soft_cap or 0.0)

    def run(self, q, kv, out=None, return_lse=False):
        qo, indptr, indices, last, causal, scale, wl, cap = self.p
        out = torch.empty_like(q) if out is None else out
        lse = torch.empty(q.shape[:2])  # (total_q, hq), log2
        for b in range(qo.numel() - 1):
            kb, vb = (_gather(c, indptr, indices, last, b) for c in kv)
            o, lse[qo[b] : qo[b + 1]] = _attend(q[qo[b] : qo[b + 1]], kb, vb, causal, wl, scale, cap, lse=True)
            out[qo[b] : qo[b + 1]] = o.to(q.dtype)
        return (out, lse) if return_lse else out


class _Decode(_Prefill):
    def plan(
        self,
        indptr,
        indices,
        last,
        hq,
        hkv,
        d,
        page_size,
        window_left=-1,
        logits_soft_cap=None,
        sm_scale=None,
        q_data_type=None,
        kv_data_type=None,
    ):
        self.p = (indptr, indices, last, sm_scale, window_left, logits_soft_cap or 0.0)

    def run(self, q, kv, return_lse=False):
        indptr, indices, last, scale, wl, cap = self.p
        got = [
            _attend(q[b : b + 1], *(_gather(c, indptr, indices, last, b) for c in kv), True, wl, scale, cap, lse=True)
            for b in range(q.shape[0])
        ]
        out = torch.cat([o for o, _ in got]).to(q.dtype)  # (B, hq, d)
        return (out, torch.cat([lse for _, lse in got])) if return_lse else out


def _cpu(cls, monkeypatch):
    mod = types.ModuleType("flashinfer")
    mod.BatchPrefillWithPagedKVCacheWrapper = _Prefill  # type: ignore[attr-defined]
    mod.BatchDecodeWithPagedKVCacheWrapper = _Decode  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    return type(f"Cpu{cls.__name__}", (cls,), {"device": "cpu", "unavailable_reason": lambda self: None})()


PREFILL = [
    Case((20, 3), (20, 40), 4, 2, 32, "bfloat16", Window(7, 0), seed=1),  # no page size: paged at DEFAULT_PAGE
    Case((5, 9), (70, 9), 4, 1, 32, "float16", Window(None, 0), page_size=32, seed=3),
    Case((16,), (16,), 2, 2, 32, "bfloat16", Window(None, None), softcap=20.0, page_size=8, seed=5),
]
DECODE = [
    Case((1, 1), (100, 37), 8, 2, 32, "bfloat16", Window.tokens(16), page_size=16, seed=2),
    Case((1, 1, 1), (5, 64, 1), 4, 4, 32, "float16", Window(None, 0), seed=4),
    Case((1,), (40,), 4, 2, 32, "bfloat16", Window(3, 5), softcap=10.0, page_size=16, seed=6),  # any right side is exact
]


@pytest.mark.parametrize("case", PREFILL, ids=["varlen-default-page", "causal-paged", "full-softcap"])
def test_paged_prefill_call_passes(case, monkeypatch):
    be = _cpu(fi.FlashInferPagedBackend, monkeypatch)
    assert be.unsupported_reason(case) is None
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["mask_detail"], row["detail"])


@pytest.mark.parametrize("case", DECODE, ids=["window", "causal-no-page-size", "two-sided"])
def test_batch_decode_call_passes(case, monkeypatch):
    be = _cpu(fi.FlashInferDecodeBackend, monkeypatch)
    assert be.unsupported_reason(case) is None
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["mask_detail"], row["detail"])


def test_decode_refuses_prefill_and_float32():
    be = backends.get("flashinfer-decode-cuda")
    assert "one query per sequence" in be.unsupported_reason(Case((2,), (9,), 2, 2, 32, "bfloat16", Window(3, 0)))
    assert "float16/bfloat16" in be.unsupported_reason(Case((1,), (9,), 2, 2, 32, "float32", Window(3, 0)))
    assert backends.get("flashinfer-paged-cuda").supports_paged


def test_sinks_with_fp8_kv_are_refused_not_run_unscaled():
    """The AttentionSink wrapper is called without ``k_scale`` / ``v_scale``: an fp8 cache with sinks would run with
    its descales dropped (a harness bug reported as FlashInfer's), so it is refused; sinks alone and fp8 alone are not."""
    paged = fi.FlashInferPagedBackend()
    base = Case((1,), (40,), 4, 2, 64, "bfloat16", Window(8, 0), page_size=16, seed=7)
    both = Case((1,), (40,), 4, 2, 64, "bfloat16", Window(8, 0), page_size=16, seed=7, sinks=True, kv_dtype="float8_e4m3fn")
    assert "k_scale" in (paged.unsupported_reason(both) or "")
    for one in (Case(**{**base.__dict__, "sinks": True}), Case(**{**base.__dict__, "kv_dtype": "float8_e4m3fn"})):
        assert "k_scale" not in (paged.unsupported_reason(one) or "")
