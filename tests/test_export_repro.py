"""``python -m parity export-repro``: standalone scripts that reproduce a row without this project.

A small CPU run folder (one varlen case; a planted off-by-one SDPA backend with a ``repro_call``,
honest ``sdpa`` and ``flex``, and the example plugin ``MyKernelOffByOne``, which has no template)
is exported; each script runs under a plain ``python`` with ``PYTHONPATH`` empty in an empty
folder, so an ``import parity`` in it would fail. The CUDA templates are compiled on the CPU and
checked for the native arguments their backend's own translation function gives.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parity import Case, Window, backends, cli
from parity.backends.flash_attn import flash_window
from parity.backends.flash_attn4 import fa4_window
from parity.backends.flashinfer import flashinfer_decode_window, flashinfer_window
from parity.backends.flex import FlexCudaBackend, bucket_band, bucket_len
from parity.backends.jax_attn import jax_window
from parity.backends.torch_fa2 import fa2_window
from parity.backends.vllm_fa import vllm_fa_window
from parity.backends.xformers import bias_expr, xformers_bias_spec
from parity.case import make_inputs
from parity.export_repro import INDEX as KNOWN_INDEX
from parity.regimes import REGIMES
from parity.repro_script import build_script

BUG = "tests.helpers:SdpaWindowOneWider"
PLUGIN = "examples.my_kernel:MyKernelOffByOne"
CASE = Case(q_lens=(20, 3), k_lens=(20, 40), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(7, 0))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    argv = ["run", "-b", BUG, "-b", "sdpa", "-b", "flex", "-b", PLUGIN, "--case", CASE.to_json(), "--out", str(out)]
    assert cli.main([*argv, "--shrink", "4", "--no-isolate", "-q", "--no-report"]) == 1  # two backends fail
    return out


def rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "results.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def run_script(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """A plain python, no PYTHONPATH, in a folder without this project: ``import parity`` would fail."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = ""
    return subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_real_divergence_exits_1_and_names_the_keys(run_dir, tmp_path, capsys):
    assert cli.main(["export-repro", str(run_dir), "--out", str(tmp_path / "repros")]) == 0
    out, err = capsys.readouterr()
    assert f"backend {PLUGIN} has no standalone call template" in err  # the plugin: a note, not a crash
    scripts = sorted((tmp_path / "repros").glob("*.py"))
    assert [p.name.split("_")[0] for p in scripts] == ["tests.helpers"]  # only the failing row with a template
    text = scripts[0].read_text()
    assert "import parity" not in text and "from parity" not in text
    shrunk = [json.loads(line) for line in (run_dir / "shrunk.jsonl").read_text().splitlines()]
    small = Case.from_dict(next(e for e in shrunk if e["backend"] == BUG)["case"])
    assert small.case_id in scripts[0].name and small.summary() in text  # the shrunk case was preferred
    assert "fail [max_err mean_err mask]" in text and "wider on the left" in text  # the harness's verdict and words
    res = run_script(scripts[0], tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "DIFFERS" in res.stdout
    assert re.search(r"mask probe: [1-9]\d* of \d+ \(head, row\) pairs see other keys than the spec", res.stdout)
    lo = max(0, small.k_lens[0] - small.q_lens[0] - 7)  # the last row's first key, per the spec
    assert f"sees keys {lo - 1}..{small.k_lens[0] - 1}, spec says {lo}..{small.k_lens[0] - 1}" in res.stdout


def test_scripts_for_rows_that_are_right_exit_0(run_dir, tmp_path, capsys):
    """A planted wrong case: honest sdpa and flex rows marked ``fail`` in a copy of the run."""
    planted = tmp_path / "planted"
    shutil.copytree(run_dir, planted)
    table = rows(planted)
    for r in table:
        if r["backend"] in ("sdpa", "flex"):
            assert r["verdict"] == "pass"
            r["verdict"], r["reasons"] = "fail", "max_err"
    with (planted / "results.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    for spec in ("sdpa", "flex"):
        assert cli.main(["export-repro", str(planted), "--backend", spec]) == 0
        (script,) = (planted / "repros").glob(f"{spec}_*.py")
        res = run_script(script, tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "AGREES" in res.stdout and "mask probe: 0 of " in res.stdout
        script.unlink()


def test_row_option_exports_that_row_whatever_its_verdict(run_dir, tmp_path, capsys):
    index = next(i for i, r in enumerate(rows(run_dir)) if r["backend"] == "sdpa")
    assert cli.main(["export-repro", str(run_dir), "--row", str(index), "--out", str(tmp_path)]) == 0
    (script,) = tmp_path.glob("sdpa_*.py")
    assert CASE.case_id in script.name  # no shrunk case for sdpa: the row's own
    assert "Harness verdict on" in script.read_text() and ": pass" in script.read_text()
    assert run_script(script, tmp_path).returncode == 0


def test_bad_input_is_one_line_exit_2(run_dir, tmp_path, capsys):
    for argv, words in [
        ([str(tmp_path / "nowhere")], "no such folder"),
        ([str(run_dir), "--row", "99"], "--row 99"),
        ([str(run_dir), "--row", "-1"], "--row -1"),
        ([str(run_dir), "--backend", "nope"], "--backend nope: no rows of it"),
        ([str(run_dir), "--row", "0", "--backend", "sdpa"], "not of --backend sdpa"),
        ([str(tmp_path)], "results.csv: no such file"),
    ]:
        assert cli.main(["export-repro", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and "Traceback" not in err[0], err


def test_no_failing_rows_is_a_line_and_exit_0(run_dir, capsys):
    assert cli.main(["export-repro", str(run_dir), "--backend", "sdpa"]) == 0
    assert "no failing rows of sdpa" in capsys.readouterr().out


# -- what the scripts are made of --------------------------------------------------------------


def _meta(case: Case, spec: str) -> dict:
    return {"backend": spec, "summary": case.summary(), "verdict": "fail", "case_json": case.to_json(), "command": "python x.py"}


def _script(spec: str, case: Case) -> str:
    backend = backends.get(spec)
    assert backend.unsupported_reason(case) is None, (spec, backend.unsupported_reason(case))
    return build_script(case, backend.repro_call(case), backend.device, _meta(case, spec))


def _inputs_of(src: str) -> dict:
    """The script's definitions up to its backend call (which needs the backend's package)."""
    ns: dict = {}
    exec(compile(src.split("# -- the backend's call")[0], "repro", "exec"), ns)
    return ns


@pytest.mark.parametrize(
    "case",
    [
        CASE,
        Case(q_lens=(5, 1, 9), k_lens=(40, 33, 9), hq=6, hkv=1, head_dim=24, dtype="float16", window=Window(4, 2), seed=17),
        Case(q_lens=(3, 1), k_lens=(70, 20), hq=4, hkv=2, head_dim=32, dtype="float32", window=Window(19, 0), page_size=16, seed=5),
        *(
            Case(q_lens=(5, 1), k_lens=(40, 33), hq=4, hkv=2, head_dim=32, dtype="float16", window=Window(4, 0), seed=9, regime=r)
            for r in REGIMES[1:]
        ),
    ],
    ids=["varlen-bf16", "mqa-fp16", "paged-fp32", *REGIMES[1:]],
)
def test_script_inputs_are_make_inputs_bit_for_bit(case):
    ns = _inputs_of(build_script(case, "", "cpu", _meta(case, "x")))
    q, k, v = ns["draw_qkv"](**ns["DRAW_ARGS"])
    want = make_inputs(case)
    for got, ref in zip((q, k, v), (want.q, want.k, want.v)):
        assert got.dtype == ref.dtype and torch.equal(got, ref)
    if case.page_size is not None:
        paged = want.paged()
        got = ns["paged_layout"](k, v, ns["K_LENS"], ns["PAGE_SIZE"], ns["SEED"])
        for a, b in zip(got, (paged.k_cache, paged.v_cache, paged.block_table, paged.seqlens_k)):
            assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert "def paged_layout" not in build_script(case, "", "cpu", _meta(case, "x"))


DECODE = Case(q_lens=(1, 1), k_lens=(300, 37), hq=8, hkv=2, head_dim=64, dtype="bfloat16", window=Window(None, 0))
DENSE = Case(q_lens=(48, 48), k_lens=(64, 64), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(15, 0))
PAGED = Case(q_lens=(3, 2), k_lens=(70, 33), hq=4, hkv=1, head_dim=64, dtype="bfloat16", window=Window(19, 0), page_size=16)
PAGED256 = Case(q_lens=(1, 1), k_lens=(300, 40), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(31, 0), page_size=256)
TOP_LEFT = Case(q_lens=(40,), k_lens=(24,), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(8, 0, "top_left"))


def _native_texts(spec: str, case: Case) -> list[str]:
    """What the script must contain, from the backend's own translation function."""
    w, ql, kl = case.window, case.q_lens, case.k_lens
    pairs = list(zip(ql, kl))
    if spec.startswith("fa4"):
        return [f"window_size={fa4_window(w, ql, kl)!r}"]
    if spec.startswith("torch-fa2"):
        left, right = fa2_window(w, ql, kl)
        return [f"window_size_left={left}, window_size_right={right}"]
    if spec.startswith("vllm-fa"):
        causal, window = vllm_fa_window(w, ql, kl)
        return [f"causal={causal!r}", f"window_size={list(window)!r}", f"fa_version={spec[7]}"]
    if spec.startswith(("fa2", "fa3")):
        return [f"window_size={flash_window(w, ql, kl)!r}"]
    if spec.startswith("xformers"):
        return [f"bias = {bias_expr(*xformers_bias_spec(w, ql, kl), ql, kl)}"]
    if spec.startswith("jax"):
        causal = spec == "jax-cudnn-causal-cuda"
        return [f"NATIVE = {[jax_window(w, sq, sk, causal) for sq, sk in pairs]!r}", f"NATIVE, {spec.split('-')[1]!r}, SCALE"]
    if spec == "flashinfer-paged-cuda":
        causal, left = flashinfer_window(w, ql[0], kl[0])
        page = [] if case.page_size else ["PAGE = 16", "def paged_layout"]
        return [f"window_left={left}, softcap=0.0", f"causal={causal!r})", *page]
    if spec == "flashinfer-decode-cuda":
        page = [] if case.page_size else ["PAGE = 16", "def paged_layout"]
        return [f"window_left={flashinfer_decode_window(w, 1, kl[0])}", "causal=None)", *page]
    if spec == "flashinfer-cuda":
        return [f"NATIVE = {[flashinfer_window(w, sq, sk) for sq, sk in pairs]!r}"]
    if spec == "flex-cuda":
        m = FlexCudaBackend.min_bucket  # 256: two blocks at least (tests/test_flex_compile_key.py)
        seqs = [(bucket_len(sq, m), bucket_len(sk, m), bucket_band(w, sq, sk)) for sq, sk in pairs]
        return ["def tensor_band_mask_mod(t):", f"SEQS = {[(bq, bk, tuple(band)) for bq, bk, band in seqs]!r}"]
    if spec.startswith("sdpa"):
        return [f"kernel={backends.get(spec).kernel!r}"]
    raise AssertionError(spec)


GPU_TEMPLATES = [
    ("fa4-cuda", DECODE),
    ("fa4-cuda", DENSE),
    ("fa4-varlen-cuda", DENSE),
    ("fa4-cuda", PAGED),
    ("torch-fa2-cuda", DENSE),
    ("torch-fa2-varlen-cuda", DENSE),
    ("torch-fa2-cuda", DECODE),
    ("fa2-cuda", DENSE),
    ("fa2-cuda", DECODE),
    ("fa3-cuda", DENSE),
    ("fa2-kvcache-cuda", DECODE),
    ("fa2-kvcache-cuda", PAGED256),
    ("xformers-cutlass-cuda", DENSE),
    ("xformers-flash-cuda", DECODE),
    ("xformers-cutlass-cuda", TOP_LEFT),
    ("jax-xla-cuda", DECODE),
    ("jax-cudnn-cuda", DENSE),
    ("jax-cudnn-causal-cuda", TOP_LEFT),
    ("flashinfer-cuda", DECODE),
    ("flex-cuda", DECODE),
    ("flashinfer-paged-cuda", DENSE),
    ("flashinfer-paged-cuda", PAGED),
    ("flashinfer-decode-cuda", DECODE),
    ("flashinfer-decode-cuda", PAGED256),
    ("vllm-fa2-cuda", DECODE),
    ("vllm-fa2-cuda", PAGED),
    ("vllm-fa3-cuda", DENSE),
    ("vllm-fa3-cuda", PAGED),
    ("sdpa-math-cuda", DENSE),
    ("sdpa-efficient-cuda", DECODE),
    ("sdpa-cudnn-cuda", DENSE),
    ("sdpa-flash-causal-cuda", TOP_LEFT),
]


@pytest.mark.parametrize("spec, case", GPU_TEMPLATES, ids=[f"{s}-{c.family}" for s, c in GPU_TEMPLATES])
def test_cuda_templates_compile_with_their_backends_native_arguments(spec, case):
    if spec == "sdpa-flash-causal-cuda":
        case = Case(q_lens=(40,), k_lens=(24,), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(None, 0, "top_left"))
    src = _script(spec, case)
    compile(src, f"{spec}.py", "exec")
    assert "import parity" not in src and "from parity" not in src
    assert "DEVICE = 'cuda'" in src
    for text in _native_texts(spec, case):
        assert text in src, (text, spec)
    if case.page_size is not None:
        assert "paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)" in src and "def paged_layout" in src


def test_fa4_template_writes_none_not_minus_one():
    src = _script("fa4-cuda", DECODE)
    assert "window_size=(None, 0)" in src and "(-1, 0)" not in src
    assert "window_size=(-1, 0)" in _script("fa2-cuda", dataclasses.replace(DENSE, window=Window(None, 0)))


def test_xformers_bias_expr_is_the_mask_the_harness_builds():
    """``_make_bias`` evaluates ``bias_expr``; here against a recording stand-in for ``attn_bias``."""

    class Rec:
        def __init__(self, chain=()):
            self.chain = chain

        def __getattr__(self, name):
            return Rec((*self.chain, (name,)))

        def __call__(self, *args, **kw):
            return Rec((*self.chain[:-1], (self.chain[-1][0], args, tuple(sorted(kw.items())))))

    varlen = ("from_seqlens", (), (("kv_seqlen", [9, 7]), ("q_seqlen", [4, 2])))
    for w, ql, kl, want in [
        (Window(15, 0), (4, 4), (9, 9), [("LowerTriangularFromBottomRightLocalAttentionMask", (16,), ())]),
        (Window(3, 2), (4, 4), (9, 9), [("LocalAttentionFromBottomRightMask", (), (("window_left", 3), ("window_right", 2)))]),
        (Window(None, 0, "top_left"), (4, 2), (9, 7), [("BlockDiagonalMask",), varlen, ("make_causal", (), ())]),
        (Window(None, 0), (4, 2), (9, 7), [("BlockDiagonalMask",), varlen, ("make_causal_from_bottomright", (), ())]),
        (Window(5, 0), (4, 2), (9, 7), [("BlockDiagonalMask",), varlen, ("make_local_attention_from_bottomright", (6,), ())]),
        (Window(5, 0, "top_left"), (4, 2), (9, 7), [("BlockDiagonalMask",), varlen, ("make_local_attention", (6,), ())]),
        (Window(None, None), (4, 2), (9, 7), [("BlockDiagonalMask",), varlen]),
    ]:
        name, kw = xformers_bias_spec(w, ql, kl)
        assert list(eval(bias_expr(name, kw, ql, kl), {"ab": Rec()}).chain) == want, (w, name)
    assert bias_expr(*xformers_bias_spec(Window(None, None), (4, 4), (9, 9)), (4, 4), (9, 9)) == "None"


KNOWN_RUNS = Path(__file__).resolve().parent / "fixtures" / "known-runs"
#: the record of which case each known divergence's repro script uses (entry, backend, script, control): package data
INDEX = KNOWN_INDEX


def _export_known(capsys, out: Path, *extra: str) -> tuple[int, list[list[str]]]:
    code = cli.main(["export-repro", "--known", "--runs", str(KNOWN_RUNS), "--out", str(out), *extra])  # a folder of run folders
    capsys.readouterr()
    index = out / "index.tsv"
    return code, [ln.split("\t") for ln in index.read_text().splitlines()[1:]] if index.exists() else []


def _no_control_takes(script: Path, backend: str) -> bool:
    """Every control candidate (the backend's own and the fallbacks) refuses the case written in ``script``."""
    from parity.case import Case
    from parity.export_repro import CONTROLS, FALLBACK_CONTROLS, _control_refusal

    text = script.read_text()
    case = Case.from_json(text.split("Case (attn-parity JSON): ", 1)[1].splitlines()[0])
    candidates = {CONTROLS.get(backend, FALLBACK_CONTROLS[0]), *FALLBACK_CONTROLS[:-1]} - {backend}
    return all(_control_refusal(name, case) for name in candidates)


def test_export_repro_known_generates_a_compiling_script_and_control_per_entry(tmp_path, capsys):
    """``export-repro --known`` writes, from committed rows (tests/fixtures/known-runs), one script and one
    control per entry of the known-divergence file, with the cases the lab's index.tsv records; each compiles."""
    from parity.expect import load

    code, rows = _export_known(capsys, tmp_path / "out", "--index", str(INDEX))
    assert code == 0
    assert {r[0] for r in rows} == {e.id for e in load().entries if not e.checks}  # engine-check entries: no script
    assert sorted(rows) == sorted(ln.split("\t") for ln in INDEX.read_text().splitlines()[1:])  # the recorded cases
    for entry, backend, script, control in rows:
        assert script.startswith(backend + "_"), entry
        if control == "-":  # only where every candidate refuses the case here (fp8 KV, paged KV with sinks)
            assert _no_control_takes(tmp_path / "out" / script, backend), entry
            continue
        for name in (script, control):
            text = (tmp_path / "out" / name).read_text()
            compile(text, name, "exec")
            assert "Case (attn-parity JSON): {" in text, name


def test_export_repro_known_repick_takes_each_entrys_smallest_row(tmp_path, capsys):
    """Without the record (``--repick``), each entry still gets a script, from the smallest row it explains."""
    code, rows = _export_known(capsys, tmp_path / "out", "--index", str(INDEX), "--repick")
    assert code == 0 and len(rows) == len(INDEX.read_text().splitlines()) - 1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["export-repro", "--known"], "--out DIR"),
        (["export-repro", "--known", "--runs", "X", "--out", "O", "--row", "1"], "not RUN_DIR, --row"),
        (["export-repro", "--out", "O"], "name a RUN_DIR, or --known"),
        (["export-repro", "RUN", "--runs", "X"], "go with --known"),
        (["export-repro", "--known", "--index", "missing.tsv", "--out", "O"], "--index missing.tsv: no such file"),
        (["export-repro", "--known", "--out", "O"], "name the run folders to pick rows from with --runs DIR"),
        (["export-repro", "--known", "--runs", "nowhere", "--out", "O"], "--runs nowhere: no such folder"),
        (["export-repro", "--known", "--runs", ".", "--out", "O"], "--runs .: no run folder (results.csv or results.csv.gz) in it"),
    ],
)
def test_export_repro_known_bad_input(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
@pytest.mark.parametrize("spec", ["flashinfer-cuda", "sdpa-math-cuda"])
def test_a_cuda_script_on_a_machine_without_one_exits_2_not_1(spec, tmp_path):
    """Exit 1 means 'diverges' to lab/loan/run_repros.sh and to a maintainer; a missing package (FlashInfer here)
    or a missing GPU (sdpa-math-cuda) must not look like that."""
    path = tmp_path / f"{spec}.py"
    path.write_text(_script(spec, DENSE if spec != "flashinfer-cuda" else DECODE))
    res = run_script(path, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "CANNOT RUN on this machine (exit 2)" in res.stdout, res.stdout + res.stderr


#: rows of the lab's CPU backward runs (lab/runs/cpu-grad-2026-12-05): the fixtures' seed0 and shrunk-large-values


@pytest.mark.parametrize("script", ["sdpa_1e26f8bf6155", "sdpa_960e893e5cc1"])
def test_cpu_backward_findings_show_in_their_scripts_and_not_in_their_controls(script, tmp_path, capsys):
    """The scripts of two CPU findings (SDPA's CPU flash kernel): the GQA decode case, whose dv is the query heads'
    summed in float16 one at a time (the script's baseline must sum the group as the harness's does, not through
    autograd's per-head adds, or the script forgives it), and the large-values case (dq ~1e30 for 0); each exits 1,
    its control (SDPA's MATH kernel) 0."""
    runs = [str(KNOWN_RUNS / f"cpu-grad-2026-12-05__{d}") for d in ("seed0", "shrunk-large-values")]
    assert cli.main(["export-repro", "--known", "--runs", *runs, "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    names = (script, script.replace("sdpa_", "sdpa-math_") + ".control")
    runs_ = [run_script(tmp_path / f"{name}.py", tmp_path) for name in names]
    assert [r.returncode for r in runs_] == [1, 0], {n: r.stdout[-600:] for n, r in zip(names, runs_)}


LONG_DECODE = Case(q_lens=(1, 1), k_lens=(1500, 999), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(99, 0))


@pytest.mark.parametrize(("spec", "code"), [("sdpa", 0), (BUG, 1)])
def test_a_script_past_the_one_hot_pass_limit_runs_the_scaled_probe(spec, code, tmp_path):
    """1500 keys at d 16 need 94 one-hot passes, past the script's 64: its scaled probe (3 residue passes, as the
    harness's) still says which (head, row) pairs read other keys, and a window one key wider exits 1 on it."""
    path = tmp_path / "repro.py"
    path.write_text(_script(spec, LONG_DECODE))
    res = run_script(path, tmp_path)
    assert res.returncode == code, res.stdout + res.stderr
    differ = 8 if code else 0
    words = f"mask probe (scaled, 3 signed residue passes mod 15/13/11): {differ} of 8 (head, row) pairs read other keys than the spec"
    assert words in res.stdout, res.stdout
    assert ("seq 0 head 0 row 0: spec says keys 1400..1499; its residues say otherwise" in res.stdout) == bool(code)
