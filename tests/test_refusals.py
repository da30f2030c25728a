"""A wrapped library's own "not supported" is ``unsupported`` (with its words); a crash stays ``error``.

Two levels, both on the CPU:

* the phrase tuples of each backend file against the libraries' real messages
  (:func:`parity.backends.base.refusal`, a pure function);
* each GPU backend end to end through :func:`parity.api.evaluate` (execute + judge), as a
  subclass on the CPU with its availability check bypassed and its library replaced by a
  stand-in module whose call raises the library's real refusal message, then a CUDA fault.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from parity import Case, Window
from parity.api import evaluate
from parity.backends import flash_attn, flash_attn4, flashinfer, jax_attn, sdpa, torch_fa2, vllm_fa, xformers
from parity.backends.base import Unsupported, refusal, refusals
from parity.backends.cudnn import CUDNN_REFUSALS
from parity.execute import execute

ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"
XF_MESSAGE = (
    "Operator `memory_efficient_attention` does not support inputs:\n"
    "     query       : shape=(1, 40, 4, 1, 32) (torch.float32)\n"
    "     attn_bias   : <class 'xformers.ops.fmha.attn_bias.LocalAttentionFromBottomRightMask'>\n"
    "`cutlassF-pt` is not supported because:\n"
    "    attn_bias type is <class 'xformers.ops.fmha.attn_bias.LocalAttentionFromBottomRightMask'>"
)

#: (phrase tuple, exception the library raises when it declines a case)
REAL_REFUSALS = [
    pytest.param(sdpa.SDPA_REFUSALS, RuntimeError("No available kernel. Aborting execution."), id="sdpa-pinned-kernel"),
    pytest.param(
        CUDNN_REFUSALS,
        RuntimeError("cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph."),
        id="sdpa-cudnn-plans",
    ),
    pytest.param(
        CUDNN_REFUSALS, RuntimeError("cuDNN Frontend error: No valid engine configs for Matmul_MUL_Reduction_"), id="sdpa-cudnn-engines"
    ),
    pytest.param(
        sdpa.SdpaCudaCudnn.refusal_phrases,
        RuntimeError("cuDNN Frontend error: Bottom right causal mask does not support max_s_q > max_s_kv."),
        id="sdpa-cudnn-bottom-right",
    ),
    pytest.param(
        jax_attn.JAX_REFUSALS,
        RuntimeError("INTERNAL: cuDNN: Sliding window attention is only supported with max_s_q <= max_s_kv."),
        id="jax-cudnn-sq-gt-sk",
    ),
    pytest.param(
        jax_attn.JAX_REFUSALS, ValueError("cuDNN doesn't support right window: 3 when causal mask is not used."), id="jax-right-window"
    ),
    pytest.param(
        jax_attn.JAX_REFUSALS, NotImplementedError("The head dim must be <= 256 and a multiple of 8, but got 72."), id="jax-head-dim"
    ),
    pytest.param(jax_attn.JAX_REFUSALS, NotImplementedError("Unsupported sequence length Q 40, KV 24."), id="jax-seqlen"),
    pytest.param(
        jax_attn.JAX_REFUSALS,
        RuntimeError("Num hidden_dim should be less than or equal to 128 and hidden_dim should be multiple of 8"),
        id="jax-cudnn-hidden-dim",
    ),
    pytest.param(flash_attn4.FA4_REFUSALS, AssertionError("Paged KV does not support irregular head dim"), id="fa4-paged-head-dim"),
    pytest.param(flash_attn4.FA4_REFUSALS, AssertionError("head_dim must be less than or equal to 256"), id="fa4-head-dim"),
    pytest.param(flash_attn4.FA4_REFUSALS, AssertionError("Unsupported compute capability. Supported: 9.x, 10.x, 11.x"), id="fa4-arch"),
    pytest.param(flash_attn4.FA4_REFUSALS, NotImplementedError("Block sparsity is not yet supported with SplitKV."), id="fa4-not-yet"),
    pytest.param(xformers.XFORMERS_REFUSALS, ValueError(XF_MESSAGE), id="xformers-pinned-op"),
    pytest.param(
        xformers.XFORMERS_REFUSALS,
        NotImplementedError("No operator found for `memory_efficient_attention_forward` with inputs:\n query : shape=(1, 2)"),
        id="xformers-dispatch",
    ),
    pytest.param(torch_fa2.FA2_REFUSALS, RuntimeError("FlashAttention only supports Ampere GPUs or newer."), id="fa2-arch"),
    pytest.param(torch_fa2.FA2_REFUSALS, RuntimeError("FlashAttention only support fp16 and bf16 data type"), id="fa2-dtype"),
    pytest.param(
        torch_fa2.FA2_REFUSALS, RuntimeError("FlashAttention forward only supports head dimension at most 256"), id="fa2-head-dim"
    ),
    pytest.param(torch_fa2.FA2_REFUSALS, RuntimeError("Paged KV cache block size must be divisible by 256"), id="fa2-page-size"),
    pytest.param(torch_fa2.FA2_REFUSALS, RuntimeError("head_size should be a multiple of 8"), id="fa3-head-dim"),
    pytest.param(
        vllm_fa.VLLM_FA_REFUSALS,
        RuntimeError("This flash attention build only supports varlen (for build size reasons)."),
        id="vllm-fa3-varlen-only",
    ),
    pytest.param(
        vllm_fa.VLLM_FA_REFUSALS, RuntimeError("FlashAttention only supports fp16, bf16, and fp8_e4m3 data type"), id="vllm-fa3-dtype"
    ),
    pytest.param(vllm_fa.VLLM_FA_REFUSALS, RuntimeError("Paged KV cache block size must be divisible by 16"), id="vllm-fa2-page-size"),
    pytest.param(vllm_fa.VLLM_FA_REFUSALS, NotImplementedError("FA2 does not support num_splits > 1"), id="vllm-fa2-wrapper"),
    pytest.param(flashinfer.FLASHINFER_REFUSALS, RuntimeError("Unsupported head_dim: 80"), id="flashinfer-head-dim"),
    pytest.param(
        flashinfer.FLASHINFER_REFUSALS,
        RuntimeError("BatchPrefillWithPagedKVCache failed to dispatch with dtype Half"),
        id="flashinfer-dispatch",
    ),
    pytest.param(
        flashinfer.FLASHINFER_REFUSALS,
        RuntimeError(
            "Error in function 'operator()' at /tmp/models-cc/flashinfer/.cache/flashinfer/0.7.2.post1/90a/generated/"
            "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_128_"
            "posenc_0_use_swa_True_use_logits_cap_False/batch_decode.cu:63: Unsupported group_size: 12"
        ),
        id="flashinfer-decode-group-size",  # the H100's words, 2026-12-07 (lab/runs/h100-2026-12-07g-models)
    ),
]

ALL_TUPLES = [
    pytest.param(t, id=name)
    for name, t in [
        ("sdpa", sdpa.SDPA_REFUSALS),
        ("sdpa-cudnn", sdpa.SdpaCudaCudnn.refusal_phrases),
        ("jax", jax_attn.JAX_REFUSALS),
        ("fa4", flash_attn4.FA4_REFUSALS),
        ("xformers", xformers.XFORMERS_REFUSALS),
        ("fa2", torch_fa2.FA2_REFUSALS),
        ("flashinfer", flashinfer.FLASHINFER_REFUSALS),
        ("vllm-fa", vllm_fa.VLLM_FA_REFUSALS),
    ]
]


@pytest.mark.parametrize("phrases, exc", REAL_REFUSALS)
def test_library_refusals_are_recognised_with_their_words(phrases, exc):
    got = refusal(exc, phrases, "lib")
    assert isinstance(got, Unsupported)
    assert str(got) == "lib refused: " + " ".join(str(exc).split())  # the library's words, whitespace collapsed


@pytest.mark.parametrize("phrases", ALL_TUPLES)
@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(ILLEGAL_ACCESS),
        RuntimeError("CUDA error: operation not supported on global/shared address space"),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        AssertionError(),
        TypeError("flash_attn_func() got an unexpected keyword argument 'window_size'"),
        ValueError("Expected `window_size > 0`, but window_size=0"),
        RuntimeError("XlaRuntimeError: INTERNAL: Failed to launch CUDA kernel: illegal address"),
    ],
    ids=["illegal-access", "cuda-op-not-supported", "oom", "bare-assert", "typeerror", "bias-valueerror", "xla-launch"],
)
def test_faults_are_not_refusals(phrases, exc):
    assert refusal(exc, phrases, "lib") is None


def test_refusals_reraises_other_exceptions_unchanged():
    exc = RuntimeError(ILLEGAL_ACCESS)
    with pytest.raises(RuntimeError) as caught:
        with refusals(("is only supported",), "lib"):
            raise exc
    assert caught.value is exc
    mine = Unsupported("FA4 windows are bottom-right aligned; top_left with Sq != Sk has no translation")
    with pytest.raises(Unsupported) as caught2:
        with refusals(("has no translation",), "lib"):
            raise mine
    assert caught2.value is mine  # the backend's own translation refusal passes through as it is


def test_long_messages_are_cut():
    got = refusal(ValueError("does not support " + "x" * 5000), ("does not support",), "lib")
    assert got is not None and len(str(got)) < 700 and str(got).endswith("...")


# -- end to end: each GPU backend on the CPU, its library replaced ---------------------------------


def _on_cpu(cls):
    """The backend class on the CPU, available: only the library call is stood in for."""
    return type(f"Cpu{cls.__name__}", (cls,), {"device": "cpu", "unavailable_reason": lambda self: None})()


def _fake(monkeypatch, name: str, **attrs) -> types.ModuleType:
    """A stand-in module ``name`` in sys.modules (parents created and linked)."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        mod_name = ".".join(parts[:i])
        mod = sys.modules.get(mod_name)
        if not isinstance(mod, types.ModuleType) or not getattr(mod, "_parity_fake", False):
            mod = types.ModuleType(mod_name)
            mod._parity_fake = True  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, mod_name, mod)
        if i > 1:
            monkeypatch.setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod, raising=False)
    for k, v in attrs.items():
        setattr(sys.modules[name], k, v)
    return sys.modules[name]


def _raiser(exc: BaseException):
    def call(*args, **kwargs):
        raise exc

    return call


@pytest.fixture(autouse=True)
def _no_stale_jax_functions():
    yield
    jax_attn._attention_fn.cache_clear()


BF16 = dict(hq=4, hkv=2, head_dim=64, dtype="bfloat16")
DENSE = Case(q_lens=(32,), k_lens=(32,), window=Window(7, 0), **BF16)


def _setup_sdpa(monkeypatch, exc):
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", _raiser(exc))
    return _on_cpu(sdpa.SdpaCudaCudnn), DENSE


def _setup_torch_fa2(monkeypatch, exc):
    monkeypatch.setattr(torch_fa2, "flash_forward_op", lambda: _raiser(exc))
    return _on_cpu(torch_fa2.TorchFa2Backend), DENSE


def _setup_fa2(monkeypatch, exc):
    _fake(monkeypatch, "flash_attn", flash_attn_func=_raiser(exc), flash_attn_varlen_func=_raiser(exc))
    return _on_cpu(flash_attn.FlashAttnBackend), DENSE


def _setup_fa2_kvcache(monkeypatch, exc):
    _fake(monkeypatch, "flash_attn", flash_attn_with_kvcache=_raiser(exc))
    return _on_cpu(flash_attn.FlashAttnKvcacheBackend), Case(q_lens=(1,), k_lens=(300,), window=Window(15, 0), **BF16)


def _setup_fa3(monkeypatch, exc):
    _fake(monkeypatch, "flash_attn_interface", flash_attn_func=_raiser(exc), flash_attn_varlen_func=_raiser(exc))
    return _on_cpu(flash_attn.FlashAttn3Backend), DENSE


def _setup_fa4(monkeypatch, exc):
    _fake(monkeypatch, "flash_attn.cute", flash_attn_func=_raiser(exc), flash_attn_varlen_func=_raiser(exc))
    paged = Case(q_lens=(20, 7), k_lens=(40, 33), hq=4, hkv=2, head_dim=72, dtype="bfloat16", window=Window(15, 0), page_size=16)
    return _on_cpu(flash_attn4.Fa4Backend), paged


def _setup_xformers(monkeypatch, exc):
    _fake(monkeypatch, "xformers.ops.fmha.attn_bias")
    _fake(monkeypatch, "xformers.ops.fmha.cutlass", FwOp=type("FwOp", (), {"NAME": "cutlassF-pt"}))
    _fake(
        monkeypatch,
        "xformers.ops",
        memory_efficient_attention_forward=_raiser(exc),
        memory_efficient_attention_forward_requires_grad=_raiser(exc),  # the measured call, with the LSE
    )
    monkeypatch.delenv(xformers.SHIM_ENV, raising=False)
    return _on_cpu(xformers.XformersCutlass), Case(q_lens=(32,), k_lens=(32,), window=Window(None, None), **BF16)


def _setup_jax(monkeypatch, exc):
    _fake(monkeypatch, "jax.nn", dot_product_attention=_raiser(exc))
    _fake(monkeypatch, "jax.dlpack", from_dlpack=lambda t: t)
    _fake(monkeypatch, "jax", jit=lambda f: f)
    jax_attn._attention_fn.cache_clear()  # it holds jitted functions of whatever jax it met
    # the H200 case: Sq > Sk with a causal window, which cuDNN declines
    case = Case(q_lens=(40,), k_lens=(24,), window=Window(8, 0, "top_left"), **BF16)
    return _on_cpu(jax_attn.JaxCudnnCausal), case


def _setup_flashinfer(monkeypatch, exc):
    _fake(monkeypatch, "flashinfer", single_prefill_with_kv_cache=_raiser(exc))
    return _on_cpu(flashinfer.FlashInferBackend), Case(
        q_lens=(16,), k_lens=(16,), hq=4, hkv=2, head_dim=80, dtype="bfloat16", window=Window(7, 0)
    )


class _RaisingWrapper:
    exc: BaseException = RuntimeError()

    def __init__(self, *args, **kwargs):
        pass

    def plan(self, *args, **kwargs):
        raise self.exc


def _setup_flashinfer_wrapper(cls, case):
    def setup(monkeypatch, exc):
        wrapper = type("Wrapper", (_RaisingWrapper,), {"exc": exc})
        _fake(monkeypatch, "flashinfer", BatchPrefillWithPagedKVCacheWrapper=wrapper, BatchDecodeWithPagedKVCacheWrapper=wrapper)
        return _on_cpu(cls), case

    return setup


def _setup_vllm_fa2(monkeypatch, exc):
    _fake(monkeypatch, "vllm.vllm_flash_attn.flash_attn_interface", flash_attn_varlen_func=_raiser(exc))
    paged = Case(q_lens=(3, 1), k_lens=(70, 33), window=Window(19, 0), page_size=16, **BF16)
    return _on_cpu(vllm_fa.VllmFa2Backend), paged


def _setup_vllm_fa3(monkeypatch, exc):
    _fake(monkeypatch, "vllm.vllm_flash_attn.flash_attn_interface", flash_attn_varlen_func=_raiser(exc))
    return _on_cpu(vllm_fa.VllmFa3Backend), DENSE


#: backend -> (set-up, the library's real refusal for that call)
END_TO_END = {
    "sdpa-cudnn-cuda": (_setup_sdpa, RuntimeError("cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph.")),
    "torch-fa2-cuda": (_setup_torch_fa2, RuntimeError("FlashAttention forward only supports head dimension at most 256")),
    "fa2-cuda": (_setup_fa2, RuntimeError("FlashAttention only supports Ampere GPUs or newer.")),
    "fa2-kvcache-cuda": (_setup_fa2_kvcache, RuntimeError("Paged KV cache block size must be divisible by 256")),
    "fa3-cuda": (_setup_fa3, RuntimeError("head_size should be a multiple of 8")),
    "fa4-cuda": (_setup_fa4, AssertionError("Paged KV does not support irregular head dim")),
    "xformers-cutlass-cuda": (_setup_xformers, ValueError(XF_MESSAGE)),
    "jax-cudnn-causal-cuda": (
        _setup_jax,
        RuntimeError("INTERNAL: Sliding window attention is only supported with max_s_q <= max_s_kv."),
    ),
    "flashinfer-cuda": (_setup_flashinfer, RuntimeError("Unsupported head_dim: 80")),
    "flashinfer-paged-cuda": (
        _setup_flashinfer_wrapper(flashinfer.FlashInferPagedBackend, Case((16, 3), (16, 30), window=Window(7, 0), page_size=16, **BF16)),
        RuntimeError("BatchPrefillWithPagedKVCache failed to dispatch with dtype BFloat16"),
    ),
    "flashinfer-decode-cuda": (
        _setup_flashinfer_wrapper(
            flashinfer.FlashInferDecodeBackend, Case((1, 1), (40, 9), hq=4, hkv=2, head_dim=80, dtype="bfloat16", window=Window(7, 0))
        ),
        RuntimeError("Unsupported head_dim: 80"),
    ),
    "vllm-fa2-cuda": (_setup_vllm_fa2, RuntimeError("Paged KV cache block size must be divisible by 16")),
    "vllm-fa3-cuda": (_setup_vllm_fa3, RuntimeError("This flash attention build only supports varlen (for build size reasons).")),
}


@pytest.fixture(autouse=True)
def _fresh_context(monkeypatch):
    """A simulated sticky CUDA fault marks this process's context lost (parity.api._LOST); the mark must not
    outlive the test: a later test's evaluate() would send named backends to a worker (seen in test_isolation)."""
    from parity import api

    monkeypatch.setattr(api, "_LOST", [])


@pytest.mark.parametrize("spec", sorted(END_TO_END))
def test_backend_records_its_librarys_refusal_as_unsupported(spec, monkeypatch):
    setup, exc = END_TO_END[spec]
    backend, case = setup(monkeypatch, exc)
    assert backend.unsupported_reason(case) is None  # the library refuses at call time, not the backend up front
    row = evaluate(backend, case)
    assert row["verdict"] == "unsupported", row["detail"]
    first_line = " ".join(str(exc).split())[:60]
    assert "refused: " in row["detail"] and first_line in row["detail"]


@pytest.mark.parametrize("spec", sorted(END_TO_END))
def test_a_cuda_fault_of_the_backend_is_a_crash_never_a_refusal(spec, monkeypatch):
    setup, _ = END_TO_END[spec]
    backend, case = setup(monkeypatch, RuntimeError(ILLEGAL_ACCESS))
    row = evaluate(backend, case)
    assert row["verdict"] == "crash"
    assert "illegal memory access" in row["detail"]


def test_execute_on_a_cpu_subclass_unsupported_then_crash(monkeypatch):
    """The unit the sweep runs (execute) with a fake backend subclass whose device is cpu."""
    setup, exc = END_TO_END["jax-cudnn-causal-cuda"]
    backend, case = setup(monkeypatch, exc)
    res = execute(backend, case)
    assert res["status"] == "unsupported"
    assert res["detail"] == "jax (cudnn) refused: INTERNAL: Sliding window attention is only supported with max_s_q <= max_s_kv."
    backend, case = setup(monkeypatch, RuntimeError(ILLEGAL_ACCESS))
    assert execute(backend, case)["status"] == "crash"  # a fault of the kernel


def test_pinned_sdpa_kernel_refusal_keeps_torchs_words(monkeypatch):
    backend, case = _setup_sdpa(monkeypatch, RuntimeError("No available kernel. Aborting execution."))
    row = evaluate(backend, case)
    assert row["verdict"] == "unsupported"
    assert row["detail"] == "SDPA kernel CUDNN_ATTENTION refused: No available kernel. Aborting execution."


def test_an_honest_cpu_call_still_passes_through_the_refusal_wrapper():
    """The wrapper changes nothing when the library answers: CPU sdpa passes."""
    assert torch.__version__
    row = evaluate(sdpa.SdpaBackend(), Case(q_lens=(9,), k_lens=(20,), hq=2, hkv=1, head_dim=16, dtype="float32", window=Window(3, 0)))
    assert row["verdict"] == "pass"


def test_a_refusal_after_a_faulted_launch_is_a_crash_that_restarts_the_worker(monkeypatch):
    """FlashInfer on the H200 (2026-12-05): the decode kernel faulted (misaligned address), then the
    merge step refused the head dim; recorded `unsupported`, the fault killed the worker's next row. On the
    H100 (2026-12-06) rows at head dim 96 ended in an illegal memory access with "MergeStates ... Unsupported
    head_dim: 96" raised after it. A refusal is checked against the device first: a fault pending there makes
    the row a crash of the backend (its worker restarted), whatever the library said afterwards; another
    pending error keeps the row an error."""
    from parity import execute as ex
    from parity.backends.base import Backend

    class Refuses(Backend):
        name, device = "refuses-after-launch", "cuda"

        def run(self, case, inputs, out):
            raise Unsupported("MergeStates failed: Unsupported head_dim: 96")

    def pending(text):
        def sync(device):
            raise RuntimeError(text)

        return sync

    monkeypatch.setattr(ex, "make_inputs", lambda case, device: __import__("parity").case.make_inputs(case, "cpu"))
    case = Case((1,), (63,), 2, 1, 32, "bfloat16", Window(None, 64))
    assert execute(Refuses(), case, probes=False)["status"] == "unsupported"  # a healthy device: the refusal stands
    monkeypatch.setattr(ex, "_sync", pending("CUDA error: an illegal memory access was encountered"))
    res = execute(Refuses(), case, probes=False)
    assert res["status"] == "crash" and "illegal memory access" in res["detail"] and "Unsupported head_dim: 96" in res["detail"]
    assert ex.context_lost(res)
    monkeypatch.setattr(ex, "_sync", pending("CUDA error: operation not permitted when stream is capturing"))
    res = execute(Refuses(), case, probes=False)
    assert res["status"] == "error" and not ex.context_lost(res)


def test_the_summary_names_crashes_as_crashes_of_their_backend():
    """A crash (a dead worker, or a CUDA fault of the kernel, a refusal raised after it included) is counted
    among the new failures and named per backend, so a reader tells a broken kernel from a wrong answer."""
    from parity.sweep import known_vs_new

    fault = "AcceleratorError at execute.py:72: CUDA error: an illegal memory access was encountered"
    rows = [
        {"backend": "flashinfer-cuda", "verdict": "crash", "detail": f"{fault} (raised before the backend's refusal: head_dim: 96)"},
        {"backend": "flashinfer-paged-cuda", "verdict": "crash", "detail": fault},
        {"backend": "flashinfer-paged-cuda", "verdict": "crash", "detail": "worker killed by SIGSEGV"},
        {"backend": "sdpa-cuda", "verdict": "error", "detail": "RuntimeError: head_dim must be 64"},
        {"backend": "fa4-cuda", "verdict": "expected", "expected_id": "x", "detail": fault},
    ]
    line = next(ln for ln in known_vs_new(rows) if ln.startswith("new failures: 4 rows"))
    assert "3 of them crashes of their backend (flashinfer-paged-cuda 2, flashinfer-cuda 1)" in line, line
    assert not any("crashes" in ln for ln in known_vs_new(rows[3:]))


def test_a_fault_recorded_as_an_error_before_faults_were_crashes_is_judged_a_crash(tmp_path):
    """Rows written before 2026-12-06 say ``error`` for a CUDA fault; judged anew, a known divergence that
    expects the crash explains them, and an ordinary error stays an error."""
    from parity.expect import Expectations, load_file
    from parity.results import raw_verdict_of

    old = {"verdict": "error", "raw_verdict": "error", "detail": "AcceleratorError at execute.py:62: CUDA error: misaligned address"}
    assert raw_verdict_of(old) == "crash" and raw_verdict_of({**old, "detail": "RuntimeError: head_dim"}) == "error"
    assert raw_verdict_of({"verdict": "expected", "raw_verdict": "crash"}) == "crash"
    toml = tmp_path / "t.toml"
    toml.write_text(
        '[[divergence]]\nid = "f"\nbackend = "tests.x:B"\ncondition = { dtype = "bfloat16" }\nverdict = "crash"\n'
        'detail = "misaligned address"\nexplanation = "x"\nupstream = "not reported"\nstrict = false\n'
    )
    entry = load_file(toml)
    case = Case((1,), (63,), 2, 1, 32, "bfloat16", Window(None, 64))
    judged = Expectations(entry).judge({**old, "backend": "tests.x:B", "case_json": case.to_json()}, case=case)
    assert judged["verdict"] == "expected" and judged["raw_verdict"] == "crash" and judged["expected_id"] == "f"
