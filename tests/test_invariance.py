"""Batch invariance (``parity run --invariance``, :mod:`parity.invariance`): sub-batches of the row's own values,
each sequence's output equal to its output in the full batch; the planted batch-dependent reduction caught
(inside every error budget), honest eager backends passing; its known-divergence path (:mod:`parity.expect`)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from parity import Case, Window, evaluate
from parity.backends.base import Unsupported
from parity.case import make_inputs
from parity.expect import ExpectationError, Expectations, load_file
from parity.invariance import ALONE_MAX, diff, run_invariance, sub_inputs, variants
from parity.judge import BaselineCache
from parity.results import ADDED_COLUMNS, CHECK_COLUMNS, COLUMNS, Verdict
from parity.selftest.bugs import BUGS, BatchDependentReduction, EagerAttention
from parity.selftest.honest import OnlineSoftmaxTiled, PagedLongPath, SplitKV

VARLEN = Case(q_lens=(5, 9, 3), k_lens=(7, 9, 12), hq=4, hkv=2, head_dim=16, dtype="float32", window=Window(3, 0), seed=3)
DECODE = Case(q_lens=(1, 1), k_lens=(40, 17), hq=4, hkv=1, head_dim=16, dtype="float32", window=Window(7, 0), seed=5)
PAGED = Case(q_lens=(3, 2), k_lens=(33, 20), hq=2, hkv=2, head_dim=8, dtype="float32", window=Window(9, 0), page_size=8, seed=1)
ONE = Case(q_lens=(6,), k_lens=(6,), hq=2, hkv=2, head_dim=8, dtype="float32", window=Window(2, 0))
#: a paged batch whose longest sequence takes PagedLongPath's long path (> 1024 keys) while the other alone does not
LONG = Case(q_lens=(1, 1), k_lens=(1100, 300), hq=2, hkv=1, head_dim=16, dtype="float32", window=Window(299, 0), page_size=64, seed=2)
#: per-(sequence, kv head) fp8 descales (an H100 run, 2026-12-07: a sub-batch kept every sequence's descales)
FP8 = Case(
    q_lens=(1, 1, 1), k_lens=(20, 7, 12), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(6, 0), page_size=4,
    kv_dtype="float8_e4m3fn", q_fp8=True, fp8_scales="batch_kv_head", seed=3005,
)  # fmt: skip
BASE = BaselineCache("cpu", keep=16)


def test_sub_inputs_are_the_same_values_as_a_batch_of_their_own():
    inputs = make_inputs(VARLEN)
    sub = sub_inputs(inputs, [2, 0])
    assert sub.case.q_lens == (3, 5) and sub.case.k_lens == (12, 7) and sub.case.batch == 2
    assert sub.cu_seqlens_q.tolist() == [0, 3, 8] and sub.cu_seqlens_k.tolist() == [0, 12, 19]
    assert torch.equal(sub.q[:3], inputs.q[14:17]) and torch.equal(sub.q[3:], inputs.q[:5])
    assert torch.equal(sub.k[:12], inputs.k[16:28]) and torch.equal(sub.v[12:], inputs.v[:7])


def test_sub_inputs_take_their_sequences_descales():
    inputs = make_inputs(FP8)
    sub = sub_inputs(inputs, [2, 0])
    for name in ("q_descale", "k_descale", "v_descale"):
        full, got = getattr(inputs, name), getattr(sub, name)  # (B, hkv) and (B', hkv)
        assert full.shape == (3, 2) and torch.equal(got, full[[2, 0]]), name


def test_variants_are_bounded_and_every_sequence_moves_in_the_rotation():
    assert variants((1, 1), (5, 9)) == [("alone", [0]), ("alone", [1]), ("rotated", [1, 0])]
    many = variants((1,) * 8, (4, 4, 30, 4, 4, 4, 4, 4))
    alone = [o for n, o in many if n == "alone"]
    assert len(alone) == ALONE_MAX and [2] in alone and [0] in alone and [7] in alone
    rotated = dict(many)["rotated"]
    assert sorted(rotated) == list(range(8)) and all(rotated[i] != i for i in range(8))


def test_diff_is_exact_and_treats_nan_as_equal_to_nan():
    a = torch.tensor([1.0, float("nan"), 0.0])
    assert diff(a, a.clone()) == (True, 0.0)
    assert diff(a, torch.tensor([1.0, float("nan"), -0.0])) == (True, 0.0)
    same, d = diff(a, torch.tensor([1.0 + 2**-20, float("nan"), 0.0]))
    assert not same and d == pytest.approx(2**-20)
    assert diff(a, torch.tensor([1.0, 2.0, 0.0])) == (False, float("inf"))


def _honest_call(backend, case):
    def call(inp):
        out = torch.empty(inp.q.shape, dtype=case.torch_dtype)
        return backend.run(inp.case, inp, out)

    return call


def test_run_invariance_words():
    eager = EagerAttention()
    inputs = make_inputs(VARLEN)
    full = _honest_call(eager, VARLEN)(inputs)
    ok = run_invariance(inputs, full, _honest_call(eager, VARLEN))
    assert ok["status"] == "ok" and ok["max_diff"] == 0.0 and "3 sub-batches" in ok["detail"]
    one = make_inputs(ONE)
    assert run_invariance(one, full, _honest_call(eager, ONE)) == {"status": "not_run", "detail": "B=1: one sequence, no batch to vary"}

    def refuse(inp):
        raise Unsupported("single sequences are not my thing")

    got = run_invariance(inputs, full, refuse)
    assert got["status"] == "not_run" and "refused every sub-batch" in got["detail"] and "not my thing" in got["detail"]

    def boom(inp):
        raise RuntimeError("kernel exploded")

    got = run_invariance(inputs, full, boom)
    assert got["status"] == "error" and "RuntimeError" in got["detail"] and "kernel exploded" in got["detail"]
    shifted = full.clone()
    shifted[14:] += 1e-3  # sequence 2's rows in the "full batch" differ from what it gives alone
    got = run_invariance(inputs, shifted, _honest_call(eager, VARLEN))
    assert got["status"] == "mismatch" and got["detail"].startswith("seq 2") and got["max_diff"] == pytest.approx(1e-3, rel=1e-2)


@pytest.mark.parametrize("case", [VARLEN, DECODE, PAGED], ids=["varlen", "decode", "paged"])
def test_the_planted_batch_dependent_reduction_fails_only_the_invariance_check(case):
    """Its outputs are inside the error budget (the row passes without --invariance); with it, the row fails with
    the one reason batch_invariance and says which sequence."""
    off = evaluate(BatchDependentReduction(), case, baselines=BASE)
    assert off["verdict"] == "pass" and off["invariance_check"] == "not_run" and "--invariance" in off["invariance_detail"]
    on = evaluate(BatchDependentReduction(), case, baselines=BASE, checks=("invariance",))
    assert on["verdict"] == "fail" and on["reasons"] == "batch_invariance", on
    assert float(on["budget_frac"]) <= 1.0 and on["invariance_check"] == "mismatch"
    assert on["invariance_detail"].startswith("seq ") and "alone" in on["invariance_detail"] and float(on["invariance_max_diff"]) > 0
    assert on["repro"].endswith(" --invariance")


def test_the_planted_bug_is_in_the_self_test_with_its_check():
    bug = next(b for b in BUGS if b.name == "bug-batch-dependent-reduction")
    assert bug.checks == ("invariance",) and bug.backend is BatchDependentReduction


@pytest.mark.parametrize("backend", ["reference", EagerAttention(), SplitKV(), OnlineSoftmaxTiled()], ids=str)
@pytest.mark.parametrize("case", [VARLEN, DECODE, PAGED, FP8], ids=["varlen", "decode", "paged", "fp8-per-sequence"])
def test_honest_eager_backends_are_batch_invariant(backend, case):
    row = evaluate(backend, case, baselines=BASE, checks=("invariance",))
    assert row["verdict"] in ("pass", "unsupported"), row
    if row["verdict"] == "pass":
        assert row["invariance_check"] == "ok" and row["invariance_max_diff"] == "0"


def test_a_row_of_one_sequence_is_not_run():
    row = evaluate("reference", ONE, baselines=BASE, checks=("invariance",))
    assert row["verdict"] == "pass" and row["invariance_check"] == "not_run" and row["invariance_detail"].startswith("B=1")


def test_an_unknown_check_is_refused():
    with pytest.raises(ValueError, match="unknown engine check"):
        evaluate("reference", ONE, checks=("nope",))


# -- the known-divergence path ----------------------------------------------------------------------------


def _entries(tmp_path: Path, body: str) -> Expectations:
    path = tmp_path / "known.toml"
    path.write_text(body)
    return Expectations(load_file(path), (str(path),))


NOT_PROMISED = """
[[divergence]]
id = "long-path-by-batch"
backend = "parity.selftest.honest:PagedLongPath"
condition = {paged = "yes"}
reasons = ["batch_invariance"]
invariance_detail = "alone"
explanation = "the long path is chosen by the batch's longest sequence: no promise of batch invariance"
upstream = "not reported"
strict = false
"""


def test_a_library_that_does_not_promise_invariance_gets_expected(tmp_path):
    """PagedLongPath (honest on values) picks its path by the batch's longest sequence, so a short sequence alone
    takes the other path: not batch invariant, as a library that does not promise it. An entry naming
    batch_invariance turns the row into expected; without the entry it fails."""
    spec = "parity.selftest.honest:PagedLongPath"
    bare = evaluate(spec, LONG, baselines=BASE, checks=("invariance",))
    assert bare["verdict"] == "fail" and bare["reasons"] == "batch_invariance" and "seq 1 alone" in bare["invariance_detail"]
    known = _entries(tmp_path, NOT_PROMISED)
    row = evaluate(spec, LONG, baselines=BASE, checks=("invariance",), expectations=known)
    assert row["verdict"] == "expected" and row["expected_id"] == "long-path-by-batch" and row["raw_verdict"] == "fail"
    assert isinstance(PagedLongPath(), EagerAttention)


def _row(reasons: str, inv: str = "mismatch", detail: str = "seq 1 alone: max |diff| 1e-07") -> dict[str, str]:
    return {
        "backend": "parity.selftest.honest:PagedLongPath",
        "verdict": "fail" if reasons else "pass",
        "raw_verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "detail": "",
        "invariance_check": inv,
        "invariance_detail": detail,
        "case_json": LONG.to_json(),
    }


NUMERIC = """
[[divergence]]
id = "numeric"
backend = "parity.selftest.honest:PagedLongPath"
condition = {paged = "yes"}
reasons = ["max_err"]
explanation = "a numeric finding"
upstream = "not reported"
"""


def test_engine_check_entries_explain_only_engine_check_failures(tmp_path):
    """An invariance entry does not explain a numeric failure beside it; a numeric entry does not swallow an
    invariance failure (the two together explain it jointly: tests/test_expect_joint.py); a strict invariance entry
    is no unexpected pass where the check did not run."""
    known = _entries(tmp_path, NOT_PROMISED + NUMERIC)
    assert known.judge(_row("batch_invariance"))["verdict"] == "expected"
    for alone in (NOT_PROMISED, NUMERIC):  # neither entry names both
        assert _entries(tmp_path, alone).judge(_row("max_err batch_invariance"))["verdict"] == "fail"
    assert known.judge(_row("max_err batch_invariance"))["expected_id"] == "long-path-by-batch+numeric"  # each its part
    assert known.judge(_row("max_err", inv="ok", detail="2 sub-batches equal"))["expected_id"] == "numeric"
    assert known.judge(_row("batch_invariance", detail="seq 0 rotated (position 1 of 2)"))["verdict"] == "fail"  # words differ
    strict = _entries(tmp_path, NOT_PROMISED.replace("strict = false", "strict = true"))
    assert strict.judge(_row("", inv="ok"))["verdict"] == "unexpected-pass"
    for inv in ("not_run", ""):  # one sequence, or a run without --invariance: the entry does not speak of it
        assert strict.judge(_row("", inv=inv, detail=""))["verdict"] == "pass"


def test_an_engine_check_failure_is_its_own_kind_for_the_shrinker():
    from parity.sweep.shrinking import failure_kind

    assert failure_kind({"verdict": "fail", "reasons": "batch_invariance"}) == "engine"
    assert failure_kind({"verdict": "fail", "reasons": "max_err graph_replay"}) == "values"


def test_the_pattern_field_is_checked(tmp_path):
    with pytest.raises(ExpectationError, match="invariance_detail"):
        _entries(tmp_path, NOT_PROMISED.replace('invariance_detail = "alone"', 'invariance_detail = "("'))
    with pytest.raises(ExpectationError, match="invariance_detail.*only applies to verdict 'fail'"):
        _entries(tmp_path, NOT_PROMISED.replace('reasons = ["batch_invariance"]', 'verdict = "error"'))


# -- the columns and the sweep ----------------------------------------------------------------------------


def test_the_columns_are_appended_and_round_trip():
    assert COLUMNS[-len(CHECK_COLUMNS) :] == list(CHECK_COLUMNS) == list(ADDED_COLUMNS[-len(CHECK_COLUMNS) :])
    v = Verdict("fail", invariance_check="mismatch", invariance_detail="seq 0 alone", invariance_max_diff=1.5e-7, graph_check="close")
    back = Verdict.from_row(v.columns())
    assert back.invariance_check == "mismatch" and back.invariance_max_diff == pytest.approx(1.5e-7) and back.graph_check == "close"
    assert Verdict.from_row({"verdict": "pass"}).invariance_check == ""  # a row of a run before the columns


def test_a_sweep_with_invariance_in_worker_processes_reports_it(tmp_path, capsys):
    """``parity run --invariance`` through the worker processes (the flag reaches execute there), its columns in
    results.csv and its table and words in summary.md."""
    from parity import cli

    out = tmp_path / "run"
    argv = ["run", "--case", VARLEN.to_json(), "--case", ONE.to_json(), "--invariance", "--expect", "none", "--out", str(out)]
    argv += ["--backend", "reference", "--backend", "parity.selftest.bugs:BatchDependentReduction", "--no-siblings"]
    assert cli.main(argv) == 1
    capsys.readouterr()
    with (out / "results.csv").open(newline="") as fh:
        rows = {(r["backend"], r["case_id"]): r for r in csv.DictReader(fh)}
    bug = rows[("parity.selftest.bugs:BatchDependentReduction", VARLEN.case_id)]
    assert bug["verdict"] == "fail" and bug["reasons"] == "batch_invariance" and bug["invariance_check"] == "mismatch"
    assert rows[("reference", VARLEN.case_id)]["invariance_check"] == "ok"
    assert rows[("reference", ONE.case_id)]["invariance_check"] == "not_run"
    assert all(r["graph_check"] == "not_run" and "--graph-replay" in r["graph_detail"] for r in rows.values())
    summary = (out / "summary.md").read_text()
    assert "Engine checks" in summary and "| `reference` | ok 1 · not_run 1 | not_run 2 |" in summary
    assert "  - batch invariance: seq " in summary
    assert "Engine checks" in (out / "report.html").read_text()
