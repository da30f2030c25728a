import pytest
import torch
from hypothesis import given

from parity import Case, Window, attention_reference, make_inputs
from parity.reference import _row_blocks, attention_dense_naive
from parity.strategies import cases


@given(case=cases(dtypes=("float32",), max_len=70))
def test_banded_equals_dense_naive(case):
    inputs = make_inputs(case)
    banded = attention_reference(inputs, block_bytes=4096)  # tiny blocks: many of them
    dense = attention_dense_naive(inputs)
    assert torch.allclose(banded, dense, atol=1e-12, rtol=0), (banded - dense).abs().max()


def test_rows_with_no_key_output_zero():
    c = Case(q_lens=(6,), k_lens=(3,), hq=2, hkv=1, head_dim=4, dtype="float32", window=Window.causal(), seed=1)
    out = attention_reference(make_inputs(c))  # rows 0..2 see no key (bottom-right, Sq > Sk)
    assert (out[:3] == 0).all() and (out[3:] != 0).any()
    assert torch.isfinite(out).all()


def test_gqa_uses_h_over_group():
    c = Case(q_lens=(9,), k_lens=(9,), hq=6, hkv=2, head_dim=8, dtype="float32", window=Window(3, 0), seed=2)
    inp = make_inputs(c)
    out = attention_reference(inp)
    for h in range(6):
        one = Case(q_lens=(9,), k_lens=(9,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=2)
        sub = make_inputs(one).with_tensors(inp.q[:, h : h + 1], inp.k[:, h // 3 : h // 3 + 1], inp.v[:, h // 3 : h // 3 + 1])
        assert torch.allclose(attention_reference(sub)[:, 0], out[:, h])


def test_softcap_and_scale_change_the_result():
    kw = dict(q_lens=(12,), k_lens=(12,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(5, 0), seed=3)
    plain = attention_reference(make_inputs(Case(**kw)))
    capped = attention_reference(make_inputs(Case(softcap=0.5, **kw)))
    scaled = attention_reference(make_inputs(Case(scale=2.0, **kw)))
    assert (plain - capped).abs().max() > 1e-3 and (plain - scaled).abs().max() > 1e-3


@pytest.mark.parametrize("window", [Window(511, 0), Window(100, 100), Window(None, 0)])
def test_block_memory_tracks_the_band_not_sk(window):
    # 32768 queries, W = 512: every block's score matrix stays under the byte budget
    sq = sk = 32768
    lo, hi = window.band(sq, sk)
    budget = 64 * 2**20
    worst = 0
    for r0, r1, k0, k1 in _row_blocks(lo, hi, 8, 8, budget):
        worst = max(worst, 8 * (r1 - r0) * (k1 - k0) * 8)
        assert k0 <= int(lo[r0]) and k1 >= int(hi[r1 - 1]) + 1
    if window.left is not None:
        assert worst <= budget
