"""``python -m parity diff BASE HEAD``: regressions between two real runs, and its exit codes.

HEAD folders are the real run with planted changes (a pass turned into a failure, a failure
fixed, an error ratio tripled, ...), so every category is known in advance."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from parity.cli import main
from tests.report_fixtures import NEEDS_GPU, OFF_BY_ONE, shared_run


@pytest.fixture
def base(tmp_path_factory, tmp_path) -> Path:
    return shared_run(tmp_path_factory, tmp_path / "base")


def _read(d: Path) -> pd.DataFrame:
    return pd.read_csv(d / "results.csv", dtype=str, keep_default_na=False)


def _head(base: Path, tmp_path: Path, edit) -> Path:
    head = tmp_path / "head"
    shutil.copytree(base, head)
    df = edit(_read(head))
    df.to_csv(head / "results.csv", index=False)
    return head


def _key(df, backend, family, dtype="bfloat16"):
    sel = df[(df["backend"] == backend) & (df["family"] == family) & (df["dtype"] == dtype)]
    return sel.index[0]


def _diff(capsys, *args) -> tuple[int, str, str]:
    code = main(["diff", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_identical_runs_have_no_regression(base, tmp_path, capsys):
    head = _head(base, tmp_path, lambda df: df)
    code, out, _ = _diff(capsys, base, head)
    assert code == 0
    assert out.startswith("parity diff: no regression (0 fixed, 28 rows compared)")
    md = (head / "diff.md").read_text()
    assert md.startswith("## attn-parity diff ✅ no regression") and "Still failing: 11" in md
    assert (head / "diff.html").exists()


def test_planted_changes_land_in_the_right_categories(base, tmp_path, capsys):
    planted = {}

    def edit(df):
        extra = df[df["backend"] == "sdpa"].copy()
        extra["backend"] = "sdpa-new"  # a backend appears (passing what sdpa passed in BASE)
        i = _key(df, "sdpa", "dense")  # pass -> fail
        df.loc[i, ["verdict", "reasons", "err_ratio", "unconfirmed_id"]] = ["fail", "max_err", "40", "a-mask-entry"]
        planted["new"] = df.loc[i, "case_id"]
        j = _key(df, OFF_BY_ONE, "chunked")  # fail -> pass
        df.loc[j, ["verdict", "reasons", "err_ratio"]] = ["pass", "", "0.5"]
        planted["fixed"] = df.loc[j, "case_id"]
        k = _key(df, "sdpa", "decode")  # still passes, error ratio x3
        df.loc[k, "err_ratio"] = str(3 * float(df.loc[k, "err_ratio"]))
        planted["up"] = df.loc[k, "case_id"]
        m = _key(df, "sdpa", "varlen")  # pass -> unsupported
        df.loc[m, ["verdict", "err_ratio", "detail"]] = ["unsupported", "", "no varlen path"]
        planted["lost"] = df.loc[m, "case_id"]
        return pd.concat([df[df["backend"] != NEEDS_GPU], extra])  # and one vanishes

    head = _head(base, tmp_path, edit)
    from parity.report.diff import compare_runs
    from parity.report.runs import load_run

    d = compare_runs(load_run(base), load_run(head))
    keys = lambda changes: sorted((c.backend, c.case_id) for c in changes)  # noqa: E731
    assert keys(d.new_failures) == [("sdpa", planted["new"])]
    assert keys(d.fixed) == [(OFF_BY_ONE, planted["fixed"])]
    assert keys(d.ratio_up) == [("sdpa", planted["up"])]
    assert d.ratio_up[0].factor == pytest.approx(3.0, rel=1e-3)
    assert keys(d.coverage_lost) == [("sdpa", planted["lost"])]
    assert d.backends_appeared == ["sdpa-new"] and d.backends_vanished == [NEEDS_GPU]
    assert len(d.still_failing) == 11 - 1  # the fixed one left
    assert d.regressions == 4

    code, out, err = _diff(capsys, base, head, "--out", tmp_path / "d")
    assert code == 1
    assert out.startswith("parity diff: REGRESSION: 1 new failures, 1 error ratios up more than 1.5x")
    md = (tmp_path / "d" / "diff.md").read_text()
    assert "### New failures (1)" in md and "pass → fail" in md and "--backend sdpa --case" in md
    assert "max_err (no mask evidence for known divergence a-mask-entry)" in md  # why it is not expected
    assert "### Fixed (1)" in md and "Backends appeared: `sdpa-new`" in md and f"Backends vanished: `{NEEDS_GPU}`" in md
    page = (tmp_path / "d" / "diff.html").read_text()
    assert 'class="status bad"' in page and planted["new"] in page and "no varlen path" in page


def test_fixes_only_pass_the_gate(base, tmp_path, capsys):
    def edit(df):
        bad = (df["backend"] == OFF_BY_ONE) & (df["verdict"] == "fail")
        df.loc[bad, "err_ratio"] = df.loc[bad, "err_ratio"].map(lambda v: str(float(v) / 1000))
        df.loc[bad, ["verdict", "reasons"]] = ["pass", ""]
        k = _key(df, "sdpa", "decode")  # an improvement on a row that passes in both
        df.loc[k, "err_ratio"] = str(float(df.loc[k, "err_ratio"]) / 10)
        return df

    head = _head(base, tmp_path, edit)
    code, out, _ = _diff(capsys, base, head)
    assert code == 0 and "5 fixed" in out
    assert "Error ratio down: 1" in out  # the fixed rows are listed as fixed only


def test_ratio_threshold_and_coverage_flags(base, tmp_path, capsys):
    tiny = _read(base)
    tiny.loc[_key(tiny, "sdpa", "dense", "float16"), "err_ratio"] = "0.01"
    tiny.to_csv(base / "results.csv", index=False)

    def edit(df):
        k = _key(df, "sdpa", "decode")
        df.loc[k, "err_ratio"] = str(1.3 * float(df.loc[k, "err_ratio"]))  # below the 1.5x default
        df.loc[_key(df, "sdpa", "dense", "float16"), "err_ratio"] = "0.05"  # x5, but only +0.04: below --min-ratio-delta
        return df[df["backend"] != NEEDS_GPU]

    head = _head(base, tmp_path, edit)
    code, out, _ = _diff(capsys, base, head)
    assert code == 1 and "1 backends vanished" in out and "error ratio" not in out
    assert _diff(capsys, base, head, "--allow-coverage-loss")[0] == 0
    code, out, _ = _diff(capsys, base, head, "--allow-coverage-loss", "--ratio-threshold", "1.2", "--min-ratio-delta", "0.1")
    assert code == 1 and "1 error ratios up more than 1.2x" in out
    code, out, _ = _diff(capsys, base, head, "--allow-coverage-loss", "--min-ratio-delta", "0")
    assert code == 1 and "1 error ratios up more than 1.5x" in out  # the tiny one, x5


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda df: df.drop(columns=["mask_detail"]), "different schemas (only in BASE: mask_detail)"),
        (lambda df: df.assign(case_id=df["case_id"] + "x"), "no case in common"),
    ],
)
def test_bad_pairs_are_usage_errors(base, tmp_path, capsys, make, needle):
    head = _head(base, tmp_path, make)
    code, out, err = _diff(capsys, base, head)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_missing_folder_and_bad_csv(base, tmp_path, capsys):
    code, _, err = _diff(capsys, base, tmp_path / "nope")
    assert code == 2 and err.strip() == f"parity: error: {tmp_path / 'nope'}: no such folder"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.csv").write_text("x,y\n1,2\n")
    code, _, err = _diff(capsys, tmp_path / "bad", base)
    assert code == 2 and "missing columns: backend, case_id, family, dtype, verdict" in err
    (tmp_path / "file").write_text("")
    code, _, err = _diff(capsys, base, base, "--out", tmp_path / "file" / "sub")
    assert code == 2 and "cannot write diff.html / diff.md" in err
    code, _, err = _diff(capsys, base, base, "--ratio-threshold", "0.5")
    assert code == 2 and "--ratio-threshold must be >= 1" in err


def test_a_run_folder_with_gzipped_results_reads_as_the_same_run(base, tmp_path, capsys):
    import gzip

    from parity.report.runs import load_run

    packed = tmp_path / "packed"
    shutil.copytree(base, packed)
    raw = (packed / "results.csv").read_bytes()
    (packed / "results.csv.gz").write_bytes(gzip.compress(raw))
    (packed / "results.csv").unlink()  # as the lab commits its runs (lab/runs/)
    assert load_run(packed).df.equals(load_run(base).df)
    code, out, _ = _diff(capsys, base, packed)
    assert code == 0, out


def _runs_folder(tmp_path_factory, tmp_path, names) -> list[Path]:
    """Run folders ``reports/runs/NAME`` under ``tmp_path`` (copies of the real run), and
    ``reports/latest`` pointing at the last, as ``parity run`` leaves them."""
    import os

    runs = [shared_run(tmp_path_factory, tmp_path / "reports" / "runs" / n) for n in names]
    (tmp_path / "reports" / "latest").symlink_to(os.path.relpath(runs[-1], tmp_path / "reports"), target_is_directory=True)
    return runs


def test_diff_defaults_to_the_latest_run(tmp_path_factory, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    old, mid, new = _runs_folder(tmp_path_factory, tmp_path, ["20261201-090000", "20261202-090000", "20261202-090000-2"])
    (tmp_path / "reports" / "runs" / "20261203-090000").mkdir()  # a run that wrote no row yet: not a run to compare
    code, out, err = _diff(capsys, old)  # OLD against reports/latest
    assert code == 0 and out.startswith("parity diff: no regression")
    line = next(x for x in err.splitlines() if "compar" in x)
    assert str(old) in line and str(Path("reports/runs/20261202-090000-2")) in line and "latest" in line
    assert (new / "diff.md").exists() and not (mid / "diff.md").exists()
    (new / "diff.md").unlink()
    code, out, err = _diff(capsys)  # the two newest runs under reports/runs/
    assert code == 0 and out.startswith("parity diff: no regression")
    line = next(x for x in err.splitlines() if "compar" in x)
    assert "20261202-090000 " in line + " " and "20261202-090000-2" in line and "20261201" not in line
    assert (new / "diff.md").exists()


def test_diff_without_runs_says_what_to_pass(tmp_path_factory, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = _diff(capsys)
    assert code == 2 and err.startswith("parity: error:") and "BASE_DIR HEAD_DIR" in err and err.count("\n") == 1
    code, _, err = _diff(capsys, tmp_path / "somewhere")
    assert code == 2 and "reports/latest" in err and "HEAD_DIR" in err and err.count("\n") == 1
    (only,) = _runs_folder(tmp_path_factory, tmp_path, ["20261201-090000"])
    code, _, err = _diff(capsys)  # one run is not two
    assert code == 2 and "1 run" in err and "BASE_DIR" in err and err.count("\n") == 1
    code, _, err = _diff(capsys, only)  # the latest against itself
    assert code == 2 and "is the latest run" in err and err.count("\n") == 1
