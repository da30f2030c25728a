import os
import signal

from parity import Case, Window, evaluate
from parity.selftest.bugs import WindowOneWider
from parity.shrink import shrink
from tests.helpers import SdpaWindowOneWider


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


def test_an_error_shrinks_only_into_the_same_error():
    """On the H200 a FlashInfer 'Invalid configuration' error (head dim 32) was shrunk into a case
    that failed otherwise (head dim 8: 'Ninja build failed'); the shrinker now keeps the error's words."""
    from parity import Case, Window
    from parity.shrink import error_words, same_failure

    orig = {
        "verdict": "error",
        "reasons": "",
        "detail": "RuntimeError at function.pxi:1038: Error in function 'P' at "
        "/tmp/x/prefill.cuh:2854: FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=1",
    }
    other = {"verdict": "error", "reasons": "", "detail": "RuntimeError at cpp_ext.py:445: Ninja build failed. Ninja output:"}
    again = {**orig, "detail": orig["detail"].replace("1038", "1040").replace("2854", "4693")}
    assert not same_failure(orig, other)
    assert same_failure(orig, again)
    assert error_words("ValueError at k.py:12: head_dim 80 not supported") == "ValueError: head_dim # not supported"

    big = Case(q_lens=(40,), k_lens=(40,), hq=4, hkv=4, head_dim=32, dtype="float16", window=Window(5, 0), seed=3)

    def judge(c):  # "Invalid configuration" at head_dim 32 only; smaller head dims fail to build
        if c.head_dim == 32:
            return {**orig, "case": c}
        return {**other, "case": c}

    small, row, _ = shrink(big, orig, judge, max_calls=40)
    assert small.head_dim == 32 and "Invalid configuration" in row["detail"]
    assert sum(small.q_lens) < 40  # it still shrank what kept the error


def test_shrink_says_when_it_stopped_at_its_budget(tmp_path, capsys):
    import json

    from parity import cli

    big = Case(q_lens=(90, 31), k_lens=(90, 60), hq=6, hkv=2, head_dim=64, dtype="bfloat16", window=Window(12, 0), seed=4)
    bug = WindowOneWider()
    row = evaluate(bug, big)
    cut = shrink(big, row, lambda c: evaluate(bug, c), max_calls=2)
    assert cut[2] == 2 and cut.exhausted  # smaller candidates were left untried
    never = shrink(big, row, lambda c: {"verdict": "pass", "reasons": ""}, max_calls=1000)
    assert not never.exhausted and never[0] == big  # every candidate tried: the search ran out, not the budget

    argv = [
        "run",
        "-b",
        "tests.helpers:SdpaWindowOneWider",
        "--case",
        big.to_json(),
        "--out",
        str(tmp_path / "o"),
        "--shrink",
        "2",
        "--no-isolate",
        "-q",
        "--no-report",
    ]
    assert cli.main(argv) == 1
    note = "stopped at the budget of 2 calls (--shrink 2); a smaller case may exist"
    assert note in [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("SHRUNK")][0]
    rec = json.loads((tmp_path / "o" / "shrunk.jsonl").read_text().splitlines()[0])
    assert rec["budget_exhausted"] is True and rec["note"] == note


def test_each_kind_of_a_backends_failures_is_shrunk(monkeypatch, tmp_path):
    """FA4 on the H100 (2026-12-05) failed a paged read first and its backward later; only the first was shrunk.
    The first row of each (backend, kind) is shrunk now; a second row of a kind already met is not."""
    from parity.shrink import Shrunk
    from parity.sweep import shrinking
    from parity.sweep.options import SweepOptions

    cases = [Case((8 + i,), (8 + i,), 2, 2, 16, "float32", Window(3, 0), seed=i) for i in range(5)]
    rows = [
        {"backend": "fa4-cuda", "verdict": "fail", "reasons": "reads_outside_window", "case_json": cases[0].to_json(), "case_id": "a"},
        {"backend": "fa4-cuda", "verdict": "fail", "reasons": "reads_outside_window", "case_json": cases[1].to_json(), "case_id": "b"},
        {"backend": "fa4-cuda", "verdict": "fail", "reasons": "dq_err dk_err", "case_json": cases[2].to_json(), "case_id": "c"},
        {"backend": "fa4-cuda", "verdict": "fail", "reasons": "max_err mask grad_error", "case_json": cases[3].to_json(), "case_id": "d"},
        {"backend": "fa4-cuda", "verdict": "error", "reasons": "", "detail": "boom", "case_json": cases[4].to_json(), "case_id": "e"},
    ]
    seen = []

    def fake(spec, case, row, options, baselines, stop):
        seen.append(row["case_id"])
        return Shrunk(case, row, 1, False)

    monkeypatch.setattr(shrinking, "_shrink_one", fake)
    shrinking.shrink_failures(rows, SweepOptions(shrink_calls=4), tmp_path)
    assert seen == ["a", "c", "d", "e"]  # reads, backward, mask (its forward is the root), error
    assert [shrinking.failure_kind(r) for r in rows] == ["reads", "reads", "backward", "mask", "error"]


def test_a_stop_ends_the_search_where_it_is():
    big = Case(q_lens=(90, 31), k_lens=(90, 60), hq=6, hkv=2, head_dim=64, dtype="bfloat16", window=Window(12, 0), seed=4)
    bug = WindowOneWider()
    calls = []

    def judge(c):
        calls.append(c)
        return evaluate(bug, c)

    got = shrink(big, evaluate(bug, big), judge, max_calls=60, stop=lambda: len(calls) >= 2)
    assert got[2] == 2 and len(calls) == 2 and got.stopped and got.exhausted


class SignalsWhileShrinking(SdpaWindowOneWider):
    """Sends this process SIGTERM on its first call on a smaller case than the run's (a shrink candidate)."""

    sent = False

    def run(self, case, inputs, out=None):
        if case.hq < 6 and not SignalsWhileShrinking.sent:
            SignalsWhileShrinking.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().run(case, inputs, out)


def test_a_signal_while_shrinking_ends_the_shrinking_and_the_run_exits_for_it(tmp_path, capsys):
    """The first stop signal after the rows ran (during shrinking) ends the search after the call in flight; the
    shrunk record says so, the reports are written, and the exit is the signal's (128 + 15)."""
    import json

    from parity import cli

    big = Case(q_lens=(90, 31), k_lens=(90, 60), hq=6, hkv=2, head_dim=64, dtype="bfloat16", window=Window(12, 0), seed=4)
    argv = ["run", "-b", f"{__name__}:SignalsWhileShrinking", "--case", big.to_json(), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--shrink", "50", "--no-isolate", "-q", "--no-report"]) == 143
    rec = json.loads((tmp_path / "o" / "shrunk.jsonl").read_text().splitlines()[0])
    assert rec["calls"] < 50 and rec["note"] == f"stopped by a signal after {rec['calls']} calls; a smaller case may exist", rec
    assert (tmp_path / "o" / "results.json").exists()


def test_a_shrunk_backward_failure_repro_asks_for_the_backward(tmp_path):
    """The SHRUNK line of a `--grad` failure printed a repro without `--grad` (CPU, 2026-12-05): rerunning it ran the
    forward only, which passes. The shrunk case's repro is its judged row's."""
    from parity.selftest.bugs import BackwardGqaNotSummed  # noqa: F401 - the spec below imports it
    from parity.sweep import shrinking
    from parity.sweep.options import SweepOptions

    spec = "parity.selftest.bugs:BackwardGqaNotSummed"
    case = Case((6,), (6,), 2, 1, 8, "float32", Window(1, 0), seed=3)
    row = evaluate(spec, case, grad=True)
    assert "dv_err" in row["reasons"].split() and row["repro"].endswith(" --grad"), row
    (rec,) = shrinking.shrink_failures([row], SweepOptions(shrink_calls=6, grad=True), tmp_path)
    assert rec["repro"].endswith(" --grad") and '"q_lens":[1]' in rec["repro"], rec["repro"]
