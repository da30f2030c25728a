"""fp8 descales as engines pass them (issue 49 item 3): per kv head and per (sequence, kv head)
(``Case.fp8_scales``), different by construction; e5m2 caches where a library takes them; the backends'
translation to their native descales (stood in for on the CPU) or their refusal with the reason; the
planted bugs of the class and the honest kernels on it."""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest
import torch

from parity import Case, Window, backends, make_inputs
from parity.api import evaluate
from parity.backends import flash_attn as fa
from parity.backends import flashinfer as fi
from parity.backends import vllm_fa
from parity.backends.base import fp8_reason
from parity.case import FP8_DTYPES, dequantize_fp8, descale_rows
from parity.judge import BaselineCache
from parity.maskcheck import mask_probe_inputs
from parity.reference import attention_reference
from parity.selftest import run as selftest
from parity.selftest.bugs import BUGS, EagerAttention, Fp8DescaleBatchStrideZero, Fp8DescaleHeadStrideZero
from parity.selftest.honest import Fp8TensorCores, LowPrecisionP, SplitKV
from parity.window import SpecError
from tests.test_flashinfer_paged import _attend

E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"
QKV = dict(dtype="bfloat16", kv_dtype=E4M3, q_fp8=True)
HEAD = Case((16, 24), (96, 24), 8, 4, 64, window=Window(31, 0), fp8_scales="kv_head", seed=21, **QKV)
SEQ = Case((1, 1, 1), (90, 37, 64), 8, 4, 64, window=Window.tokens(32), page_size=16, fp8_scales="batch_kv_head", seed=22, **QKV)
PREFILL_SEQ = dataclasses.replace(HEAD, fp8_scales="batch_kv_head", seed=23)
KV_ONLY = dataclasses.replace(SEQ, q_fp8=False, dtype="float16", seed=24)  # no fp8 query: only q stays unscaled
TENSOR = dataclasses.replace(SEQ, fp8_scales="tensor", seed=25)
E5 = Case((1, 1), (150, 90), 8, 2, 64, "float16", Window.tokens(48), page_size=16, kv_dtype=E5M2, seed=26)


# -- the case ------------------------------------------------------------------------------------------


def test_the_layout_is_omitted_when_per_tensor_and_round_trips_otherwise():
    plain = Case((5,), (9,), 4, 2, 32, kv_dtype=E4M3)
    assert plain.fp8_scales == "tensor" and "fp8_scales" not in plain.to_dict()
    assert plain.case_id == Case.from_dict({k: v for k, v in plain.to_dict().items()}).case_id
    for lay in ("kv_head", "batch_kv_head"):
        c = dataclasses.replace(plain, fp8_scales=lay)
        assert c.to_dict()["fp8_scales"] == lay and Case.from_json(c.to_json()) == c and c.case_id != plain.case_id
        assert f"scales={lay}" in c.summary() and lay in c.repro("reference")
    assert "scales=" not in plain.summary()


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(kv_dtype=E4M3, fp8_scales="head"), "one of tensor, kv_head, batch_kv_head"),
        (dict(kv_dtype=E4M3, fp8_scales=None), "one of tensor, kv_head, batch_kv_head"),
        (dict(fp8_scales="kv_head"), "needs Case.kv_dtype"),
        (dict(kv_dtype="float8_e4m3fnuz"), "one of float8_e4m3fn, float8_e5m2"),
    ],
)
def test_bad_layouts_say_what_is_allowed(kw, words):
    with pytest.raises(SpecError, match=words):
        Case((5,), (9,), 4, 2, 32, **kw)


# -- the inputs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case, shape", [(HEAD, (4,)), (SEQ, (3, 4)), (TENSOR, ())], ids=["kv_head", "batch_kv_head", "tensor"])
def test_descales_have_the_layout_shape_and_map_each_slice_amax_onto_the_fp8_max(case, shape):
    inputs = make_inputs(case)
    raw = make_inputs(dataclasses.replace(case, kv_dtype=None, q_fp8=False, fp8_scales="tensor"))
    for name, lens in (("q", case.q_lens), ("k", case.k_lens), ("v", case.k_lens)):
        d, x8 = getattr(inputs, f"{name}_descale"), getattr(inputs, name)
        assert d.shape == shape and d.dtype == torch.float32 and x8.dtype == torch.float8_e4m3fn
        per = descale_rows(d.double(), lens, x8.shape[1])  # broadcastable to (total, heads, d)
        deq = x8.double() * per
        top = 448.0 * per  # the fp8 max, dequantized: (total, heads, 1) or ()
        assert float((deq.abs() - top).clamp(min=0).max()) == 0.0  # saturation never passes a slice's max
        if name == "q":  # the query is not spread: it is the plain draw, quantized
            assert float((deq - raw.q.double()).abs().max()) <= float(d.max()) * 16 + 1e-12
    if shape:
        assert float(inputs.k_descale.max() / inputs.k_descale.min()) >= 1.5  # spread by powers of two: they differ


def test_the_spread_is_per_sequence_and_kv_head_powers_of_two_of_the_same_draw():
    spread = make_inputs(dataclasses.replace(SEQ, kv_dtype=None, q_fp8=False, fp8_scales="tensor"))
    deq = make_inputs(SEQ).dequantized(torch.float64)
    ratio = (deq.k.abs().amax(dim=(0, 2)) / spread.k.double().abs().amax(dim=(0, 2))).log2()  # (hkv,), whole tensor
    assert torch.all(ratio.round().abs() <= 2)
    by_seq = [deq.k[a:b].abs().amax(dim=(0, 2)) for a, b in zip([0, 90, 127], [90, 127, 191])]  # (hkv,) each
    assert not torch.allclose(by_seq[0] / by_seq[0][0], by_seq[1] / by_seq[1][0], rtol=0.3)  # each sequence its own factors


def test_dequantized_applies_each_elements_own_descale():
    inputs = make_inputs(SEQ)
    deq = inputs.dequantized(torch.float64)
    for b, (k0, k1) in enumerate([(0, 90), (90, 127), (127, 191)]):
        for j in range(SEQ.hkv):
            want = inputs.k[k0:k1, j].double() * float(inputs.k_descale[b, j])
            assert torch.equal(deq.k[k0:k1, j], want)
            for h in range(j * SEQ.group, (j + 1) * SEQ.group):  # query head h: its kv head's group descale
                assert torch.equal(deq.q[b, h], inputs.q[b, h].double() * float(inputs.q_descale[b, j]))
    assert torch.equal(dequantize_fp8(inputs.k, inputs.k_descale, torch.float64, SEQ.k_lens), deq.k)
    assert torch.equal(inputs.head_descales("q", 2), inputs.q_descale[2].double().repeat_interleave(2))
    with pytest.raises(ValueError, match="head_descales"):
        inputs.descale("k")


def test_the_mask_probe_repeats_per_sequence_descales_with_its_batch():
    base = make_inputs(PREFILL_SEQ)
    probe = mask_probe_inputs(PREFILL_SEQ, 0, base=base, n=3)  # 3 passes in one batch of 3 x 2 sequences
    assert probe.k_descale.shape == (6, 4) and torch.equal(probe.k_descale[4], base.k_descale[0])
    assert torch.equal(probe.v_descale, torch.ones(6, 4))


# -- e5m2 -------------------------------------------------------------------------------------------------


def test_e5m2_quantizes_to_its_own_max_and_who_takes_it():
    assert FP8_DTYPES[E5M2] == torch.finfo(torch.float8_e5m2).max == 57344.0
    inputs = make_inputs(E5)
    assert inputs.k.dtype == torch.float8_e5m2 and math.isclose(float(inputs.k.float().abs().max()), 57344.0)
    decode = fi.FlashInferDecodeBackend()
    assert decode.unsupported_reason(E5) is None and fp8_reason(decode, E5) is None  # FlashInfer: kv_data_type e5m2
    qkv = dataclasses.replace(E5, q_fp8=True, dtype="bfloat16")
    for be in (vllm_fa.VllmFa3Backend(), fa.FlashAttn3Backend()):
        assert "e4m3 only" in be.unsupported_reason(qkv) and E5M2 in be.unsupported_reason(qkv)
    assert "no fp8 KV path" in fp8_reason(backends.get("sdpa"), E5)
    kinded = type("K", (), {"name": "k", "kv_dtypes": (E4M3,)})()
    assert fp8_reason(kinded, E5) == f"k takes no {E5M2} KV cache (it takes {E4M3})"


def test_the_gqa_probe_is_not_applicable_where_kv_heads_are_not_exact_in_e5m2():
    many = Case((4,), (8,), 16, 16, 16, "float16", Window(3, 0), kv_dtype=E5M2, seed=1)  # 9 is not an e5m2 number
    row = evaluate(EagerAttention(), many)
    assert row["verdict"] == "pass" and row["gqa_check"] == "n/a" and "not all exact in float8_e5m2" in row["gqa_detail"]
    assert evaluate(EagerAttention(), E5)["gqa_check"] == "ok"  # 2 kv heads: exact


# -- the backends' descales ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [vllm_fa.fa3_descale, fa.fa3_descale], ids=["vllm", "fa3"])
def test_fa3_gets_b_by_hkv_descales_of_every_layout(fn):
    t, h, bh = torch.tensor(0.5), torch.tensor([1.0, 2.0, 3.0]), torch.arange(6.0).reshape(2, 3)
    assert torch.equal(fn(t, 2, 3), torch.full((2, 3), 0.5)) and fn(t, 2, 3).stride() == (0, 0)
    assert torch.equal(fn(h, 2, 3), torch.stack([h, h])) and fn(h, 2, 3).stride() == (0, 1)
    assert fn(bh, 2, 3) is bh


def test_flashinfer_refuses_per_head_layouts_with_the_reason():
    for be in (fi.FlashInferBackend(), fi.FlashInferPagedBackend(), fi.FlashInferDecodeBackend()):
        why = be.unsupported_reason(KV_ONLY)
        assert "k_scale / v_scale as one float" in why and "batch_kv_head" in why, why
        assert be.unsupported_reason(dataclasses.replace(KV_ONLY, fp8_scales="tensor")) is None
    plugin = type("P", (), {"name": "p", "kv_dtypes": (E4M3,), "fp8_queries": True})()  # the default: per tensor only
    assert fp8_reason(plugin, HEAD) == "p takes fp8 descales laid out tensor only (case has fp8_scales=kv_head)"
    for spec in ("reference",):
        assert fp8_reason(backends.get(spec), SEQ) is None


class Fa3Descales:
    """vLLM's FA3 ``flash_attn_varlen_func`` with fp8 inputs, dequantizing each sequence and kv head by its own
    ``(B, hkv)`` descale (``wrong_batch``: every sequence by sequence 0's, as a kernel that ignores the stride)."""

    def __init__(self, wrong_batch: bool = False):
        self.wrong_batch, self.seen = wrong_batch, []

    def __call__(self, q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None, softmax_scale=None,
                 causal=False, window_size=None, softcap=0.0, block_table=None, out=None, fa_version=2, q_descale=None,
                 k_descale=None, v_descale=None, return_softmax_lse=False):  # fmt: skip
        b, hkv = cu_seqlens_q.numel() - 1, k.shape[-2]
        assert all(d.shape == (b, hkv) and d.dtype == torch.float32 for d in (q_descale, k_descale, v_descale))
        self.seen.append(k_descale.clone())
        g = q.shape[1] // hkv
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)  # (hq, total_q)
        for i in range(b):
            r = 0 if self.wrong_batch else i
            q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
            sk = int(seqused_k[i])
            pages = block_table[i, : -(-sk // k.shape[1])].long()
            kb = k[pages].flatten(0, 1)[:sk].double() * k_descale[r].double()[None, :, None]  # (Sk, hkv, d)
            vb = v[pages].flatten(0, 1)[:sk].double() * v_descale[r].double()[None, :, None]
            qb = q[q0:q1].double() * q_descale[r].double().repeat_interleave(g)[None, :, None]  # (Sq, hq, d)
            o, seq_lse = _attend(qb, kb, vb, True, window_size[0], softmax_scale, softcap, lse=True)
            out[q0:q1] = o.to(out.dtype)
            lse[:, q0:q1] = seq_lse.transpose(0, 1) * math.log(2.0)  # (hq, Sq): natural log, vLLM's varlen layout
        return (out, lse) if return_softmax_lse else out


def test_vllm_fa3_passes_per_sequence_descales_and_the_stand_in_can_fail(monkeypatch):
    def backend(fn):
        iface = type(sys)("vllm_fa_stand_in")
        iface.flash_attn_varlen_func = fn
        monkeypatch.setitem(sys.modules, vllm_fa.INTERFACE, iface)
        return type("CpuFa3", (vllm_fa.VllmFa3Backend,), {"device": "cpu", "unavailable_reason": lambda self: None})()

    fn = Fa3Descales()
    row = evaluate(backend(fn), SEQ)
    assert row["verdict"] == "pass", (row["reasons"], row["detail"])
    assert torch.equal(fn.seen[0].cpu(), make_inputs(SEQ).k_descale)  # the (B, hkv) descales as they are
    assert evaluate(backend(Fa3Descales(wrong_batch=True)), SEQ)["verdict"] == "fail"


# -- the self-test ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [HEAD, SEQ, PREFILL_SEQ, KV_ONLY, E5], ids=["kv_head", "batch_kv_head", "prefill", "kv-only", "e5m2"])
def test_honest_kernels_pass_every_layout(case):
    for honest in (EagerAttention(), Fp8TensorCores(), LowPrecisionP(), SplitKV(), backends.get("reference")):
        row = evaluate(honest, case)
        assert row["verdict"] == "pass", (honest.name, row["reasons"], row["detail"], row["worst_where"])
        assert row["mask_check"] == "ok", row["mask_detail"]


@pytest.mark.parametrize(
    "bug, caught_by",
    [(Fp8DescaleHeadStrideZero, (HEAD, SEQ, PREFILL_SEQ, KV_ONLY)), (Fp8DescaleBatchStrideZero, (SEQ, PREFILL_SEQ, KV_ONLY))],
    ids=["head-stride-0", "batch-stride-0"],
)
def test_the_planted_bugs_fail_their_layouts_and_pass_per_tensor(bug, caught_by):
    for case in (HEAD, SEQ, PREFILL_SEQ, KV_ONLY, TENSOR, E5):
        row = evaluate(bug(), case)
        want = "fail" if case in caught_by else "pass"
        assert row["verdict"] == want, (case.summary(), row["reasons"], row["detail"])
        if want == "fail":
            assert "max_err" in row["reasons"].split()


def test_every_profile_holds_the_layouts_and_the_bugs_are_caught_there():
    from parity.strategies import PROFILES, fp8_edge_cases, generate

    new = fp8_edge_cases()[4:]
    assert {c.fp8_scales for c in new} == {"kv_head", "batch_kv_head", "tensor"} and {c.kv_dtype for c in new} == {E4M3, E5M2}
    for name in PROFILES:
        ids = {c.case_id for c in generate(PROFILES[name], 0)}
        assert all(c.case_id in ids for c in new), name
    quick = selftest.profile_cases("quick", 0)
    layouts = [c for c in quick if c.fp8_scales != "tensor"]
    assert len(layouts) == 2  # a handful: the CPU suite's time
    baselines = BaselineCache("cpu", keep=8)
    for bug in (b for b in BUGS if b.backend in (Fp8DescaleHeadStrideZero, Fp8DescaleBatchStrideZero)):
        det = selftest.detect(bug, layouts, baselines)  # the whole profile: tests/test_selftest.py (slow)
        assert det.caught and not det.problems, (bug.name, det.cases_run)
    fa3 = vllm_fa.VllmFa3Backend()
    assert {c.fp8_scales for c in quick if fa3.unsupported_reason(c) is None and fp8_reason(fa3, c) is None} >= {"kv_head", "batch_kv_head"}


# -- repro scripts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [SEQ, HEAD], ids=["batch_kv_head", "kv_head"])
def test_repro_scripts_quantize_and_dequantize_like_the_harness(case):
    from tests.test_repro_reads_fp8 import FAKE, _namespace

    ns = _namespace(case, FAKE)
    assert ns["FP8_SCALES"] == case.fp8_scales and ns["DRAW_ARGS"]["spread"] is True
    q, k, v, descales = ns["backend_inputs"]()
    want = make_inputs(case)
    for got, ref in zip((q, k, v, *descales), (want.q, want.k, want.v, want.q_descale, want.k_descale, want.v_descale)):
        assert got.dtype == ref.dtype and torch.equal(got.float(), ref.float())
    ref = ns["reference"](*ns["values"](q, k, v, descales, torch.float64), torch.float64)
    assert torch.allclose(ref, attention_reference(want), atol=1e-12, rtol=0)


def test_refused_layouts_and_dtypes_get_the_siblings_their_backends_take():
    from parity.design import siblings

    kv_head = dataclasses.replace(KV_ONLY, fp8_scales="kv_head")
    sib = siblings(kv_head, fi.FlashInferDecodeBackend(), [kv_head])
    assert sib is not None and sib.fp8_scales == "tensor" and sib.kv_dtype == E4M3 and not sib.q_fp8
    e5 = siblings(E5, vllm_fa.VllmFa3Backend(), [E5])
    assert e5 is not None and e5.kv_dtype == E4M3 and e5.q_fp8 and e5.dtype == "bfloat16"
