"""The scaled mask probe (issue 48, item 1): the residue arithmetic checked exhaustively at small moduli
(the table of parity/maskscale.py's docstring)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from parity import maskscale as ms

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
