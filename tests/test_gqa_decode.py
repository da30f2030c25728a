"""The GQA probe's decode where its output lies (issue 47/48's models cost, lab/runs/cpu-models-cost-2026-12-07): a
passing output is checked on its own device in float32 chunks, and any other answer is the whole float64 decode's,
word for word."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from parity import Case, Window
from parity import maskcheck as mc
from parity.verdict import POISON

CASES = [
    Case(q_lens=(40,), k_lens=(40,), hq=8, hkv=2, head_dim=8, dtype="bfloat16", window=Window(5, 0), seed=0),
    Case(q_lens=(3, 1, 7), k_lens=(9, 20, 7), hq=6, hkv=3, head_dim=16, dtype="float16", window=Window(2, 1), seed=1),
    Case(q_lens=(12,), k_lens=(4,), hq=4, hkv=2, head_dim=8, dtype="float32", window=Window(1, 0, "top_left"), seed=2),
]


def _honest(case: Case) -> torch.Tensor:
    heads = (torch.arange(case.hq) // case.group + 1).to(case.torch_dtype)  # (hq,)
    return heads[None, :, None].expand(sum(case.q_lens), case.hq, case.head_dim).contiguous()  # (total_q, hq, d)


def _whole(case: Case, out: torch.Tensor, monkeypatch) -> mc.ProbeResult:
    """The decode as it was: the whole output widened on the CPU (the fast path turned off)."""
    with monkeypatch.context() as m:
        m.setattr(mc, "_gqa_all_ok", lambda case, out: None)
        return mc.decode_gqa(case, out)


def _corruptions(case: Case):
    yield "honest", lambda o: o
    yield "other head", lambda o: o.index_fill(1, torch.tensor([1]), 1.0)
    yield "mixed", lambda o: o.index_fill(1, torch.tensor([case.hq - 1]), 1.5)
    yield "nan", lambda o: o.index_fill(0, torch.tensor([0]), float("nan"))
    yield "inf", lambda o: o.index_fill(0, torch.tensor([sum(case.q_lens) - 1]), float("inf"))
    yield "one head unwritten", lambda o: o.index_fill(1, torch.tensor([0]), POISON)
    yield "nothing written", lambda o: torch.full_like(o, POISON)
    at = (torch.tensor([2]), torch.tensor([1]), torch.tensor([3]))
    yield "one row poisoned in one dim", lambda o: o.index_put(at, torch.tensor(POISON, dtype=o.dtype))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.summary())
def test_every_answer_is_the_whole_decodes(case, monkeypatch):
    for name, corrupt in _corruptions(case):
        out = corrupt(_honest(case))
        assert mc.decode_gqa(case, out) == _whole(case, out, monkeypatch), name


def test_chunks_meet_every_row(monkeypatch):
    """A wrong head in the last row of the last chunk is seen with chunks of one row."""
    case = CASES[0]
    monkeypatch.setattr(mc, "GQA_CHUNK_ELEMENTS", 1)
    out = _honest(case)
    assert mc.decode_gqa(case, out).status == "ok"
    out[-1, 3] = 4.0  # query head 3 of the last row reads kv head 3
    assert mc.decode_gqa(case, out).status == "mismatch"


class _Widening(TorchFunctionMode):
    """Records the element counts of every float64 tensor made and of every move to the CPU (``.cpu()``, ``.to("cpu")``)."""

    def __init__(self):
        super().__init__()
        self.float64, self.to_cpu = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        res = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if isinstance(res, torch.Tensor):
            if res.dtype == torch.float64:
                self.float64.append(res.numel())
            to_cpu = any(str(a) == "cpu" for a in (*args[1:], (kwargs or {}).get("device")))
            if name == "cpu" or (name == "to" and to_cpu):
                self.to_cpu.append(res.numel())
        return res


def test_a_passing_output_is_neither_widened_nor_copied_whole():
    """The passing GQA probe (every row of a models run) makes no float64 copy of the output and no copy of it to
    the CPU: h100-2026-12-06b-models spent 405 s there (8 s a 32k prefill row), 22% of its workers' time."""
    case = Case(q_lens=(64,), k_lens=(64,), hq=8, hkv=2, head_dim=16, dtype="bfloat16", window=Window(7, 0), seed=0)
    out = _honest(case)
    with _Widening() as seen:
        assert mc.decode_gqa(case, out).status == "ok"
    assert not [n for n in seen.float64 if n >= out.numel()], seen.float64
    assert not [n for n in seen.to_cpu if n >= out.numel()], seen.to_cpu
