"""The lab's committed runs (lab/runs/), folder by folder: each re-judged with today's known divergences (every failing
row a known divergence, a lab incident named here, or a failure with no mask evidence), the runs without their
environment, issue 48's mechanism comparison, and README.md linking each run's notes. Moved from tests/ (issue 51):
the product's tests read fixtures only; these read the lab's data and run in the default ``pytest`` (testpaths)."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch

from parity import expect
from parity.expect import load
from parity.maskcheck import dtype_ulp
from parity.report.runs import load_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "lab" / "runs"


def _lab_rejudge():
    """lab/rejudge_committed.py as a module (it is a script, not a package's)."""
    spec = importlib.util.spec_from_file_location("rejudge_committed", ROOT / "lab" / "rejudge_committed.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: every committed GPU run folder (the sweep, the FA4 paged variants, the compile-cache sweeps), and the CPU
#: runs that found divergences of their own (the backward of SDPA's CPU kernel)
_RUN_FOLDERS = _lab_rejudge().folders(RUNS)
#: runs without environment.json: their backends' versions are unknown, so no entry (each has a version range)
#: can match their rows. The timeout recheck has no failing row and is judged; the three folders of the vLLM version
#: loan that `timeout` killed before they wrote it are not (h100-2026-12-07-versions/README.md: which build each ran
#: is in the calls' commands, not the folders). Named here so that a new one is not skipped unnoticed.
KILLED = {
    "h100-2026-12-07-versions/vllm-0.33.0",
    "h100-2026-12-07-versions/vllm-0.26.0-entries",
    "h100-2026-12-07-versions/vllm-0.33.0-entries",
}
NO_ENVIRONMENT = {"h200-2026-12-04b/seed-systems/fa2-timeout-recheck", *KILLED}
GPU_RUNS = [p for p in _RUN_FOLDERS if str(p.relative_to(RUNS)) not in KILLED]
#: FA4's own refusal (d = 72, paged): the other half of issue 17 records it as unsupported; no entry
FA4_REFUSAL = "Paged KV does not support irregular head dim"
#: xformers' own precondition (varlen, a sequence with Sq > Sk): an error in the 2026-12-04 run,
#: a refusal (unsupported) since; recorded in xformers' refusal phrases, no entry
XFORMERS_REFUSAL = "Expected `num_keys >= num_queries`"
#: the harness's own bug in the 2026-12-04 gate run (a sequence's unaligned view handed to JAX by
#: DLPack); fixed since in parity.backends.jax_attn.dlpack_ready, no entry
JAX_UNALIGNED = "must be a multiple of 10"
#: FlashInfer's own precondition (causal with Sq > Sk): errors in the seed systems' first run, a
#: refusal since (parity.backends.flashinfer.flashinfer_window), no entry
FLASHINFER_REFUSAL = "kv_len must be greater than or equal to qo_len"
#: the harness's own bug in the seed systems' second run: after one sticky CUDA error the same
#: worker ran the lane's next rows, which failed making their inputs (case.py); the worker is
#: restarted after such an error since (parity.worker), no entry
STICKY_COLLATERAL = r"at case\.py:\d+: CUDA error: misaligned address"
#: one vLLM FA2 decode row timed out while the gate ran beside it on the same GPU; run alone it
#: passed (seed-systems/fa2-timeout-recheck), no entry
CONTENDED_TIMEOUT = "no answer within 120 s"
#: FlashInfer's JIT builds (about 18 s each alone) ran past 240 s while seven jobs shared the GPU and
#: CPUs on 2026-12-05 (lab/runs/h200-2026-12-05/README.md): the run's contention, no entry
JIT_CONTENDED_TIMEOUT = "no answer within 240 s"

#: the lab's own bug on the H100 on 2026-12-05 (lab/runs/h100-2026-12-05/README.md): its scripts named the compile
#: cache CC, the device exports CC, and Inductor ran the cache folder as its C compiler; every flex-cuda row errored.
#: Fixed since in lab/loan (PARITY_CC), no entry
LAB_CC = "Permission denied: '/tmp/parity-cc'"
#: the harness's own bug in the same run: a float16 same-dtype backward baseline with NaN gave a NaN mean budget
#: and a max budget of the rounding floor alone (4 honest rows missed it by 1.04-1.34x); such a backward is not
#: judged since (parity.grad._unjudgeable), no entry
NAN_GRAD_BUDGET = "(budget nan)"
#: the harness's own bug on the H100 on 2026-12-05 (lab/runs/h100-2026-12-05b/README.md): xformers' backward was called
#: in the 5-D GQA layout, which xformers 0.0.35's backward refuses; every xformers --grad row errored. Fixed since
#: (parity.backends.xformers.xformers_layout_trained), no entry
XFORMERS_5D_GRAD = "is invalid for input of size|Input tensors have incompatible shapes"
#: the harness's own bug on the H100 on 2026-12-05 (lab/runs/h100-2026-12-05c/README.md): xformers' cutlassB-pt raises
#: this inside the backward for the attn_bias types it does not declare (its bottom-right local masks); read up
#: front since (XformersBackend.grad_unsupported_reason: unsupported), no entry
XFORMERS_BW_BIAS = "Unsupported attn_bias type"
#: the harness's own bug on the H100 on 2026-12-07 (lab/runs/h100-2026-12-07g-models/README.md): the GQA probe called a
#: bfloat16 value one or two ulps off its head's value "a mix of kv heads" (a fixed 0.05 tolerance; XLA rounds the
#: probabilities to bfloat16 before P @ V). Fixed since (parity.maskcheck: q = 0, a tolerance in ulps), no entry;
#: :func:`_gqa_within_ulps` checks every quoted value range is within two bfloat16 ulps of the expected head's value
GQA_MIX = re.compile(r"query head \d+ used a mix of kv heads \(values ([-\d.e+]+)\.\.([-\d.e+]+)\), expected kv head (\d+)")


def _gqa_within_ulps(row) -> bool:
    """A ``gqa``-only bfloat16 failure whose every quoted head read its own kv head's value (kv head k: k + 1) within
    two ulps of bfloat16 at that value (the words print three digits: half a unit of the last one is allowed too)."""
    if row["reasons"] != "gqa" or row["dtype"] != "bfloat16":
        return False
    found = GQA_MIX.findall(str(row["gqa_detail"] or ""))
    if not found:
        return False
    for lo, hi, head in found:
        want = int(head) + 1
        ulp = float(dtype_ulp(torch.tensor(float(want)), torch.bfloat16))  # the probe's own measure of an ulp
        slack = 2 * ulp + 0.5 * 10 ** (math.floor(math.log10(want)) - 2)
        if not (abs(float(lo) - want) <= slack and abs(float(hi) - want) <= slack):
            return False
    return True


def test_only_the_named_runs_lack_their_environment():
    missing = {str(p.relative_to(RUNS)) for p in _RUN_FOLDERS if not (p / "environment.json").exists()}
    assert missing == NO_ENVIRONMENT


def _raw_failing(df):
    return df[df["raw_verdict"].isin(["fail", "error", "crash", "timeout"])]


def _no_mask_evidence(bad):
    """Failing rows an entry would explain but for the mask probe's words (parity/expect.py, "mask evidence"): the
    probe did not run there (too many passes at their length), they failed on values, and ``unconfirmed_id`` names
    an entry that asks for mask words: failures, counted apart, never expected."""
    named = bad["unconfirmed_id"].fillna("") != ""
    entries = {e.id: e for e in load().entries}
    for _, r in bad[named].iterrows():
        e = entries[r["unconfirmed_id"]]
        assert r["verdict"] == "fail" and r["mask_check"] == "not_run" and e.needs_mask, (r["backend"], r["case_id"])
        assert set(r["reasons"].split()) & set(expect.VALUE_REASONS), (r["backend"], r["case_id"], r["reasons"])
    return named


@pytest.mark.parametrize("folder", GPU_RUNS, ids=lambda p: str(p.relative_to(RUNS)))
def test_committed_gpu_runs_rejudged(folder):
    """Every failing row of every committed GPU run is a known divergence, a row the runs' notes name, or a
    failure an entry would explain but whose mask probe did not run (no mask evidence); no passing row of them
    contradicts a strict entry. (FA4's own d = 72 refusal has no entry on purpose.)"""
    df = load_run(folder, load(), rejudge=True).df
    bad = _raw_failing(df)
    bad = bad[~_no_mask_evidence(bad)]
    grad_detail = bad["grad_detail"].fillna("")
    sticky = bad["detail"].str.contains(STICKY_COLLATERAL)  # two of them match the head-dim-33 entry (README there)
    nan_budget = grad_detail.str.contains(NAN_GRAD_BUDGET, regex=False) & ~bad["reasons"].str.contains("max_err")
    xf_grad = bad["backend"].str.startswith("xformers-") & grad_detail.str.contains(f"{XFORMERS_5D_GRAD}|{XFORMERS_BW_BIAS}")
    gqa_ulps = bad.apply(_gqa_within_ulps, axis=1).astype(bool) if len(bad) else bad["verdict"].eq("")
    refusals = (
        bad["detail"].str.contains(FA4_REFUSAL, regex=False)
        | bad["detail"].str.contains(XFORMERS_REFUSAL, regex=False)
        | bad["detail"].str.contains(JAX_UNALIGNED, regex=False)
        | bad["detail"].str.contains(FLASHINFER_REFUSAL, regex=False)
        | sticky
        | (bad["backend"].eq("vllm-fa2-cuda") & bad["detail"].str.contains(CONTENDED_TIMEOUT, regex=False))
        | (bad["backend"].str.startswith("flashinfer-") & bad["detail"].str.contains(JIT_CONTENDED_TIMEOUT, regex=False))
        | (bad["backend"].eq("flex-cuda") & bad["detail"].str.contains(LAB_CC, regex=False))
        | nan_budget
        | xf_grad
        # a backend's row that ran out of device memory at a real model's length (h100-2026-12-06-models: dense
        # SDPA MATH / XLA scores at 32k, XLA's autotuner): the card's limit, recorded with its estimate, no divergence
        | bad["detail"].str.startswith("out of memory: ")
        | gqa_ulps
    )
    assert (bad[~refusals]["verdict"] == "expected").all(), bad[~refusals & (bad["verdict"] != "expected")][["backend", "case_id"]]
    assert bad[refusals & ~sticky & ~nan_budget & ~xf_grad & ~gqa_ulps]["verdict"].isin(["error", "timeout"]).all()
    assert not (df["verdict"] == "unexpected-pass").any(), df[df["verdict"] == "unexpected-pass"][["backend", "expected_id", "case_id"]]
    assert (df[df["raw_verdict"] == "pass"]["verdict"] == "pass").all()


#: issue 48's comparison (lab/rejudge_committed.py --compare): the known-divergence file before matching by mechanism,
#: and every committed row whose judgement it changed, with the words that decided it
MECHANISM = RUNS / "rejudge-mechanism-2026-12-06"


def _compared(folder: Path) -> bool:
    """The run was committed when the comparison was made (its top folder dated 2026-12-06 or before, or undated): a
    later run is judged by today's entries alone (the tests above), and entries added since would show as changes."""
    m = re.search(r"20\d\d-\d\d-\d\d", folder.relative_to(RUNS).parts[0])
    return m is None or m.group(0) <= "2026-12-06"


@pytest.mark.slow  # every committed run judged twice (about 60 s on a 2-core machine)
@pytest.mark.parametrize("folder", [p for p in _RUN_FOLDERS if _compared(p)], ids=lambda p: str(p.relative_to(RUNS)))
def test_the_committed_mechanism_rejudge_is_what_the_code_gives(folder):
    """lab/runs/rejudge-mechanism-2026-12-06/changes.csv lists, for this run, exactly the rows whose judgement the
    file before (before.toml) and today's file give differently; and no row that was expected is a failure now
    without its reason: each such row names the entry that would explain it (no mask evidence)."""
    import csv

    lab = _lab_rejudge()
    got = lab.changed_rows(folder, RUNS, str(MECHANISM / "before.toml"), str(expect.DEFAULT_FILE))
    rel = folder.relative_to(RUNS).as_posix()
    with (MECHANISM / "changes.csv").open(newline="") as fh:
        want = [r for r in csv.DictReader(fh) if r["run"] == rel]
    assert [(r["backend"], r["case_id"], r["before"], r["after"]) for r in got] == [
        (r["backend"], r["case_id"], r["before"], r["after"]) for r in want
    ]
    for r in got:
        if r["before"].startswith("expected") and not r["after"].startswith("expected"):
            assert r["after"].startswith("fail (no mask evidence: ") and r["mask_check"] == "not_run", r


def test_readme_links_each_committed_runs_notes():
    text = (ROOT / "README.md").read_text()
    notes = sorted(p.relative_to(ROOT).as_posix() for p in RUNS.glob("*/README.md"))
    assert notes
    missing = [n for n in notes if f"]({n})" not in text]
    assert not missing, f"README.md does not link these runs' lab notes: {missing}"
