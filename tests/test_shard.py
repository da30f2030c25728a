"""parity.shard: sharding a sweep over machines (--shard K/N), the shard-set check of merge,
pytest node-id shards, and lanes placed on GPUs (--gpus). CPU only."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import parity
import parity.cli  # noqa: F401 - loaded before any case is drawn, as in `parity run` (hypothesis draws use local modules' literals)
from parity import Case, Window, backends, shard
from parity.design import place
from parity.results import DTYPES
from parity.strategies import CPU_LONG_CAP, generate, profile
from parity.sweep import config_key, split_line

ALL_DTYPES = DTYPES
CPU_SPECS = tuple(backends.DEFAULT_CPU)


@functools.cache
def sweep_cases(name: str, seed: int, specs: tuple[str, ...] = CPU_SPECS) -> tuple[Case, ...]:
    """The run command's cases (what ``parity.runner.load_cases`` does without --case / --dtype)."""
    prof = profile(name)
    instances = {s: backends.get(s) for s in specs}
    gpu = any(getattr(b, "device", "cpu") == "cuda" for b in instances.values())
    long_len = prof.long_len if gpu else min(prof.long_len, CPU_LONG_CAP)
    cases, _ = place(generate(prof, seed, ALL_DTYPES, long_len), instances)
    return tuple(cases)


def test_sweep_cases_are_those_of_the_run_command():
    from parity.runner import RunRequest, load_cases

    cases, _, req = load_cases(RunRequest(profile="quick", seed=1), list(CPU_SPECS))
    assert req.profile == "quick"
    assert [c.case_id for c in cases] == [c.case_id for c in sweep_cases("quick", 1)]


# -- K/N -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, want", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 3 / 3 ", (3, 3))])
def test_parse_shard(text, want):
    assert shard.parse_shard(text) == want


@pytest.mark.parametrize(
    "text, words",
    [
        ("0/3", "K must be between 1 and N=3"),
        ("4/3", "K must be between 1 and N=3"),
        ("-1/3", "K must be between 1 and N=3"),
        ("1/0", "N (the number of shards) must be >= 1, got 0"),
        ("1/-2", "must be >= 1, got -2"),
        ("2", "want K/N"),
        ("a/b", "want K/N"),
        ("1/2/3", "want K/N"),
        ("", "want K/N"),
        ("1.5/2", "want K/N"),
    ],
)
def test_parse_shard_errors_name_what_is_wrong(text, words):
    with pytest.raises(ValueError, match="shard .*" + words.replace("(", r"\(").replace(")", r"\)")):
        shard.parse_shard(text)


# -- the split -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["quick", "default"])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_shards_partition_the_cases_and_keep_configurations_whole(name, seed):
    cases = list(sweep_cases(name, seed))
    costs = shard.cost_hints(CPU_SPECS)
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids)
    for n in (1, 2, 3, 5):
        parts = [shard.select(cases, k, n, CPU_SPECS, costs) for k in range(1, n + 1)]
        got = [c.case_id for p in parts for c in p]
        assert sorted(got) == sorted(ids) and len(got) == len(ids)  # each case in exactly one shard
        assert all(parts), f"an empty shard at N={n}"
        for p in parts:  # the sweep's order within a shard
            assert [c.case_id for c in p] == [i for i in ids if i in {c.case_id for c in p}]
        where = shard.assign(cases, CPU_SPECS, n, costs)
        home: dict = {}
        for c in cases:  # a configuration never spans two shards
            assert home.setdefault(config_key(c), where[c.case_id]) == where[c.case_id]


def test_split_does_not_depend_on_the_order_of_cases_or_backends():
    cases = list(sweep_cases("default", 0))
    costs = shard.cost_hints(CPU_SPECS)
    a = shard.assign(cases, list(CPU_SPECS), 3, costs)
    b = shard.assign(list(reversed(cases)), list(reversed(CPU_SPECS)), 3, dict(reversed(list(costs.items()))))
    assert a == b


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from tests.test_shard import sweep_cases, CPU_SPECS
from parity import Case, shard
given = [Case.from_json(line) for line in sys.stdin.read().splitlines()]
costs = shard.cost_hints(CPU_SPECS)
out = {{"given": {{n: shard.assign(given, CPU_SPECS, n, costs) for n in (2, 5)}}}}
for name in ("quick", "default"):
    cases = list(sweep_cases(name, 7))
    out[name] = {{n: shard.assign(cases, CPU_SPECS, n, costs) for n in (2, 5)}}
print(json.dumps(out, sort_keys=True))
"""


def test_split_is_the_same_in_another_process_with_another_hash_seed():
    """The parent's cases split the same in children with other hash seeds; and the children,
    generating the cases themselves (same imports), agree with each other. (Not with this
    process: hypothesis >= 6.131 draws with constants of the local modules imported, so the
    drawn cases depend on which parity modules are loaded; see the next test.)"""
    root = str(Path(parity.__file__).resolve().parents[1])
    cases = list(sweep_cases("default", 7))
    costs = shard.cost_hints(CPU_SPECS)
    here = {str(n): shard.assign(cases, CPU_SPECS, n, costs) for n in (2, 5)}
    got = []
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": root}
        res = subprocess.run(
            [sys.executable, "-c", _CHILD.format(root=root)],
            input="\n".join(c.to_json() for c in cases),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        got.append(json.loads(res.stdout))
    assert got[0]["given"] == got[1]["given"] == here
    assert got[0] == got[1]
    assert len(set(got[0]["default"]["5"].values())) == 5


_IMPORTS = """
import hashlib, sys
sys.path.insert(0, {root!r})
from parity.strategies import generate, profile
{extra}
ids = " ".join(c.case_id for c in generate(profile("quick"), 7))
print(hashlib.sha1(ids.encode()).hexdigest())
"""


def test_drawn_cases_do_not_depend_on_the_modules_imported():
    """hypothesis >= 6.131 mixes literals of the local modules in sys.modules into its draws; the sweep's
    draws leave them out (strategies._seed_alone), so every machine and command draws the same cases
    (a strict xfail until that fix: 6-10 case ids differed after importing parity.cli)."""
    root = str(Path(parity.__file__).resolve().parents[1])
    out = []
    for extra in ("", "import parity.cli"):
        res = subprocess.run(
            [sys.executable, "-c", _IMPORTS.format(root=root, extra=extra)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": root},
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        out.append(res.stdout)
    assert out[0] == out[1]


#: The most loaded shard's cost over the mean, for the default profile (N = 2..5). LPT guarantees
#: max <= mean + the largest configuration's cost; with ~170-200 configurations of a few cases each
#: the figures measured are <= 1.016 (see parity/shard.py), this is the bound held.
BALANCE_BOUND = 1.05


@pytest.mark.parametrize("specs", [CPU_SPECS, tuple(backends.expand("all-gpu"))], ids=["cpu", "all-gpu"])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_default_profile_shards_are_balanced_on_the_cost_hints(specs, seed):
    cases = list(sweep_cases("default", seed, specs))
    costs = shard.cost_hints(specs)
    groups = shard.config_costs(cases, specs, costs)
    biggest = max(c for c, _ in groups.values())
    for n in (2, 3, 4, 5):
        loads = shard.shard_loads(cases, specs, n, costs)
        mean = sum(loads) / n
        assert max(loads) <= mean + biggest + 1e-9  # the LPT guarantee
        assert max(loads) / mean <= BALANCE_BOUND, (n, loads)


def test_cost_hints_weigh_configurations_that_compile_more_kernels():
    w = Window(4, 0)
    one_bucket = [Case(q_lens=(8,), k_lens=(8,), hq=2, hkv=2, head_dim=16, dtype="float16", window=w, seed=s) for s in range(4)]
    many = [Case(q_lens=(s,), k_lens=(s,), hq=4, hkv=4, head_dim=16, dtype="float16", window=w, seed=s) for s in (8, 40, 200, 900)]
    plain = shard.config_costs(one_bucket + many, ["sdpa"], {"sdpa": 1.0})
    heavy = shard.config_costs(one_bucket + many, ["sdpa", "flex"], {"sdpa": 1.0, "flex": 10.0})
    k_one, k_many = (json.dumps(list(config_key(c[0])), separators=(",", ":")) for c in (one_bucket, many))
    assert plain[k_one][0] == pytest.approx(4.0, rel=1e-3) and plain[k_many][0] == pytest.approx(4.0, rel=1e-3)
    assert heavy[k_one][0] == pytest.approx(9 * 1 + 2 * 4.0, rel=1e-3)  # one compile, two backends' cases
    assert heavy[k_many][0] == pytest.approx(9 * 4 + 2 * 4.0, rel=1e-3)  # four length buckets


def test_more_shards_than_configurations_is_refused():
    w = Window(2, 0)
    cases = [Case(q_lens=(4 + s,), k_lens=(9,), hq=1, hkv=1, head_dim=8, dtype="float32", window=w, seed=s) for s in range(5)]
    assert shard.select(cases, 1, 1, ["reference"]) == cases
    with pytest.raises(ValueError, match="2 shards but only 1 configurations"):
        shard.assign(cases, ["reference"], 2)
    with pytest.raises(ValueError, match=">= 1"):
        shard.assign(cases, ["reference"], 0)
    with pytest.raises(ValueError, match="between 1 and N"):
        shard.select(cases, 2, 1, ["reference"])


# -- the shard record and merge's check ------------------------------------------------------------


def _record(k: int, n: int, seed: int = 0, ids=("a", "b", "c")) -> dict:
    return shard.shard_record(
        k,
        n,
        profile="default",
        seed=seed,
        filters={"dtype": None},
        backend_names=["sdpa", "flex"],
        costs={"sdpa": 1.0, "flex": 10.0},
        case_ids=ids,
    )


def test_shard_record_key_fingerprints_the_sweep_not_the_shard():
    assert _record(1, 3)["key"] == _record(3, 3)["key"]
    assert _record(1, 3) == {"k": 1, "n": 3, "key": _record(1, 3)["key"]}
    assert _record(1, 3, ids=("c", "b", "a"))["key"] == _record(1, 3)["key"]  # ids as a set
    assert _record(1, 3, seed=1)["key"] != _record(1, 3)["key"]
    assert _record(1, 3, ids=("a", "b"))["key"] != _record(1, 3)["key"]
    other = shard.shard_record(
        1,
        3,
        profile="quick",
        seed=0,
        filters={"dtype": None},
        backend_names=["sdpa", "flex"],
        costs={"sdpa": 1.0, "flex": 10.0},
        case_ids=("a", "b", "c"),
        shard_cases=1,
    )
    assert other["key"] != _record(1, 3)["key"] and other["cases"] == 1
    assert len(_record(1, 3)["key"]) == 16


def _envs(*recs) -> list[dict]:
    return [{"date_utc": "x", "shard": r} for r in recs]


def test_check_shard_set_accepts_a_complete_set_in_any_order():
    recs = [_record(k, 3) for k in (2, 3, 1)]
    assert shard.check_shard_set(_envs(*recs)) == {"n": 3, "key": recs[0]["key"]}
    assert shard.check_shard_set(_envs(_record(1, 1))) == {"n": 1, "key": _record(1, 1)["key"]}


def test_check_shard_set_is_none_when_no_folder_is_a_shard():
    assert shard.check_shard_set([{"date_utc": "x"}, {}]) is None


def test_check_shard_set_names_missing_shards():
    with pytest.raises(ValueError, match=r"missing shard\(s\) 2/4, 4/4"):
        shard.check_shard_set(_envs(_record(1, 4), _record(3, 4)))


def test_check_shard_set_names_repeated_shards_and_their_folders():
    envs = _envs(_record(1, 3), _record(2, 3), _record(2, 3), _record(3, 3))
    with pytest.raises(ValueError, match=r"repeated shard\(s\) 2/3 in run-b, run-c") as err:
        shard.check_shard_set(envs, names=["run-a", "run-b", "run-c", "run-d"])
    assert "missing" not in str(err.value)
    with pytest.raises(ValueError, match=r"repeated shard\(s\) 1/2 in .*; missing shard\(s\) 2/2"):
        shard.check_shard_set(_envs(_record(1, 2), _record(1, 2)))


def test_check_shard_set_refuses_shards_of_different_splits_or_sweeps():
    with pytest.raises(ValueError, match=r"different N\): N=2: a; N=3: b"):
        shard.check_shard_set(_envs(_record(1, 2), _record(2, 3)), names=["a", "b"])
    with pytest.raises(ValueError, match=r"different sweeps .*: key \w+: a \(1/2\); key \w+: b \(2/2\)"):
        shard.check_shard_set(_envs(_record(1, 2), _record(2, 2, seed=5)), names=["a", "b"])


def test_check_shard_set_refuses_plain_runs_and_malformed_records():
    with pytest.raises(ValueError, match="b: not a shard run"):
        shard.check_shard_set([{"shard": _record(1, 2)}, {}], names=["a", "b"])
    for bad in ({"k": 0, "n": 2, "key": "x"}, {"k": "1", "n": 2, "key": "x"}, {"k": 1, "n": 2}, "1/2", {"k": True, "n": 1, "key": "x"}):
        with pytest.raises(ValueError, match="a: malformed shard record"):
            shard.check_shard_set([{"shard": bad}], names=["a"])


# -- pytest node ids -------------------------------------------------------------------------------


def test_node_id_shards_partition_and_are_fixed():
    ids = [f"tests/test_backends.py::test_edge_cases[{b}-{i}]" for b in ("sdpa", "flex", "reference") for i in range(40)]
    for n in (1, 2, 3, 5):
        kept = [shard.keep_nodeids(ids, k, n) for k in range(1, n + 1)]
        assert sorted(i for ks in kept for i in ks) == sorted(ids)
        if n > 1:
            assert all(kept) and max(map(len, kept)) < 2.0 * len(ids) / n
    # sha256 (little-endian) mod N, as pytest-shard: a fixed function of the node id alone
    assert (
        shard.shard_of_nodeid("tests/test_case.py::test_x", 7)
        == int.from_bytes(__import__("hashlib").sha256(b"tests/test_case.py::test_x").digest(), "little") % 7
    )
    with pytest.raises(ValueError):
        shard.keep_nodeids(ids, 3, 2)


# -- GPUs --------------------------------------------------------------------------------------------


def test_parse_gpus():
    assert shard.parse_gpus("0,1") == ["0", "1"]
    assert shard.parse_gpus(" 3 , 01 ") == ["3", "1"]
    assert shard.parse_gpus("GPU-8e9a2c1b-aaaa-bbbb", None) == ["GPU-8e9a2c1b-aaaa-bbbb"]
    assert shard.parse_gpus("1", ["0", "1"]) == ["1"]


@pytest.mark.parametrize(
    "text, visible, words",
    [
        ("", None, "no empty item"),
        ("0,,1", None, "no empty item"),
        ("0,", None, "no empty item"),
        ("a", None, "'a' is not a GPU id"),
        ("-1", None, "'-1' is not a GPU id"),
        ("0,1,0", None, "GPU 0 is named twice"),
        ("0,2", ["0", "1"], r"GPU 2 not visible to this process \(visible: 0,1"),
        ("0", [], r"GPU 0 not visible to this process \(visible: none"),
    ],
)
def test_parse_gpus_errors(text, visible, words):
    with pytest.raises(ValueError, match=words):
        shard.parse_gpus(text, visible)


def test_visible_gpus():
    assert shard.visible_gpus({}, 3) == ["0", "1", "2"]
    assert shard.visible_gpus({}, 0) == []
    assert shard.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, 8) == ["2", "3"]
    assert shard.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 8) == []
    assert shard.visible_gpus({"CUDA_VISIBLE_DEVICES": "1,x,2"}, 8) == ["1"]  # CUDA stops at an invalid entry
    assert shard.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc,MIG-def"}) == ["GPU-abc", "MIG-def"]
    assert isinstance(shard.visible_gpus({}), list)  # torch.cuda.device_count() here: 0 on a CPU machine


def test_lane_gpus_places_largest_first_on_the_least_loaded_gpu():
    lanes = [
        ("flex-cuda", 30.0),
        ("jax-xla-cuda", 30.0),
        ("fa4-cuda", 8.0),
        ("sdpa-cudnn-cuda", 3.0),
        ("fa2-cuda sdpa-math-cuda", 2.0),
        ("reference-cuda", 1.0),
    ]
    got = shard.lane_gpus(lanes, ["0", "1"])
    assert list(got) == [name for name, _ in lanes]  # in the lanes' order
    assert got == {
        "flex-cuda": "0",
        "jax-xla-cuda": "1",
        "fa4-cuda": "0",
        "sdpa-cudnn-cuda": "1",
        "fa2-cuda sdpa-math-cuda": "1",
        "reference-cuda": "1",
    }  # loads 38 / 36
    assert shard.lane_gpus(dict(lanes), ["0", "1"]) == got
    rev = shard.lane_gpus(list(reversed(lanes)), ["0", "1"])  # equal costs: the earlier lane first
    assert (rev["jax-xla-cuda"], rev["flex-cuda"]) == ("0", "1")
    assert set(shard.lane_gpus(lanes, ["5"]).values()) == {"5"}
    four = shard.lane_gpus(lanes, ["0", "1", "2", "3"])
    assert [four[n] for n, _ in lanes[:4]] == ["0", "1", "2", "3"]
    assert shard.lane_gpus([("a", 1.0), ("b", 1.0)], ["GPU-x", "GPU-y", "GPU-z"]) == {"a": "GPU-x", "b": "GPU-y"}
    with pytest.raises(ValueError, match="no GPU"):
        shard.lane_gpus(lanes, [])
    with pytest.raises(ValueError, match="unique"):
        shard.lane_gpus([("a", 1.0), ("a", 2.0)], ["0"])


def test_unit_gpus_gives_each_lane_unit_its_gpu():
    lanes = [["flex-cuda#1"], ["flex-cuda#2"], ["fa4-cuda", "reference-cuda"]]
    costs = {"flex-cuda#1": 15.0, "flex-cuda#2": 15.0, "fa4-cuda": 8.0, "reference-cuda": 1.0}
    got = shard.unit_gpus(lanes, costs, ["0", "1"])
    assert got["flex-cuda#1"] != got["flex-cuda#2"]  # the parts of a split backend on different GPUs
    assert got["fa4-cuda"] == got["reference-cuda"] == {"CUDA_VISIBLE_DEVICES": "0"}


def _collect(*args: str) -> tuple[int, list[str], str]:
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *args,
            "tests/test_case.py",
            "tests/test_window.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return res.returncode, [line for line in res.stdout.splitlines() if "::" in line], res.stdout + res.stderr


def test_pytest_parity_shard_option_partitions_the_collected_tests():
    rc, everything, out = _collect()
    assert rc == 0 and len(everything) > 20, out[-2000:]
    parts = []
    for k in (1, 2):
        rc, got, out = _collect("--parity-shard", f"{k}/2")
        assert rc == 0, out[-2000:]
        assert set(got) == shard.keep_nodeids(everything, k, 2) and got
        parts.append(got)
    assert sorted(i for p in parts for i in p) == sorted(everything)
    rc, _, out = _collect("--parity-shard", "4/3")
    assert rc == 4 and "--parity-shard: shard '4/3': K must be between 1 and N=3" in out


def test_for_run_gives_the_shard_and_records_that_make_a_complete_set():
    cases = list(sweep_cases("quick", 0))
    filters = shard.run_filters(dtype=("float16", "bfloat16"))
    assert filters == {"dtype": ["bfloat16", "float16"], "case": [], "case_file": "", "no_siblings": False}
    assert shard.run_filters() == {"dtype": [], "case": [], "case_file": "", "no_siblings": False}
    recs, got = [], []
    for k in (1, 2, 3):
        chosen, rec = shard.for_run(cases, f"{k}/3", CPU_SPECS, profile="quick", seed=0, filters=filters)
        assert [c.case_id for c in chosen] == [c.case_id for c in shard.select(cases, k, 3, CPU_SPECS, shard.cost_hints(CPU_SPECS))]
        assert rec["k"] == k and rec["n"] == 3 and rec["cases"] == len(chosen)
        recs.append(rec)
        got += chosen
    assert sorted(c.case_id for c in got) == sorted(c.case_id for c in cases)
    assert shard.check_shard_set(_envs(*recs)) == {"n": 3, "key": recs[0]["key"]}
    with pytest.raises(ValueError, match="want K/N"):
        shard.for_run(cases, "3", CPU_SPECS, profile="quick", seed=0, filters=filters)
    _, other = shard.for_run(cases, "1/3", CPU_SPECS, profile="quick", seed=1, filters=filters)
    assert other["key"] != recs[0]["key"]


def test_check_shard_folders_reads_environment_json(tmp_path):
    dirs = []
    for k in (1, 2):
        d = tmp_path / f"runner-{k}"
        d.mkdir()
        (d / "environment.json").write_text(json.dumps({"shard": _record(k, 2)}))
        dirs.append(d)
    assert shard.check_shard_folders(dirs)["n"] == 2
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValueError, match=f"{plain}: not a shard run"):
        shard.check_shard_folders([*dirs, plain])  # no environment.json: not a shard
    (plain / "environment.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a shard run"):
        shard.check_shard_folders([*dirs, plain])
    with pytest.raises(ValueError, match=r"missing shard\(s\) 2/2"):
        shard.check_shard_folders(dirs[:1])
    assert shard.check_shard_folders([plain]) is None


def test_shard_runs_merge_into_the_unsharded_run(tmp_path):
    """Each shard an ordinary sweep of its cases; check_shard_folders then merge's union of rows
    equals the rows of one unsharded run (what `parity run --shard` + `parity merge` will do)."""
    from parity.report.merge import merge
    from parity.sweep import run_sweep

    w = Window(3, 0)
    cases = [
        Case(q_lens=(4 + s,), k_lens=(9,), hq=hq, hkv=1, head_dim=d, dtype="float32", window=w, seed=s)
        for s in range(2)
        for hq, d in ((1, 8), (2, 8), (1, 16), (2, 16))
    ]
    specs = ["reference", "sdpa"]
    kw = dict(isolate=False, progress=False, probes=False)
    full = run_sweep(specs, cases, out_dir=tmp_path / "full", **kw)
    dirs = []
    for k in (1, 2, 3):
        chosen, rec = shard.for_run(cases, f"{k}/3", specs, profile=None, seed=0, filters={})
        d = tmp_path / f"shard-{k}"
        run_sweep(specs, chosen, out_dir=d, **kw)
        (d / "environment.json").write_text(json.dumps({"shard": rec, "backends": {}}))
        dirs.append(d)
    assert shard.check_shard_folders(dirs)["n"] == 3
    merge(tmp_path / "merged", dirs)

    def rows(path: Path) -> set:
        import csv

        with path.open(newline="") as fh:
            return {(r["backend"], r["case_id"], r["verdict"], r["max_abs_err"]) for r in csv.DictReader(fh)}

    assert rows(tmp_path / "merged" / "results.csv") == rows(tmp_path / "full" / "results.csv")
    assert len(rows(tmp_path / "full" / "results.csv")) == len(full.rows) == 16
    with pytest.raises(ValueError, match=r"missing shard\(s\) 3/3"):
        shard.check_shard_folders(dirs[:2])


def test_parity_run_shard_and_merge_on_the_command_line(tmp_path):
    """`parity run --shard K/N` twice, `parity merge` of both: the unsharded run's rows; one shard
    alone is an incomplete set (exit 2, naming the missing shard); a bad K/N is exit 2."""
    import csv

    from parity import Case, Window

    cases = [Case((n,), (n + 3,), 2, 1, 16, dt, Window(2, 0), seed=n) for n in (3, 5, 8) for dt in ("float32", "bfloat16")]
    cf = tmp_path / "cases.jsonl"
    cf.write_text("\n".join(c.to_json() for c in cases) + "\n")
    base = [
        sys.executable,
        "-m",
        "parity",
        "run",
        "-b",
        "reference",
        "-b",
        "sdpa",
        "--case-file",
        str(cf),
        "-q",
        "--no-report",
        "--shrink",
        "0",
        "--no-isolate",
    ]

    def rows(folder):
        with (folder / "results.csv").open() as fh:
            return sorted((r["backend"], r["case_id"], r["verdict"]) for r in csv.DictReader(fh))

    for k in (1, 2):
        assert subprocess.run([*base, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]).returncode == 0
    assert subprocess.run([*base, "--out", str(tmp_path / "whole")]).returncode == 0
    assert rows(tmp_path / "s1") and rows(tmp_path / "s2")  # both shards hold work
    merge = [sys.executable, "-m", "parity", "merge", "--no-report"]
    p = subprocess.run([*merge, str(tmp_path / "half"), str(tmp_path / "s1")], capture_output=True, text=True)
    assert p.returncode == 2 and "missing shard(s) 2/2" in p.stderr, p.stderr
    assert subprocess.run([*merge, str(tmp_path / "all"), str(tmp_path / "s1"), str(tmp_path / "s2")]).returncode == 0
    assert rows(tmp_path / "all") == rows(tmp_path / "whole")
    for k in (1, 2):  # per-shard timing: each shard's timing.json says which it was, the merged one lists them
        assert json.loads((tmp_path / f"s{k}" / "timing.json").read_text())["shard"]["k"] == k
    merged = json.loads((tmp_path / "all" / "timing.json").read_text())
    assert [r["shard"]["k"] for r in merged["runs"]] == [1, 2] and merged["rows_run"] == len(rows(tmp_path / "whole"))
    assert split_line(merged).startswith("work split: 2 runs merged (1/2: ")
    assert subprocess.run([sys.executable, "-m", "parity", "report", str(tmp_path / "all")]).returncode == 0
    for name in ("summary.md", "report.html"):  # the reports say how the work was split
        assert "work split: 2 runs merged (1/2: " in (tmp_path / "all" / name).read_text(), name
    p = subprocess.run([*base, "--shard", "3/2", "--out", str(tmp_path / "bad")], capture_output=True, text=True)
    assert p.returncode == 2 and "--shard 3/2" in p.stderr and "Traceback" not in p.stderr
