"""A case's inputs drawn once and shared (parity.shared_inputs, parity.sweep.inputstore): the files hold exactly
make_inputs' bytes, every row and the reference see them, a backend's writes stay its own, and a sweep's rows are
the same numbers whether its workers map the shared draw or draw their own."""

import csv
import json
import os

import pytest
import torch

from parity import Case, Window, transfer
from parity.case import make_inputs
from parity.shared_inputs import FIELDS, case_inputs, shared_or_drawn, write_inputs
from parity.sweep import run_sweep
from parity.sweep.inputstore import InputStore

E4M3 = "float8_e4m3fn"
CASES = [
    Case((5, 17), (40, 17), 8, 2, 32, "bfloat16", Window(7, 0), seed=1),
    Case((1, 1), (70, 33), 4, 4, 16, "float16", Window.tokens(16), page_size=8, regime="outliers", seed=2),
    Case((9,), (9,), 4, 1, 8, "float32", Window(None, 0), regime="sink", sinks=True, seed=3),
    Case((16, 24), (96, 24), 8, 4, 64, "bfloat16", Window(31, 0), kv_dtype=E4M3, q_fp8=True, fp8_scales="kv_head", seed=4),
    Case((1, 1, 1), (90, 37, 64), 8, 4, 64, "bfloat16", Window.tokens(32), kv_dtype=E4M3, fp8_scales="batch_kv_head", seed=5),
]


def _same(a, b) -> int:
    """Elements of tensors (or Nones) ``a`` and ``b`` whose bytes differ (-1: not both tensors of one dtype and shape)."""
    if a is None or b is None:
        return 0 if a is b else -1
    if a.dtype != b.dtype or a.shape != b.shape:
        return -1
    return int((a.contiguous().view(torch.uint8) != b.contiguous().view(torch.uint8)).sum())


def _differ(got, want) -> dict[str, int]:
    return {f: n for f in FIELDS if (n := _same(getattr(got, f), getattr(want, f)))}


@pytest.fixture
def every_tensor_a_file(monkeypatch):
    monkeypatch.setattr(transfer, "MIN_BYTES", 1)  # CPU-sized cases: every tensor goes to a file, as a model's do


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.summary())
def test_the_files_hold_make_inputs_bytes(tmp_path, every_tensor_a_file, case):
    want = make_inputs(case, "cpu")
    files = write_inputs(want, transfer.owner_prefix(tag="s-"), [str(tmp_path)])
    assert files is not None and len(files.paths) == sum(getattr(want, f) is not None for f in FIELDS)
    got, from_files = shared_or_drawn(case, "cpu", files)
    assert from_files and got.case == case
    assert not _differ(got, want), f"bytes differ from make_inputs': {_differ(got, want)}"
    assert not _differ(case_inputs(case, "cpu", files), make_inputs(case, "cpu"))


def test_a_backends_writes_to_its_inputs_stay_its_own(tmp_path, every_tensor_a_file):
    case = CASES[0]
    files = write_inputs(make_inputs(case), transfer.owner_prefix(tag="s-"), [str(tmp_path)])
    assert files is not None
    first = files.load(case)
    first.q.fill_(7.0)
    first.k.zero_()
    again = files.load(case)
    assert not _differ(again, make_inputs(case)), "a write to one row's inputs reached the next row's"


def test_gone_files_are_drawn_again_and_another_cases_are_refused(tmp_path, every_tensor_a_file):
    case = CASES[1]
    files = write_inputs(make_inputs(case), transfer.owner_prefix(tag="s-"), [str(tmp_path)])
    assert files is not None
    files.remove()
    got, from_files = shared_or_drawn(case, "cpu", files)
    assert not from_files and not _differ(got, make_inputs(case))
    with pytest.raises(ValueError, match="shared inputs of"):
        case_inputs(CASES[0], "cpu", files)


def test_no_room_keeps_no_file(tmp_path, every_tensor_a_file):
    assert write_inputs(make_inputs(CASES[0]), transfer.owner_prefix(tag="s-"), [str(tmp_path / "missing")]) is None
    assert transfer.listing(transfer.owner_prefix(), [str(tmp_path)]) == []


def test_the_store_draws_a_case_once_for_its_rows_and_its_reference(tmp_path, every_tensor_a_file):
    a, b = CASES[0], CASES[3]
    store = InputStore({a.case_id: 2, b.case_id: 1}, max_bytes=1 << 30, dirs=[str(tmp_path)])
    first, spent = store.lease(a)
    second, _ = store.lease(a)
    assert first is not None and second is first and store.draws == 1 and spent > 0
    assert store.drawn_s(a.case_id) > 0 and store.drawn_s(b.case_id) == 0.0
    assert not _differ(store.inputs(a), make_inputs(a)), "the reference's inputs are not the rows' bytes"
    store.unlease(a)
    store.unlease(a)
    store.done(a.case_id)
    assert all(os.path.exists(p) for p in first.paths), "removed before the case's last row"
    store.done(a.case_id)
    assert store.held_bytes == 0 and transfer.listing(store.prefix, [str(tmp_path)]) == []
    store.lease(b)
    assert store.held_bytes > 0
    store.close()
    assert transfer.listing(store.prefix, [str(tmp_path)]) == []


def test_the_store_makes_room_from_cases_with_no_row_in_flight(tmp_path, every_tensor_a_file):
    a, b, c = CASES[0], CASES[3], CASES[4]
    size_b = sum(t.nbytes for f in FIELDS if (t := getattr(make_inputs(b), f)) is not None)
    store = InputStore({x.case_id: 1 for x in (a, b, c)}, max_bytes=int(size_b * 1.5), dirs=[str(tmp_path)])
    fb, _ = store.lease(b)
    fc, _ = store.lease(c)  # b is in flight: it stays, and c does not fit beside it
    assert fb is not None and fc is None and store.not_held == 1
    store.unlease(b)
    fc, _ = store.lease(c)  # b answered: removed to make room
    assert fc is not None and not any(os.path.exists(p) for p in fb.paths)
    store.close()
    assert InputStore({}, max_bytes=0, dirs=[str(tmp_path)]).lease(a) == (None, 0.0)


def _rows(folder) -> dict[tuple[str, str], dict[str, str]]:
    with open(folder / "results.csv") as fh:
        return {(r["backend"], r["case_id"]): r for r in csv.DictReader(fh)}


def test_a_sweeps_rows_are_the_same_from_the_shared_draw(tmp_path, monkeypatch, every_tensor_a_file):
    """The rows' verdicts and numbers are the same whether the workers map the sweep's one draw of each case or
    draw their own (PARITY_SPILL_DIRS=off), and the run leaves no file behind."""
    cases = [CASES[0], Case((1, 1), (70, 33), 4, 4, 16, "float16", Window.tokens(16), regime="outliers", seed=2)]
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv(transfer.DIRS_ENV, str(spill))
    run_sweep(["sdpa", "sdpa-math"], cases, out_dir=tmp_path / "shared", progress=False)
    monkeypatch.setenv(transfer.DIRS_ENV, "off")
    run_sweep(["sdpa", "sdpa-math"], cases, out_dir=tmp_path / "drawn", progress=False)
    shared, drawn = _rows(tmp_path / "shared"), _rows(tmp_path / "drawn")
    assert shared.keys() == drawn.keys() and len(shared) == 4
    timing_cols = {"time_ms"}
    moved = {k: [c for c in row if c not in timing_cols and row[c] != drawn[k][c]] for k, row in shared.items()}
    assert not any(moved.values()), f"columns that moved with the shared draw: {moved}"
    lines = [json.loads(s) for s in (tmp_path / "shared" / "stages.jsonl").read_text().splitlines()]
    assert [ln["inputs_shared"] for ln in lines if ln["status"] == "ok"] == [True] * 4
    assert not any(json.loads(s)["inputs_shared"] for s in (tmp_path / "drawn" / "stages.jsonl").read_text().splitlines())
    timing = json.loads((tmp_path / "shared" / "timing.json").read_text())
    assert timing["reference_stages_s"]["shared_inputs"] > 0
    assert list(spill.iterdir()) == [], "the sweep left files behind"


def test_a_small_fp8_cases_inputs_cross_to_its_worker(tmp_path, monkeypatch):
    """A small case's fp8 K/V stay in the message (under MIN_BYTES), where torch's own pickling fails to load them
    ("UntypedStorage has no attribute 'dtype'"): the README's CPU sweep crashed the reference's worker on every fp8
    row so. They cross as bytes: the rows pass, none a crash."""
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv(transfer.DIRS_ENV, str(spill))
    res = run_sweep(["reference"], CASES[3:], out_dir=tmp_path / "out", progress=False)
    assert [r["verdict"] for r in res.rows] == ["pass", "pass"], [r["detail"] for r in res.rows]


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "bfloat16"])
def test_small_tensors_of_every_dtype_round_trip(dtype):
    """Under MIN_BYTES a tensor is pickled in the message: its bytes, dtype and shape come back (a strided view too)."""
    t = (torch.arange(24).reshape(4, 6) % 5).to(getattr(torch, dtype))  # (4, 6)
    got = transfer.loads(transfer.dumps({"t": t, "col": t[:, 2]}, "parity-test-"))
    assert got["t"].dtype == t.dtype and _same(got["t"], t) == 0 and _same(got["col"], t[:, 2].contiguous()) == 0
