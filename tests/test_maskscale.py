"""The scaled mask probe (issue 48, item 1): the residue arithmetic checked exhaustively at small moduli
(the table of parity/maskscale.py's docstring), and the probe end to end on backends that see chosen keys."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from parity import Backend, Case, Window, check_mask
from parity import maskscale as ms
from parity.maskcheck import mask_passes, mask_plan, passes_per_call
from parity.selftest.bugs import BUGS, EagerAttention
from parity.selftest.honest import HONEST

# -- the arithmetic ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("d", "sk", "want"), [(128, 131072, (127, 125, 123)), (64, 131072, (63, 61, 59)), (32, 131072, (31, 29, 27, 25))])
def test_moduli_of_real_head_dims(d, sk, want):
    assert ms.moduli(d, sk) == want and ms.covered(want, sk)


@pytest.mark.parametrize("d", [4, 7, 8, 16, 24, 33, 40, 80, 96, 128, 256])
@pytest.mark.parametrize("sk", [100, 2048, 16384, 131072])
def test_moduli_are_pairwise_coprime_and_cover_the_keys_where_d_allows(d, sk):
    mods = ms.moduli(d, sk)
    assert all(2 <= m <= d for m in mods) and len(mods) >= min(3, len(mods))
    assert all(math.gcd(a, b) == 1 for a, b in itertools.combinations(mods, 2))
    assert sum(m % 2 == 0 for m in mods) <= 1  # odd first: an even one only once the odd ones run out
    if d >= 16:
        assert ms.covered(mods, sk) and len(mods) <= 5


def test_readout_values_are_small_integers():
    """Every band of every modulus reads -1, 0 or +1 per channel: exact after dividing by the row's largest."""
    for m in range(1, 10):
        ch, sign = ms.residue_values(m, 4 * m)
        v = torch.zeros(4 * m, m, dtype=torch.long)
        v[torch.arange(4 * m), ch] = sign
        prefix = torch.cat([torch.zeros(1, m, dtype=torch.long), v.cumsum(0)])  # (Sk + 1, m)
        assert torch.equal(prefix.to(torch.int8), ms.state(torch.arange(4 * m + 1), m))
        assert set((prefix[:, None] - prefix[None]).unique().tolist()) <= {-1, 0, 1}


def test_band_pairs_lists_exactly_the_pairs_that_read_so():
    for m in range(1, 13):
        k = torch.arange(2 * m)
        x, a = (t.flatten() for t in torch.meshgrid(k, k, indexing="ij"))
        r = ms.state(x, m) - ms.state(a, m)  # (4m^2, m)
        pairs, zero, valid = ms.band_pairs(r, m)
        assert valid.all() and torch.equal(zero, x == a)
        listed = (pairs == torch.stack([x, a], -1)[:, None]).all(-1).any(-1)
        assert listed[x != a].all()
        for way in range(2):  # each pair listed reads the same
            back = ms.state(pairs[:, way, 0], m) - ms.state(pairs[:, way, 1], m)
            assert torch.equal(back[x != a], r[x != a])
    junk = torch.tensor([[1, 0, 1, 0, 0], [-1, 1, 0, 0, 0], [0, 1, 0, 0, -1]], dtype=torch.int8)  # not G(x) - G(a)
    assert not ms.band_pairs(junk, 5)[2].any()


def _all_bands(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    a, x = torch.tensor([(a, x) for a in range(n) for x in range(a + 1, n + 1)]).T
    return a, x  # bands a..x-1 of 0..n-1


def _reads(mods, a, x) -> torch.Tensor:
    return torch.cat([ms.state(x, m) - ms.state(a, m) for m in mods], 1)  # (n, sum m)


def _blind(m: int, a: int, x: int, a2: int, x2: int) -> bool:
    """The docstring's blind cases of one modulus: edges moved by multiples of 2m, both lengths multiples of 2m, complement."""
    same = (a - a2) % (2 * m) == 0 and (x - x2) % (2 * m) == 0
    zero = (x - a) % (2 * m) == 0 and (x2 - a2) % (2 * m) == 0
    complement = (a2 - x - m) % (2 * m) == 0 and (x2 - a - m) % (2 * m) == 0
    return same or zero or complement


@pytest.mark.parametrize(("mods", "n"), [((7, 5, 3), 102), ((5, 3, 4), 57), ((9, 7, 5), 80), ((11, 9, 7), 64)])
def test_table_two_bands(mods, n):
    """Every pair of distinct bands of 0..n-1 (n < M - min(m)): the passes tell them apart unless every pass is blind
    (and exactly then), and always when one edge is the same or both moved by fewer than min(m) keys."""
    a, x = _all_bands(n)
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(map(bytes, _reads(mods, a, x).numpy())):
        groups.setdefault(key, []).append(i)
    collisions = [(i, j) for g in groups.values() for i, j in itertools.combinations(g, 2)]
    A, X = a.tolist(), x.tolist()
    for i, j in collisions:
        assert all(_blind(m, A[i], X[i], A[j], X[j]) for m in mods)
        assert A[i] != A[j] and X[i] != X[j]
        assert abs(A[i] - A[j]) >= min(mods) or abs(X[i] - X[j]) >= min(mods)
    assert _blind_pairs(mods, a, x) == len(collisions)  # the blind cases are all there is


def _blind_pairs(mods, a: torch.Tensor, x: torch.Tensor) -> int:
    """How many pairs of the bands ``a..x-1`` every modulus is blind to (:func:`_blind`, vectorised)."""
    total = 0
    for i0 in range(0, len(a), 512):
        a1, x1 = a[i0 : i0 + 512, None], x[i0 : i0 + 512, None]  # (c, 1)
        later = torch.arange(i0, i0 + len(a1))[:, None] < torch.arange(len(a))[None, :]  # (c, n): each pair once
        blind = later.clone()
        for m in mods:
            same = ((a1 - a) % (2 * m) == 0) & ((x1 - x) % (2 * m) == 0)
            zero = ((x1 - a1) % (2 * m) == 0) & ((x - a) % (2 * m) == 0)
            complement = ((a - x1 - m) % (2 * m) == 0) & ((x - a1 - m) % (2 * m) == 0)
            blind &= same | zero | complement
        total += int(blind.sum())
    return total


@pytest.mark.parametrize("mods", [(7, 5, 3), (5, 3, 4), (9, 7, 5)])
def test_table_one_run_always_shows(mods):
    """A run of keys added or removed anywhere (an edge moved, a hole, an extra run, an empty band) changes the
    readout by the run's own, which is never 0 for runs shorter than 2M."""
    a, x = _all_bands(2 * math.prod(mods) - 1 if math.prod(mods) < 200 else 200)
    assert (_reads(mods, a, x) != 0).any(1).all()
    assert (_reads(mods, torch.tensor([0]), torch.tensor([2 * math.prod(mods)])) == 0).all()  # 2M keys: blind, as the table says


def test_a_shifted_power_of_two_band_always_shows_with_odd_moduli():
    """Why odd moduli: d = 128 as a modulus reads 0 for every 4096-key band (4096 = 16 x 2 x 128), shifted or not."""
    band = torch.tensor([10_000]), torch.tensor([10_000 + 4096])
    assert (ms.expected(band[0], band[1] - 1, 128) == 0).all()
    mods = ms.moduli(128, 131072)
    for t in (1, 2, 64, 127, 128, 256, 4096, 10_240):
        assert not torch.equal(_reads(mods, *band), _reads(mods, band[0] + t, band[1] + t)), t


@pytest.mark.parametrize(("mods", "n", "d"), [((7, 5, 3), 102, 8), ((5, 3, 4), 57, 6)])
def test_decode_bands_finds_each_band_in_its_blocks(mods, n, d):
    a, x = _all_bands(n)
    block = -(-n // d)
    reads = [ms.state(x, m) - ms.state(a, m) for m in mods]
    got_a, got_x, status = ms.decode_bands(reads, mods, a // block * block, (x - 1) // block * block, block, n)
    exact = status == ms.EXACT
    assert torch.equal(got_a[exact], a[exact]) and torch.equal(got_x[exact], x[exact])
    assert not (status == ms.NO_BAND).any()
    # ambiguous only where another band with the same readouts starts and ends in the same blocks
    sig = _reads(mods, a, x)
    for i in (~exact).nonzero().flatten().tolist():
        twins = (sig == sig[i]).all(1) & (a // block == a[i] // block) & ((x - 1) // block == (x[i] - 1) // block)
        assert twins.sum() > 1
    assert exact.float().mean() > 0.99


# -- the probe, end to end --------------------------------------------------------------------------------


class SeesKeys(Backend):
    """Answers the mask probe (q = 0: the weighted mean of V, sinks included) over the keys ``visible(b, i, lo, hi, sk)``
    returns for row ``i`` of sequence ``b`` (spec band ``lo..hi``) as ``(keys, weights)``; the spec's band by default."""

    name = "test-sees-keys"
    supports_sinks = True

    def visible(self, b, i, lo, hi, sk):
        return list(range(lo, hi + 1)), None

    def run(self, case, inputs, out):
        for b, _, _, v, qs in inputs.sequences():
            sq, sk = qs.stop - qs.start, v.shape[0]
            lo, hi = case.band(sq, sk)
            vx = v.float().repeat_interleave(case.group, dim=1)  # (Sk, hq, d)
            for i in range(sq):
                keys, w = self.visible(b % len(set(range(case.batch))), i, int(lo[i]), int(hi[i]), sk)
                w = torch.ones(len(keys)) if w is None else torch.tensor(w, dtype=torch.float32)
                mass = w.sum() + (inputs.sinks.exp() if inputs.sinks is not None else torch.zeros(case.hq))  # (hq,)
                out[qs.start + i] = ((w[:, None, None] * vx[keys]).sum(0) / mass[:, None]).to(out.dtype) if keys else 0
        return out


class Holey(SeesKeys):
    """Row 3 misses one key in the middle of its band."""

    def visible(self, b, i, lo, hi, sk):
        keys = list(range(lo, hi + 1))
        return ([j for j in keys if j != (lo + hi) // 2] if i == 3 else keys), None


class FarRun(SeesKeys):
    """Row 0 also sees five keys far left of its band."""

    def visible(self, b, i, lo, hi, sk):
        return (list(range(3, 8)) if i == 0 else []) + list(range(lo, hi + 1)), None


class HalfWeight(SeesKeys):
    """The last key of every row weighs half the others."""

    def visible(self, b, i, lo, hi, sk):
        keys = list(range(lo, hi + 1))
        return keys, [1.0] * (len(keys) - 1) + [0.5]


class NanRow(SeesKeys):
    def run(self, case, inputs, out):
        out = super().run(case, inputs, out)
        out[2, 1] = float("nan")
        return out


LONG = Case(q_lens=(6,), k_lens=(700,), hq=2, hkv=1, head_dim=8, dtype="bfloat16", window=Window(40, 2), seed=0)


def test_the_plan_picks_the_full_probe_where_it_is_cheap():
    assert mask_passes(LONG) == 88 and mask_plan(LONG) == ("scaled", 4) and mask_plan(LONG, 88) == ("full", 88)
    tiny = Case(q_lens=(4,), k_lens=(500,), hq=1, hkv=1, head_dim=3, dtype="float32", window=Window(5, 0), seed=0)
    assert mask_plan(tiny)[0] == "not_run" and check_mask(SeesKeys(), tiny).status == "not_run"


def test_honest_keys_pass_and_say_which_probe_ran():
    r = check_mask(SeesKeys(), LONG)
    assert (r.status, r.probe) == ("ok", "scaled"), r.detail
    assert r.detail == "all 12 (head, row) pairs read the spec's band in 4 signed residue passes (mod 7/5/3/8)"
    full = check_mask(SeesKeys(), LONG, max_passes=88)
    assert (full.status, full.probe) == ("ok", "full")


def test_a_hole_is_not_one_band():
    r = check_mask(Holey(), LONG)
    assert r.status == "mismatch" and r.differing_rows == 2, r.detail
    assert r.detail.startswith("visible keys are not one band: 2 of 12 (head, row) pairs differ")
    assert "First: seq 0 head 0 row 3 sees keys 657..699 (not one band: about 42 keys), spec says 657..699" in r.detail


def test_a_far_run_is_not_one_band():
    r = check_mask(FarRun(), LONG)
    assert r.status == "mismatch" and r.differing_rows == 2
    assert "First: seq 0 head 0 row 0 sees keys 3..696 (not one band: about 48 keys), spec says 654..696" in r.detail


def test_partial_weight_is_named():
    r = check_mask(HalfWeight(), LONG)
    assert r.detail.startswith("keys get partial weight (non-uniform softmax over visible keys): 12 of 12"), r.detail
    assert "First: seq 0 head 0 row 0 sees keys 654..696 (non-uniform weights), spec says 654..696" in r.detail


def test_nan_is_named():
    r = check_mask(NanRow(), LONG)
    assert r.status == "mismatch" and r.detail == "mask probe output has NaN/Inf in 1 (head, row) pairs of seq 0"


def test_sinks_do_not_change_the_readout():
    sinks = Case(**{**LONG.to_dict(), "sinks": True, "window": Window(40, 2)})
    assert check_mask(SeesKeys(), sinks).status == "ok"
    r = check_mask(Holey(), sinks)
    assert "about 42 keys" in r.detail  # the count read from 1 / (n + exp(sink)), the sink taken off


def _calls(backend_cls):
    class Counting(backend_cls):
        calls = 0

        def run(self, case, inputs, out):
            type(self).calls += 1
            return super().run(case, inputs, out)

    return Counting


class BandEdges(Backend):
    """The probe's answer (q = 0: the mean of V over each row's band, its left edge ``shift_left`` keys further
    left), summed row by row over the band alone: fast for decode rows at 131072 keys."""

    name = "test-band-edges"
    shift_left = 0

    def run(self, case, inputs, out):
        for _, _, _, v, qs in inputs.sequences():
            lo, hi = case.band(qs.stop - qs.start, v.shape[0])  # (Sq,), (Sq,)
            for i, (a, z) in enumerate(zip((lo - self.shift_left).clamp(min=0).tolist(), hi.tolist())):
                mean = v[a : z + 1].float().sum(0) / (z - a + 1)  # (hkv, d), exact sums of 0 / +-1
                out[qs.start + i] = mean.repeat_interleave(case.group, dim=0).to(out.dtype)  # (hq, d)
        return out


class BandOneWider(BandEdges):
    shift_left = 1


DECODE_128K = Case(q_lens=(1,), k_lens=(131072,), hq=32, hkv=8, head_dim=128, dtype="bfloat16", window=Window(4095, 0), seed=0)


def test_decode_over_131072_keys_takes_one_call_and_four_on_a_mismatch():
    ok = _calls(BandEdges)()
    r = check_mask(ok, DECODE_128K)
    assert (r.status, r.probe, ok.calls) == ("ok", "scaled", 1), r.detail
    assert passes_per_call(DECODE_128K, passes=3) == 3
    bad = _calls(BandOneWider)()
    r = check_mask(bad, DECODE_128K)
    assert bad.calls == 4  # the residues (one batched call), the block pass, two refining passes
    assert r.detail.startswith("window is one token wider on the left: 32 of 32 (head, row) pairs differ")
    assert "First: seq 0 head 0 row 0 sees keys 126975..131071, spec says 126976..131071" in r.detail
    assert "a block pass of 1024-key blocks and 2 refining passes" in r.detail
    assert "32 of 32 described pairs decoded to one band" in r.detail


def test_a_backend_declining_the_batch_gets_one_pass_per_call():
    class NoBatch(_calls(BandEdges)):
        def unsupported_reason(self, case):
            return "one sequence only" if case.batch > 1 else None

    b = NoBatch()
    assert check_mask(b, DECODE_128K).status == "ok" and b.calls == 3


SCALED_CASES = [
    Case(q_lens=(20, 3), k_lens=(70, 3), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(5, 2), seed=1),
    Case(q_lens=(1, 1, 1), k_lens=(90, 17, 40), hq=2, hkv=1, head_dim=8, dtype="float16", window=Window.tokens(9), seed=2),
    Case(q_lens=(5, 9), k_lens=(33, 50), hq=2, hkv=2, head_dim=8, dtype="float32", window=Window(6, 1), page_size=16, seed=4),
    Case(q_lens=(40,), k_lens=(24,), hq=4, hkv=2, head_dim=32, dtype="bfloat16", window=Window(8, 0), seed=5),
    Case(q_lens=(64,), k_lens=(200,), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(30, 0), sinks=True, seed=7),
    Case(q_lens=(64,), k_lens=(200,), hq=4, hkv=2, head_dim=16, dtype="bfloat16", window=Window(None, 0), chunk=48, seed=8),
    Case(q_lens=(33,), k_lens=(130,), hq=2, hkv=1, head_dim=16, dtype="bfloat16", window=Window(20, 3), kv_dtype="float8_e4m3fn", seed=9),
]


@pytest.mark.parametrize("case", SCALED_CASES, ids=lambda c: c.summary())
def test_planted_bugs_read_as_the_full_probe_and_honest_variants_pass(case):
    """Forced onto the scaled probe (max_passes 0), every planted bug gets the full probe's verdict, count and words
    (the scaled one adds what it measured), and every honest variant passes."""
    for v in HONEST:
        if not v.backend().unsupported_reason(case):
            r = check_mask(v.backend(), case, max_passes=0)
            assert (r.status, r.probe) == ("ok", "scaled"), f"{v.name}: {r.detail}"
    for bug in BUGS:
        if bug.backend().unsupported_reason(case):
            continue
        full, scaled = check_mask(bug.backend(), case), check_mask(bug.backend(), case, max_passes=0)
        assert (scaled.status, scaled.differing_rows) == (full.status, full.differing_rows), bug.name
        if full.status == "mismatch":
            assert scaled.detail.split(" [scaled probe: ")[0] == full.detail, bug.name


@pytest.mark.parametrize("case", SCALED_CASES[:3], ids=lambda c: c.summary())
def test_scaled_probe_batched_agrees_with_one_pass_per_call(case):
    for backend in (EagerAttention, *(b.backend for b in BUGS[:6])):
        batched = check_mask(backend(), case, max_passes=0)
        single = check_mask(backend(), case, max_passes=0, batch_passes=False)
        assert (batched.status, batched.detail) == (single.status, single.detail)
