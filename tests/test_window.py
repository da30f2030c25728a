import pytest
import torch

from parity import Case, SpecError, Window


def grid(rows):
    return torch.tensor([[c == "x" for c in r.replace(" ", "")] for r in rows])


# The truth tables of parity/window.py's docstring, spelled out.
TABLES = [
    (Window(1, 0), 4, 4, ["x...", "xx..", ".xx.", "..xx"]),
    (Window.tokens(3), 4, 4, ["x...", "xx..", "xxx.", ".xxx"]),
    (Window.causal(), 4, 4, ["x...", "xx..", "xxx.", "xxxx"]),
    (Window(1, 0), 2, 4, [".xx.", "..xx"]),
    (Window(1, 0, "top_left"), 2, 4, ["x...", "xx.."]),
    (Window(0, 0), 3, 3, ["x..", ".x.", "..x"]),
    (Window(1, 1), 3, 3, ["xx.", "xxx", ".xx"]),
    (Window(None, 1), 3, 3, ["xx.", "xxx", "xxx"]),
    (Window.full(), 2, 3, ["xxx", "xxx"]),
    # Sq > Sk, bottom-right: the first rows see no key
    (Window.causal(), 3, 2, ["..", "x.", "xx"]),
]


@pytest.mark.parametrize("window,sq,sk,rows", TABLES, ids=lambda x: str(x) if not isinstance(x, list) else "")
def test_truth_tables(window, sq, sk, rows):
    assert torch.equal(window.mask(sq, sk), grid(rows))


@pytest.mark.parametrize("window", [Window(2, 0), Window(0, 3), Window(None, 0), Window(3, None, "top_left"), Window(1, 1)])
@pytest.mark.parametrize("sq,sk", [(1, 7), (5, 5), (7, 3), (4, 9)])
def test_scalar_rule_matches_mask(window, sq, sk):
    m = window.mask(sq, sk)
    for i in range(sq):
        for j in range(sk):
            assert bool(m[i, j]) == window.visible(i, j, sq, sk), (i, j)


def test_band_is_inclusive_and_clipped():
    lo, hi = Window(2, 1).band(5, 5)
    assert lo.tolist() == [0, 0, 0, 1, 2]
    assert hi.tolist() == [1, 2, 3, 4, 4]


def test_tokens_convention():
    assert Window.tokens(1) == Window(0, 0)
    assert Window.tokens(4096) == Window(4095, 0)
    with pytest.raises(SpecError, match="w >= 1"):
        Window.tokens(0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"left": -1}, "sentinel"),
        ({"right": -3}, r"Window.right must be >= 0"),
        ({"left": 1.5}, "Window.left must be a non-negative int"),
        ({"left": True}, "Window.left"),
        ({"align": "center"}, "Window.align"),
    ],
)
def test_validation_names_field_and_value(kwargs, match):
    with pytest.raises(SpecError, match=match):
        Window(**kwargs)


def test_dict_roundtrip_and_unknown_field():
    w = Window(3, None, "top_left")
    assert Window.from_dict(w.to_dict()) == w
    with pytest.raises(SpecError, match="unknown field"):
        Window.from_dict({"left": 1, "size": 2})


@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
@pytest.mark.parametrize("sq,sk", [(4, 6), (6, 4)])
def test_sides_as_wide_as_int64_reach_every_key(sq, sk, align):
    """A side up to 2**63 - 1 is valid and means what None means on that side: ``i + d + right`` wrapped in
    int64, so every row of Window(0, 2**63 - 1) saw no key in the reference (and in SDPA's and flex's masks)."""
    big = 2**63 - 1
    for wide, plain in ((Window(0, big, align), Window(0, None, align)), (Window(big, 0, align), Window(None, 0, align))):
        assert torch.equal(wide.mask(sq, sk), plain.mask(sq, sk)), wide
        m = wide.mask(sq, sk)
        assert all(bool(m[i, j]) == wide.visible(i, j, sq, sk) for i in range(sq) for j in range(sk))


WIDE = [(Window(0, 2**63 - 1), None), (Window(2**63 - 1, 0, "top_left"), None)]


@pytest.mark.parametrize(
    "backend,window,chunk",
    [(b, w, c) for b in ("reference", "sdpa", "flex") for w, c in WIDE] + [(b, Window(1, 0), 2**63 - 1) for b in ("reference", "flex")],
)
def test_cpu_backends_take_int64_wide_windows_and_chunks(backend, window, chunk):
    """The CPU backends' own translations (SDPA's boolean mask, flex's mask_mod numbers) overflowed on a side
    or chunk near 2**63 (a wrapped band: every row saw no key, a mask-mismatch ``fail``; flex's int32 tensor of
    a chunk: an ``error``): they see the spec's keys and pass."""
    from parity.api import evaluate

    case = Case(q_lens=(5,), k_lens=(7,), hq=2, hkv=1, head_dim=8, dtype="float32", window=window, chunk=chunk)
    row = evaluate(backend, case)
    assert (row["verdict"], row["mask_check"]) == ("pass", "ok"), (row["verdict"], row["reasons"], row["detail"], row["mask_detail"])
