"""``python -m parity merge``: shards and resumed parts of a sweep become one run folder."""

import csv
import json

import pytest

from parity import Case, Window
from parity.cli import main
from parity.report.merge import merge
from parity.runner import IN_PROGRESS

CASES = [Case((12,), (12,), 2, 1, 8, "float32", Window(3, 0), seed=s) for s in range(3)]


def sweep(out, backends, cases=CASES, extra=(), rc=0):
    got = main(
        [
            "run",
            *sum((["-b", b] for b in backends), []),
            *sum((["--case", c.to_json()] for c in cases), []),
            "--out",
            str(out),
            "-q",
            "--no-report",
            "--no-isolate",
            *extra,
        ]
    )
    assert got == rc
    return out


def rows(folder):
    with (folder / "results.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_shards_make_one_report(tmp_path):
    a = sweep(tmp_path / "a", ["reference"])
    b = sweep(tmp_path / "b", ["sdpa"])
    extra = tmp_path / "cons"
    (extra / "x").mkdir(parents=True)
    (extra / "x" / "consistency.csv").write_text(
        "backend,check,where,case,max_diff_vs_prefill,max_err_vs_reference,tolerance,verdict,detail\n"
        "sdpa,decode,p=0,c,0,0,1,pass,\nsdpa,chunked,chunk=5,c,9,9,1,fail,\n"
    )
    assert main(["merge", str(tmp_path / "m"), str(a), str(b), "--extra", str(extra)]) == 0
    got = rows(tmp_path / "m")
    assert sorted((r["backend"], r["seed"]) for r in got) == sorted((b, str(s)) for b in ("reference", "sdpa") for s in range(3))
    env = json.loads((tmp_path / "m" / "environment.json").read_text())
    assert [m["folder"] for m in env["merged_from"]] == [str(a), str(b)]
    assert set(env["backends"]) == {"reference", "sdpa"} and env["partial"] is False
    html = (tmp_path / "m" / "report.html").read_text()
    assert "Decode and chunked-prefill consistency" in html
    assert "`sdpa` 1/2 (fail 1)" in (tmp_path / "m" / "summary.md").read_text()


def test_conflicting_rows_are_refused_unless_asked(tmp_path):
    a = sweep(tmp_path / "a", ["reference"])
    b = tmp_path / "b"
    b.mkdir()
    text = (a / "results.csv").read_text().splitlines()
    changed = text[1].replace(",pass,", ",fail,", 1)
    assert changed != text[1]
    (b / "results.csv").write_text("\n".join([text[0], changed]) + "\n")
    with pytest.raises(ValueError, match="different rows"):
        merge(tmp_path / "m", [a, b])
    merge(tmp_path / "m2", [a, b], prefer_last=True)
    assert [r["verdict"] for r in rows(tmp_path / "m2")].count("fail") == 1
    merge(tmp_path / "m3", [a, a])  # identical duplicates are fine
    assert len(rows(tmp_path / "m3")) == 3


def test_bad_merge_input_is_a_usage_error(tmp_path, capsys):
    a = sweep(tmp_path / "a", ["reference"])
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "m"), str(a), str(tmp_path / "empty")]) == 2
    assert "no results.csv" in capsys.readouterr().err
    assert main(["merge", str(a), str(a)]) == 2
    assert "one of the input folders" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("x")
    assert main(["merge", str(tmp_path / "a-file"), str(a)]) == 2  # was: merge: [Errno 17] File exists
    assert "a-file: not a folder" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m2"), str(a), "--extra", str(tmp_path / "nope")]) == 2  # was: merged, nothing folded in
    assert "--extra " + str(tmp_path / "nope") + ": no such folder" in capsys.readouterr().err
    assert not (tmp_path / "m2").exists()


def test_partial_parts_merged_into_a_complete_folder_are_not_partial(tmp_path):
    first = tmp_path / "first"
    assert (
        main(
            [
                "run",
                "-b",
                "reference",
                *sum((["--case", c.to_json()] for c in CASES[:2]), []),
                "--out",
                str(first),
                "-q",
                "--no-report",
                "--no-isolate",
            ]
        )
        == 0
    )
    env = json.loads((first / "environment.json").read_text())
    env["partial"] = True  # as a --time-limit run would have left it
    (first / "environment.json").write_text(json.dumps(env))
    rest = sweep(tmp_path / "rest", ["reference"], CASES[2:])
    merge(tmp_path / "m", [first, rest])
    assert json.loads((tmp_path / "m" / "environment.json").read_text())["partial"] is False
    env.update(in_progress=True, partial_why=IN_PROGRESS)  # as a run killed (SIGKILL) leaves it
    (first / "environment.json").write_text(json.dumps(env))
    merge(tmp_path / "m2", [first, rest])
    merged = json.loads((tmp_path / "m2" / "environment.json").read_text())
    assert merged["partial"] is False and "in_progress" not in merged and "partial_why" not in merged, merged
    assert merged["merged_from"][0]["in_progress"] is True and merged["backends"]["reference"]["version"], merged


def test_time_limit_leaves_a_partial_folder_that_resume_completes(tmp_path):
    out = tmp_path / "o"
    args = [
        "run",
        "-b",
        "tests.test_isolation:SlowReference",
        *sum((["--case", c.to_json()] for c in CASES), []),
        "--out",
        str(out),
        "-q",
        "--no-isolate",
        "--no-probes",
        "--shrink",
        "0",
    ]
    assert main([*args, "--time-limit", "0.1"]) == 3  # partial, no failing row
    env = json.loads((out / "environment.json").read_text())
    assert env["partial"] is True and env["rows_in_folder"] < env["rows_total"] == 3
    assert json.loads((out / "timing.json").read_text())["partial"] is True
    first = (out / "summary.md").read_text().splitlines()[0]
    assert "PARTIAL" in first and f"parity run --resume --out {out}" in first
    assert main([*args, "--resume"]) == 0
    env = json.loads((out / "environment.json").read_text())
    assert env["partial"] is False and env["rows_in_folder"] == 3 and len(env["earlier_runs"]) == 1
    assert sorted(r["seed"] for r in rows(out)) == ["0", "1", "2"]


def test_merge_with_expect_judges_the_rows_again(tmp_path):
    """Rows run before an entry existed: ``merge --expect FILE`` reports them as ``expected``."""
    bug = "parity.selftest.bugs:WindowOneWider"
    a = sweep(tmp_path / "a", [bug], extra=("--expect", "none"), rc=1)
    assert {r["verdict"] for r in rows(a)} == {"fail"}
    toml = tmp_path / "known.toml"
    toml.write_text(
        f'[[divergence]]\nid = "planted-one-wider"\nbackend = "{bug}"\nverdict = "fail"\ncondition = {{ dtype = "float32" }}\n'
        'explanation = "The planted off-by-one."\nupstream = "none"\n'
    )
    assert main(["merge", str(tmp_path / "plain"), str(a)]) == 0
    assert "new failures: 3 rows" in (tmp_path / "plain" / "summary.md").read_text()
    assert main(["merge", str(tmp_path / "judged"), str(a), "--expect", str(toml)]) == 0
    text = (tmp_path / "judged" / "summary.md").read_text()
    assert "3 rows expected (planted-one-wider 3)" in text and "new failures: 0 rows" in text, text[:600]
