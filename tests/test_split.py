"""--split: one compile-bound backend in several workers at once, each with its own configurations."""

import csv
import json
import os
from pathlib import Path

import pytest

from parity import Case, Window
from parity.backends.reference import ReferenceBackend
from parity.strategies import generate, profile
from parity.sweep import SweepOptions, _safe, config_key, plan_lanes, run_sweep, split_cases
from parity.sweep.lanes import auto_splits, plan


def _cases() -> list[Case]:
    out = []
    for n, (hq, hkv, d) in enumerate([(1, 1, 8), (2, 1, 8), (2, 2, 16), (4, 2, 8), (1, 1, 16)]):
        for s in range(3 if n % 2 else 2):
            w = Window(2, 0)
            out.append(Case(q_lens=(5 + s,), k_lens=(9,), hq=hq, hkv=hkv, head_dim=d, dtype="float32", window=w, seed=10 * n + s))
    return out


class PidLogging(ReferenceBackend):
    """The reference, noting which worker process ran which case (in $PARITY_TEST_PID_LOG)."""

    name = "pid-logging"

    def run(self, case, inputs, out):
        with open(os.environ["PARITY_TEST_PID_LOG"], "a") as fh:
            fh.write(f"{os.getpid()} {case.case_id}\n")
        return super().run(case, inputs, out)


def test_split_cases_keeps_a_configuration_in_one_part_and_balances_the_parts():
    cases = generate(profile("quick"), 0, ("float32", "bfloat16"))
    part = split_cases(cases, 3)
    assert set(part) == {c.case_id for c in cases} and set(part.values()) == {0, 1, 2}
    by_key: dict = {}
    for c in cases:
        by_key.setdefault(config_key(c), set()).add(part[c.case_id])
    assert all(len(parts) == 1 for parts in by_key.values())  # no kernel is built by two workers
    load = [sum(1 for p in part.values() if p == i) for i in range(3)]
    biggest = max(sum(1 for c in cases if config_key(c) == k) for k in by_key)
    assert max(load) - min(load) <= biggest, load


def test_parts_of_one_backend_go_to_different_lanes():
    units = ["a#1", "a#2", "b", "c"]
    lanes = plan_lanes(units, 2, {"a#1": 5.0, "a#2": 5.0, "b": 1.0, "c": 1.0}, {"a#1": "a", "a#2": "a"})
    assert sorted(map(sorted, lanes)) == [["a#1", "b"], ["a#2", "c"]]
    # plain LPT would put a#2 beside a#1 (all three lanes tie at 3); the parts must spread instead
    group = {"a#1": "a", "a#2": "a", "a#3": "a"}
    lanes = plan_lanes(["a#1", "a#2", "a#3", "b", "c"], 3, {"a#1": 3.0, "b": 3.0, "c": 3.0, "a#2": 1.0, "a#3": 1.0}, group)
    assert sorted(sum(1 for u in lane if u.startswith("a#")) for lane in lanes) == [1, 1, 1], lanes


def test_a_split_backend_gives_the_rows_of_an_unsplit_one_from_several_workers(tmp_path, monkeypatch):
    spec = "tests.test_split:PidLogging"
    cases = _cases()
    log = tmp_path / "pids.txt"
    monkeypatch.setenv("PARITY_TEST_PID_LOG", str(log))
    run_sweep([spec, "reference"], cases, out_dir=tmp_path / "whole", timeout=60, progress=False)
    log.unlink()
    split = run_sweep([spec, "reference"], cases, out_dir=tmp_path / "split", timeout=60, progress=False, jobs=3, splits={spec: 3})

    def rows(folder: Path) -> dict:
        with (folder / "results.csv").open(newline="") as fh:
            return {(r["backend"], r["case_id"]): (r["verdict"], r["max_abs_err"]) for r in csv.DictReader(fh)}

    assert rows(tmp_path / "split") == rows(tmp_path / "whole")  # every case once per backend, the same numbers
    assert len(split.rows) == 2 * len(cases) and all(r["verdict"] == "pass" for r in split.rows)
    ids = {c.case_id for c in cases}
    pid_of: dict[str, set[str]] = {}
    for line in log.read_text().split("\n"):
        if line and line.split()[1] in ids:  # the mask probes' own cases aside
            pid, case_id = line.split()
            pid_of.setdefault(case_id, set()).add(pid)
    assert set(pid_of) == ids
    pids_of_key: dict = {}
    for c in cases:
        pids_of_key.setdefault(config_key(c), set()).update(pid_of[c.case_id])
    assert all(len(p) == 1 for p in pids_of_key.values())  # a configuration stays in its worker
    assert len(set().union(*pid_of.values())) == 3  # three workers ran the backend
    assert {_safe(f"{spec}#{i}") + ".log" for i in (1, 2, 3)} <= {p.name for p in (tmp_path / "split" / "logs").iterdir()}
    t = json.loads((tmp_path / "split" / "timing.json").read_text())["per_backend"][spec]
    assert t["parts"] == 3 and len(t["part_small_s"]) == 3 and all(x > 0 for x in t["part_small_s"])
    assert t["small_cases"] == len(cases)
    assert t["cases_per_s_upto_4096"] == pytest.approx(len(cases) / max(t["part_small_s"]), rel=0.02)
    assert sum(t["part_small_s"]) == pytest.approx(t["small_s"], rel=0.02)


def test_split_refuses_what_it_cannot_do():
    cases = _cases()[:2]
    with pytest.raises(ValueError, match="at least 3 lanes"):
        run_sweep(["reference"], cases, jobs=2, splits={"reference": 3}, progress=False)
    with pytest.raises(ValueError, match="is not among the backends of this run"):
        run_sweep(["reference"], cases, jobs=2, splits={"sdpa": 2}, progress=False)
    with pytest.raises(ValueError, match="--no-isolate"):
        run_sweep(["reference"], cases, jobs=2, splits={"reference": 2}, isolate=False, progress=False)
    with pytest.raises(ValueError, match="K must be >= 1"):
        run_sweep(["reference"], cases, splits={"reference": 0}, progress=False)


def test_auto_splits_splits_the_backends_above_an_even_share_of_the_lanes():
    five = dict.fromkeys("abc", 5)
    assert auto_splits({"a": 10, "b": 1, "c": 1}, five, 2) == {"a": 2}  # M = 6: only a is above it
    assert auto_splits({"a": 10, "b": 1, "c": 1}, five, 4) == {"a": 4}  # M = 3: ceil(10 / 3)
    assert auto_splits({"a": 10, "b": 1, "c": 1}, five, 8) == {"a": 5}  # ceil(10 / 1.5) = 7, 5 configurations
    assert auto_splits({"a": 10, "b": 1, "c": 1}, {**five, "a": 1}, 4) == {}  # one configuration: one part
    assert auto_splits({"a": 6, "b": 5, "c": 1}, five, 3) == {"a": 2, "b": 2}  # M = 4
    assert auto_splits({"a": 2, "b": 1, "c": 1}, five, 2) == {}  # a load equal to M stays whole
    assert auto_splits({"a": 10, "b": 1, "c": 1}, five, 1) == {}  # one lane


def test_plan_splits_by_measured_cost_where_auto_is_asked_and_it_can(tmp_path):
    cases = _cases()  # 5 configurations
    specs = ["reference", "sdpa", "flex"]  # cost hints 1, 1, 10
    p = plan(specs, cases, SweepOptions(jobs=2, auto_split=True))
    assert p.splits == p.auto == {"flex": 2} and sorted(map(len, p.lanes)) == [2, 2]
    assert p.auto_line() == "--split auto: flex into 2 parts"
    costs = tmp_path / "lane_costs.json"  # earlier runs measured sdpa the heavy one: it splits, flex does not
    costs.write_text(json.dumps({"seconds_per_row": {"reference": 0.01, "sdpa": 0.5, "flex": 0.02}}))
    assert plan(specs, cases, SweepOptions(jobs=4, auto_split=True, cost_file=str(costs))).auto == {"sdpa": 4}
    explicit = plan(specs, cases, SweepOptions(jobs=4, auto_split=True, splits={"flex": 1, "sdpa": 2}))
    assert explicit.splits == {"sdpa": 2} and explicit.auto == {}  # --split B=K wins for B, even K = 1
    for off in (SweepOptions(jobs=2), SweepOptions(jobs=1, auto_split=True), SweepOptions(jobs=2, auto_split=True, isolate=False)):
        p = plan(specs, cases, off)
        assert p.splits == {} and p.auto is None and p.auto_line() == "", off


def test_split_auto_runs_the_rows_of_an_unsplit_run(tmp_path, capsys):
    from parity.cli import main

    (tmp_path / "cases.jsonl").write_text("".join(c.to_json() + "\n" for c in _cases()))
    common = ["run", "--backend", "reference,sdpa,flex", "--case-file", str(tmp_path / "cases.jsonl"), "--jobs", "2"]
    common += ["--no-report", "--shrink", "0", "-q"]
    assert main([*common, "--out", str(tmp_path / "whole")]) == 0
    assert main([*common, "--split", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert "work split: 2 lanes on the CPU; flex in 2 parts (--split auto)" in capsys.readouterr().out

    def rows(folder: Path) -> dict:
        with (folder / "results.csv").open(newline="") as fh:
            return {(r["backend"], r["case_id"]): (r["verdict"], r["max_abs_err"]) for r in csv.DictReader(fh)}

    assert rows(tmp_path / "auto") == rows(tmp_path / "whole") and len(rows(tmp_path / "auto")) == 3 * len(_cases())
    timing = json.loads((tmp_path / "auto" / "timing.json").read_text())
    assert timing["auto_split"] == {"flex": 2} and timing["per_backend"]["flex"]["parts"] == 2
    assert {"flex_1.log", "flex_2.log"} <= {p.name for p in (tmp_path / "auto" / "logs").iterdir()}


def test_resume_restores_split_auto(tmp_path):
    from parity import cli
    from parity.cli.common import resumed

    (tmp_path / "environment.json").write_text(json.dumps({"argv": ["__main__.py", "run", "--split", "auto", "--jobs", "2"]}))
    args = resumed(cli.build_parser().parse_args(["run", "--resume", "--out", str(tmp_path)]), cli.run.add_parser)
    assert args.split == ["auto"] and args.jobs == 2


def test_lanes_are_planned_again_once_the_workers_say_which_backends_are_unavailable():
    p = plan(["flex-cuda", "reference", "sdpa", "jax-xla-cuda"], _cases(), SweepOptions(jobs=2))  # hints 30, 1, 1, 8
    assert p.lanes == [["flex-cuda"], ["reference", "sdpa", "jax-xla-cuda"]]
    after = p.rebalanced({"flex-cuda", "jax-xla-cuda"})
    assert after.lanes == [["flex-cuda", "reference", "jax-xla-cuda"], ["sdpa"]] and after.units == p.units
    assert p.rebalanced(set()) is p and p.rebalanced({"not-a-unit"}) is p


def test_a_run_whose_heavy_backends_are_unavailable_spreads_the_others_over_its_lanes(tmp_path):
    from parity.cli import main

    if ReferenceBackend().device == "cuda":  # pragma: no cover - the CUDA backends must be unavailable here
        pytest.skip("needs a machine without CUDA")
    (tmp_path / "cases.jsonl").write_text("".join(c.to_json() + "\n" for c in _cases()))
    args = ["run", "--backend", "flex-cuda,reference,sdpa,jax-xla-cuda", "--case-file", str(tmp_path / "cases.jsonl")]
    assert main([*args, "--jobs", "2", "--no-report", "--shrink", "0", "-q", "--out", str(tmp_path / "run")]) == 1  # named, unavailable
    lanes = json.loads((tmp_path / "run" / "timing.json").read_text())["lanes"]
    assert sorted(sorted(lane) for lane in lanes) == [["flex-cuda", "jax-xla-cuda", "reference"], ["sdpa"]], lanes
