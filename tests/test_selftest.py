"""The harness catches every planted bug on the CI profile, and never cries wolf on honest variants.

Detection runs the sweep machinery itself (:func:`parity.evaluate`: budget, mask and GQA
probes, poisoned buffer) over ``strategies.generate(PROFILES["quick"], seed=0)`` - the
cases ``python -m parity run --profile quick`` sweeps - in order, up to the first failing
case. Nothing here is written for one bug.
"""

from __future__ import annotations

import functools

import pytest

from parity.cli import main
from parity.judge import BaselineCache
from parity.selftest import run as selftest
from parity.selftest.bugs import BUGS, EagerAttention, PlantedBug, WindowOneWider
from parity.selftest.honest import HONEST, HonestVariant

_BASELINES = BaselineCache("cpu", keep=256)  # every case's reference once, for all tests here
_DETECTIONS: dict[str, selftest.Detection] = {}


@functools.cache
def quick() -> list:
    """What ``python -m parity run --profile quick`` sweeps (seed 0)."""
    return selftest.profile_cases("quick", 0)


@functools.cache
def honest_cases() -> list:
    """The whole quick sweep of seed 0, plus the drawn cases of seeds 1 and 2.

    More seeds: ``python -m parity selftest --honest-seeds 0-9`` (figures in docs/selftest.md).
    """
    return selftest.seeds_cases("quick", [0, 1, 2])


def _detection(bug: PlantedBug) -> selftest.Detection:
    if bug.name not in _DETECTIONS:
        _DETECTIONS[bug.name] = selftest.detect(bug, quick(), _BASELINES)
    return _DETECTIONS[bug.name]


@pytest.mark.slow  # a sweep of the quick profile per bug (about 2 minutes in all): `pytest -m slow`, CI runs it
@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
def test_quick_profile_flags_planted_bug(bug: PlantedBug):
    det = _detection(bug)
    assert not det.problems, f"planted bug {bug.name} raised instead of computing: {det.problems}"
    assert det.caught, f"{bug.name} ({bug.klass}) ESCAPED the quick profile: passed all {det.cases_run} cases"
    known = ("max_err", "mean_err", "nan", "nan_masked_rows", "inf", "unwritten", "mask", "gqa", "reads_outside_window", "lse")
    known += ("batch_invariance", "graph_replay")  # the engine checks a bug is run with (PlantedBug.checks)
    assert det.checks and all(c in known for c in det.checks), det.checks


def test_detection_table_lists_every_bug(capsys):
    table = selftest.detection_table([_detection(b) for b in BUGS])
    with capsys.disabled():
        print("\n" + table)
    assert table.count("\n") == len(BUGS) + 1 and "ESCAPED" not in table
    assert all(b.klass in table for b in BUGS)


# The mask probe words for the window bugs: the report must say what is wrong, not only that.
@pytest.mark.parametrize(
    "name,words",
    [
        ("bug-window-one-wider", "window is one token wider on the left"),
        ("bug-window-one-narrower", "window is one token narrower on the left"),
        ("bug-decode-drops-window", "window ignored"),
        ("bug-paged-drops-window", "window ignored"),
        ("bug-paged-reads-every-page", "rows read NaN-poisoned pages outside the window: seq 0 head 0 rows"),
        ("bug-empty-rows-mean-v", "row should see no key but sees every key"),
        ("bug-gqa-head-mapping", "read the wrong kv head"),
        ("bug-lse-in-log2", "(row, head) LSE values over budget"),
    ],
)
def test_detection_names_the_bug(name, words):
    bug = next(b for b in BUGS if b.name == name)
    det = _detection(bug)
    assert words in det.detail, det.detail


@pytest.mark.slow  # about half of the whole suite's time: `pytest -m slow` (nox -s slow; CI runs it)
@pytest.mark.parametrize("variant", HONEST, ids=lambda v: v.name)
def test_honest_variant_never_fails(variant: HonestVariant):
    (res,) = selftest.check_honest([variant], honest_cases(), _BASELINES)
    msgs = [f"{r['verdict']} [{r['reasons'] or r['detail']}] {r['repro']}" for r in res.failed[:3]]
    assert res.ok, f"FALSE ALARM: {variant.name} failed {len(res.failed)} of {res.cases} cases:\n" + "\n".join(msgs)
    assert res.passed + res.unsupported == res.cases == len(honest_cases())
    # every variant has a paged path and chunks: all cases really ran, but learned-sink cases where a variant
    # takes no sinks (recorded unsupported with that reason, never a pass)
    # (and, for the fp8-only variant, every case without fp8 inputs)
    from parity.backends.base import refusal_reason

    be = variant.backend()
    why = [refusal_reason(be, c) for c in honest_cases()]
    assert {w.split(":")[0] for w in why if w} <= {"learned sinks", "an fp8 emulation"}, set(why)
    assert res.unsupported == sum(w is not None for w in why)
    assert res.worst_budget_frac <= 1.0


def test_selftest_command_exit_0_and_prints_the_table(monkeypatch, capsys):
    few = honest_cases()[:: len(honest_cases()) // 12]  # a dozen cases
    monkeypatch.setattr(selftest, "seeds_cases", lambda profile, seeds: few)
    args = ["--bug", "bug-decode-drops-window", "--bug", "bug-gqa-head-mapping", "--honest", "honest-split-kv", "--honest-seeds", "0"]
    rc = main(["selftest", *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "window dropped in decode path" in out.out and "wrong GQA head mapping" in out.out
    assert "honest-split-kv" in out.out and "ESCAPED" not in out.out


def test_selftest_command_exit_1_when_a_bug_escapes(monkeypatch, capsys):
    # a "bug" that is really the honest kernel must escape, and the self-test must say so
    fake = PlantedBug("bug-not-a-bug", "no bug at all", EagerAttention)
    monkeypatch.setattr("parity.selftest.bugs.BUGS", (fake,))  # parity.cli.selftest reads it at run time
    monkeypatch.setattr(selftest, "profile_cases", lambda profile, seed: quick()[:6])
    assert main(["selftest", "--no-honest"]) == 1
    out = capsys.readouterr()
    assert "ESCAPED" in out.out and "bug-not-a-bug" in out.err


def test_selftest_command_exit_1_on_a_false_alarm(monkeypatch, capsys):
    # a wrong kernel listed as honest must make the self-test fail
    fake = HonestVariant("honest-but-not", "one token wider", WindowOneWider)
    monkeypatch.setattr("parity.selftest.honest.HONEST", (fake,))  # parity.cli.selftest reads it at run time
    monkeypatch.setattr(selftest, "seeds_cases", lambda profile, seeds: quick()[:3])
    assert main(["selftest", "--no-bugs", "--honest-seeds", "0"]) == 1
    assert "FALSE ALARM: honest-but-not" in capsys.readouterr().err
