"""Known divergences matched by mechanism (issue 48, item 2; parity/expect.py): the probe-word fields
(``mask_detail``, ``read_detail``), the case ``features``, the "no mask evidence" outcome (``unconfirmed_id``)
where the mask probe could not run, and the entries ``parity report`` says matched nothing.

The committed runs re-judged with the rewritten file: tests/test_expect.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from parity import Case, Window
from parity.api import evaluate_record, failure_message
from parity.cli import main
from parity.coverage import case_cells
from parity.expect import ExpectationError, case_features, load, load_file
from tests.test_expect import EMPTY_ROWS, FAKE_TOML, KNOWN, NO_EMPTY_ROWS, _entry, _row, _toml

ROOT = Path(__file__).resolve().parents[1]
#: the environment of the lab's second models run (lab/runs/h100-2026-12-06b-models/run), as tests/fixtures/known-runs keeps it
MODELS_B = ROOT / "tests" / "fixtures" / "known-runs" / "h100-2026-12-06b-models__run"
#: issue 48: the read probe's NaN-page read by FlashInfer's paged prefill at flashinfer#4972's shape (qo_len 300,
#: kv_len 4096, 8/2 heads, d128, page 16, window_left 333, non-causal: a 334-key band at the last row) ...
ISSUE_4972 = Case((300,), (4096,), 8, 2, 128, "bfloat16", Window(333, None), page_size=16, seed=4972)
#: ... and its paged decode path with a 256-key window over 700 keys
DECODE_700 = Case((1,), (700,), 8, 2, 128, "bfloat16", Window(255, 0), page_size=16, seed=700)
#: a backend that loads every page of the block table and masks late: the mechanism of those rows
READS_EVERY_PAGE = "parity.selftest.bugs:PagedReadsEveryPage"


# ---------------------------------------------------------------- the new fields: bad input


@pytest.mark.parametrize(
    "text, words",
    [
        (_entry(detail='"(unclosed"'), "entry 'x': field 'detail' is not a regular expression"),
        (_entry(mask_detail='"(unclosed"'), "entry 'x': field 'mask_detail' is not a regular expression"),
        (_entry(read_detail='"[z-a]"'), "entry 'x': field 'read_detail' is not a regular expression"),
        (_entry(read_detail="3"), "entry 'x': field 'read_detail' must be a string (a regular expression), got 3"),
        (_entry(mask_detail='["a"]'), "entry 'x': field 'mask_detail' must be a string (a regular expression)"),
        (_entry(verdict='"error"', read_detail='"unused tail"'), "entry 'x': field 'read_detail' only applies to verdict 'fail'"),
        (_entry(verdict='"crash"', mask_detail='"sees"'), "entry 'x': field 'mask_detail' only applies to verdict 'fail'"),
        (_entry(features='{ pages_outside = "yes" }'), "entry 'x': field 'features': unknown feature 'pages_outside'"),
        (_entry(features='{ last_page_tail = "maybe" }'), "entry 'x': field 'features': 'last_page_tail' must be one of no, yes"),
        (_entry(features='{ last_page_tail = ["yes", 1] }'), "entry 'x': field 'features': 'last_page_tail' must be one of no, yes"),
        (_entry(features="{}"), "entry 'x': field 'features' must be a non-empty table"),
        (_entry(features='"yes"'), "entry 'x': field 'features' must be a non-empty table"),
        (_entry(fetaures='{ last_page_tail = "yes" }'), "entry 'x': unknown field(s) ['fetaures']"),
    ],
)
def test_a_bad_new_field_is_one_line_naming_file_entry_and_field(tmp_path, text, words):
    path = _toml(tmp_path, text)
    with pytest.raises(ExpectationError) as err:
        load_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and words in msg and "\n" not in msg, msg


def test_the_new_fields_load(tmp_path):
    text = _entry(
        condition='{ paged = "yes" }',
        reasons='["reads_outside_window"]',
        features='{ pages_outside_window = "yes", last_page_tail = ["no", "yes"] }',
        read_detail="'poisoned keys \\d'",
        mask_detail='"see exactly"',
    )
    (e,) = load_file(_toml(tmp_path, text))
    assert e.features == (("pages_outside_window", ("yes",)), ("last_page_tail", ("no", "yes")))
    assert (e.read_detail, e.mask_detail, e.detail) == ("poisoned keys \\d", "see exactly", "")
    assert e.needs_mask  # mask_detail alone asks for mask evidence
    text = "paged=yes, pages_outside_window=yes, last_page_tail=no|yes; mask_detail ~ see exactly; read_detail ~ poisoned keys \\d"
    assert e.condition_text() == text


# ---------------------------------------------------------------- features


@pytest.mark.parametrize(
    "case, want",
    [
        (NO_EMPTY_ROWS, ("no", "no")),  # contiguous KV: no page at all
        (Case((1,), (64,), 2, 2, 32, window=Window(None, 0), page_size=16), ("no", "no")),  # every page seen, none partial
        (Case((1,), (70,), 2, 2, 32, window=Window(None, 0), page_size=16), ("no", "yes")),  # tail 70..79 of page 4
        (Case((1,), (64,), 2, 2, 32, window=Window(15, 0), page_size=16), ("yes", "no")),  # keys 48..63: pages 0-2 unseen
        (ISSUE_4972, ("yes", "no")),  # keys 0..3455 on pages 0-215 outside every window; 4096 = 256 pages
        (DECODE_700, ("yes", "yes")),  # pages 0-26 outside; tail 700..703 of page 43
        # a batch: one sequence with pages outside, another with a tail, neither both
        (Case((1, 1), (64, 70), 2, 2, 32, window=Window(15, 0), page_size=16), ("yes", "yes")),
    ],
)
def test_case_features(case, want):
    f = case_features(case)
    assert (f["pages_outside_window"], f["last_page_tail"]) == want


@pytest.mark.parametrize(
    "case, want",
    [
        (NO_EMPTY_ROWS, "none"),  # contiguous KV
        (Case((1,), (64,), 2, 2, 32, window=Window(None, 0), page_size=16), "none"),  # every page seen
        # the 12-07d cases' shape: keys 0..111 on pages 0-6 outside a one-key window at key 127: 127 keys before it
        (Case((1,), (128,), 2, 2, 32, window=Window(0, None), page_size=16), "<=128"),
        (Case((1,), (144,), 2, 2, 32, window=Window(0, None), page_size=16), ">128"),  # page 0 starts 143 keys before
        (Case((1,), (64,), 2, 2, 32, window=Window(0, 0, "top_left"), page_size=16), "<=128"),  # pages 1-3 after key 0: 63
        (Case((1,), (160,), 2, 2, 32, window=Window(0, 0, "top_left"), page_size=16), ">128"),  # key 159 is 159 after it
        (ISSUE_4972, ">128"),  # pages 0-215 outside a band that starts at key 3456
        # a batch: the far sequence decides
        (Case((1, 1), (128, 4096), 2, 2, 32, window=Window(0, None), page_size=16), ">128"),
    ],
)
def test_outside_window_reach(case, want):
    assert case_features(case)["outside_window_reach"] == want


@pytest.mark.parametrize(
    "sk, want",
    [(128, ("expected", "fa4-paged-reads-pages-outside-window-near-it")), (4096, ("fail", ""))],
    ids=["pages-within-128-keys", "page-0-of-a-4k-cache"],
)
def test_a_near_page_read_entry_leaves_a_far_read_new(sk, want):
    """The read probe's words of a kernel that loads every page (a planted CPU backend), judged as an FA4 row: over
    128 keys with a one-key window every poisoned page is within 128 keys of it (the 12-07d rows, expected); over a
    4096-key cache the same words could come from page 0, 4095 keys away: not the near-read entry's, a new failure."""
    case = Case((1, 1), (sk, sk), 8, 4, 64, "float16", Window(0, None), page_size=16, seed=1)
    row = dict(evaluate_record(READS_EVERY_PAGE, case).row)
    assert row["raw_verdict"] == "fail" and "poisoned keys 0.." in row["read_detail"], row["read_detail"]
    judged = load().judge({**row, "backend": "fa4-cuda"}, "flash-attn-4 4.0.0b36", "2.11.0")
    assert (judged["verdict"], judged["expected_id"]) == want


FEATURE_TOML = """
[[divergence]]
id = "fake-page-reader"
backend = "tests.helpers:EmptyRows*"
versions = "torch>=2.5"
condition = { paged = "yes" }
features = { pages_outside_window = "yes" }
reasons = ["reads_outside_window"]
read_detail = 'poisoned keys \\d'
explanation = "Loads pages outside the window."
upstream = "not reported"
strict = false
"""


def test_features_and_read_detail_decide_a_read_entry(tmp_path):
    exp = load([str(_toml(tmp_path, FEATURE_TOML))])
    aligned_all_seen = Case((1,), (64,), 2, 2, 32, window=Window(None, 0), page_size=16)
    words = "rows read NaN-poisoned pages outside the window: seq 0 head 0 rows 0 (poisoned keys 0..47 on pages 0-2)"
    tail_only = "rows read NaN-poisoned pages outside the window: seq 0 head 0 rows 0 (poisoned unused tail 70..79 of page 4)"

    def j(case, detail):
        row = {**_row(case, KNOWN, "fail", "reads_outside_window"), "read_check": "mismatch", "read_detail": detail}
        out = exp.judge(row, "2.13.0", "2.13.0")
        return out["verdict"], out["expected_id"]

    pages_case = Case((1,), (64,), 2, 2, 32, window=Window(15, 0), page_size=16)
    assert j(pages_case, words) == ("expected", "fake-page-reader")
    assert j(pages_case, tail_only) == ("fail", "")  # the words of another mechanism
    assert j(aligned_all_seen, words) == ("fail", "")  # the case has no page outside the window: not covered


# ---------------------------------------------------------------- the flashinfer rows of issue 48


def _flashinfer_version(backend: str) -> tuple[str, str]:
    env = json.loads((MODELS_B / "environment.json").read_text())
    return env["backends"][backend]["version"], env["torch"]


@pytest.mark.parametrize(
    "case, backend, entry",
    [
        (ISSUE_4972, "flashinfer-paged-cuda", "flashinfer-paged-prefill-reads-pages-outside-window"),
        (DECODE_700, "flashinfer-paged-cuda", "flashinfer-paged-prefill-reads-pages-outside-window"),
        (DECODE_700, "flashinfer-decode-cuda", "flashinfer-decode-paged-reads-outside-window"),
    ],
    ids=["prefill-334-key-band", "paged-decode-700-keys", "decode-wrapper-700-keys"],
)
def test_flashinfer_page_reads_below_1024_keys_are_expected(case, backend, entry):
    """The rows issue 48 saw come out new (the entry said long = yes): the read probe's words of a kernel that
    loads every page (the harness's own probe on a planted CPU backend), as a FlashInfer 0.7.2 row of the
    12-06b run, are now the entry's; the band is under 1024 keys, so no length condition could have held."""
    assert case_cells(case)["long"] == frozenset({"no"})
    row = dict(evaluate_record(READS_EVERY_PAGE, case).row)
    assert row["raw_verdict"] == "fail" and row["reasons"] == "reads_outside_window", row
    assert "poisoned keys 0.." in row["read_detail"] and row["mask_check"] == "ok", row["read_detail"]
    version, torch_version = _flashinfer_version(backend)
    judged = load().judge({**row, "backend": backend}, version, torch_version)
    assert (judged["verdict"], judged["expected_id"]) == ("expected", entry)
    # out of the entry's versions (a FlashInfer upgrade) the same row is a failure again
    assert load().judge({**row, "backend": backend}, "flashinfer 0.8.0", torch_version)["verdict"] == "fail"


# ---------------------------------------------------------------- no mask evidence


def _judge_fake(exp, case, reasons, mask_check, mask_detail=""):
    row = {**_row(case, KNOWN, "fail", reasons), "mask_check": mask_check, "mask_detail": mask_detail}
    out = exp.judge(row, "2.13.0", "2.13.0")
    return out["verdict"], out["expected_id"], out["unconfirmed_id"]


NOT_RUN = "needs 3 passes (max Sk 70 / d 32); limit is 1"
EVERY_KEY = "row should see no key but sees every key: 24 of 160 (head, row) pairs differ"


def test_a_mask_entry_without_mask_evidence_is_named_not_expected(tmp_path):
    """explains_but_for_mask's truth table, through judge: only a value failure whose mask probe did not run."""
    exp = load([str(_toml(tmp_path, FAKE_TOML))])  # reasons = ["mask"]
    case = EMPTY_ROWS[0]
    assert _judge_fake(exp, case, "max_err mean_err mask", "mismatch", EVERY_KEY) == ("expected", "fake-empty-rows", "")
    assert _judge_fake(exp, case, "max_err mean_err", "not_run", NOT_RUN) == ("fail", "", "fake-empty-rows")
    assert _judge_fake(exp, case, "nan", "not_run", NOT_RUN) == ("fail", "", "fake-empty-rows")
    assert _judge_fake(exp, case, "lse", "not_run", NOT_RUN) == ("fail", "", "")  # not a value failure
    assert _judge_fake(exp, case, "max_err", "ok", "all 160 (head, row) pairs see exactly the spec's keys") == ("fail", "", "")
    assert _judge_fake(exp, case, "max_err", "", "") == ("fail", "", "")  # no probe asked: not "could not run"
    assert _judge_fake(exp, NO_EMPTY_ROWS, "max_err", "not_run", NOT_RUN) == ("fail", "", "")  # outside the condition


def test_an_exact_mask_entry_asks_for_the_probe_too(tmp_path):
    """Numerics "with exact masks" (mask_detail = the probe's words of an exact mask): a value failure whose
    probe did not run could be a wrong window, so it is named, not expected; with the probe's words it is."""
    text = FAKE_TOML.replace('reasons = ["mask"]', 'reasons = ["max_err"]\nmask_detail = "see exactly the spec\'s keys"')
    exp = load([str(_toml(tmp_path, text))])
    case = EMPTY_ROWS[0]
    exact = "all 160 (head, row) pairs see exactly the spec's keys"
    assert _judge_fake(exp, case, "max_err", "ok", exact) == ("expected", "fake-empty-rows", "")
    assert _judge_fake(exp, case, "max_err mask", "mismatch", EVERY_KEY) == ("fail", "", "")  # a wrong mask: not this
    assert _judge_fake(exp, case, "max_err", "not_run", NOT_RUN) == ("fail", "", "fake-empty-rows")
    assert _judge_fake(exp, case, "mean_err", "not_run", NOT_RUN) == ("fail", "", "")  # its own reason is missing


def test_a_failure_message_names_the_entry_without_mask_evidence(tmp_path):
    """assert_parity's words (parity.api.failure_message): the failure, and which entry would explain it."""
    exp = load([str(_toml(tmp_path, FAKE_TOML))])
    # head dim 2 past the pass limit: neither mask probe runs (the scaled one needs 4 channels)
    tiny = dataclasses.replace(EMPTY_ROWS[0], head_dim=2)
    judged = evaluate_record(KNOWN, tiny, max_passes=0, expectations=exp)
    assert (judged.row["verdict"], judged.row["unconfirmed_id"]) == ("fail", "fake-empty-rows")
    msg = failure_message(judged)
    assert "no mask evidence: the known divergence fake-empty-rows would explain it, but the mask probe did not run" in msg, msg
    assert "head dim 2: the scaled probe needs 4 channels; the full one 12 passes" in msg
    with_probe = evaluate_record(KNOWN, tiny, expectations=exp)
    assert with_probe.row["verdict"] == "expected" and "no mask evidence" not in failure_message(with_probe)


def test_a_run_whose_mask_probe_did_not_run_says_so(tmp_path, capsys):
    """End to end: the known bug on cases of 70 keys at head dim 2 with --max-mask-passes 1 (35 passes needed, and
    the scaled probe needs 4 channels): failures (exit 1), each naming the entry in unconfirmed_id, counted in the
    summary apart."""
    cases = [Case((100,), (70,), 4, 4, 2, "float32", Window.causal(), seed=s) for s in (5, 6)]
    out = tmp_path / "run"
    args = ["run", "--no-isolate", "-q", "--shrink", "0", "--out", str(out), "--expect", str(_toml(tmp_path, FAKE_TOML))]
    args += ["--backend", KNOWN, "--max-mask-passes", "1", *[a for c in cases for a in ("--case", c.to_json())]]
    assert main(args) == 1
    text = capsys.readouterr().out
    line = "no mask evidence: 2 of the new failures an entry would explain but no mask evidence"
    assert line in text and text.rstrip().count("fake-empty-rows 2") == 1, text
    md = (out / "summary.md").read_text()
    assert line in md and "no mask evidence: `fake-empty-rows` would explain it" in md
    import csv

    with (out / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["verdict"], r["mask_check"], r["unconfirmed_id"]) for r in rows] == [("fail", "not_run", "fake-empty-rows")] * 2
    assert "unconfirmed_id" in (out / "report.html").read_text()


# ---------------------------------------------------------------- entries that matched nothing

UNMATCHED_TOML = (
    FAKE_TOML
    + """
[[divergence]]
id = "fake-float16-only"
backend = "tests.helpers:EmptyRows*"
versions = "torch>=2.5"
condition = { dtype = "float16" }
reasons = ["max_err"]
explanation = "Never seen in this run: its cases are float16."
upstream = "not reported"
strict = false

[[divergence]]
id = "fake-old-torch"
backend = "tests.helpers:EmptyRowsSee*"
versions = "torch<2.0"
condition = { empty_rows = "yes" }
reasons = ["mask"]
explanation = "A torch this run did not have."
upstream = "not reported"

[[divergence]]
id = "fake-backward"
backend = "tests.helpers:EmptyRows*"
versions = "torch>=2.5"
condition = { empty_rows = "yes" }
reasons = ["dq_err"]
explanation = "A backward entry: this run checked no backward."
upstream = "not reported"

[[divergence]]
id = "fake-other-backend"
backend = "sdpa"
versions = "torch>=2.5"
condition = { empty_rows = "yes" }
reasons = ["mask"]
explanation = "A backend this run did not ask for."
upstream = "not reported"
"""
)


def test_the_report_names_the_entries_that_matched_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--no-isolate", "-q", "--shrink", "0", "--out", str(out), "--expect", str(_toml(tmp_path, UNMATCHED_TOML))]
    args += ["--backend", KNOWN, *[a for c in (*EMPTY_ROWS, NO_EMPTY_ROWS) for a in ("--case", c.to_json())]]
    assert main(args) == 0
    capsys.readouterr()
    md = (out / "summary.md").read_text()
    want = (
        "entries that matched nothing: 2 of the 3 known divergences for this run's backends matched no row: "
        "fake-float16-only, fake-old-torch (version outside torch<2.0)"
    )
    assert want in md, md
    html = (out / "report.html").read_text()
    part = html[html.index('id="known-unmatched"') :]
    part = part[: part.index("</div>")]
    assert "<code>fake-float16-only</code>" in part and "<code>fake-old-torch</code>" in part and "version outside torch&lt;2.0" in part
    assert "fake-empty-rows" not in part and "fake-backward" not in part and "fake-other-backend" not in part
    # re-rendered with only the entry that matched: every entry for the run matched, no such line
    assert main(["report", str(out), "--expect", str(_toml(tmp_path, FAKE_TOML, "only.toml"))]) == 0
    assert "entries that matched nothing" not in (out / "summary.md").read_text()
    assert "Every one of the 1 known divergences for this run" in (out / "report.html").read_text()
