"""The coverage model, the covering design, backend-aware placement and input regimes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from parity import Case, Window, backends, make_inputs
from parity.coverage import GRID_CELLS, case_cells, gaps, grid_count, matches, side_class, tally
from parity.design import (
    DESIGN_DIMS,
    all_pairs,
    concretize,
    covering_cases,
    design_cases,
    design_values,
    place,
    takes,
)
from parity.regimes import LOGIT_STD, REGIMES
from parity.strategies import PROFILES, edge_cases, generate

ROOT = Path(__file__).resolve().parents[1]
#: rows of the lab's committed runs the tests need (tests/fixtures/make_lab_rows.py)
LAB_ROWS = ROOT / "tests" / "fixtures" / "lab-rows"
FLASH_API = ("torch-fa2-cuda", "torch-fa2-varlen-cuda", "fa4-cuda", "fa4-varlen-cuda", "fa2-cuda", "fa3-cuda")


@pytest.mark.parametrize(
    "value, sk, left, want",
    [
        (None, 9, True, "unbounded"),
        (0, 9, True, "0"),
        (0, 1, True, "0"),
        (8, 9, True, "sk-1"),
        (9, 9, True, ">=sk"),
        (30, 9, False, ">=sk"),
        (5, 9, True, "narrow"),
        (5, 9, False, "inside"),
        (63, 200, True, "narrow"),
        (64, 200, True, "inside"),
        (198, 200, True, "inside"),
        (199, 200, True, "sk-1"),
    ],
)
def test_side_classes(value, sk, left, want):
    assert side_class(value, sk, left) == want


def test_case_cells_of_a_mixed_varlen_batch():
    c = Case((1, 40), (100, 24), 8, 2, 64, "bfloat16", Window(63, 0), regime="sink")
    cells = case_cells(c)
    assert cells["left"] == {"narrow", ">=sk"} and cells["right"] == {"0"}
    assert cells["length"] == {"decode", "sq>sk"} and cells["batch"] == {"varlen"}
    assert cells["grid"] == {"inside/0/decode", ">=sk/0/sq>sk"}  # narrow counts as inside on the grid
    assert cells["empty_rows"] == {"yes"} and cells["tile"] == {"64"} and cells["layout"] == {"GQA-pow2"}
    assert cells["regime"] == {"sink"}
    fp32 = dataclasses.replace(c, dtype="float32")
    assert case_cells(fp32)["grid"] == set()  # the grid counts half precision only
    assert matches(c, {"length": "sq>sk", "dtype": ["float16", "bfloat16"]})
    assert not matches(c, {"length": "sq>sk", "dtype": "float32"})


@pytest.mark.parametrize("cond, words", [({"lenght": "decode"}, "unknown coverage dimension"), ({"length": "prefill"}, "has no value")])
def test_a_condition_with_a_typo_is_an_error_not_a_silent_miss(cond, words):
    with pytest.raises(ValueError, match=words):
        matches(Case((4,), (4,), 1, 1, 16), cond)


def test_concretize_holds_every_value_it_was_given():
    lim = PROFILES["default"].limits()
    values = design_values(lim)
    import random

    rng = random.Random(5)
    built = 0
    for n in range(300):
        row = {d: rng.choice(values[d]) for d in DESIGN_DIMS}
        case = concretize(row, random.Random(n), lim)
        if case is None:
            continue
        built += 1
        cells = case_cells(case)
        for d in DESIGN_DIMS:
            if d == "tile" and row[d] == "none":
                continue  # drawn lengths may land on a tile by chance
            assert row[d] in cells[d], (d, row[d], cells[d], case.summary())
    assert built > 200


@pytest.mark.parametrize("name", ["quick", "default"])
def test_the_design_holds_every_pair_of_values(name):
    prof = PROFILES[name]
    lim = prof.limits()
    cases = covering_cases(lim, 0, prof.grid, 0)
    held = set()
    for c in cases:
        cells = case_cells(c)
        items = [(d, v) for d in DESIGN_DIMS for v in sorted(cells[d])]
        held |= {(a, b) for a in items for b in items if DESIGN_DIMS.index(a[0]) < DESIGN_DIMS.index(b[0])}
    missing = all_pairs(design_values(lim)) - held
    # "no tile length" is the one value a drawn length can miss by landing on a tile
    assert all(("tile", "none") in p for p in missing), sorted(missing)[:5]
    assert len(missing) <= 10


def test_default_profile_runs_the_whole_window_grid_on_flash_kernels():
    """At least 90 of the 100 cells in fp16/bf16 for every flash-attn-API backend (statically:
    each backend's own unsupported_reason on the generated cases plus their siblings)."""
    prof = PROFILES["default"]
    insts = {s: backends.get(s) for s in backends.BUILTIN}
    cases, _ = place(generate(prof, 0), insts)
    for spec in FLASH_API:
        grid = set()
        for c in cases:
            if takes(insts[spec], c):
                grid |= case_cells(c)["grid"]
        assert len(grid) >= 90, (spec, len(grid), sorted(set(GRID_CELLS) - grid)[:10])


def test_generated_cases_keep_their_ids():
    """Adding regimes and the design must not change the cases earlier runs were made of: the
    curated edge cases of the lab's sample run (lab/runs/sample-cpu: its rows in tests/fixtures/lab-rows) have
    the same ids."""
    import csv

    with (LAB_ROWS / "sample-cpu-edge.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # the sample's edge cases (seed 1000 + template index): every one is still generated, with its id;
    # templates added since (the FA2 clamp's, 2026-12-05) come after them and are new ids
    old_edge = {r["case_id"] for r in rows if r["dtype"] == "bfloat16" and 1000 <= int(r["seed"]) < 1100}
    edge = {c.case_id for c in edge_cases(("bfloat16",))}
    assert len(old_edge) == 28 and old_edge <= edge
    assert Case.from_json(Case((3,), (3,), 1, 1, 16).to_json()).regime == "normal"
    assert "regime" not in Case((3,), (3,), 1, 1, 16).to_dict()


class _Picky:
    """A flash-like backend: float16/bfloat16, no softcap, no paged, bottom-right; refuses right > 0."""

    supports_paged = False

    def unsupported_reason(self, case):
        if case.dtype == "float32" or case.softcap is not None:
            return "half precision, no softcap"
        if case.window.align == "top_left" and case.q_lens != case.k_lens:
            return "bottom-right only"
        if case.window.right != 0:
            return "causal windows only"  # about the window itself: no sibling can help
        return None


def test_placement_gives_a_refused_trap_a_sibling_the_backend_takes():
    trap = Case((40,), (24,), 4, 2, 32, "float32", Window(8, 0, "top_left"), softcap=5.0, seed=3)
    window_refusal = Case((40,), (40,), 4, 2, 32, "bfloat16", Window(8, 3), seed=4)
    out, added = place([trap, window_refusal], {"picky": _Picky()})
    assert added == {"picky": 1} and len(out) == 3
    sib = out[2]
    assert takes(_Picky(), sib)
    assert (sib.q_lens, sib.k_lens, sib.hq, sib.hkv, sib.window.left, sib.window.right) == (
        trap.q_lens,
        trap.k_lens,
        trap.hq,
        trap.hkv,
        trap.window.left,
        trap.window.right,
    )
    assert sib.softcap is None and sib.dtype in ("float16", "bfloat16") and sib.window.align == "bottom_right"
    again, _ = place(out, {"picky": _Picky()})
    assert len(again) == 3  # idempotent: a case already served gets no second sibling


class _NoMixedTwoSided:
    """Like xformers' masks: a two-sided window only on a uniform batch."""

    supports_paged = False

    def unsupported_reason(self, case):
        if not case.is_uniform and case.window.right not in (0, None):
            return "no varlen mask with a right side"
        return None


def test_a_varlen_batch_the_backend_cannot_mask_gets_its_first_sequence_as_a_sibling():
    mixed = Case((30, 7), (50, 9), 4, 2, 32, "bfloat16", Window(8, 3), seed=5)
    out, added = place([mixed], {"xf": _NoMixedTwoSided()})
    assert added == {"xf": 1}
    sib = out[1]
    assert (sib.q_lens, sib.k_lens, sib.window, sib.hq, sib.head_dim) == ((30,), (50,), mixed.window, 4, 32)


@settings(max_examples=25, deadline=None)
@given(design_cases(max_len=130, max_batch=2))
def test_the_property_strategy_draws_from_the_model(case):
    assert case.regime in REGIMES and max(case.q_lens) <= 130 and max(case.k_lens) <= 130
    assert set(case_cells(case)) >= set(DESIGN_DIMS)


def test_regimes_shape_the_inputs():
    base = Case((1, 200), (300, 200), 4, 2, 64, "bfloat16", Window(100, 0), seed=11)
    normal = make_inputs(base)
    for regime in REGIMES:
        inp = make_inputs(dataclasses.replace(base, regime=regime))
        assert torch.isfinite(inp.q).all() and torch.isfinite(inp.k).all() and torch.isfinite(inp.v).all(), regime
        s = torch.einsum("qhd,khd->hqk", inp.q[1:, :2].double(), inp.k[300:, :1].expand(-1, 2, -1).double()) * base.softmax_scale
        if regime == "normal":
            assert torch.equal(inp.q, normal.q) and float(s.std()) < 2
        if regime == "large_logits":
            assert float(s.abs().max()) > 88 and abs(float(s.std()) - LOGIT_STD) < 8  # past float32's exp overflow
        if regime == "large_values":
            assert float(inp.v.abs().max()) > 1e30
        if regime == "sink":  # key 0 of sequence 2 (packed row 300) scores far above the rest
            assert float(s[..., 0].mean()) > float(s[..., 1:].mean()) + 5
    fp16 = make_inputs(dataclasses.replace(base, dtype="float16", regime="large_values"))
    assert 8000 < float(fp16.v.abs().max()) <= 65504 / 4 + 1  # never near the poison value -30000


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parity", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_run_writes_coverage_and_require_coverage_fails_on_a_family_gap(tmp_path):
    cases = [
        Case((24,), (24,), 2, 1, 16, "float32", Window.causal(), seed=1),
        Case((24,), (24,), 2, 1, 16, "float32", Window(5, 0), seed=2),
    ]
    cf = tmp_path / "cases.jsonl"
    cf.write_text("".join(c.to_json() + "\n" for c in cases))
    out = tmp_path / "run"
    args = ("run", "-b", "sdpa", "-b", "sdpa-causal", "--case-file", str(cf), "--out", str(out), "--no-isolate", "--no-report", "-q")
    res = _run(*args)
    assert res.returncode == 0, res.stderr
    assert "coverage: sdpa-causal ran none of: left=narrow" in res.stderr
    rows = (out / "coverage.csv").read_text().splitlines()
    assert rows[0] == "backend,dimension,value,ran,unsupported,unavailable"
    assert "sdpa-causal,left,narrow,0,1,0" in rows and "sdpa,left,narrow,1,0,0" in rows
    strict = _run(*args, "--require-coverage", "--force")  # the same --out again: replacing it is explicit
    assert strict.returncode == 1 and "--require-coverage" in strict.stderr


def test_gaps_compare_backends_of_one_family_only():
    rows = [
        {"backend": "a", "verdict": "pass", "case_json": Case((8,), (8,), 1, 1, 16, window=Window(2, 0)).to_json()},
        {"backend": "b", "verdict": "unsupported", "case_json": Case((8,), (8,), 1, 1, 16, window=Window(2, 0)).to_json()},
        {"backend": "c", "verdict": "unsupported", "case_json": Case((8,), (8,), 1, 1, 16, window=Window(2, 0)).to_json()},
        {"backend": "c", "verdict": "pass", "case_json": Case((8,), (8,), 1, 1, 16, window=Window(None, 0)).to_json()},
    ]
    t = tally(rows)
    fam = {"a": "x", "b": "x", "c": "y"}.__getitem__
    assert set(gaps(t, fam)) == set()  # b ran nothing at all (as unavailable): not compared
    rows.append({"backend": "b", "verdict": "pass", "case_json": Case((8,), (8,), 1, 1, 16, window=Window(None, 0)).to_json()})
    g = gaps(tally(rows), fam)
    assert ("left", "narrow") in g["b"]["a"] and "c" not in g
    assert grid_count(tally(rows), "a") == 1


def test_the_committed_run_before_the_design_ran_a_fifth_of_the_grid_on_flash_kernels():
    from parity.coverage import read_rows

    t = tally(read_rows(LAB_ROWS / "h200-2026-12-02"))  # every fa4-cuda and torch-fa2-cuda row of lab/runs/h200-2026-12-02
    assert 10 <= grid_count(t, "fa4-cuda") <= 30 and grid_count(t, "torch-fa2-cuda") <= 30
