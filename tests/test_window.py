import pytest
import torch

from parity import SpecError, Window


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
