import pytest
import torch

from parity import Case, Window, evaluate
from parity.results import DTYPES
from parity.selftest.bugs import NanOnEmptyRows, WindowOneWider
from parity.verdict import budgets_with

from .helpers import Noisy, SkipsLastRow

CASE = Case(q_lens=(40,), k_lens=(40,), hq=4, hkv=2, head_dim=32, dtype="bfloat16", window=Window(6, 0), seed=5)


def test_reference_backend_passes_with_rounding_only():
    row = evaluate("reference", CASE)
    assert row["verdict"] == "pass", row
    assert float(row["err_ratio"]) <= 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_honest_rounding_differences_pass(dtype):
    row = evaluate(Noisy(), Case(**{**CASE.to_dict(), "window": Window(6, 0), "dtype": dtype}))
    assert row["verdict"] == "pass", row["worst_where"]


def test_off_by_one_fails_budget_and_mask_with_words():
    row = evaluate(WindowOneWider(), CASE)
    assert row["verdict"] == "fail"
    assert {"max_err", "mask"} <= set(row["reasons"].split())
    assert "one token wider on the left" in row["mask_detail"]
    assert "window full" in row["worst_where"]


def test_nan_in_rows_without_keys_is_its_own_failure():
    c = Case(q_lens=(12,), k_lens=(5,), hq=2, hkv=2, head_dim=8, dtype="float16", window=Window(2, 0), seed=1)
    row = evaluate(NanOnEmptyRows(), c)
    assert row["verdict"] == "fail" and "nan_masked_rows" in row["reasons"].split()
    assert int(row["nan_masked_rows"]) == 7 * 2 * 8


def test_unwritten_elements_are_detected():
    row = evaluate(SkipsLastRow(), CASE, probes=False)
    assert "unwritten" in row["reasons"].split()
    assert int(row["unwritten"]) == CASE.hq * CASE.head_dim


@pytest.mark.parametrize(
    "item,match",
    [
        ("bfloat16.k_max", "DTYPE.FIELD=VALUE"),
        ("int8.k_max=1", "unknown dtype"),
        ("float16.kmax=1", "unknown field"),
        ("float16.k_max=abc", "not a number"),
        ("float16.k_max=-1", ">= 0"),
    ],
)
def test_budget_overrides_validate(item, match):
    with pytest.raises(ValueError, match=match):
        budgets_with([item])


def test_budget_override_applies():
    assert budgets_with(["bfloat16.k_max=3"])["bfloat16"].k_max == 3.0


def test_a_forward_baseline_with_nan_is_not_judged(monkeypatch):
    """The forward's same-dtype baseline with a NaN gave a NaN mean budget (no error exceeds NaN) and a max budget
    that Python's max() computed without the NaN: such a row is not judged, never passed (as the backward's)."""
    import parity.judge as judge_mod

    real = judge_mod.attention_reference

    def nan_baseline(inputs, compute_dtype=torch.float64, **kw):
        out = real(inputs, compute_dtype, **kw)  # (total_q, hq, d)
        if compute_dtype != torch.float64:
            out[0, 0, 0] = float("nan")
        return out

    monkeypatch.setattr(judge_mod, "attention_reference", nan_baseline)
    case = Case((5,), (9,), 2, 1, 16, "float16", Window(3, 0), seed=4)
    row = evaluate("reference", case)
    assert row["verdict"] == "unsupported" and "not judged" in row["detail"] and "1 non-finite" in row["detail"], row
