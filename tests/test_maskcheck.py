from parity import Case, Window, check_gqa, check_mask

from .helpers import DropWindowInDecode, OffByOneLeft, TopLeft, WrongGqaMapping


def test_reference_mask_is_exact():
    c = Case(q_lens=(20, 3), k_lens=(70, 3), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(5, 2), seed=0)
    r = check_mask("reference", c)
    assert r.status == "ok", r.detail


def test_off_by_one_is_described():
    c = Case(q_lens=(32,), k_lens=(32,), hq=2, hkv=2, head_dim=16, dtype="float32", window=Window(7, 0), seed=0)
    r = check_mask(OffByOneLeft(), c)
    assert r.status == "mismatch"
    assert r.detail.startswith("window is one token wider on the left")
    assert "row 8 sees keys 0..8, spec says 1..8" in r.detail


def test_alignment_slip_is_a_shift():
    c = Case(q_lens=(8,), k_lens=(40,), hq=1, hkv=1, head_dim=8, dtype="float16", window=Window(3, 0), seed=0)
    r = check_mask(TopLeft(), c)
    assert r.status == "mismatch" and "shifted" in r.detail


def test_window_dropped_in_decode():
    c = Case(q_lens=(1,), k_lens=(50,), hq=2, hkv=1, head_dim=16, dtype="bfloat16", window=Window.tokens(8), seed=0)
    r = check_mask(DropWindowInDecode(), c)
    assert r.status == "mismatch" and "window ignored" in r.detail
    assert check_mask(DropWindowInDecode(), Case(**{**c.to_dict(), "q_lens": [5], "window": Window.tokens(8)})).status == "ok"


def test_wrong_gqa_mapping_is_named():
    c = Case(q_lens=(10,), k_lens=(10,), hq=4, hkv=2, head_dim=8, dtype="bfloat16", window=Window(3, 0), seed=0)
    assert check_gqa("reference", c).status == "ok"
    r = check_gqa(WrongGqaMapping(), c)
    assert r.status == "mismatch"
    assert "query head 1 used kv head(s) [1], expected kv head 0" in r.detail
