"""Known divergences (parity/expect.py, parity/known_divergences.toml): loading and its errors,
version ranges, the judging table, the findings on rows of the lab's runs (tests/fixtures), and `parity run` /
`report` / `diff` / JUnit on fake CPU backends. The pytest side (xfail, property test) is
tests/test_expect_pytest.py; the lab's committed runs re-judged, folder by folder, are lab/tests/test_lab_runs.py."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from parity import Case, Window, expect
from parity.cli import main
from parity.expect import ExpectationError, Expectations, VersionRange, load, load_file
from parity.report.runs import load_run

ROOT = Path(__file__).resolve().parents[1]
#: the first H200 run (lab/runs/h200-2026-12-02, written before known divergences existed), cut to its failing rows,
#: the flash kernels' rows and two rows of each other (backend, verdict): tests/fixtures/make_lab_rows.py
H200 = ROOT / "tests" / "fixtures" / "lab-rows" / "h200-2026-12-02"
KNOWN = "tests.helpers:EmptyRowsSeeEveryKey"
KNOWN_PLUS = "tests.helpers:EmptyRowsAndOffByOne"
FAKE_TOML = """
[[divergence]]
id = "fake-empty-rows"
backend = "tests.helpers:EmptyRows*"
versions = "torch>=2.5"
condition = { empty_rows = "yes" }
reasons = ["mask"]
explanation = "Rows that see no key attend to every key."
upstream = "not reported"
"""
STRICT_ON_REFERENCE = """
[[divergence]]
id = "reference-said-to-fail"
backend = "reference"
condition = { empty_rows = "yes" }
explanation = "A claim that is false: the reference is right."
upstream = "not reported"
strict = STRICT
"""
EMPTY_ROWS = [
    Case((40,), (24,), 4, 4, 32, "float32", Window.causal(), seed=1),
    Case((40,), (24,), 4, 2, 32, "float32", Window(8, 0), seed=2),
]
NO_EMPTY_ROWS = Case((33,), (33,), 2, 1, 32, "float32", Window(1, 0), seed=3)


def _toml(tmp_path: Path, text: str, name: str = "known.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------- the file and its errors


def test_default_file_loads_and_each_entry_is_in_the_readme():
    exp = load(["default"])
    assert exp.files == (str(expect.DEFAULT_FILE),) and len(exp.entries) >= 6
    readme = (ROOT / "README.md").read_text()
    for e in exp.entries:
        assert f"`{e.id}`" in readme, f"README's findings table does not point at {e.id}"
        assert e.upstream == "not reported" or e.upstream.startswith("https://"), e.id
        assert e.versions is not None, f"{e.id}: say which versions it was seen on"


BASE_ENTRY = {"id": '"x"', "backend": '"sdpa"', "condition": '{ dtype = "float32" }', "explanation": '"Why."', "upstream": '"not reported"'}


def _entry(**fields: str | None) -> str:
    kv = {**BASE_ENTRY, **fields}
    return "[[divergence]]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items() if v is not None)


@pytest.mark.parametrize(
    "text, words",
    [
        (_entry(condition='{ colour = "red" }'), "entry 'x': condition: unknown coverage dimension 'colour'"),
        (_entry(condition='{ dtype = "fp8" }'), "entry 'x': condition 'dtype': unknown value(s) ['fp8']"),
        (_entry(condition='{ left = ["narrow", 3] }'), "entry 'x': condition 'left' must be a string or a non-empty list"),
        (_entry(condition="{}"), "entry 'x': field 'condition' must be a non-empty table"),
        (_entry(stict="true"), "entry 'x': unknown field(s) ['stict']"),
        (_entry(upstream=None), "entry 'x': missing field(s) ['upstream']"),
        (_entry(id=None), "entry #1: missing field(s) ['id']"),
        (_entry(verdict='"pass"'), "entry 'x': field 'verdict' must be one of fail, error, crash, timeout"),
        (_entry(reasons='["mask", "typo"]'), "entry 'x': field 'reasons' must be a list of"),
        (_entry(verdict='"error"', reasons='["mask"]'), "entry 'x': field 'reasons' only applies to verdict 'fail'"),
        (_entry(any_reasons='["dq_err", "dz_err"]'), "entry 'x': field 'any_reasons' must be a list of"),
        (_entry(verdict='"crash"', any_reasons='["dq_err"]'), "entry 'x': field 'any_reasons' only applies to verdict 'fail'"),
        (_entry(strict='"yes"'), "entry 'x': field 'strict' must be true or false"),
        (_entry(versions='"torch"'), "entry 'x': field 'versions': 'torch' is not 'PACKAGE SPECIFIERS'"),
        (_entry(versions='"torch>=two"'), "entry 'x': field 'versions': '>=two' in 'torch>=two' is not a version specifier"),
        (_entry(versions='"torch>=2.13,<2.11"'), "entry 'x': field 'versions': 'torch>=2.13,<2.11' matches no version"),
        (_entry(backend='"sdpa-cudnn"'), "entry 'x': field 'backend': 'sdpa-cudnn' matches no known backend"),
        (_entry(explanation='""'), "entry 'x': field 'explanation' must be a non-empty string"),
        (_entry() + _entry(), "entry 'x': duplicate id"),
        ("[[divergence]\n", "not valid TOML"),
        ("[[divergences]]\nid = 'x'\n", "unknown top-level key(s) ['divergences']"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_entry_and_field(tmp_path, capsys, text, words):
    path = _toml(tmp_path, text)
    with pytest.raises(ExpectationError) as err:
        load_file(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and words in msg and "\n" not in msg, msg
    # on the command line: exit 2, the same line, before any case runs
    assert (
        main(
            [
                "run",
                "--backend",
                "reference",
                "--case",
                NO_EMPTY_ROWS.to_json(),
                "--expect",
                str(path),
                "-q",
                "--no-report",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err_text = capsys.readouterr().err
    assert words in err_text and not (tmp_path / "out" / "results.csv").exists()


def test_which_files_expect_none_default_and_the_environment(tmp_path):
    mine = _toml(tmp_path, FAKE_TOML)
    assert [e.id for e in load([str(mine)]).entries] == ["fake-empty-rows"]  # replaces the default
    both = load(["default", str(mine)])
    assert both.entries[-1].id == "fake-empty-rows" and len(both.entries) == len(load().entries) + 1
    assert not load(["none"]) and load(["none"]).files == ()
    assert [e.id for e in load(None, {"PARITY_EXPECT": str(mine)}).entries] == ["fake-empty-rows"]
    assert not load(None, {"PARITY_EXPECT": "none"})
    assert load(None, {}).files == (str(expect.DEFAULT_FILE),)
    with pytest.raises(ExpectationError, match="none cannot be combined"):
        load(["none", str(mine)])
    with pytest.raises(ExpectationError, match="no such expectations file"):
        load([str(tmp_path / "missing.toml")])
    with pytest.raises(ExpectationError, match="id already defined in"):
        load([str(mine), str(_toml(tmp_path, FAKE_TOML, "again.toml"))])


def test_version_ranges():
    r = VersionRange.parse("flash-attn-4>=4.0.0b36,<4.1")
    assert r.find("flash-attn-4 4.0.0b36") == "4.0.0b36"
    assert [r.contains(v) for v in ("4.0.0b35", "4.0.0b36", "4.0.0", "4.0.3", "4.1.0")] == [False, True, True, True, False]
    x = VersionRange.parse("xformers >= 0.0.35, < 0.0.36")
    assert x.admits("xformers 0.0.35, op cutlassF-pt (shim ...)") and not x.admits("xformers 0.0.36, op cutlassF-pt")
    j = VersionRange.parse("jax>=0.11,<0.12")
    assert j.find("jax 0.11.2, jaxlib 0.11.2, implementation=xla") == "0.11.2" and j.find("jaxlib 0.11.2") is None
    t = VersionRange.parse("torch==2.11.*")
    assert t.admits("2.11.0+cu130", "2.11.0+cu130")  # a bare version string: the run's torch
    assert t.admits("FlashAttention 2.5.7 vendored in torch 2.11.0+cu130") and not t.admits("2.12.0", "2.12.0")
    # a version that cannot be found is outside every range: the entry matches nothing, never everything
    assert not j.admits("", "2.11.0") and not j.admits("unknown (RuntimeError)") and not x.admits("0.0.35")


# ---------------------------------------------------------------- judging


def _row(case: Case, backend: str, verdict: str, reasons: str = "") -> dict:
    return {"backend": backend, "case_json": case.to_json(), "verdict": verdict, "raw_verdict": verdict, "reasons": reasons}


def test_judge_follows_the_truth_table(tmp_path):
    exp = load([str(_toml(tmp_path, FAKE_TOML + STRICT_ON_REFERENCE.replace("STRICT", "true")))])
    ok, out = EMPTY_ROWS[0], NO_EMPTY_ROWS
    j = lambda row, version="2.13.0": exp.judge(row, version, "2.13.0")  # noqa: E731

    def vid(r):
        return r["verdict"], r["expected_id"], r["raw_verdict"]

    assert vid(j(_row(ok, KNOWN, "fail", "max_err mask"))) == ("expected", "fake-empty-rows", "fail")
    assert vid(j(_row(ok, KNOWN, "fail", "max_err"))) == ("fail", "", "fail")  # the reason the entry names is missing
    assert vid(j(_row(ok, KNOWN, "error"))) == ("error", "", "error")  # another verdict than the entry's
    assert vid(j(_row(out, KNOWN, "fail", "mask"))) == ("fail", "", "fail")  # outside the condition
    assert vid(j(_row(ok, KNOWN, "fail", "mask"), "2.4.0")) == ("fail", "", "fail")  # outside the versions
    assert vid(exp.judge(_row(ok, KNOWN, "fail", "mask"), "", "")) == ("fail", "", "fail")  # version unknown: not in range
    assert vid(j(_row(ok, "tests.other:Thing", "fail", "mask"))) == ("fail", "", "fail")  # another backend
    assert vid(j(_row(ok, KNOWN, "pass"))) == ("unexpected-pass", "fake-empty-rows", "pass")  # strict by default
    assert vid(j(_row(ok, "reference", "pass"))) == ("unexpected-pass", "reference-said-to-fail", "pass")
    assert vid(j(_row(out, "reference", "pass"))) == ("pass", "", "pass")
    assert vid(j(_row(ok, KNOWN, "unsupported"))) == ("unsupported", "", "unsupported")
    # judged again, from the raw verdict: with no entries every row is back to its own verdict
    assert vid(Expectations().judge(j(_row(ok, KNOWN, "fail", "mask")))) == ("fail", "", "fail")
    lax = load([str(_toml(tmp_path, STRICT_ON_REFERENCE.replace("STRICT", "false"), "lax.toml"))])
    assert vid(lax.judge(_row(ok, "reference", "pass"))) == ("pass", "", "pass")  # not strict: a pass is a pass


def test_any_reasons_needs_one_of_them_and_makes_a_backward_entry(tmp_path):
    """One backward bug shows in whichever gradients it reaches: ``any_reasons`` explains a row with any
    of them, none without; and it is a backward entry, so it may explain a row that failed in its backward."""
    text = FAKE_TOML.replace('reasons = ["mask"]', 'any_reasons = ["dq_err", "dk_err"]')
    exp = load([str(_toml(tmp_path, text))])
    assert exp.entries[0].backward and exp.entries[0].reasons == ()
    ok = EMPTY_ROWS[0]

    def j(reasons):
        r = exp.judge({**_row(ok, KNOWN, "fail", reasons), "grad_check": "mismatch"}, "2.13.0", "2.13.0")
        return r["verdict"], r["expected_id"]

    assert j("dk_err") == j("dq_err dv_err") == ("expected", "fake-empty-rows")
    assert j("dv_err") == j("max_err") == j("") == ("fail", "")


#: a few committed rows per known divergence (tests/fixtures/make_known_runs.py): the row each entry's repro
#: script is made from, a passing row of the same backend and run, FA4's own refusal; rows.tsv says the verdict
KNOWN_RUNS = ROOT / "tests" / "fixtures" / "known-runs"


def test_committed_findings_each_have_their_entry():
    """The README findings, entry by entry, on hand-picked committed rows (not on counts of the lab's runs):
    each finding's row is judged its entry, the passing rows beside them stay passes (no entry reaches too
    far), FA4's own refusal matches none, and every entry has a row."""
    lines = [ln.split("\t") for ln in (KNOWN_RUNS / "rows.tsv").read_text().splitlines()[1:]]
    judged = {}
    for folder in sorted({f for f, *_ in lines}):
        df = load_run(KNOWN_RUNS / folder, load(), rejudge=True).df
        judged.update({(folder, b, c): (v, e) for b, c, v, e in zip(df["backend"], df["case_id"], df["verdict"], df["expected_id"])})
    entries = {e.id for e in load().entries}
    for folder, backend, case_id, want in lines:
        verdict, entry = judged[(folder, backend, case_id)]
        assert (entry if want in entries else verdict) == want and (verdict == "expected") == (want in entries), (folder, backend, case_id)
    assert {w for *_, w in lines} & entries == entries  # no entry without a finding behind it
    refused = [b for f, b, c, w in lines if w == "error" and f == "h200-2026-12-02"]
    assert sorted(refused) == ["fa4-cuda", "fa4-varlen-cuda"]


# ---------------------------------------------------------------- report and diff on an old run


def _old_run(tmp_path: Path) -> Path:
    """A copy of rows of the 2026-12-02 run (:data:`H200`), its results.csv unpacked (the fixture keeps it gzipped)."""
    d = tmp_path / "h200"
    d.mkdir()
    for name in ("environment.json", "masks.jsonl.gz", "shrunk.jsonl"):
        shutil.copy(H200 / name, d / name)
    (d / "results.csv").write_bytes(gzip.decompress((H200 / "results.csv.gz").read_bytes()))
    return d


def test_rewrite_results_refuses_a_run_without_its_environment(tmp_path, capsys):
    """Judged anew without environment.json, no versioned entry can match: --rewrite-results would turn the
    rows the run itself found expected into failures (it did, once, to a benchmark's warm run). It refuses,
    naming why, and leaves results.csv as the run wrote it."""
    old = _old_run(tmp_path)
    (old / "environment.json").unlink()
    before = (old / "results.csv").read_bytes()
    assert main(["report", str(old), "--expect", "default", "--rewrite-results"]) == 2
    err = capsys.readouterr().err
    assert "has no environment.json" in err and "results.csv is not rewritten" in err
    assert (old / "results.csv").read_bytes() == before
    assert main(["report", str(old), "--expect", "default"]) == 0  # the reports alone: written, with a warning
    assert "warning:" in capsys.readouterr().err


def test_report_renders_an_old_run_known_vs_new_and_leaves_results_csv(tmp_path, capsys):
    old = _old_run(tmp_path)
    before = (old / "results.csv").read_bytes()
    assert "raw_verdict" not in before.decode().splitlines()[0]
    assert main(["report", str(old)]) == 0
    md = (old / "summary.md").read_text()
    assert md.startswith("## attn-parity ❌ 2 failing of 624 rows (99 expected)")  # the two FA4 refusals are new
    assert "known divergences: 99 rows expected (" in md and "new failures: 2 rows" in md
    assert "<summary>Known divergences (99 rows expected)</summary>" in md
    junit = (old / "junit.xml").read_text()
    assert junit.count('type="parity.expected"') == 99 and 'type="parity.unexpected-pass"' not in junit
    assert 'message="expected (known divergence jax-xla-float32-tf32: ' in junit
    html = (old / "report.html").read_text()
    assert 'id="known-table"' in html and 'class="chip c-exp" title="41 expected' in html
    assert (old / "results.csv").read_bytes() == before  # not rewritten unless asked
    assert main(["report", str(old), "--strict"]) == 1  # the two refusals
    assert main(["report", str(old), "--strict", "--expect", "none"]) == 1
    assert "101 failing of 624 rows" in (old / "summary.md").read_text()
    capsys.readouterr()
    assert main(["report", str(old), "--rewrite-results"]) == 0
    raw = load_run(old).df  # no expectations applied on load: what the file now says
    assert (raw["verdict"] == "expected").sum() == 99 and (raw[raw["verdict"] == "expected"]["raw_verdict"] == "fail").all()


def test_diff_an_old_run_against_its_rejudged_copy(tmp_path, capsys):
    old = _old_run(tmp_path)
    new = tmp_path / "new"
    shutil.copytree(old, new)
    assert main(["report", str(new), "--rewrite-results"]) == 0
    capsys.readouterr()
    assert main(["diff", str(old), str(new)]) == 0  # same schema once loaded; the old run judged with the default file
    out = capsys.readouterr().out
    assert out.startswith("parity diff: no regression (0 fixed, 624 rows compared)") and "Still expected: 99" in out
    assert main(["diff", str(old), str(new), "--expect", "none"]) == 0  # both back to their raw verdicts
    assert "Still failing: 101" in capsys.readouterr().out


def test_diff_sections_for_known_divergences(tmp_path, capsys):
    """pass -> expected and fail -> expected are visible, not regressions; expected -> fail and a
    new unexpected pass are regressions."""
    from parity.report.diff import _classify

    assert _classify("pass", "expected") == "newly_expected" and _classify("fail", "expected") == "newly_expected"
    assert _classify(None, "expected") == "newly_expected" and _classify("expected", "expected") == "still_expected"
    assert _classify("expected", "fail") == "new_failures" and _classify("expected", "error") == "new_failures"
    assert _classify("expected", "pass") == "fixed" and _classify("expected", "unsupported") == "coverage_lost"
    assert _classify("pass", "unexpected-pass") == "unexpected_passes" and _classify("expected", "unexpected-pass") == "unexpected_passes"
    assert _classify("unexpected-pass", "unexpected-pass") == "still_failing" and _classify("fail", "fail") == "still_failing"
    base, head = _fake_run(tmp_path, "base", [KNOWN]), _fake_run(tmp_path, "head", [KNOWN], "none")
    capsys.readouterr()
    assert main(["diff", str(base), str(head)]) == 1  # HEAD ran without the entry: expected -> fail
    out = capsys.readouterr().out
    assert out.startswith("parity diff: REGRESSION: 2 new failures")
    assert "| expected → fail | max_err mean_err mask (known divergence fake-empty-rows) |" in (head / "diff.md").read_text()
    assert main(["diff", str(head), str(base)]) == 0  # fail -> expected: visible, no regression
    assert "Newly expected: 2" in capsys.readouterr().out


# ---------------------------------------------------------------- parity run with fake backends


def _fake_run(tmp_path: Path, name: str, backends: list[str], expect_file: str | None = None, toml: str = FAKE_TOML) -> Path:
    out = tmp_path / name
    path = expect_file or str(_toml(tmp_path, toml, f"{name}.toml"))
    args = ["run", "--no-isolate", "-q", "--shrink", "0", "--out", str(out), "--expect", path]
    for b in backends:
        args += ["--backend", b]
    for c in (*EMPTY_ROWS, NO_EMPTY_ROWS):
        args += ["--case", c.to_json()]
    _fake_run.rc = main(args)  # type: ignore[attr-defined]
    return out


def _verdicts(out: Path) -> list[tuple[str, str, str]]:
    import csv

    with (out / "results.csv").open(newline="") as fh:
        return [(r["verdict"], r["raw_verdict"], r["expected_id"]) for r in csv.DictReader(fh)]


def test_run_known_bug_with_its_entry_exits_0(tmp_path, capsys):
    out = _fake_run(tmp_path, "known", [KNOWN])
    assert _fake_run.rc == 0  # type: ignore[attr-defined]
    assert _verdicts(out) == [("expected", "fail", "fake-empty-rows")] * 2 + [("pass", "pass", "")]
    text = capsys.readouterr().out
    assert "known divergences: 2 rows expected (fake-empty-rows 2)" in text and "new failures: 0 rows" in text
    assert "FAIL " not in text
    env = json.loads((out / "environment.json").read_text())
    assert env["expectations"]["entries"] == ["fake-empty-rows"]
    junit = (out / "junit.xml").read_text()
    assert junit.count('type="parity.expected"') == 2 and 'failures="0"' in junit
    assert (out / "summary.md").read_text().startswith("## attn-parity ✅ PASS: 3 rows ran: 1 passed, 2 expected (known divergences)")


def test_run_known_bug_without_entries_or_with_an_extra_bug_exits_1(tmp_path, capsys):
    _fake_run(tmp_path, "none", [KNOWN], "none")
    assert _fake_run.rc == 1  # type: ignore[attr-defined]
    out = _fake_run(tmp_path, "extra", [KNOWN_PLUS])
    assert _fake_run.rc == 1  # type: ignore[attr-defined]
    assert _verdicts(out) == [("expected", "fail", "fake-empty-rows")] * 2 + [("fail", "fail", "")]
    text = capsys.readouterr().out
    assert f"FAIL {KNOWN_PLUS} [max_err mean_err mask]" in text and "new failures: 1 rows" in text


def test_run_strict_entry_on_a_correct_backend_is_an_unexpected_pass(tmp_path, capsys):
    out = _fake_run(tmp_path, "strict", ["reference"], toml=STRICT_ON_REFERENCE.replace("STRICT", "true"))
    assert _fake_run.rc == 1  # type: ignore[attr-defined]
    assert _verdicts(out) == [("unexpected-pass", "pass", "reference-said-to-fail")] * 2 + [("pass", "pass", "")]
    text = capsys.readouterr().out
    assert re.search(
        r"UNEXPECTED-PASS reference \[reference-said-to-fail\] \w+\n  passed, but the strict known divergence "
        r"reference-said-to-fail: A claim that is false",
        text,
    ), text
    assert "unexpected passes: 2 rows covered by strict entries that passed (reference-said-to-fail 2)" in text
    junit = (out / "junit.xml").read_text()
    assert junit.count('type="parity.unexpected-pass"') == 2 and 'failures="2"' in junit
    assert "**2**" in (out / "summary.md").read_text()  # the unexpected-pass column, bold
    _fake_run(tmp_path, "lax", ["reference"], toml=STRICT_ON_REFERENCE.replace("STRICT", "false"))
    assert _fake_run.rc == 0  # type: ignore[attr-defined]
