"""The first run on a laptop (issue 34): the profile chosen with no --profile on a CPU-only run, time
limits that scale with the work and a retry alone before a ``timeout`` is recorded, and the time
left printed with the progress."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
import re
import time
from pathlib import Path

import pytest

from parity import Case, Window, cli
from parity.backends.reference import ReferenceBackend
from parity.sweep import run_sweep
from parity.sweep.eta import Eta, clock

ME = "tests.test_first_run"
CASE = Case(q_lens=(8,), k_lens=(8,), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=0)


class SlowButRight(ReferenceBackend):
    """Right, and slower than a short limit: it sleeps PARITY_TEST_SLEEP seconds on each call of its
    first worker (the file PARITY_TEST_MARK says a worker slept already), like a first call that
    compiles on a busy machine."""

    name = "slow-but-right"

    def run(self, case, inputs, out):
        mark = Path(os.environ["PARITY_TEST_MARK"])
        if not mark.exists() or int(mark.read_text()) == os.getpid():
            mark.write_text(str(os.getpid()))
            time.sleep(float(os.environ["PARITY_TEST_SLEEP"]))
        return super().run(case, inputs, out)


class Hangs(ReferenceBackend):
    name = "hangs-always"

    def run(self, case, inputs, out):
        time.sleep(600)
        return super().run(case, inputs, out)


class BuildsOnFirstUse(ReferenceBackend):
    """Right; the first call of each configuration in a worker sleeps PARITY_TEST_SLEEP seconds (a JIT
    build); with PARITY_TEST_HANG set, its case of seed 5 hangs (after any build)."""

    name = "builds-on-first-use"
    first_use_compile = True
    built: set = set()

    def run(self, case, inputs, out):
        from parity.shard import config_key

        key = config_key(case)
        if key not in self.built:
            self.built.add(key)
            time.sleep(float(os.environ["PARITY_TEST_SLEEP"]))
        if os.environ.get("PARITY_TEST_HANG") and case.seed == 5:
            time.sleep(600)
        return super().run(case, inputs, out)


OTHER_CONFIG = dataclasses.replace(CASE, head_dim=16, seed=1)


@pytest.mark.parametrize("grace", [4.0, 0.0])
def test_a_first_row_that_builds_its_kernel_gets_the_compile_grace(tmp_path, monkeypatch, capsys, grace):
    """Three rows, two configurations, a fixed 1 s limit, a 2 s build. With the grace no row times out. With
    none (--compile-grace 0) every row does, its retry too: each kill loses the build and the restarted
    worker starts it again (FlashInfer's SM90 prefill modules on the H100 of 2026-12-06c, four times)."""
    monkeypatch.setenv("PARITY_TEST_SLEEP", "2")
    cases = [CASE, dataclasses.replace(CASE, seed=5), OTHER_CONFIG]
    res = run_sweep([f"{ME}:BuildsOnFirstUse"], cases, progress=False, probes=False, timeout=1.0, compile_grace=grace)
    assert [r["verdict"] for r in res.rows] == ["pass" if grace else "timeout"] * 3, [r["detail"] for r in res.rows]
    assert capsys.readouterr().err.count("gave no answer within 1 s") == (0 if grace else 3)


def test_a_built_configuration_gets_no_grace_and_its_hang_is_found_at_the_plain_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PARITY_TEST_SLEEP", "0")
    monkeypatch.setenv("PARITY_TEST_HANG", "1")
    cases = [CASE, dataclasses.replace(CASE, seed=5)]
    res = run_sweep([f"{ME}:BuildsOnFirstUse"], cases, progress=False, probes=False, timeout=1.0, compile_grace=2.0)
    assert [r["verdict"] for r in res.rows] == ["pass", "timeout"]
    # the hang's own limit is the plain 1 s; its retry, in a restarted worker that built nothing, has the grace
    assert "gave no answer within 1 s" in capsys.readouterr().err
    assert "nor within 3 s when retried alone" in res.rows[1]["detail"]


def test_the_compile_grace_ends_with_the_time_limit(tmp_path, monkeypatch):
    """A 40 s build, a 1 s limit, 60 s of grace and a 12 s --time-limit: the build is killed about 1 s past the
    time limit and its row is left to --resume (not a timeout), instead of the run waiting 40 s for it. (12 s: the
    worker must start and send the row before the limit, which took more than 6 s on a loaded 2-core machine.)"""
    monkeypatch.setenv("PARITY_TEST_SLEEP", "40")
    t0 = time.perf_counter()
    res = run_sweep(
        [f"{ME}:BuildsOnFirstUse"],
        [CASE],
        out_dir=tmp_path / "out",
        progress=False,
        probes=False,
        timeout=1.0,
        compile_grace=60.0,
        time_limit=12.0,
    )
    assert time.perf_counter() - t0 < 35
    assert res.partial and res.rows == []
    assert "(--time-limit 12 s reached: a build in flight then was cut)" in res.stopped_by


def test_a_slow_but_right_backend_is_retried_alone_and_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PARITY_TEST_MARK", str(tmp_path / "slept"))
    monkeypatch.setenv("PARITY_TEST_SLEEP", "4")
    # scaled limit: a 1.5 s floor (the reference takes milliseconds here); the retry gets 4x that
    res = run_sweep(
        [f"{ME}:SlowButRight", "reference"],
        [CASE],
        out_dir=tmp_path / "out",
        progress=False,
        probes=False,
        timeout_floor=1.5,
        retry_scale=4.0,
    )
    got = {r["backend"].split(":")[-1]: r for r in res.rows}
    assert got["SlowButRight"]["verdict"] == "pass", got["SlowButRight"]["detail"]
    assert got["reference"]["verdict"] == "pass"
    assert not res.failed and not res.partial
    # the first limit is the floor or more (10 x the reference's own time on a loaded machine); the retry's is 4x it
    m = re.search(r"gave no answer within ([\d.]+) s .*; retrying it alone with ([\d.]+) s", capsys.readouterr().err)
    assert m and float(m.group(1)) >= 1.5 and abs(float(m.group(2)) - 4 * float(m.group(1))) <= 2, m  # both rounded to 1 s


def test_a_hang_is_still_a_timeout_and_says_how_long_the_reference_took(tmp_path, capsys):
    code = cli.main(
        [
            "run",
            "--backend",
            f"{ME}:Hangs",
            "--case",
            CASE.to_json(),
            "--out",
            str(tmp_path / "out"),
            "--timeout",
            "1.5",
            "--no-probes",
            "--no-report",
            "--shrink",
            "0",
            "-q",
        ]
    )
    assert code == 1
    out = capsys.readouterr()
    assert "TIMEOUT" in out.out
    rows = (tmp_path / "out" / "results.csv").read_text()
    assert "timeout" in rows
    assert "no answer within 1.5 s, nor within 1.5 s when retried alone" in rows
    assert "the reference took" in rows and " s on this case" in rows


def test_the_first_run_profile_is_chosen_on_a_cpu_run_and_covers_every_trap(monkeypatch):
    from parity import backends
    from parity.coverage import uncovered
    from parity.design import place
    from parity.runner import first_run_profile
    from parity.strategies import CPU_LONG_CAP, PROFILES, edge_cases, generate

    monkeypatch.delenv("PARITY_PROFILE", raising=False)
    insts = {s: backends.get(s) for s in backends.DEFAULT_CPU}
    assert first_run_profile(None, insts, gpu_here=False) == "first"
    assert first_run_profile(None, insts, gpu_here=True) == "first"  # CPU backends only: CPU sizes
    gpu_insts = {**insts, "sdpa-math-cuda": backends.get("sdpa-math-cuda")}
    assert first_run_profile(None, gpu_insts, gpu_here=True) == "default"  # a GPU runner: the full profile
    assert first_run_profile(None, gpu_insts, gpu_here=False) == "first"
    assert first_run_profile("quick", insts, gpu_here=False) == "quick"
    monkeypatch.setenv("PARITY_PROFILE", "default")
    assert first_run_profile(None, insts, gpu_here=False) == "default"

    cases, _ = place(generate(PROFILES["first"], 0, long_len=CPU_LONG_CAP), insts)
    # every value of every coverage dimension, every window-grid cell; at CPU sizes (lengths <= 130)
    # but for the 256-key tile's lengths 255 and 257, which the default profile holds (256: the split-KV rows' window)
    assert uncovered(cases) == [("tile", "255"), ("tile", "257")]
    assert uncovered(place(generate(PROFILES["default"], 0, long_len=CPU_LONG_CAP), insts)[0]) == []
    ids = {c.case_id for c in cases}
    templates = {(c.q_lens, c.k_lens, c.window, c.head_dim, c.softcap, c.page_size, c.seed) for c in edge_cases()}
    held = {(c.q_lens, c.k_lens, c.window, c.head_dim, c.softcap, c.page_size, c.seed) for c in cases}
    assert templates <= held  # every curated edge case, in one dtype
    # 171 cases before the 2026 features (sinks, chunks, fp8 copies: 211 on 2026-12-05)
    assert max(max(c.k_lens) for c in cases) <= CPU_LONG_CAP and len(ids) < 240
    assert uncovered(generate(PROFILES["quick"], 0, long_len=CPU_LONG_CAP))  # the check can fail: quick has no grid


def _synthetic(n_rows: int, seed: int) -> list[tuple[str, float, bool, float]]:
    """Rows (backend, cost, runs, seconds): two backends, one 10x slower per unit of work, a fixed
    cost per row, some rows declined, the costly rows mostly late (as long cases are), noise."""
    rng = random.Random(seed)
    rows = []
    for i in range(n_rows):
        cost = rng.uniform(1e3, 5e4) * (1 + 20 * (i > 0.8 * n_rows) * rng.random())
        for spec, a, r in (("fast", 0.01, 1e-6), ("slow", 0.1, 1e-5)):
            runs = rng.random() > 0.2
            secs = (a + r * cost) * rng.uniform(0.7, 1.4) if runs else 0.002
            rows.append((spec, cost, runs, secs))
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_the_time_left_is_right_within_a_factor_of_two_after_a_tenth(seed):
    rows = _synthetic(200, seed)
    eta = Eta((spec, str(i // 2), cost, runs) for i, (spec, cost, runs, _) in enumerate(rows))
    total = sum(s for *_, s in rows)
    elapsed = 0.0
    for i, (spec, _, runs, secs) in enumerate(rows):
        eta.done(spec, str(i // 2), secs, ran=runs)
        elapsed += secs
        if i + 1 >= len(rows) / 10 and i + 1 < len(rows) - 1:
            left, true = eta.left(elapsed), total - elapsed
            assert left is not None and true / 2 <= left <= 2 * true, (i, left, true)
    assert eta.left(elapsed) == 0.0


def _replay(path: Path) -> list[tuple[float, float | None, float]]:
    """(seconds since the rows began, the ETA then, the true seconds left) after each finished row."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    eta = Eta(tuple(p) for p in doc["planned"])
    end = max(e[1] for e in doc["events"] if e[0] == "done")
    out = []
    for kind, t, spec, case_id, *rest in doc["events"]:
        if kind == "skip":
            eta.skip(spec, case_id)
            continue
        eta.done(spec, case_id, rest[0], ran=rest[1])
        out.append((t, eta.left(t), end - t))
    return out


def test_the_time_left_of_a_real_first_run_is_right_within_a_factor_of_two_after_a_tenth():
    """README command 1's rows as they finished on the 2-core machine (2026-12-05, tests/fixtures/):
    a row's seconds there follow compilation and overheads, not its cost (the cost line alone said
    250 s with 24 s left), so the ETA must not trust the line before it predicts better than the mean."""
    points = _replay(Path(__file__).parent / "fixtures" / "eta-first-run.json.gz")
    after = points[len(points) // 10 :]
    off = [
        (round(t, 1), round(left, 1), round(true, 1))
        for t, left, true in after
        if true > 0.5 and (left is None or not true / 2 <= left <= 2 * true)
    ]
    assert len(after) > 600 and not off, off[:5]


def test_the_time_left_reads_as_a_clock():
    assert Eta([]).left(3.0) is None
    assert [clock(None), clock(42), clock(185), clock(3725)] == ["?", "42s", "3m05s", "1h02m"]
