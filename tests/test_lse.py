"""The log-sum-exp output (issue 29 item 2): the reference's LSE, the per-row comparison under its own
budget, the empty-row conventions, the backend interface (``returns_lse`` + ``run_lse``), the layouts
the libraries return, and the columns, messages and reports that carry it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from parity import Case, Window
from parity.api import ParityError, assert_parity, evaluate, evaluate_record
from parity.backends.base import BackendError, lse_call, lse_rows, packed_lse
from parity.backends.reference import ReferenceBackend
from parity.backends.xformers import xformers_lse_rows
from parity.case import make_inputs
from parity.judge import compute_baseline
from parity.reference import attention_reference
from parity.results import LSE_COLUMNS, Verdict
from parity.selftest.bugs import EagerWithLse, LseInLog2
from parity.verdict import BUDGETS, compare_lse

#: rows 0..4 of sequence 0 see no key (Sq > Sk, bottom-right), sequence 1 is a plain window; softcap on
EMPTY = Case((9, 6), (4, 6), 4, 2, 16, "bfloat16", Window(2, 0), softcap=5.0, seed=3)
PLAIN = Case((7,), (12,), 2, 1, 16, "float32", Window(3, 1), seed=4)


def _dense_lse(case: Case) -> torch.Tensor:
    """Unbanded float64 logsumexp of the scaled, softcapped, masked scores -> ``(total_q, hq)``."""
    rows = []
    for _, q, k, _, _ in make_inputs(case, "cpu").sequences():
        kx = k.double().repeat_interleave(case.group, 1)  # (Sk, hq, d)
        s = torch.einsum("qhd,khd->hqk", q.double(), kx) * case.softmax_scale  # (hq, Sq, Sk)
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        s = s.masked_fill(~case.window.mask(q.shape[0], k.shape[0], "cpu"), float("-inf"))
        rows.append(torch.logsumexp(s, -1).transpose(0, 1))  # (Sq, hq)
    return torch.cat(rows)


@pytest.mark.parametrize("case", [EMPTY, PLAIN], ids=["empty-rows", "plain"])
def test_reference_lse_is_the_dense_logsumexp_in_blocks_too(case):
    want = _dense_lse(case)
    for block in (64 * 2**20, 64):  # one block, and many tiny ones (the banded path)
        lse = torch.empty(want.shape, dtype=torch.float64)
        attention_reference(make_inputs(case, "cpu"), torch.float64, block_bytes=block, lse=lse)
        assert torch.equal(torch.isneginf(lse), torch.isneginf(want))
        fin = torch.isfinite(want)
        assert torch.allclose(lse[fin], want[fin], rtol=0, atol=1e-12)


def test_baseline_lse_error_sets_a_budget_and_the_reference_passes_it():
    base = compute_baseline(EMPTY, "cpu")
    assert base.ref_lse is not None and base.lse_baseline_max > 0  # bf16 arithmetic costs the baseline something
    got = base.ref_lse.float()
    c = compare_lse(EMPTY, got, base, BUDGETS["bfloat16"], ("-inf",))
    assert c.check == "ok" and c.max_abs_err < c.budget, c.detail
    assert "5 row(s) see no key: LSE -inf (the library's convention: -inf)" in c.detail


def test_log2_lse_fails_and_names_rows_heads_and_the_miss():
    base = compute_baseline(EMPTY, "cpu")
    got = base.ref_lse.float() / math.log(2.0)
    c = compare_lse(EMPTY, got, base, BUDGETS["bfloat16"], ("-inf",))
    assert c.check == "mismatch" and c.max_abs_err > c.budget
    assert "(row, head) LSE values over budget" in c.detail and "seq 1 rows 0..5 (6 rows)" in c.detail
    assert "heads 0,1,2,3" in c.detail and "got " in c.detail and "want " in c.detail


def test_one_wrong_row_is_named():
    base = compute_baseline(PLAIN, "cpu")
    got = base.ref_lse.float().clone()
    got[3, 1] += 0.01  # over the float32 budget
    c = compare_lse(PLAIN, got, base, BUDGETS["float32"])
    assert c.check == "mismatch" and "1 of 14 (row, head)" in c.detail and "seq 0 row 3; heads 1" in c.detail


@pytest.mark.parametrize(
    "value, conventions, check",
    [
        (float("-inf"), ("-inf",), "ok"),
        (float("inf"), ("+inf",), "ok"),
        (float("inf"), ("+inf", "-inf"), "ok"),
        (float("-inf"), ("+inf",), "mismatch"),  # not the library's documented value
        (0.0, ("-inf",), "mismatch"),
        (0.0, ("0",), "ok"),
        (float("nan"), ("-inf",), "mismatch"),
        (float("nan"), ("nan",), "ok"),
        (123.0, ("any",), "ok"),  # undocumented: recorded, not judged
    ],
)
def test_empty_rows_follow_the_librarys_convention(value, conventions, check):
    base = compute_baseline(EMPTY, "cpu")
    got = base.ref_lse.float().clone()
    got[:5] = value  # the rows that see no key
    c = compare_lse(EMPTY, got, base, BUDGETS["bfloat16"], conventions)
    assert c.check == check, c.detail
    assert "see no key" in c.detail


def test_a_non_finite_lse_on_a_row_that_sees_keys_fails():
    base = compute_baseline(EMPTY, "cpu")
    got = base.ref_lse.float().clone()
    got[7, 2] = float("inf")
    c = compare_lse(EMPTY, got, base, BUDGETS["bfloat16"], ("+inf", "-inf"))
    assert c.check == "mismatch" and "got +inf" in c.detail


def test_lse_call_only_where_run_is_not_overridden_below_run_lse():
    class Faulty(ReferenceBackend):  # a test's fault injected in run: measured through run, no LSE
        def run(self, case, inputs, out):
            return super().run(case, inputs, out)

    assert lse_call(ReferenceBackend()) is not None and lse_call(EagerWithLse()) is not None
    assert lse_call(Faulty()) is None
    assert lse_call(LseInLog2()) is not None  # overrides the LSE, not run
    from parity.backends.sdpa import SdpaBackend

    assert lse_call(SdpaBackend()) is None  # returns no LSE


def test_rows_carry_the_lse_columns():
    row = evaluate("flex", EMPTY)
    assert row["verdict"] == "pass" and row["lse_check"] == "ok", row["lse_detail"]
    assert float(row["lse_max_abs_err"]) <= float(row["lse_budget"])
    assert evaluate("sdpa", PLAIN)["lse_check"] == "none"
    v = Verdict.from_row(row)
    assert v.lse_check == "ok" and isinstance(v.lse_budget, float)
    assert {c: str(x) for c, x in v.columns().items() if c in LSE_COLUMNS} == {c: row[c] for c in LSE_COLUMNS}


def test_log2_bug_fails_with_reason_lse_and_assert_parity_says_so():
    judged = evaluate_record(LseInLog2(), PLAIN)
    assert judged.row["verdict"] == "fail" and judged.row["reasons"] == "lse"
    with pytest.raises(ParityError, match=r"lse: \d+ of 14 \(row, head\) LSE values over budget"):
        assert_parity(LseInLog2(), PLAIN)
    assert_parity(EagerWithLse(), PLAIN)


def test_a_wrong_lse_shape_is_an_interface_error():
    class WrongShape(ReferenceBackend):
        def run_lse(self, case, inputs, out):
            out, lse = super().run_lse(case, inputs, out)
            return out, lse.t()

    row = evaluate(WrongShape(), PLAIN)
    assert row["verdict"] == "error" and "run_lse() returned an LSE of shape (2, 7), expected (7, 2)" in row["detail"]


def test_library_layouts_to_rows():
    q_lens = (3, 5)
    want = torch.arange(8 * 4, dtype=torch.float32).view(8, 4)  # (total_q, hq)
    padded = torch.full((2, 4, 6), float("nan"))  # (B, hq, Sq_max), padding never read
    padded[0, :, :3], padded[1, :, :5] = want[:3].t(), want[3:].t()
    assert torch.equal(packed_lse(padded, q_lens), want)
    assert torch.equal(lse_rows(padded, q_lens, 4), want)
    assert torch.equal(lse_rows(want.t().contiguous(), q_lens, 4), want)  # (hq, total_q)
    with pytest.raises(BackendError):
        lse_rows(want, q_lens, 4)  # (total_q, hq) is not a library layout here
    g = padded.view(2, 2, 2, 6)  # xformers (B, G, H, M): heads g * H + h
    assert torch.equal(xformers_lse_rows(g, q_lens, 4), want)
    packed = want.t().reshape(1, 2, 2, 8)  # varlen packed (1, G, H, total_q)
    assert torch.equal(xformers_lse_rows(packed, q_lens, 4), want)


def test_honest_split_kv_and_online_softmax_lse_pass_their_conventions():
    from parity.selftest.honest import OnlineSoftmaxTiled, SplitKV

    for be in (SplitKV(), OnlineSoftmaxTiled()):
        row = evaluate(be, EMPTY)
        assert row["verdict"] == "pass" and row["lse_check"] == "ok", (be.name, row["lse_detail"])
    assert "LSE +inf (the library's convention: +inf)" in evaluate(OnlineSoftmaxTiled(), EMPTY)["lse_detail"]
    wrong = dataclasses.replace(EMPTY)  # same case; the online-softmax variant declaring -inf must fail
    bad = type("Declares", (OnlineSoftmaxTiled,), {"lse_empty": ("-inf",)})()
    assert evaluate(bad, wrong)["reasons"] == "lse"


def test_reports_show_the_lse_columns_and_the_miss(tmp_path):
    from parity.cli import main

    case = '{"q_lens":[7],"k_lens":[12],"hq":2,"hkv":1,"head_dim":16,"dtype":"float32","window":{"left":3,"right":1}}'
    out = tmp_path / "run"
    argv = ["run", "--no-isolate", "--case", case, "-q", "--shrink", "0", "--out", str(out)]
    assert main([*argv, "--backend", "reference", "--backend", "parity.selftest.bugs:LseInLog2"]) == 1
    html = (out / "report.html").read_text()
    assert "lse_check" in html and "lse_budget" in html and "lse: 14 of 14 (row, head) LSE values over budget" in html
    assert "  - lse: 14 of 14 (row, head) LSE values over budget" in (out / "summary.md").read_text()


def test_repro_script_docstring_says_the_lse_miss_and_that_it_does_not_check_it():
    from parity.repro_script import docstring

    meta = {"backend": "x", "summary": "s", "verdict": "fail", "reasons": "lse", "case_json": "{}", "command": "python x.py"}
    text = docstring({**meta, "lse_detail": "3 of 14 (row, head) LSE values over budget"})
    assert "log-sum-exp: 3 of 14 (row, head)" in text and "not the log-sum-exp" in text
    assert "log-sum-exp" not in docstring(meta)


def test_the_pytest_plugin_fails_on_lse_with_the_miss():
    from parity.pytest_plugin import check_row

    judged = evaluate_record(LseInLog2(), PLAIN)
    with pytest.raises(ParityError, match=r"\[lse\][\s\S]*lse: 14 of 14 \(row, head\) LSE values over budget"):
        check_row(judged.row, None, judged)
    with pytest.raises(ParityError, match=r"lse: 14 of 14"):
        check_row(judged.row)  # from the results row alone (its columns)


def test_an_older_runs_pass_and_fail_are_read_as_ok_and_mismatch(tmp_path):
    """lse_check said pass / fail before 2026-12-07 (every other check says ok / mismatch): read back as those."""
    import csv

    from parity.report.runs import read_results
    from parity.results import COLUMNS, blank_row

    words = ("pass", "fail", "none", "")
    rows = [{**blank_row(), "backend": "x", "case_id": str(i), "verdict": "pass", "lse_check": w} for i, w in enumerate(words)]
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    assert list(read_results(path)["lse_check"]) == ["ok", "mismatch", "none", ""]
    assert [Verdict.from_row(r).lse_check for r in rows] == ["ok", "mismatch", "none", ""]
