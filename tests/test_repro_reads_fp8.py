"""Repro scripts of read-probed and fp8 rows (issue 29 item 6).

The GPU libraries with paged / padded caches and fp8 inputs cannot run here, so
:mod:`tests.cache_fakes` stands in for them: an honest eager kernel over a paged cache, a padded
cache with used lengths, or fp8 inputs with descales, and its planted bugs (every page / the whole
capacity read and multiplied by zero; the V descale applied twice), each with a ``repro_call``.
Their rows go through ``parity run`` and ``export-repro`` as a real backend's do, and the scripts
run under a plain python in an empty folder. The GPU templates of FA3, vLLM's FA3 and FlashInfer
are checked to compile with the descales passed as their ``run`` passes them.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from parity import Case, Window, backends, cli
from parity.case import make_inputs
from parity.export_repro import read_probe
from parity.maskcheck import poisoned_spans
from parity.repro_script import build_script
from tests.test_export_repro import _meta, run_script

FAKE = "tests.cache_fakes:EagerCache"
READS_ALL = "tests.cache_fakes:EagerCacheReadsAll"
TWICE = "tests.cache_fakes:EagerCacheDescaleTwice"

DECODE = Case(q_lens=(1, 1), k_lens=(37, 20), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(7, 0), seed=3)
PAGED = Case(q_lens=(3, 2), k_lens=(70, 33), hq=4, hkv=1, head_dim=16, dtype="bfloat16", window=Window(19, 0), page_size=16, seed=1)
FP8 = Case(
    q_lens=(9, 3), k_lens=(20, 14), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(5, 0), kv_dtype="float8_e4m3fn", seed=2
)
FP8_Q = dataclasses.replace(FP8, q_fp8=True, seed=4)


def _run_and_export(tmp_path: Path, case: Case, bug: str) -> tuple[list[dict[str, str]], Path, Path]:
    """``parity run`` of the bug and the honest fake on ``case``, then ``export-repro`` of the bug's row with
    the honest fake as its control: the rows, the bug's script and the control's."""
    out = tmp_path / "run"
    argv = ["run", "-b", bug, "-b", FAKE, "--case", case.to_json(), "--out", str(out), "--no-isolate", "-q", "--no-report", "--shrink", "0"]
    assert cli.main(argv) == 1  # the bug's row fails
    with (out / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    repros = tmp_path / "repros"
    assert cli.main(["export-repro", str(out), "--backend", bug, "--control", FAKE, "--out", str(repros)]) == 0
    (script,) = repros.glob(f"tests.cache_fakes_EagerCache*_{case.case_id}.py")
    (control,) = repros.glob("*.control.py")
    return rows, script, control


@pytest.mark.parametrize("case", [DECODE, PAGED], ids=["padded-decode", "paged"])
def test_a_row_that_reads_outside_the_window_gets_a_script_that_exits_1_naming_rows_and_span(case, tmp_path, capsys):
    rows, script, control = _run_and_export(tmp_path, case, READS_ALL)
    by = {r["backend"]: r for r in rows}
    assert by[READS_ALL]["reasons"] == "reads_outside_window" and by[FAKE]["verdict"] == "pass"
    text = script.read_text()
    assert "import parity" not in text and "from parity" not in text
    assert f"READ_PROBE = {'paged' if case.page_size else 'padded'!r}" in text and "def poison_pages" in text
    res = run_script(script, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "DIFFERS: READS OUTSIDE THE WINDOW" in res.stdout and "DIFFERS from the float64 reference" not in res.stdout
    assert "AGREES" not in res.stdout and "mask probe: 0 of " in res.stdout  # the output itself is right
    total = sum(case.q_lens) * case.hq
    assert f"read probe: {total} of {total} (row, head) pairs NaN/Inf" in res.stdout, res.stdout
    for b in range(case.batch):  # the harness's own words for each sequence's poisoned span
        rows_b = "0" if case.q_lens[b] == 1 else f"0..{case.q_lens[b] - 1}"
        assert f"seq {b} head 0 rows {rows_b} read NaN-poisoned KV (poisoned {poisoned_spans(case, b)})" in res.stdout, res.stdout
    ok = run_script(control, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"read probe: 0 of {total} (row, head) pairs NaN/Inf" in ok.stdout and "AGREES" in ok.stdout


def _namespace(case: Case, spec: str) -> dict:
    """The script of ``spec`` on ``case`` executed as a module (not as __main__): its functions and constants."""
    backend = backends.get(spec)
    src = build_script(case, backend.repro_call(case), backend.device, _meta(case, spec), reads=read_probe(backend, case))
    ns: dict = {"__name__": "repro"}
    exec(compile(src, "repro", "exec"), ns)
    return ns


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.float().nan_to_num(7.0), b.float().nan_to_num(7.0))


@pytest.mark.parametrize(
    "case", [PAGED, DECODE, dataclasses.replace(FP8, page_size=16, q_lens=(3, 1))], ids=["paged", "padded", "fp8-paged"]
)
def test_the_scripts_poisoned_cache_is_the_harness_probes_bit_for_bit(case):
    """NaN exactly where the harness's read probe puts it (fp8 caches too); the visible keys unchanged."""
    ns = _namespace(dataclasses.replace(case, kv_dtype=None), FAKE) if case.kv_dtype else _namespace(case, FAKE)
    want = dataclasses.replace(make_inputs(case), poison_kv=True)
    q, k, v, _ = ns["backend_inputs"]() if not case.kv_dtype else (None, want.k, want.v, None)
    ns["PROBE"]["on"] = True
    if case.page_size is not None:
        got = ns["paged_layout"](k, v, ns["K_LENS"], ns["PAGE_SIZE"], ns["SEED"])
        ref = want.paged()
        assert _same(got[0], ref.k_cache) and _same(got[1], ref.v_cache) and torch.equal(got[2], ref.block_table)
        assert int(ref.k_cache.float().isnan().any(-1).any(-1).sum()) > 0
    else:
        got = ns["padded_layout"](k, v, ns["K_LENS"], 48)
        ref = want.padded()
        assert _same(got[0], ref.k_cache) and _same(got[1], ref.v_cache)
    ns["PROBE"]["on"] = False
    clean = (
        ns["paged_layout"](k, v, ns["K_LENS"], ns["PAGE_SIZE"], ns["SEED"])
        if case.page_size
        else ns["padded_layout"](k, v, ns["K_LENS"], 48)
    )
    assert not clean[0].float().isnan().any()  # off the probe: the harness's own layout


def test_a_backend_without_a_probe_gets_no_read_probe():
    sdpa = backends.get("sdpa")
    assert read_probe(sdpa, DECODE) is None and read_probe(backends.get(FAKE), DECODE) == "padded"
    assert read_probe(backends.get(FAKE), PAGED) == "paged" and read_probe(backends.get(FAKE), FP8) is None
    assert read_probe(backends.get("fa2-kvcache-cuda"), DECODE) == "padded"
    src = build_script(DECODE, sdpa.repro_call(DECODE), "cpu", _meta(DECODE, "sdpa"))
    assert "READ_PROBE = None" in src and "def read_probe" not in src


@pytest.mark.parametrize("case", [FP8, FP8_Q], ids=["kv-fp8", "qkv-fp8"])
def test_fp8_rows_get_scripts_that_quantize_like_the_harness(case, tmp_path, capsys):
    """The honest fp8 kernel's script agrees (exit 0), the V-descale-twice bug's differs (exit 1)."""
    rows, script, control = _run_and_export(tmp_path, case, TWICE)
    by = {r["backend"]: r for r in rows}
    assert by[TWICE]["verdict"] == "fail" and "max_err" in by[TWICE]["reasons"] and by[FAKE]["verdict"] == "pass"
    text = script.read_text()
    assert "def quantize_fp8" in text and "def round_p_fp8" in text and "KV_DTYPE = 'float8_e4m3fn'" in text
    assert f"Q_FP8 = {case.q_fp8!r}" in text
    res = run_script(script, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "DIFFERS from the float64 reference" in res.stdout and "mask probe: 0 of " in res.stdout
    err = float(re.search(r"max \|backend - reference\| = (\S+);", res.stdout).group(1))
    assert math.isclose(err, float(by[TWICE]["max_abs_err"]), rel_tol=1e-3), (err, by[TWICE]["max_abs_err"])  # the harness's miss
    ok = run_script(control, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "AGREES" in ok.stdout and "mask probe: 0 of " in ok.stdout


def test_fp8_script_inputs_and_budget_are_the_harnesss():
    """quantize_fp8 in the script gives make_inputs' fp8 tensors and descales; its reference and budget
    are the harness's (float64 on the dequantized values; the baseline with P rounded to e4m3)."""
    from parity.reference import attention_reference

    ns = _namespace(FP8_Q, FAKE)
    q, k, v, descales = ns["backend_inputs"]()
    want = make_inputs(FP8_Q)
    for got, ref in zip((q, k, v, *descales), (want.q, want.k, want.v, want.q_descale, want.k_descale, want.v_descale)):
        assert got.dtype == ref.dtype and torch.equal(got.float(), ref.float())
    ref = ns["reference"](*ns["values"](q, k, v, descales, torch.float64), torch.float64)
    assert torch.allclose(ref, attention_reference(want), atol=1e-12, rtol=0)
    same = ns["reference"](*ns["values"](q, k, v, descales, torch.bfloat16), torch.bfloat16).double()
    base = attention_reference(want, torch.bfloat16).double()
    assert torch.allclose(same, base, atol=2e-2, rtol=0)
    ns["KV_DTYPE"] = None  # without the P rounding the baseline's error is far smaller: the rounding is in
    plain = ns["reference"](*ns["values"](q, k, v, descales, torch.bfloat16), torch.bfloat16).double()
    assert float((plain - ref).abs().max()) * 2 < float((same - ref).abs().max())


def test_a_template_without_descales_is_a_note_not_a_script(tmp_path, capsys, monkeypatch):
    """A backend that takes fp8 but whose template has no ``descales`` would pass raw fp8 values: a note instead."""
    from tests import cache_fakes

    out = tmp_path / "run"
    argv = ["run", "-b", TWICE, "--case", FP8.to_json(), "--out", str(out), "--no-isolate", "-q", "--no-report", "--shrink", "0"]
    assert cli.main(argv) == 1
    capsys.readouterr()
    monkeypatch.setattr(cache_fakes.EagerCacheDescaleTwice, "repro_call", lambda self, case: "def attention(q, k, v):\n    return q\n")
    assert cli.main(["export-repro", str(out), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "takes no fp8 descales" in err and "python -m parity run --backend" in err
    assert not list((tmp_path / "r").glob("*.py"))


FP8_DENSE = Case(
    q_lens=(48, 48), k_lens=(64, 64), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(15, 0), kv_dtype="float8_e4m3fn"
)
FP8_PAGED = Case(
    q_lens=(3, 2), k_lens=(70, 33), hq=4, hkv=1, head_dim=64, dtype="bfloat16", window=Window(19, 0), page_size=16, kv_dtype="float8_e4m3fn"
)
FP8_DECODE = Case(
    q_lens=(1, 1),
    k_lens=(300, 40),
    hq=4,
    hkv=2,
    head_dim=64,
    dtype="bfloat16",
    window=Window(31, 0),
    page_size=16,
    kv_dtype="float8_e4m3fn",
)
#: the fp8-capable GPU backends, a case each takes, and the call text the template must hold
FP8_TEMPLATES = [
    ("fa3-cuda", dataclasses.replace(FP8_DENSE, q_fp8=True), "module='flash_attn_interface', descales=descales)"),
    (
        "fa3-cuda",
        Case(q_lens=(5, 1), k_lens=(40, 33), hq=4, hkv=2, head_dim=64, window=Window(4, 0), kv_dtype="float8_e4m3fn", q_fp8=True),
        "dense=False, module='flash_attn_interface', descales=descales)",
    ),
    ("vllm-fa3-cuda", dataclasses.replace(FP8_DENSE, q_fp8=True), "fa_version=3, descales=descales)"),
    ("vllm-fa3-cuda", dataclasses.replace(FP8_PAGED, q_fp8=True), "seqused_k=seqused_k, descales=descales)"),
    ("flashinfer-cuda", FP8_DENSE, "kv_scales=(float(descales[1]), float(descales[2])))"),
    ("flashinfer-paged-cuda", FP8_PAGED, "causal=True, kv_scales=(float(descales[1]), float(descales[2])))"),
    ("flashinfer-decode-cuda", FP8_DECODE, "causal=None, kv_scales=(float(descales[1]), float(descales[2])))"),
]


@pytest.mark.parametrize("spec, case, text", FP8_TEMPLATES, ids=[f"{s}-{c.family}" for s, c, _ in FP8_TEMPLATES])
def test_fp8_gpu_templates_compile_and_pass_the_descales_as_run_does(spec, case, text):
    backend = backends.get(spec)
    assert backend.unsupported_reason(case) is None, backend.unsupported_reason(case)
    src = build_script(case, backend.repro_call(case), backend.device, _meta(case, spec), reads=read_probe(backend, case))
    compile(src, f"{spec}.py", "exec")
    assert "def attention(q, k, v, descales):" in src and text in src, spec
    if spec.startswith("vllm"):  # the output buffer in DTYPE (FA3's fp8 path writes bfloat16), not in q's fp8
        assert "torch.empty(q.shape, dtype=DTYPE, device=q.device)" in src
    assert ("READ_PROBE = 'paged'" in src) == (case.page_size is not None)


@pytest.mark.parametrize("spec, case", [("fa2-kvcache-cuda", DECODE), ("vllm-fa2-cuda", PAGED), ("fa4-cuda", PAGED)])
def test_gpu_templates_with_a_cache_get_the_read_probe_and_compile(spec, case):
    case = dataclasses.replace(case, head_dim=64)
    backend = backends.get(spec)
    src = build_script(case, backend.repro_call(case), backend.device, _meta(case, spec), reads=read_probe(backend, case))
    compile(src, f"{spec}.py", "exec")
    wrapped = "padded_layout" if case.page_size is None else "paged_layout"
    assert f"harness_{wrapped} = {wrapped}" in src and src.count(f"\ndef {wrapped}(") == 2  # the harness's, then the probe's
