"""Learned sinks (``Case.sinks``) and chunked local attention (``Case.chunk``), on the CPU.

* the case fields: defaults leave ids and JSON unchanged, bad values are a SpecError, sinks are seeded
  apart from q/k/v, bfloat16 values;
* the chunk rule (``window.chunk_band``) against its docstring truth table, and floor modulo for Sq > Sk;
* the reference with sinks against a hand-written softmax with one more column; rows with no key give 0;
* flex (the second implementation: a sink key scored by its score_mod, the chunk in its mask_mod)
  against the reference, eager and bucketed;
* the probes: the mask probe reads chunks exactly (and names the top-left chunk bug), the GQA probe
  with sinks still reads the kv head;
* backends without the feature are ``unsupported`` with their reason; the GPU calls (vLLM FA3 ``s_aux``
  / ``attention_chunk``, FA4 ``learnable_sink``, FlashInfer's sink wrapper) with CPU stand-ins;
* the planted bugs are caught and their honest base passes; a known-divergence condition names
  ``sinks`` / ``chunk``; a repro script carries both and agrees on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest
import torch

from parity import Case, Window, backends, make_inputs
from parity.api import evaluate
from parity.backends import flash_attn4, flashinfer, vllm_fa
from parity.backends.base import Backend, feature_reason
from parity.backends.flex import FlexBackend
from parity.coverage import case_cells, matches
from parity.maskcheck import run_gqa_probe, run_mask_probe
from parity.reference import attention_dense_naive, attention_reference
from parity.selftest.bugs import ChunkTopLeft, EagerAttention, SinkTimesScale
from parity.selftest.honest import SplitKV
from parity.window import SpecError, chunk_band

SINK_CASE = Case((1, 17, 30), (9, 17, 20), 4, 2, 16, "float32", Window(6, 0), sinks=True, seed=3)
CHUNK_CASE = Case((24,), (80,), 4, 1, 16, "float32", Window.causal(), chunk=32, seed=4)


def test_defaults_keep_ids_and_json():
    plain = Case((5,), (9,), 4, 2, 16)
    assert "sinks" not in plain.to_dict() and "chunk" not in plain.to_dict()
    assert plain.case_id == "4023a051606c"  # the id before the fields existed
    both = dataclasses.replace(plain, sinks=True, chunk=4)
    assert both.to_dict()["sinks"] is True and both.to_dict()["chunk"] == 4
    assert Case.from_json(both.to_json()) == both and both.case_id != plain.case_id
    assert "chunk=4" in both.summary() and "sinks" in both.summary()
    assert '"chunk":4' in both.repro("flex")


@pytest.mark.parametrize("bad", [dict(chunk=0), dict(chunk=2.0), dict(sinks="yes"), dict(sinks=1)])
def test_bad_fields_are_spec_errors(bad):
    with pytest.raises(SpecError, match="Case.(chunk|sinks)"):
        Case((5,), (9,), 4, 2, 16, **bad)


def test_sinks_are_seeded_apart_from_qkv_and_bf16_values():
    plain, with_sinks = make_inputs(dataclasses.replace(SINK_CASE, sinks=False)), make_inputs(SINK_CASE)
    assert plain.sinks is None and with_sinks.sinks is not None and with_sinks.sinks.shape == (4,)
    assert torch.equal(plain.q, with_sinks.q) and torch.equal(plain.k, with_sinks.k) and torch.equal(plain.v, with_sinks.v)
    s = with_sinks.sinks
    assert s.dtype == torch.float32 and torch.equal(s, s.to(torch.bfloat16).float())
    assert torch.equal(make_inputs(SINK_CASE).sinks, s)  # deterministic
    assert not torch.equal(make_inputs(dataclasses.replace(SINK_CASE, seed=4)).sinks, s)
    assert with_sinks.to("cpu").sinks is not None


def test_chunk_truth_table_of_the_docstring():
    """parity/window.py's table: Sq = 3, Sk = 6, chunk 4."""
    causal = Case((3,), (6,), 1, 1, 8, window=Window.causal(), chunk=4).mask(3, 6).int().tolist()
    assert causal == [[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1]]
    tokens = Case((3,), (6,), 1, 1, 8, window=Window.tokens(2), chunk=4).mask(3, 6).int().tolist()
    assert tokens == [[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 1, 1]]


def test_chunk_of_a_negative_position_holds_no_key():
    """Sq > Sk: p = i + Sk - Sq < 0 lies in a chunk before key 0 (floor modulo), whatever the window."""
    lo, hi = Window.full().band(6, 3)
    lo, hi = chunk_band(lo, hi, 6, 3, 2)  # p = -3 .. 2
    seen = (hi - lo + 1).clamp(min=0).tolist()
    assert seen == [0, 0, 0, 2, 2, 1]


def _hand_reference(case: Case, inputs) -> torch.Tensor:
    """Sinks as one more softmax column, written out here (not the harness's code)."""
    out = []
    for _, q, k, v, _ in inputs.sequences():
        sq, sk = q.shape[0], k.shape[0]
        rows = []
        for i in range(sq):
            heads = []
            for h in range(case.hq):
                kv = h // case.group
                vis = [j for j in range(sk) if case.window.visible(i, j, sq, sk)]
                s = [float(q[i, h].double() @ k[j, kv].double()) * case.softmax_scale for j in vis]
                sink = float(inputs.sinks[h])
                m = max([*s, sink])
                den = sum(math.exp(x - m) for x in s) + math.exp(sink - m)
                o = sum((math.exp(x - m) / den) * v[j, kv].double() for x, j in zip(s, vis)) if vis else torch.zeros(case.head_dim)
                heads.append(torch.as_tensor(o, dtype=torch.float64))
            rows.append(torch.stack(heads))
        out.append(torch.stack(rows))
    return torch.cat(out)


def test_reference_with_sinks_against_a_hand_written_softmax():
    inputs = make_inputs(SINK_CASE)
    ref = attention_reference(inputs, block_bytes=512)  # many bands
    assert torch.allclose(ref, _hand_reference(SINK_CASE, inputs), atol=1e-12)
    assert torch.allclose(ref, attention_dense_naive(inputs), atol=1e-12)
    scaled = dataclasses.replace(inputs, sinks=inputs.sinks * SINK_CASE.softmax_scale)
    assert (attention_reference(scaled) - ref).abs().max() > 1e-2  # the sink is not scaled: the planted bug differs


def test_rows_with_no_key_output_zero_with_sinks():
    case = Case((40,), (24,), 4, 2, 32, "bfloat16", Window(8, 0), sinks=True)
    inputs = make_inputs(case)
    for dtype in (torch.float64, torch.bfloat16):
        out = attention_reference(inputs, dtype)
        assert out[:16].abs().max() == 0 and torch.isfinite(out).all()


@pytest.mark.parametrize("bucketed", [False, True])
@pytest.mark.parametrize(
    "case",
    [
        SINK_CASE,
        CHUNK_CASE,
        Case((5, 20, 1), (9, 10, 30), 4, 2, 16, "float32", Window(2, 3, "top_left"), softcap=20.0, sinks=True, chunk=3, seed=5),
        Case((6,), (3,), 2, 1, 16, "float32", Window.full(), chunk=2, sinks=True, seed=6),  # Sq > Sk
    ],
    ids=["sinks", "chunk", "both-softcap", "sq>sk"],
)
def test_flex_second_implementation_matches_the_reference(case, bucketed):
    be = type("F", (FlexBackend,), {"bucketed": bucketed})()
    inputs = make_inputs(case)
    out = be.run(case, inputs, torch.full_like(inputs.q, -30000.0))
    assert (out.double() - attention_reference(inputs)).abs().max() < 1e-5


def test_mask_probe_reads_chunks_and_names_the_top_left_bug():
    run = lambda be: lambda inp: be.run(inp.case, inp, torch.full_like(inp.q, -30000.0))  # noqa: E731
    assert run_mask_probe(CHUNK_CASE, run(FlexBackend()), "cpu").status == "ok"
    bad = run_mask_probe(CHUNK_CASE, run(ChunkTopLeft()), "cpu")
    assert bad.status == "mismatch" and "spec says" in bad.detail, bad.detail


def test_gqa_probe_with_sinks_reads_the_kv_head():
    case = Case((9,), (9,), 6, 2, 16, "float32", Window(3, 0), sinks=True)
    be = EagerAttention()
    res = run_gqa_probe(case, lambda inp: be.run(inp.case, inp, torch.full_like(inp.q, -30000.0)), "cpu")
    assert res.status == "ok", res.detail


@pytest.mark.parametrize(
    "spec, words",
    [
        ("sdpa", "scaled_dot_product_attention"),
        ("torch-fa2-cuda", "aten._flash_attention_forward"),
        ("fa2-cuda", "flash-attn 2"),
        ("xformers-cutlass-cuda", "memory_efficient_attention"),
        ("jax-xla-cuda", "jax.nn.dot_product_attention"),
        ("flashinfer-cuda", "single_prefill_with_kv_cache"),
        ("vllm-fa2-cuda", "FA2 does not support s_aux"),
    ],
)
def test_backends_without_the_feature_say_why(spec, words):
    be = backends.get(spec)
    assert feature_reason(be, SINK_CASE).startswith("learned sinks: ") and words in feature_reason(be, SINK_CASE)
    if spec != "vllm-fa2-cuda":  # vLLM checks its wrapper for attention_chunk (below)
        assert feature_reason(be, CHUNK_CASE).startswith("chunk=32: ")


def test_an_unsupported_row_names_the_feature():
    row = evaluate(backends.get("sdpa"), CHUNK_CASE)
    assert row["verdict"] == "unsupported" and row["detail"].startswith("chunk=32: "), row["detail"]


def test_a_plugin_backend_without_flags_is_unsupported_not_wrong():
    class Plain(Backend):
        name = "plain"

        def run(self, case, inputs, out):  # ignores sinks: would be wrong
            return out.copy_(attention_reference(dataclasses.replace(inputs, sinks=None)))

    row = evaluate(Plain(), SINK_CASE)
    assert row["verdict"] == "unsupported" and "learned sinks" in row["detail"]
    assert feature_reason(Plain(), dataclasses.replace(SINK_CASE, sinks=False)) is None


@pytest.mark.parametrize("bug, case", [(SinkTimesScale, SINK_CASE), (ChunkTopLeft, CHUNK_CASE)], ids=["sink", "chunk"])
def test_planted_bugs_fail_and_their_base_passes(bug, case):
    assert evaluate(EagerAttention(), case)["verdict"] == "pass"
    assert evaluate(SplitKV(), case)["verdict"] == "pass"  # an honest variant by another algorithm
    row = evaluate(bug(), case)
    assert row["verdict"] == "fail" and "max_err" in row["reasons"], row


def test_condition_names_sinks_and_chunk():
    assert case_cells(SINK_CASE)["sinks"] == {"yes"} and case_cells(SINK_CASE)["chunk"] == {"none"}
    assert matches(CHUNK_CASE, {"chunk": "on", "sinks": "no"}) and not matches(SINK_CASE, {"sinks": "no"})


# -- the GPU calls, with CPU stand-ins -------------------------------------------------------------


def _sink_softmax_attention(q, k, v, scale, sink, ok, lse=False):
    """One sequence: q (Sq, hq, d), k / v (Sk, hkv, d), sink (hq,) or None, ok (Sq, Sk): the stand-ins' math;
    with ``lse`` also the natural-log LSE (hq, Sq) of the normaliser (the sink's term in it)."""
    g = q.shape[1] // k.shape[1]
    kx, vx = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)  # (Sk, hq, d)
    s = torch.einsum("qhd,khd->hqk", q.double(), kx) * scale  # (hq, Sq, Sk)
    s = s.masked_fill(~ok, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.double()[:, None, None].expand(-1, s.shape[1], 1)], -1)  # (hq, Sq, Sk + 1)
    p = torch.softmax(s, -1).nan_to_num(0.0)[..., : k.shape[0]]  # (hq, Sq, Sk)
    o = torch.einsum("hqk,khd->qhd", p, vx)  # (Sq, hq, d)
    return (o, torch.logsumexp(s, -1).float()) if lse else o


def _fa3_mask(sq, sk, left, right, causal, chunk):
    i, j, d = torch.arange(sq)[:, None], torch.arange(sk)[None, :], sk - sq
    right = 0 if causal else right
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i + d - left
    if right >= 0:
        ok &= j <= i + d + right
    if chunk:
        ok &= torch.div(j, chunk, rounding_mode="floor") == torch.div(i + d, chunk, rounding_mode="floor")
    return ok


class VllmStandIn:
    """flash_attn_varlen_func with FA3's s_aux (bf16) and, when ``chunk_arg``, attention_chunk."""

    def __init__(self, chunk_arg: bool):
        self.calls: list[dict] = []
        if chunk_arg:
            self.__call__ = self.call  # type: ignore[method-assign]

    def call(self, q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, softmax_scale=None, causal=False,
             window_size=None, softcap=0.0, out=None, fa_version=3, s_aux=None, attention_chunk=0,
             return_softmax_lse=False, **rest):  # fmt: skip
        assert not rest, rest
        self.calls.append(dict(s_aux=s_aux, attention_chunk=attention_chunk))
        assert s_aux is None or s_aux.dtype == torch.bfloat16
        lse = torch.empty(q.shape[1], q.shape[0])  # (hq, total_q): vLLM's varlen layout
        for b in range(cu_seqlens_q.numel() - 1):
            q0, q1, k0, k1 = (int(x) for x in (cu_seqlens_q[b], cu_seqlens_q[b + 1], cu_seqlens_k[b], cu_seqlens_k[b + 1]))
            ok = _fa3_mask(q1 - q0, k1 - k0, *window_size, causal, attention_chunk)
            o, lse[:, q0:q1] = _sink_softmax_attention(q[q0:q1], k[k0:k1], v[k0:k1], softmax_scale, s_aux, ok, lse=True)
            out[q0:q1] = o.to(out.dtype)
        return (out, lse) if return_softmax_lse else out


def _vllm_backend(monkeypatch, chunk_arg):
    stand_in = VllmStandIn(chunk_arg)
    if chunk_arg:
        fn = stand_in.call
    else:

        def fn(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, softmax_scale=None, causal=False,
               window_size=None, softcap=0.0, out=None, fa_version=3, s_aux=None, return_softmax_lse=False):  # fmt: skip
            return stand_in.call(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k, softmax_scale, causal,
                                 window_size, softcap, out, fa_version, s_aux, return_softmax_lse=return_softmax_lse)  # fmt: skip

    iface = type(sys)("vllm_fa_stand_in")
    iface.flash_attn_varlen_func = fn
    monkeypatch.setitem(sys.modules, vllm_fa.INTERFACE, iface)
    be = type("CpuFa3", (vllm_fa.VllmFa3Backend,), {"device": "cpu", "unavailable_reason": lambda self: None})()
    return be, stand_in


def test_vllm_fa3_passes_s_aux_and_chunks_where_the_wrapper_takes_them(monkeypatch):
    be, rec = _vllm_backend(monkeypatch, chunk_arg=True)
    case = Case((20, 3), (20, 40), 4, 2, 32, "bfloat16", Window.tokens(12), sinks=True, chunk=8, seed=7)
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["mask_detail"], row["detail"])
    assert rec.calls[0]["attention_chunk"] == 8 and rec.calls[0]["s_aux"].shape == (4,)
    assert "s_aux=torch.tensor(SINKS" in be.repro_call(case) and "attention_chunk=8" in be.repro_call(case)


def test_vllm_fa3_without_attention_chunk_is_unsupported_but_takes_sinks(monkeypatch):
    be, _ = _vllm_backend(monkeypatch, chunk_arg=False)
    assert "takes no attention_chunk" in be.unsupported_reason(dataclasses.replace(CHUNK_CASE, dtype="bfloat16"))
    case = Case((1, 1), (100, 37), 8, 2, 32, "bfloat16", Window.tokens(16), sinks=True, seed=2)
    assert evaluate(be, case)["verdict"] == "pass"
    assert "FA2 does not support s_aux" in feature_reason(vllm_fa.VllmFa2Backend(), case)


def test_fa4_passes_learnable_sink_in_bfloat16(monkeypatch):
    seen = {}

    def flash_attn_func(
        q, k, v, softmax_scale=None, causal=False, window_size=(None, None), softcap=0.0, learnable_sink=None, return_lse=False
    ):
        seen["sink"] = learnable_sink
        b, sq, hq, d = q.shape
        left, right = (-1 if x is None else x for x in window_size)
        ok = _fa3_mask(sq, k.shape[1], left, right, False, 0)
        got = [_sink_softmax_attention(q[i], k[i], v[i], softmax_scale, learnable_sink, ok, lse=True) for i in range(b)]
        out = torch.stack([o for o, _ in got]).to(q.dtype)  # (B, Sq, hq, d)
        return (out, torch.stack([x for _, x in got])) if return_lse else out  # lse (B, hq, Sq)

    cute = type(sys)("flash_attn.cute")
    cute.flash_attn_func, cute.flash_attn_varlen_func = flash_attn_func, None
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setitem(sys.modules, "flash_attn", type(sys)("flash_attn"))
    be = type("CpuFa4", (flash_attn4.Fa4Backend,), {"device": "cpu", "unavailable_reason": lambda self: None})()
    case = Case((16,), (16,), 8, 2, 64, "bfloat16", Window.tokens(6), sinks=True, seed=8)
    row = evaluate(be, case, probes=False)
    assert row["verdict"] == "pass", (row["reasons"], row["detail"])
    assert seen["sink"].dtype == torch.bfloat16 and seen["sink"].shape == (8,)
    assert "chunk=32: flash_attn.cute" in feature_reason(be, CHUNK_CASE)


def test_flashinfer_paged_runs_sinks_through_the_sink_wrapper(monkeypatch):
    calls = {}

    class SinkWrapper:
        def __init__(self, workspace, kv_layout, backend, head_dim_qk, head_dim_vo, window_left, q_data_type, kv_data_type):
            calls["init"] = dict(kv_layout=kv_layout, window_left=window_left)

        def plan(self, qo_indptr, indptr, indices, last, hq, hkv, d, page_size, causal, window_left, q_data_type, kv_data_type):
            self.plan_args = (qo_indptr, indptr, indices, last, page_size, causal, window_left)

        def run(self, q, kv, sink, sm_scale):
            qo, indptr, indices, last, ps, causal, left = self.plan_args
            calls["sink"] = sink
            out = torch.empty_like(q)
            for b in range(len(last)):
                pages = indices[int(indptr[b]) : int(indptr[b + 1])].long()
                sk = (len(pages) - 1) * ps + int(last[b])
                kb, vb = kv[0][pages].flatten(0, 1)[:sk], kv[1][pages].flatten(0, 1)[:sk]
                q0, q1 = int(qo[b]), int(qo[b + 1])
                ok = _fa3_mask(q1 - q0, sk, left, -1, causal, 0)
                seen = ok.any(0)[:, None, None]  # (Sk, 1, 1): a windowed kernel loads only keys some row sees
                kb, vb = torch.where(seen, kb, 0), torch.where(seen, vb, 0)
                out[q0:q1] = _sink_softmax_attention(q[q0:q1], kb, vb, sm_scale, sink, ok).to(q.dtype)
            return out

    fi = type(sys)("flashinfer")
    fi.BatchAttentionWithAttentionSinkWrapper = SinkWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    be = type("CpuFi", (flashinfer.FlashInferPagedBackend,), {"device": "cpu", "unavailable_reason": lambda self: None})()
    case = Case((1, 1), (70, 33), 4, 2, 64, "bfloat16", Window.tokens(20), page_size=16, sinks=True, seed=9)
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["detail"], row["read_detail"])
    assert calls["sink"].dtype == torch.float32 and calls["init"]["window_left"] == 19
    assert "logits_soft_cap" in be.unsupported_reason(dataclasses.replace(case, softcap=30.0))
    del fi.BatchAttentionWithAttentionSinkWrapper
    assert evaluate(be, case)["verdict"] == "unsupported"


def test_repro_script_carries_sinks_and_chunk_and_agrees(tmp_path):
    from parity.repro_script import build_script

    case = Case((5, 20), (9, 30), 4, 2, 16, "float32", Window(6, 0), sinks=True, chunk=8, seed=10)
    script = build_script(case, FlexBackend().repro_call(case), "cpu", dict(backend="flex", summary=case.summary(), verdict="pass",
                                                                          case_json=case.to_json(), command="python x.py"))  # fmt: skip
    assert "CHUNK = 8" in script and "SINKS = [" in script
    path = tmp_path / "repro.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # the same script with the sinks dropped from its reference disagrees: the script checks them
    path.write_text(script.replace("if SINKS is not None:", "if False:"))
    assert subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300).returncode == 1


def test_vllm_wrapper_without_s_aux_is_unsupported_for_sinks(monkeypatch):
    def old(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, softmax_scale=None, causal=False, out=None):
        raise AssertionError("not called")

    iface = type(sys)("vllm_fa_stand_in")
    iface.flash_attn_varlen_func = old
    monkeypatch.setitem(sys.modules, vllm_fa.INTERFACE, iface)
    case = Case((1, 1), (100, 37), 8, 2, 32, "bfloat16", Window.tokens(16), sinks=True, seed=2)
    assert "takes no s_aux" in vllm_fa.VllmFa3Backend().unsupported_reason(case)
    assert vllm_fa.VllmFa3Backend().unsupported_reason(dataclasses.replace(case, sinks=False)) is None
