"""fp8 KV caches (``Case.kv_dtype``, ``Case.q_fp8``): the case, its quantized inputs, the reference and
baseline on the dequantized values, the backends' fp8 calls (stood in for on the CPU), the self-test's
fp8 emulation and planted bug, and the coverage / strategy terms."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest
import torch

from parity import Case, Window, backends, make_inputs
from parity.api import evaluate
from parity.backends import flashinfer as fi
from parity.backends import vllm_fa
from parity.backends.base import fp8_reason
from parity.coverage import case_cells, matches
from parity.judge import compute_baseline
from parity.reference import attention_reference, round_p_fp8
from parity.selftest.bugs import EagerAttention, Fp8DescaleTwice
from parity.selftest.honest import Fp8TensorCores, LowPrecisionP
from parity.window import SpecError
from tests.test_flashinfer_paged import _attend, _Decode, _gather, _Prefill

E4M3 = "float8_e4m3fn"
FP8 = dict(kv_dtype=E4M3)
CHUNK = Case((16, 40), (200, 40), 4, 1, 64, "bfloat16", Window(31, 0), seed=7, **FP8)
DECODE = Case((1, 1, 1), (300, 77, 129), 8, 2, 128, "bfloat16", Window.tokens(64), page_size=16, seed=8, **FP8)
QKV = dataclasses.replace(CHUNK, q_fp8=True, seed=9)
GQA = Case((64,), (64,), 8, 4, 64, "bfloat16", Window(15, 0), seed=11, kv_dtype=E4M3, q_fp8=True)  # kv heads 1..4 in the GQA probe
CASES = [CHUNK, DECODE, QKV, dataclasses.replace(DECODE, q_fp8=True, dtype="float16", softcap=30.0, seed=10), GQA]


# -- the case -----------------------------------------------------------------------------------------


def test_fields_default_off_and_keep_ids_and_json():
    plain = Case((5,), (9,), 4, 2, 32)
    assert plain.kv_dtype is None and plain.q_fp8 is False
    assert "kv_dtype" not in plain.to_dict() and "q_fp8" not in plain.to_dict()
    assert plain.case_id == Case.from_json(plain.to_json()).case_id
    fp8 = dataclasses.replace(plain, kv_dtype=E4M3, q_fp8=True)
    assert fp8.to_dict()["kv_dtype"] == E4M3 and fp8.to_dict()["q_fp8"] is True
    assert Case.from_json(fp8.to_json()) == fp8 and fp8.case_id != plain.case_id
    assert "q+kv=fp8-e4m3fn" in fp8.summary() and "kv=fp8-e4m3fn" in dataclasses.replace(fp8, q_fp8=False).summary()
    assert E4M3 in fp8.repro("reference")


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(kv_dtype="float8_e4m3fnuz"), "one of float8_e4m3fn, float8_e5m2"),
        (dict(kv_dtype="int8"), "one of float8_e4m3fn"),
        (dict(kv_dtype=E4M3, dtype="float32"), "float16 or bfloat16"),
        (dict(q_fp8=True), "needs Case.kv_dtype"),
        (dict(kv_dtype=E4M3, q_fp8=1), "true or false"),
    ],
)
def test_bad_fp8_fields_say_what_is_allowed(kw, words):
    with pytest.raises(SpecError, match=words):
        Case((5,), (9,), 4, 2, 32, **kw)


def test_inputs_are_quantized_per_tensor_after_the_same_draw():
    plain = make_inputs(dataclasses.replace(QKV, kv_dtype=None, q_fp8=False))
    inputs = make_inputs(QKV)
    for name in "qkv":
        x8, d, x = getattr(inputs, name), getattr(inputs, f"{name}_descale"), getattr(plain, name)
        assert x8.dtype == torch.float8_e4m3fn and d.dtype == torch.float32 and d.shape == ()
        assert math.isclose(float(d), float(x.float().abs().max()) / 448.0, rel_tol=1e-6)  # amax / 448
        deq = x8.double() * float(d)
        assert float((deq - x.double()).abs().max()) <= float(d) * 16 + 1e-12  # e4m3 rounding: half an ulp at 448 is 16
        assert float(deq.abs().max()) > 0.99 * float(x.double().abs().max())  # amax maps onto the top of the range
    kv_only = make_inputs(CHUNK)
    assert kv_only.q.dtype == torch.bfloat16 and kv_only.q_descale is None
    assert torch.equal(kv_only.q, make_inputs(dataclasses.replace(CHUNK, kv_dtype=None)).q)  # q drawn as before


def test_inputs_move_and_page_with_their_descales():
    inputs = make_inputs(DECODE)
    moved = inputs.to("cpu")
    assert moved.k_descale is not None and float(moved.v_descale) == float(inputs.v_descale)
    paged = inputs.paged()
    assert paged.k_cache.dtype == torch.float8_e4m3fn
    k, v = paged.gather()
    assert torch.equal(k.float(), inputs.k.float()) and torch.equal(v.float(), inputs.v.float())


@pytest.mark.parametrize("kv_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_paged_gather_of_one_element_pages(kv_dtype):
    """Pages of one element (page 1, one kv head, d 1): a bool mask over them was masked_fill, which fp8
    lacks on the CPU, so the reference backend's row of such a case was an error."""
    case = Case(q_lens=(1,), k_lens=(1,), hq=1, hkv=1, head_dim=1, dtype="float16", page_size=1, kv_dtype=kv_dtype)
    inputs = make_inputs(case)
    k, v = inputs.paged().gather([torch.ones(1, dtype=torch.bool)])  # (1, 1, 1) each
    assert torch.equal(k.float(), inputs.k.float()) and torch.equal(v.float(), inputs.v.float())


# -- reference and baseline -------------------------------------------------------------------------


def test_reference_sees_the_dequantized_values_exactly():
    inputs = make_inputs(QKV)
    deq = inputs.dequantized(torch.float64)
    assert deq.k_descale is None and torch.equal(deq.k, inputs.k.double() * float(inputs.k_descale))
    ref = attention_reference(inputs)  # (total_q, hq, d)
    assert torch.equal(ref, attention_reference(deq))


def test_the_baseline_rounds_p_to_e4m3_times_256():
    p = torch.tensor([1.0, 0.3, 1e-3, 2.0**-14, 1e-6], dtype=torch.float64)
    r = round_p_fp8(p, E4M3)
    assert float(r[0]) == 1.0 and float(r[4]) == 0.0  # 1e-6 * 256 underflows e4m3
    assert float(((r[:4] - p[:4]) / p[:4]).abs().max()) <= 2.0**-4  # normal fp8 numbers: 3 mantissa bits
    inputs = make_inputs(CHUNK)
    with_p8 = attention_reference(inputs, torch.bfloat16)
    without = attention_reference(
        dataclasses.replace(inputs.dequantized(torch.bfloat16), case=dataclasses.replace(CHUNK, kv_dtype=None)), torch.bfloat16
    )
    ref = attention_reference(inputs)
    assert float((with_p8.double() - ref).abs().max()) > 2 * float((without.double() - ref).abs().max())
    base = compute_baseline(CHUNK, "cpu")
    assert math.isclose(base.baseline_max, float((with_p8.double() - ref).abs().max()))


# -- which backends take fp8 ---------------------------------------------------------------------------


def test_backends_without_an_fp8_path_are_unsupported_with_the_reason():
    for spec in ("sdpa", "flex"):
        be = backends.get(spec)
        row = evaluate(be, CHUNK)
        assert row["verdict"] == "unsupported" and "no fp8 KV path" in row["detail"] and E4M3 in row["detail"], row["detail"]
    assert "no fp8 query" in fp8_reason(type("K", (), {"kv_dtypes": (E4M3,)})(), QKV)
    assert fp8_reason(backends.get("reference"), QKV) is None
    fa4 = backends.get("fa4-cuda")
    assert "no fp8 KV path" in fp8_reason(fa4, CHUNK)
    assert fp8_reason(backends.get("vllm-fa2-cuda"), QKV) is not None


def test_vllm_fa3_wants_an_fp8_query_and_bfloat16():
    fa3 = vllm_fa.VllmFa3Backend()
    assert "needs q_fp8" in fa3.unsupported_reason(CHUNK)
    assert fa3.unsupported_reason(QKV) is None and fp8_reason(fa3, QKV) is None
    assert "BF16" in fa3.unsupported_reason(dataclasses.replace(QKV, dtype="float16"))
    assert fp8_reason(fi.FlashInferBackend(), QKV) and fp8_reason(fi.FlashInferBackend(), CHUNK) is None


# -- the self-test's fp8 emulation and planted bug ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=["chunk", "paged-decode", "qkv", "qkv-fp16-softcap", "gqa"])
def test_honest_fp8_kernels_pass_and_the_descale_twice_bug_fails(case):
    for honest in (Fp8TensorCores(), EagerAttention(), LowPrecisionP()):
        row = evaluate(honest, case)
        assert row["verdict"] == "pass", (honest.name, row["reasons"], row["worst_where"], row["gqa_detail"], row["mask_detail"])
        assert row["mask_check"] == "ok" and row["gqa_check"] in ("ok", "n/a"), (row["mask_detail"], row["gqa_detail"])
    row = evaluate(Fp8DescaleTwice(), case)
    assert row["verdict"] == "fail" and "max_err" in row["reasons"].split(), row
    assert Fp8TensorCores().unsupported_reason(dataclasses.replace(case, kv_dtype=None, q_fp8=False)) is not None


def test_a_kernel_that_ignores_the_descales_fails():
    class NoDescale(Fp8TensorCores):
        def run(self, case, inputs, out):
            return super().run(case, dataclasses.replace(inputs, q_descale=None, k_descale=None, v_descale=None), out)

    assert evaluate(NoDescale(), QKV)["verdict"] == "fail"


# -- vLLM FA3 and FlashInfer, their fp8 calls stood in for -------------------------------------------------


class Fa3Fp8:
    """FA3's fp8 ``flash_attn_varlen_func``: fp8 q / k / v, ``(B, hkv)`` float32 descales, bfloat16 out."""

    def __init__(self, use_v_descale: bool = True):
        self.use_v_descale = use_v_descale
        self.shapes: list[tuple] = []

    def __call__(self, q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None, softmax_scale=None,
                 causal=False, window_size=None, softcap=0.0, block_table=None, out=None, fa_version=2, q_descale=None,
                 k_descale=None, v_descale=None, return_softmax_lse=False):  # fmt: skip
        assert fa_version == 3 and q.dtype == k.dtype == v.dtype == torch.float8_e4m3fn and out.dtype == torch.bfloat16
        b, hkv = cu_seqlens_q.numel() - 1, k.shape[-2]
        for d in (q_descale, k_descale, v_descale):
            assert d.shape == (b, hkv) and d.dtype == torch.float32
            self.shapes.append(tuple(d.shape))
        g = q.shape[1] // hkv
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)  # (hq, total_q)
        qd = q.double() * q_descale[0].double().repeat_interleave(g)[None, :, None]  # (total_q, hq, d)
        kd, vd = k.double() * k_descale[0, 0].double(), v.double() * (v_descale[0, 0].double() if self.use_v_descale else 1.0)
        for i in range(b):
            q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
            if block_table is not None:
                sk = int(seqused_k[i])
                pages = block_table[i, : -(-sk // k.shape[1])].long()
                kb, vb = kd[pages].flatten(0, 1)[:sk], vd[pages].flatten(0, 1)[:sk]
            else:
                kb, vb = kd[int(cu_seqlens_k[i]) : int(cu_seqlens_k[i + 1])], vd[int(cu_seqlens_k[i]) : int(cu_seqlens_k[i + 1])]
            left, right = window_size
            o, seq_lse = _attend(qd[q0:q1], kb, vb, causal or right == 0, left, softmax_scale, softcap, lse=True)
            out[q0:q1] = o.to(out.dtype)
            lse[:, q0:q1] = seq_lse.transpose(0, 1) * math.log(2.0)  # (hq, Sq): natural log, vLLM's varlen layout
        return (out, lse) if return_softmax_lse else out


def _fa3(monkeypatch, fn):
    iface = type(sys)("vllm_fa_stand_in")
    iface.flash_attn_varlen_func = fn
    monkeypatch.setitem(sys.modules, vllm_fa.INTERFACE, iface)
    return type("CpuFa3", (vllm_fa.VllmFa3Backend,), {"device": "cpu", "unavailable_reason": lambda self: None})()


@pytest.mark.parametrize("case", [QKV, dataclasses.replace(DECODE, q_fp8=True)], ids=["varlen", "paged-decode"])
def test_vllm_fa3_passes_fp8_inputs_and_b_by_hkv_descales(case, monkeypatch):
    fn = Fa3Fp8()
    row = evaluate(_fa3(monkeypatch, fn), case)
    assert row["verdict"] == "pass", (row["reasons"], row["worst_where"], row["detail"])
    assert fn.shapes[0] == (case.batch, case.hkv)
    row = evaluate(_fa3(monkeypatch, Fa3Fp8(use_v_descale=False)), case)
    assert row["verdict"] == "fail"  # the stand-in can fail: the descales reach the verdict


class _Fp8Prefill(_Prefill):
    """FlashInfer's paged prefill with an fp8 cache: ``k_scale`` folded into ``sm_scale``, ``out *= v_scale``."""

    def plan(self, *a, q_data_type=None, kv_data_type=None, **kw):
        assert kv_data_type == torch.float8_e4m3fn and q_data_type in (torch.float16, torch.bfloat16)
        super().plan(*a, **kw)

    def run(self, q, kv, out=None, k_scale=None, v_scale=None, return_lse=False):
        assert isinstance(k_scale, float) and isinstance(v_scale, float)
        qo, indptr, indices, last, causal, scale, wl, cap = self.p
        out = torch.empty_like(q) if out is None else out
        lse = torch.empty(q.shape[:2])  # (total_q, hq), log2
        for b in range(qo.numel() - 1):
            kb, vb = (_gather(c, indptr, indices, last, b).float() for c in kv)
            o, lse[qo[b] : qo[b + 1]] = _attend(q[qo[b] : qo[b + 1]], kb, vb, causal, wl, scale * k_scale, cap, lse=True)
            out[qo[b] : qo[b + 1]] = o.to(q.dtype)
        out *= v_scale
        return (out, lse) if return_lse else out


class _Fp8Decode(_Decode):
    def run(self, q, kv, k_scale=None, v_scale=None, return_lse=False):
        indptr, indices, last, scale, wl, cap = self.p
        got = [
            _attend(q[b : b + 1], *(_gather(c, indptr, indices, last, b).float() for c in kv), True, wl, scale * k_scale, cap, lse=True)
            for b in range(q.shape[0])
        ]
        out = (torch.cat([o for o, _ in got]) * v_scale).to(q.dtype)  # (B, hq, d)
        return (out, torch.cat([lse for _, lse in got])) if return_lse else out


def _fi(cls, monkeypatch):
    mod = type(sys)("flashinfer")
    mod.BatchPrefillWithPagedKVCacheWrapper = _Fp8Prefill  # type: ignore[attr-defined]
    mod.BatchDecodeWithPagedKVCacheWrapper = _Fp8Decode  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    return type(f"Cpu{cls.__name__}", (cls,), {"device": "cpu", "unavailable_reason": lambda self: None})()


@pytest.mark.parametrize(
    "cls, case", [(fi.FlashInferPagedBackend, CHUNK), (fi.FlashInferDecodeBackend, DECODE)], ids=["paged-prefill", "decode"]
)
def test_flashinfer_passes_k_scale_and_v_scale(cls, case, monkeypatch):
    be = _fi(cls, monkeypatch)
    assert be.unsupported_reason(case) is None and fp8_reason(be, case) is None
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["worst_where"], row["detail"])


# -- coverage and strategies -----------------------------------------------------------------------------------


def test_coverage_dimension_and_conditions_name_fp8():
    assert case_cells(dataclasses.replace(CHUNK, kv_dtype=None))["fp8"] == {"no"}
    assert case_cells(CHUNK)["fp8"] == {"kv"} and case_cells(QKV)["fp8"] == {"qkv"}
    assert matches(QKV, {"fp8": "qkv"}) and not matches(CHUNK, {"fp8": ["qkv", "no"]})


def test_every_profile_holds_fp8_cases_after_the_others():
    from parity.strategies import PROFILES, generate

    cases = generate(PROFILES["quick"], 0)
    kinds = [case_cells(c)["fp8"] for c in cases]
    first = next(n for n, k in enumerate(kinds) if k != {"no"})
    assert all(k == {"no"} for k in kinds[:first]) and all(k != {"no"} for k in kinds[first:])  # appended
    assert {"kv"} in kinds and {"qkv"} in kinds
    fa3, decode = vllm_fa.VllmFa3Backend(), fi.FlashInferDecodeBackend()
    assert any(fa3.unsupported_reason(c) is None for c in cases[first:])
    assert any(decode.unsupported_reason(c) is None and fp8_reason(decode, c) is None for c in cases[first:])


class Fa3Interface:
    """``flash_attn_interface`` (FA3, Hopper) with fp8 inputs: ``flash_attn_func`` / ``flash_attn_varlen_func``
    taking ``(B, hkv)`` descales, returning bfloat16."""

    def __init__(self):
        self.descale_shapes: list[tuple] = []

    def _one(self, q, k, v, scale, window_size, softcap, q_descale, k_descale, v_descale):
        """-> bfloat16 ``(Sq, hq, d)`` and the natural-log LSE ``(hq, Sq)``."""
        assert q.dtype == k.dtype == v.dtype == torch.float8_e4m3fn
        self.descale_shapes.append(tuple(q_descale.shape))
        g = q.shape[1] // k.shape[1]
        qd = q.double() * q_descale[0].double().repeat_interleave(g)[None, :, None]
        kd, vd = k.double() * float(k_descale[0, 0]), v.double() * float(v_descale[0, 0])
        left, right = window_size
        o, lse = _attend(qd, kd, vd, right == 0, left, scale, softcap, lse=True)  # FA3's (L, 0) is bottom-right causal
        if right > 0 or (right < 0 and left >= 0):
            raise AssertionError(f"stand-in covers (L, 0) and (-1, 0) windows only, got {window_size}")
        return o.to(torch.bfloat16), (lse * math.log(2.0)).transpose(0, 1)

    def flash_attn_func(self, q, k, v, softmax_scale=None, causal=False, window_size=None, softcap=0.0, return_attn_probs=False, **d):
        got = [self._one(q[b], k[b], v[b], softmax_scale, window_size, softcap, **d) for b in range(q.shape[0])]
        out = torch.stack([o for o, _ in got])  # (B, Sq, hq, d)
        return (out, torch.stack([lse for _, lse in got])) if return_attn_probs else out  # lse (B, hq, Sq)

    def flash_attn_varlen_func(self, q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=None, causal=False, window_size=None,
                               softcap=0.0, return_attn_probs=False, **d):  # fmt: skip
        got = [
            self._one(
                q[cu_q[b] : cu_q[b + 1]], k[cu_k[b] : cu_k[b + 1]], v[cu_k[b] : cu_k[b + 1]], softmax_scale, window_size, softcap, **d
            )
            for b in range(cu_q.numel() - 1)
        ]
        return torch.cat([o for o, _ in got]), torch.cat([lse for _, lse in got], dim=1)  # (total_q, hq, d), (hq, total_q)


@pytest.mark.parametrize("case", [QKV, GQA], ids=["varlen", "dense-gqa"])
def test_fa3_interface_passes_fp8_inputs_with_descales(case, monkeypatch):
    from parity.backends.flash_attn import FlashAttn3Backend

    iface = Fa3Interface()
    mod = type(sys)("flash_attn_interface")
    mod.flash_attn_func, mod.flash_attn_varlen_func = iface.flash_attn_func, iface.flash_attn_varlen_func  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn_interface", mod)
    be = type("CpuFa3", (FlashAttn3Backend,), {"device": "cpu", "unavailable_reason": lambda self: None})()
    assert "needs q_fp8" in be.unsupported_reason(CHUNK) and fp8_reason(be, case) is None
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["worst_where"], row["detail"])
    assert iface.descale_shapes[0] == (case.batch, case.hkv)


def test_a_refused_fp8_case_gets_the_sibling_fa3_takes():
    from parity.design import siblings

    fp16 = dataclasses.replace(CHUNK, dtype="float16")
    sib = siblings(fp16, vllm_fa.VllmFa3Backend(), [fp16])
    assert sib is not None and sib.q_fp8 and sib.dtype == "bfloat16" and sib.kv_dtype == E4M3
    assert siblings(fp16, backends.get("sdpa"), [fp16]) is None  # no fp8 path: no sibling drops the fp8 KV
