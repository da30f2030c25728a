"""tests/known.py, without a child pytest: a known divergence's xfail and event carry the measured
miss (the figures of :func:`parity.api.failure_message`), an unexpected pass its error ratio."""

from __future__ import annotations

import re

import pytest

from parity import ParityError
from parity.api import evaluate_record, failure_message, miss_lines
from parity.expect import load
from tests.known import check, expected_text, xfail_if_expected
from tests.test_expect import EMPTY_ROWS, FAKE_TOML, KNOWN, NO_EMPTY_ROWS, STRICT_ON_REFERENCE


@pytest.fixture
def expectations(tmp_path):
    p = tmp_path / "known.toml"
    p.write_text(FAKE_TOML + STRICT_ON_REFERENCE.replace("STRICT", "true"))
    return load([str(p)])


def test_an_xfail_carries_the_measured_miss(expectations):
    judged = evaluate_record(KNOWN, EMPTY_ROWS[0], expectations=expectations)
    assert judged.row["verdict"] == "expected", judged.row
    with pytest.raises(pytest.xfail.Exception) as info:
        xfail_if_expected(judged, expectations)
    msg = str(info.value)
    assert msg.startswith("fake-empty-rows: Rows that see no key attend to every key. [max_err mean_err mask]"), msg
    assert re.search(r"max\|err\| [\d.e+-]+ vs allowed [\d.e+-]+ .*err ratio [\d.e+]+", msg), msg  # how far over
    assert "mask: row should see no key but sees every key" in msg, msg  # the mask miss
    assert msg.endswith(f"repro: {judged.row['repro']}"), msg
    assert "\n" not in msg, msg  # one line in pytest's short summary


def test_an_event_carries_the_measured_miss_without_the_repro(expectations):
    judged = evaluate_record(KNOWN, EMPTY_ROWS[1], expectations=expectations)
    text = expected_text(judged, expectations)
    assert text.startswith("fake-empty-rows [max_err mean_err mask]: error budget: max|err| "), text
    assert "mask: " in text and "repro" not in text, text


def test_an_unexpected_pass_shows_its_error_ratio(expectations):
    judged = evaluate_record("reference", EMPTY_ROWS[0], expectations=expectations)
    assert judged.row["verdict"] == "unexpected-pass", judged.row
    with pytest.raises(ParityError) as info:
        check(judged, expectations)
    msg = str(info.value)
    assert "UNEXPECTED PASS" in msg and f"err ratio {float(judged.row['err_ratio']):.3g}" in msg, msg
    assert msg.splitlines()[-1].startswith("  repro: python -m parity run"), msg


def test_failure_message_is_its_header_the_miss_lines_and_the_repro(expectations):
    for case in (EMPTY_ROWS[0], NO_EMPTY_ROWS):
        judged = evaluate_record(KNOWN, case)
        lines = failure_message(judged).splitlines()
        assert lines[1:-1] == [f"  {m}" for m in miss_lines(judged)], lines
        assert failure_message(judged.row).splitlines()[1:-1] == [f"  {m}" for m in miss_lines(judged.row)]


def test_a_row_read_back_from_results_csv_keeps_its_budget_figures(tmp_path):
    """``parity report`` and the shrinker see rows from results.csv, without the comparison object."""
    import csv

    judged = evaluate_record(KNOWN, EMPTY_ROWS[0])
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(judged.row))
        w.writeheader()
        w.writerow(judged.row)
    with path.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    text = failure_message(row)
    assert f"max|err| {float(row['max_abs_err']):.4g} vs allowed {float(row['threshold_max']):.4g}" in text, text
    assert f"err ratio {float(row['err_ratio']):.3g}" in text and row["worst_where"] in text, text
    # one source: the same lines as the live record's, less what results.csv has no column for
    allowed_mean = f" vs allowed {judged.verdict.threshold_mean:.3g}"
    live = [line.replace(allowed_mean, "") for line in miss_lines(judged) if "never written" not in line]
    assert miss_lines(row) == live and allowed_mean in " ".join(miss_lines(judged))
