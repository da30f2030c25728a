"""vLLM's flash-attn build (``vllm-fa2-cuda``, ``vllm-fa3-cuda``) on the CPU.

* unavailable with a reason: no GPU; no ``vllm.vllm_flash_attn``; a staged subfolder (stub
  ``vllm/__init__.py`` as ``lab/device/stage.py`` writes it) whose FA extension did not load;
* the call itself, end to end through :func:`parity.api.evaluate`, with
  ``flash_attn_varlen_func`` stood in for by flash-attn's documented semantics (``window_size``
  bottom-right inclusive, ``-1`` unbounded, ``causal`` forcing ``right = 0``, ``cu_seqlens_k`` or
  ``block_table`` + ``seqused_k``, a row with no key = 0, ``out=``): the backend's arguments
  (paged layout, GQA, softcap, the window) must give the reference's answer;
* a stand-in that drops ``causal`` (the (-1, -1) vLLM passes for a full causal layer then means
  "see everything") must fail: the translation relies on ``causal``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest
import torch

from parity import Case, Window, backends
from parity.api import evaluate
from parity.backends import vllm_fa

#: the stub ``vllm/__init__.py`` the lab's staging writes (lab/device/stage.py; its tests check the two agree)
VLLM_STUB = '__version__ = "0.26.0"\n_parity_stub = True\n'


def _drop_vllm_modules():
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.mark.parametrize("spec", ["vllm-fa2-cuda", "vllm-fa3-cuda"])
def test_unavailable_on_cpu_with_reason(spec):
    be = backends.get(spec)
    assert be.device == "cuda" and be.supports_paged
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert "no CUDA device" in be.unavailable_reason()


def test_unavailable_without_vllm_names_the_library(monkeypatch):
    """The hint names what to install (the library), not this repository's lab scripts (not in the wheel)."""
    monkeypatch.setattr(vllm_fa, "cuda_unavailable_reason", lambda: None)
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    why = vllm_fa.VllmFa3Backend().unavailable_reason()
    assert "cannot import vllm.vllm_flash_attn.flash_attn_interface" in why
    assert "pip install vllm" in why and "--worker-path vllm-fa3-cuda=DIR" in why
    assert ".sh" not in why and "/tmp/" not in why


def test_staged_subfolder_with_a_missing_extension(tmp_path, monkeypatch):
    """The folder layout prepare builds: stub vllm/__init__.py, the interface's FA*_AVAILABLE flags."""
    pkg = tmp_path / "vllm" / "vllm_flash_attn"
    pkg.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text(VLLM_STUB)
    (pkg / "__init__.py").write_text("")
    (pkg / "flash_attn_interface.py").write_text(
        "FA2_AVAILABLE, FA2_UNAVAILABLE_REASON = False, 'libcudart.so.13: cannot open shared object file'\n"
        "FA3_AVAILABLE, FA3_UNAVAILABLE_REASON = True, None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(vllm_fa, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    _drop_vllm_modules()
    try:
        fa2, fa3 = vllm_fa.VllmFa2Backend(), vllm_fa.VllmFa3Backend()
        assert fa2.unavailable_reason() == "vllm_flash_attn has no FA2 extension: libcudart.so.13: cannot open shared object file"
        assert fa3.unavailable_reason() is None
        assert fa3.version() == "vllm 0.26.0 vllm_flash_attn FA3 (vllm_flash_attn subpackage only)"
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
        assert "Hopper" in fa3.unavailable_reason()
        assert fa2.unavailable_reason().startswith("vllm_flash_attn has no FA2")
    finally:
        _drop_vllm_modules()


def test_unsupported_reasons():
    fa2, fa3 = vllm_fa.VllmFa2Backend(), vllm_fa.VllmFa3Backend()
    base = dict(hq=4, hkv=2, head_dim=64, dtype="bfloat16")
    assert "float16/bfloat16" in fa2.unsupported_reason(Case((8,), (8,), 4, 2, 64, "float32", Window(3, 0)))
    assert "top_left" in fa3.unsupported_reason(Case((8,), (20,), window=Window(3, 0, "top_left"), **base))
    assert fa3.unsupported_reason(Case((8,), (8,), window=Window(3, 0, "top_left"), **base)) is None
    assert "multiple of 8" in fa2.unsupported_reason(Case((8,), (8,), 4, 2, 72 + 4, "bfloat16", Window(3, 0)))
    paged8 = Case((1,), (40,), window=Window(3, 0), page_size=8, **base)
    assert "page_size % 16" in fa2.unsupported_reason(paged8)
    assert fa3.unsupported_reason(paged8) is None
    assert fa2.unsupported_reason(Case((40,), (24,), window=Window(8, 0), **base)) is None  # Sq > Sk: rows with no key are 0


# -- the call, with flash_attn_varlen_func stood in for --------------------------------------------


class Recorder:
    """flash-attn's documented ``flash_attn_varlen_func`` on the CPU (float64 inside)."""

    def __init__(self, honour_causal: bool = True):
        self.calls: list[dict] = []
        self.honour_causal = honour_causal

    def __call__(
        self,
        q,
        k,
        v,
        max_seqlen_q,
        cu_seqlens_q,
        max_seqlen_k,
        cu_seqlens_k=None,
        seqused_k=None,
        softmax_scale=None,
        causal=False,
        window_size=None,
        softcap=0.0,
        block_table=None,
        out=None,
        fa_version=2,
        return_softmax_lse=False,
        **rest,
    ):
        assert (cu_seqlens_k is None) != (seqused_k is None), "cu_seqlens_k or seqused_k, not both"
        assert block_table is None or seqused_k is not None
        assert not rest, rest
        self.calls.append(
            dict(
                fa_version=fa_version,
                causal=causal,
                window=tuple(window_size),
                paged=block_table is not None,
                max_q=max_seqlen_q,
                max_k=max_seqlen_k,
                lse=return_softmax_lse,
            )
        )
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)  # (hq, total_q), as vLLM's build returns it
        left, right = window_size
        if causal and self.honour_causal:
            right = 0
        for b in range(cu_seqlens_q.numel() - 1):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            if block_table is not None:
                sk, ps = int(seqused_k[b]), k.shape[1]
                pages = block_table[b, : -(-sk // ps)].long()
                kb, vb = k[pages].flatten(0, 1)[:sk], v[pages].flatten(0, 1)[:sk]
            else:
                k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
                kb, vb, sk = k[k0:k1], v[k0:k1], k1 - k0
            sq = q1 - q0
            i, j, d = torch.arange(sq)[:, None], torch.arange(sk)[None, :], sk - sq
            ok = torch.ones(sq, sk, dtype=torch.bool)
            if left >= 0:
                ok &= j >= i + d - left
            if right >= 0:
                ok &= j <= i + d + right
            seen = ok.any(0)[:, None, None]  # (Sk, 1, 1): a windowed kernel loads only keys some row sees (the read probe)
            kb, vb = torch.where(seen, kb, 0), torch.where(seen, vb, 0)  # (Sk, hkv, d) each
            g = q.shape[1] // kb.shape[1]
            kx, vx = kb.double().repeat_interleave(g, 1), vb.double().repeat_interleave(g, 1)  # (Sk, hq, d)
            s = torch.einsum("qhd,khd->hqk", q[q0:q1].double(), kx) * softmax_scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            p = torch.softmax(s.masked_fill(~ok, float("-inf")), -1).nan_to_num(0.0)  # a row with no key: 0
            out[q0:q1] = torch.einsum("hqk,khd->qhd", p, vx).to(out.dtype)
            row_lse = torch.logsumexp(s.masked_fill(~ok, float("-inf")), -1)  # (hq, Sq)
            lse[:, q0:q1] = row_lse.masked_fill(torch.isneginf(row_lse), float("inf"))  # FA2: +inf where no key
        return (out, lse) if return_softmax_lse else out


def _cpu_backend(cls, monkeypatch, fn):
    iface = type(sys)("vllm_fa_stand_in")
    iface.flash_attn_varlen_func = fn
    monkeypatch.setitem(sys.modules, vllm_fa.INTERFACE, iface)  # vllm_fa_attention imports it by name
    return type(f"Cpu{cls.__name__}", (cls,), {"device": "cpu", "unavailable_reason": lambda self: None})()


CASES = [
    Case((20, 3), (20, 40), 4, 2, 32, "bfloat16", Window(7, 0), seed=1),  # varlen, chunked
    Case((1, 1), (100, 37), 8, 2, 32, "bfloat16", Window.tokens(16), page_size=16, seed=2),  # paged decode
    Case((5, 9), (70, 9), 4, 1, 32, "float16", Window(None, 0), page_size=32, seed=3),  # full causal, paged
    Case((40,), (24,), 4, 2, 32, "bfloat16", Window(8, 0), seed=4),  # Sq > Sk: leading rows see no key
    Case((16,), (16,), 2, 2, 32, "bfloat16", Window(3, 5), softcap=20.0, seed=5),  # two-sided, softcap
    Case((12,), (30,), 2, 1, 32, "float16", Window(None, None), page_size=16, seed=6),  # full, paged
]


@pytest.mark.parametrize("cls", [vllm_fa.VllmFa2Backend, vllm_fa.VllmFa3Backend], ids=["fa2", "fa3"])
@pytest.mark.parametrize("case", CASES, ids=[c.family + str(i) for i, c in enumerate(CASES)])
def test_the_call_vllm_makes_passes_under_flash_attns_rule(cls, case, monkeypatch):
    rec = Recorder()
    be = _cpu_backend(cls, monkeypatch, rec)
    assert be.unsupported_reason(case) is None
    row = evaluate(be, case)
    assert row["verdict"] == "pass", (row["reasons"], row["mask_detail"], row["detail"])
    assert row["unwritten"] in ("0", 0), row["unwritten"]  # written into the harness's buffer
    first = rec.calls[0]
    assert first["fa_version"] == cls.fa_version
    assert first["paged"] == (case.page_size is not None)
    assert (first["causal"], first["window"]) == vllm_fa.vllm_fa_window(case.window, case.q_lens, case.k_lens)
    assert (first["max_q"], first["max_k"]) == (max(case.q_lens), max(case.k_lens))


def test_a_kernel_that_ignores_causal_fails_the_full_causal_case(monkeypatch):
    be = _cpu_backend(vllm_fa.VllmFa2Backend, monkeypatch, Recorder(honour_causal=False))
    row = evaluate(be, CASES[2])
    assert row["verdict"] == "fail" and "mask" in row["reasons"]


def test_unavailable_keeps_the_extensions_own_words(monkeypatch):
    """vllm_flash_attn/__init__ raises when no extension loads; the reason keeps the loader's error."""

    def import_fails(name):  # what importing the staged package does when neither extension loads
        iface = type(sys)(name)
        iface.FA3_UNAVAILABLE_REASON = "libcudart.so.13: cannot open shared object file"  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, iface)  # the interface module, loaded before __init__ raised
        return f"cannot import {name}: ImportError: vllm.vllm_flash_attn requires the CUDA flash attention extensions"

    monkeypatch.setattr(vllm_fa, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(vllm_fa, "import_error_reason", import_fails)
    why = vllm_fa.VllmFa3Backend().unavailable_reason()
    assert "requires the CUDA flash attention extensions" in why
    assert "FA3: libcudart.so.13: cannot open shared object file" in why


# -- compile keys: the module of vLLM's FA2 build a case's first call JIT-compiles ------------------------------------

#: a prefill with a sliding window: local, so the non-causal file of its head dim
PREFILL = Case((100,), (300,), 8, 2, 64, "bfloat16", Window(31, 0))


def _fa2_file(case: Case) -> str:
    key = vllm_fa.VllmFa2Backend().compile_key(case)
    assert key is not None and len(key) == 1, key
    return key[0]


def test_fa2_compile_key_is_the_file_fa2_dispatch_picks():
    """Heads are a run-time ratio; causal has a file of its own, local and none share one; the head dim's bucket
    (72, 80, 96 -> 96; 136 -> 192, no 160 file), not its value; paged runs the split-KV file, whatever its page size."""
    key = _fa2_file
    assert key(PREFILL) == "flash_fwd_hdim64_bf16_sm80.cu"
    assert key(PREFILL) == key(dataclasses.replace(PREFILL, hq=4, hkv=4)) == key(dataclasses.replace(PREFILL, hq=16, hkv=1))
    causal, none = (dataclasses.replace(PREFILL, window=w) for w in (Window(None, 0), Window(None, None)))
    assert key(causal) == "flash_fwd_hdim64_bf16_causal_sm80.cu" != key(PREFILL) == key(none)
    assert key(dataclasses.replace(PREFILL, window=Window(5, 7))) == key(PREFILL)  # two-sided: local
    dims = {d: key(dataclasses.replace(PREFILL, head_dim=d)) for d in (72, 80, 96, 136, 192)}
    assert dims[72] == dims[80] == dims[96] == "flash_fwd_hdim96_bf16_sm80.cu"
    assert dims[136] == dims[192] == "flash_fwd_hdim192_bf16_sm80.cu"
    paged = dataclasses.replace(PREFILL, page_size=16)
    assert key(paged) == "flash_fwd_split_hdim64_bf16_sm80.cu" == key(dataclasses.replace(PREFILL, page_size=32))
    assert key(dataclasses.replace(PREFILL, softcap=30.0)) == key(PREFILL) == key(dataclasses.replace(PREFILL, softcap=50.0))
    assert key(dataclasses.replace(PREFILL, dtype="float16")) == "flash_fwd_hdim64_fp16_sm80.cu"


def test_fa2_compile_key_follows_mha_varlen_fwds_rewrites():
    """Lengths decide causal: a window side >= max_seqlen_k becomes -1 (a window wider than the keys is causal), one
    query drops ``causal``; a GQA decode with no window swaps heads into queries and may split (its own file)."""
    key = _fa2_file
    assert key(dataclasses.replace(PREFILL, window=Window(300, 0))) == "flash_fwd_hdim64_bf16_causal_sm80.cu"
    assert key(dataclasses.replace(PREFILL, window=Window(299, 0))) == "flash_fwd_hdim64_bf16_sm80.cu"
    decode = Case((1,), (357,), 8, 4, 64, "float16", Window(None, 0))
    assert key(decode) == "flash_fwd_split_hdim64_fp16_sm80.cu"  # 1 x 4 x 1 blocks on 264: two splits
    assert key(dataclasses.replace(decode, hq=4)) == "flash_fwd_hdim64_fp16_sm80.cu"  # no swap: causal dropped, no split
    one_block = dataclasses.replace(decode, k_lens=(200,))  # one key block of 256: one split
    assert key(one_block) == "flash_fwd_hdim64_fp16_sm80.cu"
    assert key(dataclasses.replace(one_block, page_size=16)) == "flash_fwd_split_align_hdim64_fp16_sm80.cu"
    assert key(dataclasses.replace(decode, q_lens=(2,))) == "flash_fwd_hdim64_fp16_causal_sm80.cu"


def test_fa2_split_heuristic_is_flash_apis():
    """num_splits_heuristic's own example (its comment): 48 blocks on 108 SMs take 2 splits (efficiency 0.89)."""
    assert vllm_fa.fa2_num_splits(48, 108, 64) == 2
    assert vllm_fa.fa2_num_splits(212, 264, 64) == 1  # blocks >= 0.8 of the SMs: no split
    assert vllm_fa.fa2_num_splits(4, 264, 1) == 1  # one key block: nothing to split
    assert vllm_fa.fa2_num_splits(4, 264, 2) == 2


def test_fa3_and_its_split_variants_build_nothing():
    for spec in ("vllm-fa3-cuda", "vllm-fa3-split2-cuda", "vllm-fa3-split256-cuda"):
        be = backends.get(spec)
        assert be.compile_key(PREFILL) is None and be.compile_kernels(PREFILL) == ()
    fa2 = backends.get("vllm-fa2-cuda")
    assert fa2.compile_kernels(PREFILL) == (fa2.compile_key(PREFILL),)
    assert fa2.compile_key(Case((8,), (20,), 4, 2, 64, "bfloat16", Window(3, 0, "top_left"))) is None  # no translation
