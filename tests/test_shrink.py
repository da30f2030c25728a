from parity import Case, Window, evaluate
from parity.selftest.bugs import WindowOneWider
from parity.shrink import shrink


def test_failing_case_shrinks_and_still_fails_the_same_way():
    big = Case(q_lens=(90, 31), k_lens=(90, 60), hq=6, hkv=2, head_dim=64, dtype="bfloat16", window=Window(12, 0), softcap=5.0, seed=4)
    bug = WindowOneWider()
    row = evaluate(bug, big)
    assert row["verdict"] == "fail"
    small, small_row, calls = shrink(big, row, lambda c: evaluate(bug, c), max_calls=60)
    assert small_row["verdict"] == "fail" and "mask" in small_row["reasons"]
    assert small.batch == 1 and small.hq <= 2 and sum(small.q_lens) < 40 and small.head_dim <= 16
    assert small.softcap is None and calls <= 60


def test_honest_backend_does_not_shrink_into_a_failure():
    c = Case(q_lens=(20,), k_lens=(20,), hq=2, hkv=1, head_dim=16, dtype="float16", window=Window(3, 0), seed=1)
    row = evaluate("reference", c)
    small, small_row, _ = shrink(c, {**row, "verdict": "fail", "reasons": "mask"}, lambda x: evaluate("reference", x), max_calls=10)
    assert small == c  # nothing smaller fails
