"""Joint explanations (parity/expect.py, :func:`parity.expect.joint_explanation`): a failing row whose reasons split
among known divergences that each explain their part is ``expected``, ``expected_id`` ``a+b``; the consumers of
``expected_id`` count each entry of it (reports, the run's summary, ``parity evidence``, ``export-repro --known``,
``vdiff``'s findings, the pytest words).

The row behind it: vLLM FA3 on an H100 with ``--invariance``, case ddb1214eefd2 (a paged varlen decode batch over
32768 / 4097 / 5120 keys), failed with ``reads_outside_window`` (its 4097-key sequence's last page tail) and
``batch_invariance`` (its split count), each a known divergence of its own entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parity import Case, Window
from parity.cli import main
from parity.expect import ExpectationError, Expectations, joint_explanation, load
from parity.export_repro import pick
from parity.report.data import known_rows, n_expected, unmatched_entries
from parity.report.runs import load_run
from parity.report.vdiff import Pair, RowPair, Side, _classify, findings
from parity.sweep.writers import known_vs_new
from tests.test_expect import _entry, _toml
from tests.test_vdiff import row as run_row
from tests.test_vdiff import write_run

INVARIANCE = "vllm-fa3-varlen-not-batch-invariant-splits-from-longest-sequence"
TAIL = "vllm-fa3-paged-reads-unused-tail-of-last-page"
BOTH = f"{INVARIANCE}+{TAIL}"  # the file's order: the invariance entry comes first
VLLM = "vllm 0.26.0 vllm_flash_attn FA3"
#: the H100 row's case (lab/runs/h100-2026-12-07d-models: ddb1214eefd2)
DDB = Case.from_json(
    json.dumps(
        {
            "q_lens": [1, 1, 1024],
            "k_lens": [32768, 4097, 5120],
            "hq": 32,
            "hkv": 8,
            "head_dim": 128,
            "dtype": "bfloat16",
            "window": {"left": None, "right": 0, "align": "bottom_right"},
            "scale": None,
            "softcap": None,
            "page_size": 256,
            "seed": 1047620062,
            "model": "mixtral-8x7b-v0.1",
            "layer": "global",
        }
    )
)
#: a small planted case of the same mechanisms: a varlen decode batch, its second sequence's last page with a tail
SMALL = Case((1, 1), (64, 40), 4, 1, 64, "bfloat16", Window(None, 0), page_size=16, seed=7)
READ = "rows read NaN-poisoned pages outside the window: seq 1 head 0 rows 0 (poisoned unused tail 4097..4351 of page 16)"
ALONE = "seq 0 alone: max |diff| 0.000122 against its rows in the full batch"
CHECKS = {"invariance_check": "mismatch", "invariance_detail": ALONE, "graph_check": "not_run", "mask_check": "ok"}


def _row(case: Case, reasons: str, read_detail: str = READ, **extra: str) -> dict:
    return {
        "backend": "vllm-fa3-cuda",
        "case_json": case.to_json(),
        "verdict": "fail",
        "raw_verdict": "fail",
        "reasons": reasons,
        "read_detail": read_detail,
        **CHECKS,
        **extra,
    }


def _judge(exp: Expectations, r: dict, version: str = VLLM) -> tuple[str, str]:
    out = exp.judge(r, version, "2.9.0")
    return out["verdict"], out["expected_id"]


@pytest.mark.parametrize("case", [DDB, SMALL], ids=["ddb1214eefd2", "planted"])
def test_a_row_of_two_known_failures_is_expected_with_both_entries(case):
    exp = load()
    assert _judge(exp, _row(case, "reads_outside_window batch_invariance")) == ("expected", BOTH)
    # neither entry alone explains it: what the row was before joint explanations
    for alone in (INVARIANCE, TAIL):
        only = Expectations(tuple(e for e in exp.entries if e.id == alone))
        assert _judge(only, _row(case, "reads_outside_window batch_invariance")) == ("fail", "")


def test_one_entry_alone_still_explains_its_row():
    exp = load()
    assert _judge(exp, _row(DDB, "reads_outside_window")) == ("expected", TAIL)
    assert _judge(exp, _row(SMALL, "batch_invariance", read_detail="")) == ("expected", INVARIANCE)


@pytest.mark.parametrize(
    "reasons, read_detail, invariance_detail, version",
    [
        ("reads_outside_window batch_invariance max_err", READ, ALONE, VLLM),  # a third reason no entry names
        ("reads_outside_window batch_invariance mean_err", READ, ALONE, VLLM),
        ("reads_outside_window batch_invariance", "poisoned keys 0..15 of page 0", ALONE, VLLM),  # the read is not the tail
        ("reads_outside_window batch_invariance", READ, "seq 0 differs", VLLM),  # not the invariance entry's words
        ("reads_outside_window batch_invariance", READ, ALONE, "vllm 0.25.0"),  # outside both entries' versions (vllm>=0.26)
    ],
)
def test_a_row_with_a_part_no_entry_explains_stays_a_failure(reasons, read_detail, invariance_detail, version):
    assert _judge(load(), _row(DDB, reasons, read_detail, invariance_detail=invariance_detail), version) == ("fail", "")


def test_a_uniform_batch_is_not_the_invariance_entrys():
    """Each entry must cover the row: a uniform batch (the invariance entry's condition is varlen) stays a failure."""
    uniform = Case((1, 1), (40, 40), 4, 1, 64, "bfloat16", Window(None, 0), page_size=16, seed=7)
    assert _judge(load(), _row(uniform, "reads_outside_window batch_invariance")) == ("fail", "")


PARTS = "".join(
    _entry(id=f'"{name}"', backend='"vllm-fa3-cuda"', condition='{ paged = "yes" }', reasons=reasons, **extra)
    for name, reasons, extra in (
        ("t-read", '["reads_outside_window"]', {}),
        ("t-check", '["batch_invariance"]', {}),
        ("t-values", '["max_err"]', {}),
        ("t-check-values", '["batch_invariance", "max_err"]', {}),
        ("t-error", "[]", {"verdict": '"error"'}),
    )
)


def test_joint_explanation_follows_its_table(tmp_path):
    """The fewest entries win, the first in file order among as few; an error row or a row of one reason is never
    explained jointly; ``including`` keeps only the sets holding that entry."""
    exp = load([str(_toml(tmp_path, PARTS))])
    ids = lambda r, including="": "+".join(e.id for e in joint_explanation(exp.entries, r, including))  # noqa: E731
    assert ids(_row(SMALL, "reads_outside_window batch_invariance")) == "t-read+t-check"
    assert ids(_row(SMALL, "reads_outside_window batch_invariance max_err")) == "t-read+t-check-values"  # 2 beat 3
    assert ids(_row(SMALL, "reads_outside_window max_err")) == "t-read+t-values"
    assert ids(_row(SMALL, "reads_outside_window batch_invariance max_err"), including="t-values") == "t-read+t-check+t-values"
    assert ids(_row(SMALL, "reads_outside_window batch_invariance mean_err")) == ""  # mean_err: no entry names it
    assert ids(_row(SMALL, "reads_outside_window")) == ""  # one reason: an entry alone or none
    assert ids({**_row(SMALL, ""), "verdict": "error", "raw_verdict": "error"}) == ""
    assert _judge(exp, _row(SMALL, "reads_outside_window batch_invariance")) == ("expected", "t-read+t-check")
    # an entry alone wins as before: one naming a check and a value reason explains a row with another value reason
    assert _judge(exp, _row(SMALL, "reads_outside_window batch_invariance max_err")) == ("expected", "t-check-values")
    assert _judge(exp, _row(SMALL, "max_err batch_invariance")) == ("expected", "t-check-values")


def test_an_id_may_not_hold_the_joining_plus(tmp_path):
    with pytest.raises(ExpectationError, match=r"entry 'a\+b': field 'id' must not hold '\+'"):
        load([str(_toml(tmp_path, _entry(id='"a+b"')))])


def test_the_words_name_each_entry():
    exp = load()
    words = exp.describe_id(BOTH)
    assert words.startswith(f"{INVARIANCE}: vLLM's FA3 build") and f"; {TAIL}: vLLM's FA3 build" in words
    assert exp.describe_id(TAIL) == exp.get(TAIL).describe() and exp.describe_id("gone") == "gone"


# ---------------------------------------------------------------- the consumers: a run holding the joint row


def _fa3_run(folder: Path, version: str = VLLM) -> Path:
    """A run of vllm-fa3-cuda: the joint row, a larger row the tail entry explains alone, and a pass."""
    bigger = Case((1, 1), (300, 250), 4, 1, 64, "bfloat16", Window(None, 0), page_size=16, seed=8)
    rows = [
        {**run_row("vllm-fa3-cuda", SMALL, "fail", "reads_outside_window batch_invariance"), "read_detail": READ, **CHECKS},
        {**run_row("vllm-fa3-cuda", bigger, "fail", "reads_outside_window"), "read_detail": READ, **CHECKS, "invariance_check": "ok"},
        {**run_row("vllm-fa3-cuda", Case((1,), (32,), 4, 1, 64, "bfloat16", Window(None, 0), seed=9), "pass"), **CHECKS},
    ]
    rows[2].update(invariance_check="ok", invariance_detail="")
    return write_run(folder, {"vllm-fa3-cuda": version}, rows)


def test_reports_count_each_entry_of_a_joint_row_and_rows_once(tmp_path):
    run = load_run(_fa3_run(tmp_path / "run"), load(), rejudge=True)
    assert list(run.df["expected_id"]) == [BOTH, TAIL, ""]
    counts = {k["id"]: k["expected"] for k in known_rows(run) if k["expected"]}
    assert counts == {INVARIANCE: 1, TAIL: 2} and n_expected(run) == 2
    assert not {u["entry"].id for u in unmatched_entries(run)[1]} & {INVARIANCE, TAIL}
    lines = known_vs_new(run.df.to_dict("records"))
    assert lines[0] == f"known divergences: 2 rows expected ({INVARIANCE} 1, {TAIL} 2)", lines


def test_evidence_sees_each_entry_of_a_joint_row(tmp_path, capsys):
    """The tail entry on its joint row alone: seen (before joint explanations, "not seen 0/1")."""
    run = write_run(
        tmp_path / "run",
        {"vllm-fa3-cuda": VLLM},
        [{**run_row("vllm-fa3-cuda", SMALL, "fail", "reads_outside_window batch_invariance"), "read_detail": READ, **CHECKS}],
    )
    assert main(["evidence", str(run), "--expect", "default", "--entry", "vllm-fa3-paged-reads*,vllm-fa3-varlen-*"]) == 0
    out = capsys.readouterr().out
    assert f"| {TAIL} | vllm>=0.26 | seen 1/1 |" in out and f"| {INVARIANCE} | vllm>=0.26 | seen 1/1 |" in out, out


def test_export_known_picks_a_row_the_entry_explains_alone_first(tmp_path):
    """The tail entry's repro comes from its own (larger) row; the invariance entry's from the joint row, its only."""
    run = load_run(_fa3_run(tmp_path / "run"), load(), rejudge=True)
    picked = pick([run])
    assert picked[TAIL][2]["expected_id"] == TAIL and picked[INVARIANCE][2]["expected_id"] == BOTH


def _side(raw: str, mechanism: str) -> Side:
    from parity.results import Outcome

    return Side({}, Outcome.of(raw), raw, "", mechanism)


def test_vdiff_follows_each_entry_of_a_joint_mechanism():
    """BASE failing by a+b; HEAD failing by a alone: a's finding still present, b's failing otherwise, no new finding;
    HEAD by a and a third entry: a new finding."""
    from parity.report.vdiff import VersionDiff

    pair = Pair("vllm-fa3-cuda", "vllm-fa3-cuda", VLLM, "vllm 0.27.1")
    still = RowPair(pair, "c1", _side("fail", BOTH), _side("fail", INVARIANCE))
    other = RowPair(pair, "c2", _side("fail", BOTH), _side("fail", f"{INVARIANCE}+other"))
    found = {f.entry: (f.base_rows, f.still, f.other) for f in findings([still, other], load())}
    assert found == {INVARIANCE: (2, 2, 0), TAIL: (2, 0, 2)}
    d = VersionDiff(None, None, [pair], 2.0, 1.5, 0.25, False)  # type: ignore[arg-type]
    for rp in (still, other):
        _classify(d, rp)
    assert d.new == [other]
