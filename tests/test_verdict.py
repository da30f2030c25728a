import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import parity.verdict as verdict
from parity import Case, Window, backends, evaluate
from parity.execute import execute
from parity.expect import load_checked
from parity.judge import BaselineCache, apply_expectations, judge
from parity.results import DTYPES
from parity.selftest.bugs import NanOnEmptyRows, WindowOneWider
from parity.verdict import BUDGETS, budgets_with

from .helpers import Noisy, SkipsLastRow

BASE = BaselineCache("cpu", keep=16)
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


class InfInOneRow(Noisy):
    """Honest, but one element of the middle row is +Inf: one chunk holds a non-finite value, the others do not."""

    name = "inf-one-row"

    def run(self, case, inputs, out):
        super().run(case, inputs, out)
        out[out.shape[0] // 2, 0, 0] = float("inf")
        return out


SAME_CASES = [
    CASE,
    Case(q_lens=(12,), k_lens=(5,), hq=2, hkv=2, head_dim=8, dtype="float16", window=Window(2, 0), seed=1),
    Case(q_lens=(1, 9, 30), k_lens=(50, 40, 64), hq=8, hkv=2, head_dim=16, dtype="float32", window=Window(4, 1), page_size=16, seed=2),
]


@pytest.mark.parametrize("chunk", [None, 1, 97], ids=lambda c: f"chunk={c}")
@pytest.mark.parametrize("backend", ["reference", Noisy, NanOnEmptyRows, WindowOneWider, SkipsLastRow, InfInOneRow], ids=str)
def test_the_comparison_of_written_finite_chunks_keeps_every_column(monkeypatch, backend, chunk):
    """The comparison's fast path (every element written and finite: no masks, one read back per chunk) gives every
    column of a row, numbers bit for bit, as the masked path it skips (the code before 2026-12-07), chunk by chunk
    (``chunk``: elements per chunk; a row of rows with NaN, Inf or unwritten elements goes through both)."""
    if chunk is not None:
        monkeypatch.setattr(verdict, "CHUNK_ELEMENTS", chunk)
    exp = load_checked(None)
    for case in SAME_CASES:
        res = execute(backends.get(backend) if isinstance(backend, str) else backend(), case)
        rows = []
        for fast in (True, False):
            if not fast:
                monkeypatch.setattr(verdict, "_tally_written_finite", lambda *a: False)
            judged = apply_expectations(judge(case, "fa4-cuda", {}, res, BASE, BUDGETS), exp, "2.8.3", case)
            rows.append((judged.row, judged.verdict, judged.comparison))  # the columns, and their numbers unformatted
        monkeypatch.undo()
        if chunk is not None:
            monkeypatch.setattr(verdict, "CHUNK_ELEMENTS", chunk)
        assert rows[0] == rows[1], case.summary()


@pytest.mark.parametrize("where", ["none", "sum_overflows", "inf_in_ref", "nan_in_out", "inf_in_out"])
def test_a_chunk_the_fast_path_declines_is_judged_by_the_masks(monkeypatch, where):
    """Where the errors' sum is not finite (the fast path's test: a NaN or an Inf in the output or the reference, or
    finite errors whose sum overflows) the masks judge the chunk: the same comparison as with no fast path."""
    case = Case(q_lens=(4,), k_lens=(4,), hq=1, hkv=1, head_dim=4, dtype="float32", window=Window(2, 0), seed=0)
    ref = torch.linspace(-1.0, 1.0, 16, dtype=torch.float64).view(4, 1, 4)  # (total_q, hq, d)
    out = ref + 1e-3
    if where == "sum_overflows":
        ref.fill_(1e308)
        out = ref.clone()
        out[1, 0, 2] = out[2, 0, 1] = 0.0  # two errors of 1e308: finite, their sum is not
    elif where == "inf_in_ref":
        ref[3, 0, 0] = float("inf")
    else:
        out[2, 0, 3] = float("nan") if where == "nan_in_out" else float("inf")
    base = verdict.Baseline(ref=ref, baseline_max=1e-3, baseline_mean=1e-4, rounding_max=0.0, empty_rows=torch.zeros(4, dtype=torch.bool))
    fast = verdict.compare(case, out, base, BUDGETS["float32"])
    monkeypatch.setattr(verdict, "_tally_written_finite", lambda *a: False)
    assert repr(fast) == repr(verdict.compare(case, out, base, BUDGETS["float32"]))  # repr: a NaN equals itself there


def test_the_judge_cost_benchmark_runs_and_a_held_baseline_waits_for_no_computation():
    """``benchmarks/judge_cost.py`` on two small models-profile calls: its table, and the cache's hit answered while
    another case's reference is computed (its last line: waited far less than that computation took)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "benchmarks.judge_cost", "--model", "gemma-3-1b", "--calls", "decode-1k-32k,spec-5", "--repeat", "1"]
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300, check=True).stdout
    lines = out.splitlines()
    assert "compare_masked" in lines[1] and len(lines) == 6, out
    waited, took = map(float, re.findall(r"waited ([\d.]+) ms \(that computation took ([\d.]+) ms\)", lines[-1])[0])
    assert waited < took / 4, out
