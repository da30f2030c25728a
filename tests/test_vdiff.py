"""``python -m parity vdiff``: one backend at two versions on the same cases, on small synthetic run folders
(written here: results.csv + environment.json), judged against a small known-divergence file of this test."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from parity import Case, Window
from parity.cli import main
from parity.results import COLUMNS

OLD, NEW = "vllm 0.26.0 vllm_flash_attn FA2", "vllm 0.33.0 vllm_flash_attn FA2"
TORCH = "2.13.0+cpu"

ENTRIES = """
[[divergence]]
id = "t-clamp"
backend = "vllm-fa2-cuda"
versions = "vllm>=0.26,<0.27"
condition = { length = "sq>sk" }
verdict = "fail"
reasons = ["mask"]
explanation = "a clamp of the right side (test entry)"
upstream = "not reported"
strict = {strict}

[[divergence]]
id = "t-nan"
backend = "vllm-fa2-cuda"
versions = "vllm>=0.26,<0.27"
condition = { paged = "yes" }
verdict = "fail"
reasons = ["nan"]
explanation = "NaN from a paged cache (test entry)"
upstream = "not reported"
strict = false
"""


def _case(seed: int, q: int = 16, k: int = 16, page: int | None = None) -> Case:
    return Case(q_lens=(q,), k_lens=(k,), hq=2, hkv=1, head_dim=16, dtype="bfloat16", window=Window(3, 0), page_size=page, seed=seed)


CLAMP_A, CLAMP_B = _case(1, 8, 4), _case(2, 8, 4)
PAGED = _case(3, page=8)
MOVED, BREAKS, REFUSED, SAME = _case(4), _case(5), _case(6), _case(7)


def row(
    backend: str,
    case: Case,
    raw: str,
    reasons: str = "",
    max_err: float = 1e-3,
    mean_err: float = 1e-4,
    lse: float = 0.0,
    ratio: float = 1.0,
) -> dict:
    r = dict.fromkeys(COLUMNS, "")
    r.update(q_lens=" ".join(map(str, case.q_lens)), k_lens=" ".join(map(str, case.k_lens)), window_left=case.window.left, window_right=0)
    r.update(
        backend=backend, case_id=case.case_id, case_json=case.to_json(), family="dense", dtype=case.dtype, verdict=raw, raw_verdict=raw
    )
    r.update(
        reasons=reasons,
        max_abs_err=max_err,
        mean_abs_err=mean_err,
        lse_max_abs_err=lse,
        err_ratio=ratio,
        repro=f"parity run --case {case.case_id}",
    )
    return r


def write_run(folder: Path, versions: dict[str, str], rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    with (folder / "results.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    backends = {n: {"spec": n, "name": n, "version": v} for n, v in versions.items()}
    (folder / "environment.json").write_text(json.dumps({"torch": TORCH, "date_utc": "2026-12-07T00:00:00+00:00", "backends": backends}))
    return folder


def base_rows(name: str = "vllm-fa2-cuda") -> list[dict]:
    return [
        row(name, CLAMP_A, "fail", "mask"),
        row(name, CLAMP_B, "fail", "mask"),
        row(name, PAGED, "fail", "nan"),
        row(name, MOVED, "pass", max_err=1e-3),
        row(name, BREAKS, "pass"),
        row(name, REFUSED, "pass"),
        row(name, SAME, "pass"),
        row("sdpa", SAME, "pass"),
    ]


def head_rows(name: str = "vllm-fa2-cuda", regress: bool = True) -> list[dict]:
    return [
        row(name, CLAMP_A, "pass"),  # the clamp is fixed
        row(name, CLAMP_B, "pass"),
        row(name, PAGED, "fail", "nan"),  # still present, outside the entry's range
        row(name, MOVED, "pass", max_err=3e-3),  # moved x3 while passing
        row(
            name,
            BREAKS,
            "fail" if regress else "pass",
            "max_err" if regress else "",
            max_err=0.5 if regress else 1e-3,
            ratio=9.0 if regress else 1.0,
        ),  # a new finding
        row(name, REFUSED, "unsupported" if regress else "pass"),  # coverage lost
        row(name, SAME, "pass"),
        row("sdpa", SAME, "pass", max_err=9e-3),  # same version: not a pair, so its move is not reported
    ]


@pytest.fixture
def expect(tmp_path) -> Path:
    p = tmp_path / "entries.toml"
    p.write_text(ENTRIES.replace("{strict}", "false"))
    return p


def _vdiff(capsys, *args) -> tuple[int, str, str]:
    code = main(["vdiff", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _two_runs(tmp_path: Path, regress: bool = True, head_version: str = NEW) -> tuple[Path, Path]:
    base = write_run(tmp_path / "base", {"vllm-fa2-cuda": OLD, "sdpa": TORCH}, base_rows())
    head = write_run(tmp_path / "head", {"vllm-fa2-cuda": head_version, "sdpa": TORCH}, head_rows(regress=regress))
    return base, head


def test_two_runs_one_version_each(tmp_path, expect, capsys):
    base, head = _two_runs(tmp_path)
    code, out, _ = _vdiff(capsys, base, head, "--expect", expect)
    assert code == 1, out
    assert out.startswith(
        "parity vdiff: REGRESSION: 1 rows with new findings at HEAD, coverage lost on 1 rows (1 finding fixed, 1 not fixed)"
    )
    assert "vllm-fa2-cuda: vllm 0.26.0 vllm_flash_attn FA2 → vllm 0.33.0 vllm_flash_attn FA2" in out
    assert "sdpa" not in out  # the same version at both: not a pair
    assert "t-clamp: fixed" in out
    assert "t-nan: still present (HEAD's version is outside `versions`: widen it (seen at HEAD))" in out
    md = (head / "vdiff.md").read_text()
    assert md.startswith("## attn-parity version diff ❌ REGRESSION")
    assert "| t-clamp | fixed | 2 | 0 | 2 | 0 | 0 | vllm>=0.26,<0.27 |  |" in md
    assert "| t-nan | still present | 1 | 1 | 0 | 0 | 0 | vllm>=0.26,<0.27 |" in md
    assert "expected → pass: 2" in md and "expected → fail: 1" in md and "pass → fail: 1" in md and "pass → unsupported: 1" in md
    assert "### New findings at HEAD (1 rows, 1 kinds)" in md and f"parity run --case {BREAKS.case_id}" in md
    assert "### Coverage lost (1)" in md
    # numbers moved where both pass: MOVED's max error x3, nothing else
    assert "| max abs error | 2 | 1 | 0 |" in md and "| mean abs error | 2 | 0 | 0 |" in md and "| LSE max abs error | 2 | 0 | 0 |" in md
    assert "| vllm-fa2-cuda | max abs error | 0.001 | 0.003 | 3 |" in md
    html = (head / "vdiff.html").read_text()
    assert 'id="findings"' in html and "t-clamp" in html and 'class="status bad"' in html


def test_no_regression_exits_0(tmp_path, expect, capsys):
    base, head = _two_runs(tmp_path, regress=False)
    code, out, _ = _vdiff(capsys, base, head, "--expect", expect, "--out", tmp_path / "page")
    assert code == 0, out
    assert out.startswith("parity vdiff: no regression (1 finding fixed, 1 not fixed, 7 rows compared)")
    assert (tmp_path / "page" / "vdiff.md").exists() and not (head / "vdiff.md").exists()


def test_an_error_ratio_up_while_passing_is_a_regression(tmp_path, expect, capsys):
    """As in parity diff: the error over the same-dtype baseline's grew x3 (+2), both passing."""
    base = write_run(tmp_path / "base", {"vllm-fa2-cuda": OLD}, base_rows()[:-1])
    rows = head_rows(regress=False)[:-1]
    rows[3]["err_ratio"] = 3.0
    head = write_run(tmp_path / "head", {"vllm-fa2-cuda": NEW}, rows)
    code, out, _ = _vdiff(capsys, base, head, "--expect", expect)
    assert code == 1 and out.startswith("parity vdiff: REGRESSION: 1 error ratios up more than 1.5x")
    assert "### Error ratio up (1)" in (head / "vdiff.md").read_text()
    assert _vdiff(capsys, base, head, "--expect", expect, "--ratio-threshold", "4")[0] == 0


def test_one_run_with_the_kernel_staged_twice(tmp_path, expect, capsys):
    """X beside X@TAG in one folder: the tagged rows are judged under X's name (the entries name X)."""
    tagged = "vllm-fa2-cuda@0.33"
    folder = write_run(tmp_path / "both", {"vllm-fa2-cuda": OLD, tagged: NEW, "sdpa": TORCH}, base_rows() + head_rows(tagged)[:-1])
    code, out, _ = _vdiff(capsys, folder, "--expect", expect)
    assert code == 1
    assert "vllm-fa2-cuda → vllm-fa2-cuda@0.33: vllm 0.26.0" in out
    assert "t-clamp: fixed" in out and "t-nan: still present" in out
    assert "| t-clamp | fixed | 2 | 0 | 2 |" in (folder / "vdiff.md").read_text()


def test_pair_names_any_two_backends(tmp_path, expect, capsys):
    folder = write_run(tmp_path / "both", {"vllm-fa2-cuda": OLD, "mine:Fa2": NEW}, base_rows()[:-1] + head_rows("mine:Fa2")[:-1])
    code, out, _ = _vdiff(capsys, folder, "--pair", "vllm-fa2-cuda=mine:Fa2", "--expect", expect, "--allow-coverage-loss")
    assert code == 1 and "t-clamp: fixed" in out


def test_a_strict_entry_fixed_inside_its_range_says_narrow_it(tmp_path, capsys):
    strict = tmp_path / "strict.toml"
    strict.write_text(ENTRIES.replace("{strict}", "true"))
    base, head = _two_runs(tmp_path, regress=False, head_version="vllm 0.26.1 vllm_flash_attn FA2")
    code, out, _ = _vdiff(capsys, base, head, "--expect", strict)
    assert code == 0, out  # the fix is the point of an upgrade: an unexpected pass is not a regression here
    assert "t-clamp: fixed (HEAD's version is inside `versions`: narrow it (not seen at HEAD))" in out
    assert "expected → unexpected-pass: 2" in (head / "vdiff.md").read_text()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--pair", "vllm-fa2-cuda"], "--pair wants BASE=HEAD"),
        (["--pair", "nope=vllm-fa2-cuda"], "no rows of nope in"),
        (["--factor", "1"], "--factor must be > 1"),
    ],
)
def test_bad_input_is_exit_2(tmp_path, expect, capsys, argv, needle):
    base, head = _two_runs(tmp_path)
    code, _, err = _vdiff(capsys, base, head, "--expect", expect, *argv)
    assert code == 2 and needle in err


def test_no_version_change_and_no_tag_are_exit_2(tmp_path, expect, capsys):
    base = write_run(tmp_path / "base", {"vllm-fa2-cuda": OLD}, base_rows()[:-1])
    same = write_run(tmp_path / "same", {"vllm-fa2-cuda": OLD}, head_rows()[:-1])
    code, _, err = _vdiff(capsys, base, same, "--expect", expect)
    assert code == 2 and "changed version between BASE and HEAD" in err
    code, _, err = _vdiff(capsys, base, "--expect", expect)
    assert code == 2 and "no backend X beside X@TAG" in err
    code, out, _ = _vdiff(capsys, base, same, "--expect", expect, "--backend", "vllm-*")  # named: compared anyway
    assert code == 1 and "t-clamp: fixed" in out


# ---------------------------------------------------------------- parity evidence: entry x version


def _evidence_runs(tmp_path: Path) -> list[Path]:
    """The entries' cases on three versions: the clamp seen at 0.26.0 and 0.27.1, gone at 0.33.0; the paged NaN
    seen at 0.26.0 and 0.33.0; the second clamp case refused at 0.33.0."""
    name, tagged = "vllm-fa2-cuda", "vllm-fa2-cuda@0.27"
    old = write_run(
        tmp_path / "v026-and-v027",
        {name: OLD, tagged: "vllm 0.27.1 vllm_flash_attn FA2"},
        [
            row(name, CLAMP_A, "fail", "mask"),
            row(name, PAGED, "fail", "nan"),
            row(tagged, CLAMP_A, "fail", "mask"),
            row(tagged, PAGED, "pass"),
        ],
    )
    new = write_run(
        tmp_path / "v033",
        {name: NEW},
        [
            row(name, CLAMP_A, "pass"),
            row(name, CLAMP_B, "unsupported"),
            row(name, PAGED, "fail", "nan"),
            row(name, SAME, "fail", "max_err"),
        ],
    )
    return [old, new]


def test_evidence_table_entry_by_version(tmp_path, expect, capsys):
    runs = _evidence_runs(tmp_path)
    code = main(["evidence", *map(str, runs), "--expect", str(expect), "--out", str(tmp_path / "ev")])
    out = capsys.readouterr().out
    assert code == 0
    assert "| entry | versions | vllm 0.26.0 | vllm 0.27.1 | vllm 0.33.0 | evidence supports | agrees |" in out
    clamp = "| t-clamp | vllm>=0.26,<0.27 | seen 1/1 | seen 1/1 | not seen 0/1 | vllm>=0.26.0,<0.33.0 |"
    clamp += " vllm 0.27.1 seen but outside the range |"
    assert clamp in out
    nan = (
        "| t-nan | vllm>=0.26,<0.27 | seen 1/1 | not seen 0/1 | seen 1/1 | vllm>=0.26.0 (not seen at vllm 0.27.1 between: not one range) |"
    )
    assert nan in out and "vllm 0.33.0 seen but outside the range" in out
    assert (tmp_path / "ev" / "evidence.md").read_text() == out
    rows = list(csv.DictReader((tmp_path / "ev" / "evidence.csv").open()))
    clamp_new = next(r for r in rows if r["entry"] == "t-clamp" and r["version"] == "vllm 0.33.0")
    assert (clamp_new["status"], clamp_new["ran"], clamp_new["not_run"], clamp_new["example_case"]) == (
        "not seen",
        "1",
        "1",
        CLAMP_A.case_id,
    )


def test_evidence_not_run_where_only_refused(tmp_path, expect, capsys):
    folder = write_run(tmp_path / "refused", {"vllm-fa2-cuda": NEW}, [row("vllm-fa2-cuda", CLAMP_A, "unsupported")])
    assert main(["evidence", str(folder), "--expect", str(expect), "--entry", "t-clamp"]) == 0
    out = capsys.readouterr().out
    assert "| t-clamp | vllm>=0.26,<0.27 | not run | (never seen in these runs) | yes |" in out and "t-nan" not in out


def test_evidence_bad_input(tmp_path, expect, capsys):
    assert main(["evidence", "--expect", str(expect)]) == 2
    assert "name the run folders" in capsys.readouterr().err
    assert main(["evidence", str(tmp_path / "nope"), "--expect", str(expect)]) == 2
    assert main(["evidence", str(tmp_path), "--runs", str(tmp_path), "--expect", str(expect)]) == 2
    assert "--runs and --index go with --write-cases" in capsys.readouterr().err


def test_write_cases_gives_each_entry_its_case_per_backend(tmp_path, expect, capsys):
    runs = _evidence_runs(tmp_path)
    code = main(["evidence", "--write-cases", str(tmp_path / "cases"), "--runs", str(runs[0]), "--expect", str(expect)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("parity evidence: 2 entries' cases in")
    assert f"python -m parity run --backend vllm-fa2-cuda --case-file {tmp_path / 'cases' / 'vllm-fa2-cuda.jsonl'}" in out
    cases = [Case.from_json(line) for line in (tmp_path / "cases" / "vllm-fa2-cuda.jsonl").read_text().splitlines()]
    assert {c.case_id for c in cases} == {CLAMP_A.case_id, PAGED.case_id}
    assert (tmp_path / "cases" / "cases.tsv").read_text().splitlines()[0] == "entry\tbackend\tcase_id"


def test_evidence_keeps_runs_of_unknown_version_apart(tmp_path, expect, capsys):
    """Two runs killed before their environment.json (no version recorded) are two columns named by their folders,
    never one version's counts added up (lab/runs/h100-2026-12-07-versions: 0.26.0's and 0.33.0's rows had been
    merged under one `vllm ?`)."""
    runs = []
    for name, verdict in (("a/killed-old", "fail"), ("b/killed-new", "pass")):
        folder = write_run(tmp_path / name, {}, [row("vllm-fa2-cuda", CLAMP_A, verdict, "mask" if verdict == "fail" else "")])
        (folder / "environment.json").unlink()
        runs.append(folder)
    assert main(["evidence", *map(str, runs), "--expect", str(expect), "--entry", "t-clamp"]) == 0
    out = capsys.readouterr().out
    assert "| vllm ? (a/killed-old) | vllm ? (b/killed-new) |" in out
    assert "| t-clamp | vllm>=0.26,<0.27 | seen 1/1 | not seen 0/1 |" in out


def test_a_head_without_its_environment_says_so(tmp_path, expect, capsys):
    """HEAD killed before writing environment.json: the page says nothing of its machine was recorded (not "no GPU")."""
    base, head = _two_runs(tmp_path)
    (head / "environment.json").unlink()
    _vdiff(capsys, base, head, "--expect", expect)
    md = (head / "vdiff.md").read_text()
    head_line = next(line for line in md.splitlines() if line.startswith("- HEAD "))
    assert head_line.endswith("(no environment.json: its date, torch, GPU and backend versions were not recorded)"), head_line


def test_a_killed_run_gives_its_versions_and_reads_as_partial(tmp_path, expect, capsys):
    """A run killed (SIGKILL, a loan's end) leaves the environment.json written before its first row: vdiff, evidence
    and report read its versions from it, and say it is partial."""
    from parity.runner import IN_PROGRESS

    base, head = _two_runs(tmp_path, regress=False)
    env = json.loads((head / "environment.json").read_text())
    env.update(partial=True, in_progress=True, partial_why=IN_PROGRESS, rows_total=99)
    (head / "environment.json").write_text(json.dumps(env))
    code, out, _ = _vdiff(capsys, base, head, "--expect", expect)
    assert code == 0 and f"vllm-fa2-cuda: {OLD} → {NEW}" in out, out
    assert f"{head} (2026-12-07T00:00:00+00:00, torch {TORCH}, no GPU, PARTIAL: in progress, or killed" in (head / "vdiff.md").read_text()
    assert main(["evidence", str(base), str(head), "--expect", str(expect)]) == 0
    assert "| vllm 0.26.0 | vllm 0.33.0 |" in capsys.readouterr().out  # the killed run's version, not "?"
    main(["report", str(head)])
    first = (head / "summary.md").read_text().splitlines()[0]
    assert "PARTIAL: in progress, or killed before it ended" in first and "8 of 99 rows ran" in first, first
    assert f"resume: parity run --resume --out {head}" in first, first
