"""GPU backends: the window translations on the CPU (each checked against the native
library's documented masking rule, re-implemented here), and ``gpu``-marked runs.

The CPU tests compare, for many (Sq, Sk, window) triples, the mask that the translated
native arguments would produce under the library's own rule with ``Window.mask``; a
translation that is off by one, drops a side or mixes up the alignment fails here.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch

from parity import backends
from parity.backends.base import Unsupported
from parity.backends.flash_attn import flash_window
from parity.backends.flash_attn4 import fa4_window
from parity.backends.flashinfer import flashinfer_decode_window, flashinfer_window
from parity.backends.flex import seq_bands
from parity.backends.jax_attn import jax_window
from parity.backends.torch_fa2 import fa2_window
from parity.backends.vllm_fa import vllm_fa_window
from parity.backends.xformers import xformers_bias_spec
from parity.case import Case
from parity.window import Window

SIZES = [(1, 1), (1, 9), (4, 9), (9, 9), (9, 4), (13, 30), (30, 13)]
SIDES = [None, 0, 1, 3, 8, 29, 31]


def windows():
    for left, right in itertools.product(SIDES, SIDES):
        for align in ("bottom_right", "top_left"):
            yield Window(left, right, align)


def fa2_rule(sq: int, sk: int, left: int, right: int) -> torch.Tensor:
    """flash-attn's mask (``-1`` = unbounded), bottom-right: i + sk - sq - left <= j <= i + sk - sq + right."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i + sk - sq - left
    if right >= 0:
        ok &= j <= i + sk - sq + right
    return ok


def fa4_rule(sq: int, sk: int, left: int | None, right: int | None) -> torch.Tensor:
    return fa2_rule(sq, sk, -1 if left is None else left, -1 if right is None else right)


def jax_rule(t: int, s: int, causal: bool, local: tuple[int, int] | None) -> torch.Tensor:
    """jax.nn.dot_product_attention: tril causal mask, window i - l <= j <= i + r (top-left)."""
    i = torch.arange(t)[:, None]
    j = torch.arange(s)[None, :]
    ok = torch.ones(t, s, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if local is not None:
        ok &= (i <= j + local[0]) & (i >= j - local[1])
    return ok


def xformers_rule(name: str, kw: dict, sq: int, sk: int) -> torch.Tensor:
    """The documented mask of each xformers attn_bias class used, for one block."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    s = sk - sq
    if name in ("None", "BlockDiagonalMask"):
        return torch.ones(sq, sk, dtype=torch.bool)
    if name in ("LowerTriangularMask", "BlockDiagonalCausalMask"):
        return j <= i
    if name in ("LowerTriangularFromBottomRightMask", "BlockDiagonalCausalFromBottomRightMask"):
        return j <= i + s
    if name == "BlockDiagonalCausalLocalAttentionMask":  # i - window_size < j <= i
        return (j <= i) & (j > i - kw["window_size"])
    if name in ("LowerTriangularFromBottomRightLocalAttentionMask", "BlockDiagonalCausalLocalAttentionFromBottomRightMask"):
        return (j <= i + s) & (j > i + s - kw["window_size"])
    if name == "LocalAttentionFromBottomRightMask":  # q - left <= k + (sq - sk) <= q + right
        return (i - kw["window_left"] <= j - s) & (j - s <= i + kw["window_right"])
    raise AssertionError(f"unknown bias {name}")


def test_fa2_and_fa3_translation_matches_flash_attn_rule():
    checked = 0
    for w in windows():
        for sq, sk in SIZES:
            for fn in (fa2_window, flash_window):
                try:
                    left, right = fn(w, [sq], [sk])
                except Unsupported:
                    assert w.align == "top_left" and sq != sk
                    continue
                assert torch.equal(fa2_rule(sq, sk, left, right), w.mask(sq, sk)), (w, sq, sk, left, right)
                checked += 1
    assert checked > 500


def test_fa4_uses_none_not_minus_one():
    assert fa4_window(Window(None, 0), [5], [9]) == (None, 0)
    assert fa4_window(Window(None, None), [5], [9]) == (None, None)
    assert fa2_window(Window(None, 0), [5], [9]) == (-1, 0)
    for w in windows():
        for sq, sk in SIZES:
            try:
                left, right = fa4_window(w, [sq], [sk])
            except Unsupported:
                continue
            assert -1 not in (left, right)
            assert torch.equal(fa4_rule(sq, sk, left, right), w.mask(sq, sk)), (w, sq, sk)


@pytest.mark.parametrize("causal_with_window", [False, True], ids=["window-alone", "causal-plus-window"])
def test_jax_translation_with_query_padding(causal_with_window):
    checked = 0
    for w in windows():
        for sq, sk in SIZES:
            try:
                pad, causal, local = jax_window(w, sq, sk, causal_with_window)
            except Unsupported:
                assert w.align == "bottom_right" and sq > sk
                continue
            got = jax_rule(sq + pad, sk, causal, local)[pad:]
            assert torch.equal(got, w.mask(sq, sk)), (w, sq, sk, pad, causal, local)
            checked += 1
    assert checked > 300


def test_xformers_bias_choice_matches_its_documented_masks():
    checked = 0
    for w in windows():
        for sq, sk in SIZES:
            try:
                name, kw = xformers_bias_spec(w, [sq], [sk])
            except Unsupported:
                continue
            assert torch.equal(xformers_rule(name, kw, sq, sk), w.mask(sq, sk)), (w, sq, sk, name, kw)
            checked += 1
    assert checked > 200
    # varlen: block-diagonal masks, each block by the same rule
    for w in windows():
        ql, kl = [4, 9, 13], [9, 9, 30]
        try:
            name, kw = xformers_bias_spec(w, ql, kl)
        except Unsupported:
            assert w.right != 0 and not (w.left is None and w.right is None)
            continue
        assert name.startswith("BlockDiagonal")
        for sq, sk in zip(ql, kl):
            assert torch.equal(xformers_rule(name, kw, sq, sk), w.mask(sq, sk)), (w, sq, sk, name)


def test_vllm_fa_translation_matches_flash_attn_rule():
    """vLLM's (causal, window_size) under flash-attn's documented rule: causal=True forces right = 0."""
    checked = 0
    for w in windows():
        for sq, sk in SIZES:
            try:
                causal, (left, right) = vllm_fa_window(w, [sq], [sk])
            except Unsupported:
                assert w.align == "top_left" and sq != sk
                continue
            assert causal == (w.right == 0)
            assert torch.equal(fa2_rule(sq, sk, left, 0 if causal else right), w.mask(sq, sk)), (w, sq, sk, causal, left, right)
            checked += 1
    assert checked > 400
    # as vLLM's FlashAttention backend builds them: sliding_window=W -> (W - 1, 0) causal; full causal -> (-1, -1) causal
    assert vllm_fa_window(Window.tokens(4096), [1], [9000]) == (True, (4095, 0))
    assert vllm_fa_window(Window(None, 0), [5], [9]) == (True, (-1, -1))
    assert vllm_fa_window(Window(None, None), [5], [9]) == (False, (-1, -1))
    assert vllm_fa_window(Window(7, 7), [9], [9]) == (False, (7, 7))  # vLLM's encoder-only window


def test_flashinfer_translation():
    for w in windows():
        for sq, sk in SIZES:
            try:
                causal, left = flashinfer_window(w, sq, sk)
            except Unsupported:
                continue
            assert torch.equal(fa2_rule(sq, sk, left, 0 if causal else -1), w.mask(sq, sk)), (w, sq, sk)


#: A side past every key of any case here: a C int window argument must never see it (flash-attn takes ``int``).
HUGE = 2**62
INT32_MAX = 2**31 - 1


def _per_sequence(fn):
    return lambda w, ql, kl: [fn(w, sq, sk) for sq, sk in zip(ql, kl)]


#: Every backend's window translation, as ``fn(window, q_lens, k_lens) -> native``: those that give one argument for
#: the whole batch (``batch``: capped at the longest Sq plus the longest Sk) and those that give one per sequence.
BATCH_TRANSLATIONS = {
    "fa2_window": fa2_window,
    "flash_window": flash_window,
    "fa4_window": fa4_window,
    "vllm_fa_window": vllm_fa_window,
    "xformers_bias_spec": xformers_bias_spec,
}
SEQUENCE_TRANSLATIONS = {
    "jax_window": _per_sequence(jax_window),
    "jax_window causal_with_window": _per_sequence(lambda w, sq, sk: jax_window(w, sq, sk, True)),
    "flashinfer_window": _per_sequence(flashinfer_window),
    "flashinfer_decode_window": _per_sequence(flashinfer_decode_window),
    "flex seq_bands": lambda w, ql, kl: seq_bands(w, ql, kl, bucketed=False),
    "flex seq_bands bucketed": lambda w, ql, kl: seq_bands(w, ql, kl, bucketed=True),
    "flex seq_bands chunk": lambda w, ql, kl: seq_bands(w, ql, kl, bucketed=True, chunk=HUGE),
    "sdpa native": lambda w, ql, kl: backends.get("sdpa").native(Case(ql, kl, 2, 1, 8, "float32", w)),
}


def _native_or_refusal(fn, w: Window, ql, kl):
    try:
        return fn(w, ql, kl)
    except Unsupported:
        return "Unsupported"  # its words name the window as given (its side), so only that it refused is compared


def _ints(x) -> list[int]:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return []
    if isinstance(x, int):
        return [x]
    if isinstance(x, dict):
        return [i for v in x.values() for i in _ints(v)]
    return [i for v in x for i in _ints(v)] if isinstance(x, (tuple, list)) else []


def _huge_windows():
    for left, right in itertools.product([None, 0, 3, HUGE], repeat=2):
        if HUGE in (left, right):
            for align in ("bottom_right", "top_left"):
                yield Window(left, right, align)


def _capped(w: Window, cap: int) -> Window:
    return Window(*(cap if side == HUGE else side for side in (w.left, w.right)), w.align)


def _check_capped(name: str, fn, ql, kl, cap: int) -> int:
    """``fn``'s native argument for each window with a side of :data:`HUGE` against the same window with that side
    ``cap``; every int of it fits a C int. Returns the windows compared."""
    checked = 0
    for w in _huge_windows():
        got, want = _native_or_refusal(fn, w, ql, kl), _native_or_refusal(fn, _capped(w, cap), ql, kl)
        assert got == want, f"{name}{(ql, kl)}: window {w.describe()} gives {got}, the side capped at {cap} gives {want}"
        over = [i for i in _ints(got) if abs(i) > INT32_MAX]
        assert not over, f"{name}{(ql, kl)}: window {w.describe()} passes {over}, {max(over) / INT32_MAX:.3g}x a C int's most"
        checked += got != "Unsupported"
    return checked


def test_every_window_translation_caps_a_side_past_every_key():
    """A side of 2**62 (a valid ``Window``: sides go to 2**63 - 1) reaches past every key, as a side of ``Sq + Sk``
    does (:meth:`Window.sides`); every backend's translation passes the capped side, so a C ``int`` window argument
    (flash-attn's ``window_size``, xformers' and FlashInfer's, a static XLA window) never wraps or overflows. A side
    the translation passes as its own "unbounded" sentinel (``None``: flash-attn's -1) stays one."""
    checked = 0
    for (sq, sk), (name, fn) in itertools.product(SIZES, {**BATCH_TRANSLATIONS, **SEQUENCE_TRANSLATIONS}.items()):
        checked += _check_capped(name, fn, [sq], [sk], sq + sk)
    ql, kl = [4, 9, 13], [9, 9, 30]  # one argument for the batch: capped at the longest Sq plus the longest Sk
    for name, fn in BATCH_TRANSLATIONS.items():
        checked += _check_capped(name, fn, ql, kl, max(ql) + max(kl))
    assert checked > 400, checked


def test_a_window_wider_than_the_sequence_reaches_the_kernel_as_named_when_a_c_int_holds_it():
    """Only a side past a C ``int`` is replaced (:meth:`Window.native_sides`): a window wider than its sequence, a case
    users write (``window_size=(4096, 0)`` on 100 tokens), reaches each kernel as named, so a kernel that mishandles
    it is still caught."""
    ql, kl = [4], [9]
    assert fa2_window(Window(15, 0), ql, kl) == (15, 0)
    assert fa2_window(Window(INT32_MAX, 0), ql, kl) == (INT32_MAX, 0)
    assert fa2_window(Window(INT32_MAX + 1, 0), ql, kl) == (13, 0)
    assert vllm_fa_window(Window(15, 20), ql, kl) == (False, (15, 20))
    assert fa4_window(Window(15, 20), ql, kl) == (15, 20)
    assert flashinfer_window(Window(15, 0), 4, 9) == (True, 15)
    assert 15 in _ints(jax_window(Window(15, 0), 9, 9))


@pytest.mark.parametrize("name", ["flashinfer-paged-cuda", "flashinfer-decode-cuda", "flashinfer-decode-split2-cuda"])
def test_flashinfer_paged_batch_window_is_capped_for_its_longest_sequence(name):
    """The paged backends pass one ``window_left`` for the batch: capped at the longest sequence's lengths, not the
    first's (which would cut the window of a longer sequence after it), and a side of 2**62 gives the capped one."""
    backend = backends.get(name)
    ql = [1, 1] if "decode" in name else [4, 9]
    case = Case(ql, [9, 300], 2, 1, 64, "float16", Window(200, 0), page_size=16)
    assert backend.native(case)["window_left"] == 200  # a side below the cap: as given
    huge = backend.native(dataclasses.replace(case, window=Window(HUGE, 0)))
    assert huge == backend.native(dataclasses.replace(case, window=Window(max(ql) + 300, 0))), huge
    assert huge["window_left"] == max(ql) + 300, huge


def test_gpu_backends_are_registered_and_constructible_without_imports():
    names = backends.expand("all-gpu")
    for n in (
        "torch-fa2-cuda",
        "fa4-cuda",
        "xformers-cutlass-cuda",
        "xformers-flash-cuda",
        "jax-xla-cuda",
        "jax-cudnn-cuda",
        "fa2-cuda",
        "fa3-cuda",
        "fa2-kvcache-cuda",
        "flashinfer-cuda",
        "vllm-fa2-cuda",
        "vllm-fa3-cuda",
    ):
        assert n in names
        assert backends.get(n).device == "cuda"
    assert backends.marker_for("torch-fa2-cuda") == "torch_fa2"
    assert backends.marker_for("fa4-cuda") == "flash_attn"
    assert backends.marker_for("vllm-fa3-cuda") == "vllm"


def test_unsupported_reasons_name_the_limit():
    fa2 = backends.get("torch-fa2-cuda")
    c = Case((8,), (8,), 2, 2, 64, "float32", Window(3, 0))
    assert "float16/bfloat16" in fa2.unsupported_reason(c)
    c = Case((8,), (20,), 2, 2, 64, "bfloat16", Window(3, 0, "top_left"))
    assert "top_left" in fa2.unsupported_reason(c)
    assert fa2.unsupported_reason(Case((8,), (20,), 2, 2, 64, "bfloat16", Window(3, 0))) is None
    jx = backends.get("jax-xla-cuda")
    assert "Sq > Sk" in jx.unsupported_reason(Case((20,), (8,), 2, 2, 64, "bfloat16", Window(3, 0)))


def test_consistency_check_catches_a_decode_bug():
    from parity.consistency import check
    from parity.selftest.bugs import DecodeDropsWindow

    case = Case((40,), (40,), 2, 1, 16, "float32", Window.tokens(8), seed=3)
    good = check(backends.get("reference"), case)
    assert good and all(r["verdict"] == "pass" for r in good)
    bad = check(DecodeDropsWindow(), case, chunk=10)  # chunks of 10: no Sq = 1 call in the chunked check
    decode = [r for r in bad if r["check"] == "decode"]
    assert any(r["verdict"] == "fail" for r in decode)  # positions past the window see all keys
    assert all(r["verdict"] == "pass" for r in bad if r["check"] == "chunked")


# -- on a GPU -----------------------------------------------------------------------------------

GPU_BACKENDS = [
    "torch-fa2-cuda",
    "torch-fa2-varlen-cuda",
    "fa4-cuda",
    "fa4-varlen-cuda",
    "xformers-cutlass-cuda",
    "xformers-flash-cuda",
    "jax-xla-cuda",
    "jax-cudnn-cuda",
    "fa2-cuda",
    "fa3-cuda",
    "flashinfer-cuda",
    "flashinfer-paged-cuda",
    "flashinfer-decode-cuda",
    "vllm-fa2-cuda",
    "vllm-fa3-cuda",
    "fa2-kvcache-split128-cuda",  # split-KV forced to each library's most (tests/test_split_kv.py)
    "fa3-split256-cuda",
    "vllm-fa3-split256-cuda",
    "flashinfer-decode-splitmax-cuda",
]


def _available(spec: str):
    be = backends.get(spec)
    why = be.unavailable_reason()
    if why:
        pytest.skip(f"{spec} unavailable: {why}")
    return be


GPU_CASES = [
    Case((64,), (64,), 4, 2, 64, "bfloat16", Window.tokens(16), seed=1),
    Case((1, 1), (100, 37), 8, 2, 64, "bfloat16", Window.tokens(16), seed=2),
    Case((16,), (80,), 4, 1, 64, "bfloat16", Window(23, 0), seed=3),
    Case((30, 7, 64), (30, 7, 64), 4, 2, 64, "float16", Window(12, 0), seed=4),
    Case((3, 1), (70, 33), 4, 1, 64, "bfloat16", Window(19, 0), page_size=16, seed=5),  # paged backends only
]


def _consistency_rows(spec: str, case: Case, path: list[str] | None) -> list[dict]:
    """:func:`parity.consistency.check` of ``spec``: in this process, or (a backend with a worker
    path) in a subprocess with that path first on sys.path, as the sweep's worker would have it."""
    from parity.consistency import check as consistency_check

    if not path:
        return consistency_check(_available(spec), case)
    code = (
        "import json, sys; from parity import backends; from parity.case import Case; "
        "from parity.consistency import check; be = backends.get(sys.argv[1]); why = be.unavailable_reason(); "
        "print(json.dumps({'unavailable': why} if why else check(be, Case.from_json(sys.argv[2]))))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, *[p for p in sys.path if p]]))
    p = subprocess.run([sys.executable, "-c", code, spec, case.to_json()], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, f"{spec}: consistency worker exited {p.returncode}: {p.stderr[-2000:]}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if isinstance(out, dict):
        pytest.skip(f"{spec} unavailable: {out['unavailable']}")
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.summary().replace(" ", "_"))
@pytest.mark.parametrize("spec", GPU_BACKENDS)
def test_gpu_backend_windowed_cases_pass(spec, case, expectations, worker_paths):
    """Pass, or a known divergence (xfail naming the entry); an unexpected pass of a strict entry fails.
    A backend with a worker path (``--worker-path``) runs in its worker process."""
    from parity.api import evaluate_record
    from tests.known import check, xfail_if_expected

    path = worker_paths.get(spec)
    if not path:
        _available(spec)
    if case.page_size is not None and not backends.get(spec).supports_paged:
        pytest.skip(f"{spec} has no paged path")
    judged = check(evaluate_record(spec, case, expectations=expectations, worker_path=path), expectations)
    row = judged.row
    if row["verdict"] in ("unavailable", "unsupported"):
        pytest.skip(f"{row['verdict']}: {row['detail']}")
    xfail_if_expected(judged, expectations)
    assert row["verdict"] == "pass", f"{spec}: {row['verdict']} {row['reasons']} {row['detail']} {row['worst_where']}"


#: the engine checks' cases on CUDA (--graph-replay, --invariance): a paged decode batch and a varlen prefill batch
ENGINE_CASES = [
    Case((1, 1, 1), (70, 33, 129), 8, 2, 64, "bfloat16", Window(31, 0), page_size=16, seed=6),
    Case((37, 64), (37, 100), 4, 2, 64, "float16", Window(16, 0), seed=7),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", ENGINE_CASES, ids=lambda c: c.summary().replace(" ", "_"))
@pytest.mark.parametrize("spec", GPU_BACKENDS)
def test_gpu_graph_replay_and_batch_invariance(spec, case, expectations, worker_paths):
    """The call captured in a CUDA graph and replayed on new values equals the eager call bit for bit (or the backend
    says why it does not capture: ``not_run``), and each sequence alone or rotated equals its rows in the batch; a
    known divergence naming the check is an xfail. On an H100 (lab/runs/h100-2026-12-07-checks) 1026 replays of torch's
    backends were bit-equal; a capture that errors here is the harness's graph call to mend, or a finding."""
    from parity.api import evaluate_record
    from tests.known import check, xfail_if_expected

    path = worker_paths.get(spec)
    if not path:
        _available(spec)
    if case.page_size is not None and not backends.get(spec).supports_paged:
        pytest.skip(f"{spec} has no paged path")
    judged = check(evaluate_record(spec, case, expectations=expectations, worker_path=path, checks=("graph", "invariance")), expectations)
    row = judged.row
    if row["verdict"] in ("unavailable", "unsupported"):
        pytest.skip(f"{row['verdict']}: {row['detail']}")
    xfail_if_expected(judged, expectations)
    assert row["graph_check"] in ("ok", "not_run"), f"{spec}: graph replay {row['graph_check']}: {row['graph_detail']}"
    assert not row["graph_detail"].startswith("needs CUDA"), row["graph_detail"]  # not_run: the backend's refusal only
    assert row["invariance_check"] == "ok", f"{spec}: batch invariance {row['invariance_check']}: {row['invariance_detail']}"


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["torch-fa2-cuda", "fa4-cuda", "xformers-flash-cuda", "jax-cudnn-cuda"])
def test_gpu_decode_and_chunked_consistency(spec, expectations, worker_paths):
    """Decode steps and chunked prefill equal one-shot prefill. Where the prefill itself is a known
    divergence (judged on the same case), its decode / chunked mismatches follow from it: an xfail."""
    from parity.api import evaluate_record
    from tests.known import check, xfail_if_expected

    path = worker_paths.get(spec)
    case = Case((512,), (512,), 8, 2, 64, "bfloat16", Window.tokens(100), seed=5)
    rows = _consistency_rows(spec, case, path)
    bad = [r for r in rows if r["verdict"] != "pass"]
    if bad:
        xfail_if_expected(check(evaluate_record(spec, case, expectations=expectations, worker_path=path), expectations), expectations)
    assert not bad, bad


def test_flex_bucketed_path_matches_reference_on_cpu():
    """flex-cuda pads lengths to power-of-two buckets and passes the window as tensors;
    the same code run eagerly on the CPU must still pass (padded keys masked, rows cut)."""
    from parity.api import evaluate
    from parity.backends.flex import FlexCudaBackend, bucket_len

    class FlexBucketedCpu(FlexCudaBackend):
        name = "flex-bucketed-cpu"
        device = "cpu"
        compiled = False

    assert [bucket_len(n) for n in (1, 128, 129, 600)] == [128, 128, 256, 1024]
    be = FlexBucketedCpu()
    for case in (
        Case((1, 1), (100, 37), 8, 2, 64, "float32", Window.tokens(16), seed=1),
        Case((40,), (24,), 4, 2, 32, "float32", Window(8, 0), seed=2),  # leading rows see no key
        Case((16,), (40,), 2, 2, 32, "float32", Window(5, 0, "top_left"), seed=3),
        Case((30, 7, 64), (30, 7, 64), 4, 2, 32, "float32", Window(12, 3), seed=4),
    ):
        row = evaluate(be, case)
        assert row["verdict"] == "pass", (case.summary(), row["reasons"], row["mask_detail"], row["worst_where"])


def test_jax_inputs_are_aligned_before_dlpack():
    """A sequence's view into a packed batch starts anywhere; JAX takes the buffer as it is and XLA
    rejected an unaligned one on the H200. The helper hands over aligned, equal tensors."""
    from parity.backends.jax_attn import XLA_ALIGNMENT, dlpack_ready

    packed = torch.randn(101, 3, 16, dtype=torch.float16)  # (total, h, d)
    view = packed[7:40]  # starts 7 * 3 * 16 * 2 = 672 bytes in
    assert view.data_ptr() % XLA_ALIGNMENT != 0 or packed.data_ptr() % XLA_ALIGNMENT != 0
    ready = dlpack_ready(view)
    assert ready.data_ptr() % XLA_ALIGNMENT == 0 and torch.equal(ready, view)
    aligned = torch.randn(64, 3, 16)
    if aligned.data_ptr() % XLA_ALIGNMENT == 0:
        assert dlpack_ready(aligned).data_ptr() == aligned.data_ptr()  # no copy when there is no need


def test_xformers_varlen_bottom_right_with_sq_gt_sk_is_unsupported_up_front():
    """xformers' own check refused these on the H200 ("Expected `num_keys >= num_queries`"); the
    translation says so before the call, so the design can give xformers a sibling it takes."""
    with pytest.raises(Unsupported, match="Sk >= Sq in every sequence"):
        xformers_bias_spec(Window(None, 0), (256, 114), (145, 120))
    with pytest.raises(Unsupported, match="Sk >= Sq in every sequence"):
        xformers_bias_spec(Window(64, 0), (127, 138), (92, 138))
    assert xformers_bias_spec(Window(64, 0), (92, 138), (127, 138))[0] == "BlockDiagonalCausalLocalAttentionFromBottomRightMask"
    assert xformers_bias_spec(Window(64, 0, "top_left"), (127, 138), (92, 138))[0] == "BlockDiagonalCausalLocalAttentionMask"
