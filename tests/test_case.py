import shlex

import pytest

from parity import Case, SpecError, Window, make_inputs


def base(**kw):
    args = dict(q_lens=(5, 3), k_lens=(9, 3), hq=4, hkv=2, head_dim=8, dtype="bf16", window=Window(2, 0), seed=7)
    args.update(kw)
    return Case(**args)


def test_json_roundtrip_and_id_stable():
    c = base(softcap=5.0, scale=0.5)
    again = Case.from_json(c.to_json())
    assert again == c and again.case_id == c.case_id
    assert c.dtype == "bfloat16"  # alias normalised


def test_repro_command_rebuilds_the_case():
    c = base()
    argv = shlex.split(c.repro("flex"))
    assert argv[:6] == ["python", "-m", "parity", "run", "--backend", "flex"]
    assert Case.from_json(argv[argv.index("--case") + 1]) == c


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"hq": 6, "hkv": 4}, r"hq \(6\) must be divisible by Case.hkv \(4\)"),
        ({"q_lens": (5,)}, "one entry per sequence"),
        ({"q_lens": (0, 3)}, "q_lens entries must be ints >= 1"),
        ({"dtype": "int8"}, "Case.dtype"),
        ({"softcap": -1.0}, "Case.softcap"),
        ({"scale": float("nan")}, "Case.scale"),
        ({"page_size": 0}, "Case.page_size"),
        # what JSON can name but a tensor cannot hold: refused naming the field, not a TypeError / OverflowError traceback
        ({"dtype": ["x"]}, "Case.dtype"),
        ({"dtype": "float16", "kv_dtype": []}, "Case.kv_dtype"),
        ({"q_lens": (2**63,), "k_lens": (1,)}, r"Case.q_lens entries .* at most 2\*\*63 - 1"),
        ({"seed": 10**23}, r"Case.seed must be at most 2\*\*63 - 1"),
        ({"chunk": 2**63}, r"Case.chunk must be at most"),
        ({"hq": 2**64, "hkv": 1}, r"Case.hq must be at most"),
        ({"window": {"left": 2**63}}, r"Window.left must be at most 2\*\*63 - 1"),
        ({"window": Window(2**63 - 1, 2**63 - 1), "chunk": 2**63 - 1, "seed": 2**63 - 1}, None),  # the largest int64s are valid
        ({"q_lens": (5,), "k_lens": (2,), "window": Window(0, 0, "top_left"), "hq": 2, "hkv": 2}, None),
    ],
)
def test_validation(kw, match):
    if match is None:
        base(**kw)  # valid: rows 0..1 see a key
        return
    with pytest.raises(SpecError, match=match):
        base(**kw)


def test_every_case_has_a_visible_key():
    # non-negative sides always keep the aligned diagonal key j = i + d, so no band is empty
    c = Case(q_lens=(3,), k_lens=(1,), hq=1, hkv=1, head_dim=4, window=Window(0, 0), seed=0)
    assert c.band_counts() == [1]


def test_unknown_and_missing_fields():
    with pytest.raises(SpecError, match="unknown field"):
        Case.from_dict({"q_lens": [1], "k_lens": [1], "hq": 1, "hkv": 1, "head_dim": 4, "heads": 2})
    with pytest.raises(SpecError, match="missing required"):
        Case.from_dict({"q_lens": [1]})
    with pytest.raises(SpecError, match="not valid JSON"):
        Case.from_json("{q_lens: 1}")


def test_families():
    assert base(q_lens=(1, 1), k_lens=(50, 50)).family == "decode"
    assert base(q_lens=(9, 9), k_lens=(9, 9)).family == "dense"
    assert base(q_lens=(9, 3), k_lens=(9, 3)).family == "varlen"
    assert base(q_lens=(9, 9), k_lens=(20, 20)).family == "chunked"
    assert base(q_lens=(9, 9), k_lens=(5, 5)).family == "prefill_long_q"
    assert base(page_size=16).family == "paged"


def test_inputs_are_deterministic_and_packed():
    c = base()
    a, b = make_inputs(c), make_inputs(c)
    assert a.q.shape == (8, 4, 8) and a.k.shape == (12, 2, 8)
    assert a.cu_seqlens_q.tolist() == [0, 5, 8] and a.cu_seqlens_k.tolist() == [0, 9, 12]
    assert (a.q == b.q).all() and (a.v == b.v).all()
    assert a.q.dtype == c.torch_dtype


def test_paged_cache_round_trips_and_permutes_pages():
    c = base(q_lens=(1, 3), k_lens=(37, 5), page_size=16)
    inp = make_inputs(c)
    paged = inp.paged()
    assert paged.k_cache.shape == (5, 16, 2, 8) and paged.block_table.shape == (2, 3)  # 4 pages and the null page
    assert paged.block_table[1, 1:].tolist() == [4, 4] and not paged.k_cache[4].any()  # padding slots: the null page
    k, v = paged.gather()
    assert (k == inp.k).all() and (v == inp.v).all()
    assert paged.block_table[0].tolist() != [0, 1, 2]  # seeded permutation, not identity
