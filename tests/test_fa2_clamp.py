"""flash-attn 2's window clamp (Dao-AILab/flash-attention#895): the planted bug that models it
(parity.selftest.bugs.Fa2RightSideClampedToSk) predicts the committed H200 rows of every FA2 build,
and the quick profile, which `nox -s gpu` runs, reaches it on every FA2-family backend."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from parity import Case, backends
from parity.selftest.bugs import EagerAttention, Fa2RightSideClampedToSk
from parity.strategies import generate, profile

ROOT = Path(__file__).resolve().parents[1]
#: every backend that runs a flash-attn 2 build
FA2_FAMILY = ("torch-fa2-cuda", "torch-fa2-varlen-cuda", "xformers-flash-cuda", "vllm-fa2-cuda", "fa2-cuda", "fa2-kvcache-cuda")
HALF = ("float16", "bfloat16")  # vLLM's FA2 and flash-attn take no float32


def clamp_changes_mask(case: Case) -> bool:
    """Does the clamp give some prefill row other keys than the spec? (Decode rows: Sq = 1 <= Sk.)"""
    bug, honest = Fa2RightSideClampedToSk(), EagerAttention()
    return any(
        bool((bug.prefill_mask(case, sq, sk) != honest.prefill_mask(case, sq, sk)).any())  # (Sq, Sk)
        for sq, sk in zip(case.q_lens, case.k_lens)
        if sq > sk
    )


#: the FA2-family rows of the lab's GPU runs whose mask was probed (tests/fixtures/make_lab_rows.py): every one
#: whose mask differed, and as many that matched (those with a sequence of more queries than keys first)
FA2_MASKS = ROOT / "tests" / "fixtures" / "lab-rows" / "fa2-masks.csv.gz"


def test_the_clamp_model_predicts_every_committed_fa2_mask():
    """On the probed FA2-family rows of the lab's GPU runs, the model's mask differs from the spec exactly
    where the kernel's did: no miss, no false alarm."""
    rows = pd.read_csv(FA2_MASKS)
    predicted = rows["case_json"].map(lambda j: clamp_changes_mask(Case.from_json(j)))
    seen = rows["mask_check"].eq("mismatch")
    wrong = rows[predicted != seen]
    assert wrong.empty, f"{len(wrong)} rows the clamp model gets wrong:\n{wrong[['backend', 'case_id', 'mask_check']]}"
    assert seen.sum() >= 8 * 3 and set(rows[seen]["backend"]) >= {"torch-fa2-cuda", "vllm-fa2-cuda", "xformers-flash-cuda"}


@pytest.mark.parametrize("name", FA2_FAMILY)
def test_quick_profile_reaches_the_clamp_on_every_fa2_backend(name):
    """A green gate must not hide the clamp: in each half dtype, the quick profile holds cases the
    backend accepts on which the clamp drops keys on the right and on which it drops the window."""
    backend = backends.get(name)
    hits = [c for c in generate(profile("quick")) if backend.unsupported_reason(c) is None and clamp_changes_mask(c)]
    for dtype in HALF:
        windows = {(c.window.left is None) for c in hits if c.dtype == dtype}
        assert windows == {True, False}, f"{name} {dtype}: the quick profile reaches the FA2 clamp in {len(hits)} cases {windows}"
