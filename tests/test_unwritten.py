"""A backend that leaves its output buffer unwritten: the `unwritten` verdict comes first, and alone
when nothing was written; mask and GQA words only for the rows the backend did write (the probes'
poison is never read as "row sees every key" or "kv head -30001")."""

from __future__ import annotations

import dataclasses

from parity import Case, Window
from parity.api import evaluate_record, failure_message
from parity.reference import attention_reference

from .helpers import _Wrapped, one_wider_on_the_left

CASE = Case(q_lens=(40, 24), k_lens=(40, 30), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(6, 0), seed=5)
POISON_WORDS = ("window ignored", "sees every key", "-30001", "kv head(s) [-", "mix of kv heads")


class WritesNothing(_Wrapped):
    name = "bug-writes-nothing"

    def run(self, case, inputs, out):
        return out


class WritesFirstHeads(_Wrapped):
    """Writes query heads 0 and 1 only (heads 2 and 3 stay poison)."""

    name = "bug-writes-first-heads"

    def run(self, case, inputs, out):
        bad = dataclasses.replace(case, window=self.seen_window(case))
        out[:, :2] = attention_reference(dataclasses.replace(inputs, case=bad))[:, :2]
        return out


class WritesFirstHeadsOffByOne(WritesFirstHeads):
    name = "bug-writes-first-heads-off-by-one"

    def seen_window(self, case):
        return one_wider_on_the_left(case.window)


def evaluate(backend, case):
    """The row, and its failure message (which needs the comparison of the judged record)."""
    judged = evaluate_record(backend, case)
    return judged.row, failure_message(judged)


def _words(row, msg) -> str:
    return " ".join(str(row[k]) for k in ("mask_detail", "gqa_detail", "worst_where")) + "\n" + msg


def test_nothing_written_is_unwritten_alone():
    row, message = evaluate(WritesNothing(), CASE)
    assert row["verdict"] == "fail" and row["reasons"] == "unwritten", row["reasons"]
    assert int(row["unwritten"]) == sum(CASE.q_lens) * CASE.hq * CASE.head_dim
    assert row["mask_check"] == "n/a" and "not written" in row["mask_detail"], row["mask_detail"]
    assert row["gqa_check"] == "n/a" and "not written" in row["gqa_detail"], row["gqa_detail"]
    words = _words(row, message)
    assert not any(w in words for w in POISON_WORDS), words
    msg = message.splitlines()
    assert "never written" in msg[1] and len(msg) == 3 and msg[2].strip().startswith("repro:"), msg


def test_some_heads_unwritten_judges_only_the_written_rows():
    row, message = evaluate(WritesFirstHeads(), CASE)
    assert row["verdict"] == "fail" and row["reasons"] == "unwritten", row["reasons"]  # the written heads are right
    assert int(row["unwritten"]) == sum(CASE.q_lens) * 2 * CASE.head_dim
    assert row["mask_check"] == "ok" and "not judged" in row["mask_detail"], row["mask_detail"]
    assert row["gqa_check"] == "ok" and "[2, 3]" in row["gqa_detail"], row["gqa_detail"]
    words = _words(row, message)
    assert not any(w in words for w in POISON_WORDS), words
    assert "never written" in message.splitlines()[1]


def test_a_window_bug_in_the_written_rows_is_still_named():
    row, message = evaluate(WritesFirstHeadsOffByOne(), CASE)
    reasons = row["reasons"].split()
    assert reasons[0] == "unwritten" and "mask" in reasons, reasons
    assert "one token wider on the left" in row["mask_detail"] and "not judged" in row["mask_detail"], row["mask_detail"]
    words = _words(row, message)
    assert not any(w in words for w in POISON_WORDS), words
    msg = message.splitlines()
    assert "never written" in msg[1] and any(m.strip().startswith("mask: window is one token wider") for m in msg), msg
