"""The read probe: paged KV positions a real engine holds garbage in hold NaN; a kernel that reads
them and multiplies by zero probability outputs NaN (reason ``reads_outside_window``)."""

import dataclasses

import pytest
import torch

from parity import Case, Window
from parity.api import evaluate
from parity.backends.reference import ReferenceBackend
from parity.case import UNREFERENCED_PAGES, make_inputs, pages_seen
from parity.maskcheck import run_read_probe
from parity.selftest.bugs import EagerAttention, PagedReadsEveryPage, PagedWalksLongestTable

# seq 0: Sk=37 on 5 pages of 8, window 5 keys back from the last 4 rows: pages 0-2 unseen, tail 37..39
CASE = Case(hq=2, hkv=1, head_dim=8, q_lens=[4, 3], k_lens=[37, 20], window=Window(left=5, right=0), page_size=8, dtype="float32")


def test_poisoned_cache_keeps_every_seen_key_and_poisons_the_rest():
    inputs = make_inputs(CASE)
    plain, poisoned = inputs.paged(), dataclasses.replace(inputs, poison_kv=True).paged()
    assert poisoned.k_cache.shape == plain.k_cache.shape and plain.k_cache.shape[0] == 5 + 3 + UNREFERENCED_PAGES
    assert torch.isnan(poisoned.v_cache[-1]).all() and not plain.v_cache[-1].any()  # the null page: NaN in the probe only
    assert plain.block_table[1, 3:].tolist() == [8, 8]  # padding slots point at the null page, not at live page 0
    need = [pages_seen(CASE, 8, b) for b in range(CASE.batch)]
    assert need[0].tolist() == [False, False, False, True, True] and need[1].tolist() == [False, True, True]
    k, v = poisoned.gather(need)  # (total_k, hkv, d): pages no row sees are zeros, never read
    k0, v0 = plain.gather(need)
    assert torch.equal(k, k0) and torch.equal(v, v0) and torch.isfinite(k).all()
    last = int(poisoned.block_table[0, 4])
    assert torch.isnan(poisoned.k_cache[last, 37 - 32 :]).all() and torch.isfinite(poisoned.k_cache[last, : 37 - 32]).all()
    assert not torch.isfinite(poisoned.gather()[1]).all()  # every page of the block table: NaN
    assert torch.isfinite(inputs.k).all()  # contiguous keys stay finite


def test_kernel_reading_every_page_fails_with_reads_outside_window():
    row = evaluate(PagedReadsEveryPage(), CASE)
    assert row["verdict"] == "fail" and row["reasons"].split() == ["reads_outside_window"], row["reasons"]
    assert row["read_check"] == "mismatch" and row["mask_check"] == "ok"
    words = row["read_detail"]
    assert "seq 0 head 0 rows 0..3 (poisoned keys 0..23 on pages 0-2; unused tail 37..39 of page 4)" in words, words


@pytest.mark.parametrize("backend", [ReferenceBackend(), EagerAttention()], ids=["reference", "eager"])
def test_honest_paged_paths_read_only_what_they_need(backend):
    row = evaluate(backend, CASE)
    assert row["verdict"] == "pass" and row["read_check"] == "ok", row["read_detail"]


def test_skipped_probe_says_why():
    dense = dataclasses.replace(CASE, page_size=None)
    row = evaluate(EagerAttention(), dense)
    assert row["read_check"] == "n/a" and "contiguous KV" in row["read_detail"]
    result = run_read_probe(CASE, lambda inp: inp.q, "cpu", paged=False)
    assert result.status == "not_run" and "no paged-KV path" in result.detail
    assert evaluate(EagerAttention(), CASE, probes=False)["read_check"] == "not_run"


# decode against a padded cache (cache_seqlens / seqused_k): Sk 37 and 20 in a cache of 48 slots
DECODE = Case(hq=2, hkv=1, head_dim=8, q_lens=[1, 1], k_lens=[37, 20], window=Window(left=5, right=0), dtype="float32")


def test_padded_cache_poisons_only_the_slots_past_each_used_length():
    inputs = make_inputs(DECODE)
    plain, poisoned = inputs.padded(), dataclasses.replace(inputs, poison_kv=True).padded()
    assert plain.k_cache.shape == poisoned.k_cache.shape == (2, 48, 1, 8)
    for b, n in enumerate([37, 20]):
        assert torch.equal(poisoned.k_cache[b, :n], plain.k_cache[b, :n]) and torch.isfinite(poisoned.v_cache[b, :n]).all()
        assert torch.isnan(poisoned.k_cache[b, n:]).all() and torch.isnan(poisoned.v_cache[b, n:]).all()
    assert poisoned.seqlens_k.tolist() == [37, 20]


def test_decode_reading_the_cache_capacity_fails_with_reads_outside_window():
    from parity.selftest.bugs import DecodeReadsCacheCapacity

    row = evaluate(DecodeReadsCacheCapacity(), DECODE)
    assert row["verdict"] == "fail" and row["reasons"].split() == ["reads_outside_window"], row["reasons"]
    words = row["read_detail"]
    assert "cache slots past the used length" in words, words
    assert "seq 0 head 0 rows 0 (poisoned slots 37..47 past its used length 37)" in words, words
    honest = evaluate(EagerAttention(), DECODE)
    assert honest["verdict"] == "pass" and honest["read_check"] == "ok", honest["read_detail"]
    assert "39 cache slots past the sequences' used lengths" in honest["read_detail"]


# -- long paged caches and padding slots (issue 49) -----------------------------------------------------------------


def test_padding_slots_are_told_from_pages_outside_the_window():
    # seq 1 has 3 pages of the table's 5: slots 3..4 are padding and name the null page (NaN in the probe)
    row = evaluate(PagedWalksLongestTable(), CASE)
    assert row["verdict"] == "fail" and row["reasons"].split() == ["reads_outside_window"], row["reasons"]
    words = row["read_detail"]
    assert "rows read a padding slot" in words and "seq 1 head 0 rows 0..2 (padding slots 3..4 of its block table" in words, words
    assert "pages outside the window" not in words and "seq 0" not in words, words
    both = evaluate(_ReadsEveryPageAndWalksTheTable(), CASE)["read_detail"]
    assert "rows read a padding slot" in both and "rows read NaN-poisoned pages outside the window: seq 0" in both, both


class _ReadsEveryPageAndWalksTheTable(PagedWalksLongestTable):
    """Both read bugs at once: the probe's words name both parts."""

    name = "bug-reads-every-page-and-walks-the-table"
    pages_to_load = PagedReadsEveryPage.pages_to_load


def test_quick_profile_holds_long_ragged_paged_caches():
    from parity.strategies import PROFILES, generate, long_paged_cases

    quick = generate(PROFILES["quick"], 0, long_len=2048)
    long = [c for c in quick if c.page_size is not None and max(c.k_lens) >= 2000]
    assert long and {max(c.q_lens) == 1 for c in long} == {True, False}  # decode and chunked prefill
    for c in long:
        pages = [-(-sk // c.page_size) for sk in c.k_lens]
        assert len(set(pages)) == len(pages) > 1  # ragged block tables: padding slots
        assert (~pages_seen(c, c.page_size, 0)).sum() > 1  # whole pages outside the window
    assert max(max(c.k_lens) for c in long_paged_cases(16384)) >= 4000  # the GPU profiles' 4k caches


LONG = Case(hq=2, hkv=1, head_dim=16, q_lens=[2, 1], k_lens=[1100, 90], window=Window(left=40, right=0), page_size=64, dtype="float32")


@pytest.mark.parametrize("case", [LONG, CASE], ids=["long", "short"])
def test_long_path_reading_from_page_zero_fails_only_above_1k_keys(case):
    from parity.selftest.bugs import PagedLongPathReadsFromPageZero
    from parity.selftest.honest import PagedLongPath

    row = evaluate(PagedLongPathReadsFromPageZero(), case)
    if case is CASE:
        assert row["verdict"] == "pass", row["read_detail"]  # under 1k keys: the honest path
        return
    assert row["verdict"] == "fail" and row["reasons"].split() == ["reads_outside_window"], row["reasons"]
    words = row["read_detail"]
    assert "rows read NaN-poisoned pages outside the window: seq 0 head 0 rows 0..1 (poisoned keys 0..1023 on pages 0-15" in words
    for honest in (PagedLongPath(), ReferenceBackend()):
        ok = evaluate(honest, case)
        assert ok["verdict"] == "pass" and ok["read_check"] == "ok", ok["read_detail"]
