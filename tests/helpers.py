"""Test-only backends: honest noise, an unwritten row, a wrong SDPA, known-divergence fixtures, the reference
declared on CUDA that records its calls (:class:`RecordingOnCuda`).

The planted window / alignment / decode / GQA / empty-row bugs are :mod:`parity.selftest.bugs`'
(``WindowOneWider``, ``TopLeftAlignment``, ``DecodeDropsWindow``, ``GqaRepeatNotInterleave``,
``NanOnEmptyRows``); tests import them from there."""

from __future__ import annotations

import dataclasses

import torch

from parity import Backend, Case, Inputs, Window
from parity.backends.reference import ReferenceBackend
from parity.backends.sdpa import SdpaBackend
from parity.reference import attention_reference


def one_wider_on_the_left(w: Window) -> Window:
    """The window a kernel with the classic off-by-one sees: one key more on the left."""
    return w if w.left is None else Window(w.left + 1, w.right, w.align)


class _Wrapped(Backend):
    """Runs the float64 reference on a modified case: the classic way a window bug looks."""

    device = "cpu"

    def seen_window(self, case: Case) -> Window:
        return case.window

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        bad = dataclasses.replace(case, window=self.seen_window(case))
        out.copy_(attention_reference(dataclasses.replace(inputs, case=bad)))
        return out


class Noisy(_Wrapped):
    """Honest but rounds differently: relative noise far below one ulp of the dtype."""

    name = "honest-noisy"

    def run(self, case, inputs, out):
        ref = attention_reference(inputs)
        gen = torch.Generator().manual_seed(case.seed + 1)
        eps = torch.finfo(case.torch_dtype).eps
        out.copy_(ref * (1 + 0.25 * eps * torch.randn(ref.shape, generator=gen, dtype=torch.float64)))
        return out


class SkipsLastRow(_Wrapped):
    name = "bug-unwritten"

    def run(self, case, inputs, out):
        full = attention_reference(inputs)
        out[:-1] = full[:-1]
        return out


class SdpaWindowOneWider(SdpaBackend):
    """Real SDPA with the classic off-by-one in its mask: one key more on the left. Its standalone
    repro (``repro_call``, inherited) builds the same wrong mask, so the script diverges too."""

    name = "bug-sdpa-window-one-wider"

    def mask_window(self, case: Case) -> Window:
        return one_wider_on_the_left(case.window)


class EmptyRowsSeeEveryKey(_Wrapped):
    """Wrong in a known way (SDPA's cuDNN kernel on the H200): a query row whose window holds
    no key attends to every key instead of returning 0. tests/test_expect.py gives it an entry."""

    name = "bug-empty-rows-see-every-key"

    def run(self, case, inputs, out):
        super().run(case, inputs, out)
        full = attention_reference(dataclasses.replace(inputs, case=dataclasses.replace(case, window=Window.full())))
        cq, _ = case.cu_seqlens()
        for b, (sq, sk) in enumerate(zip(case.q_lens, case.k_lens)):
            lo, hi = case.window.band(sq, sk)
            rows = (lo > hi).nonzero().flatten() + cq[b]
            out[rows] = full[rows].to(out.dtype)
        return out


class EmptyRowsAndOffByOne(EmptyRowsSeeEveryKey):
    """The known bug above plus one no entry describes: the left window edge one token too wide."""

    name = "bug-empty-rows-and-off-by-one"

    def seen_window(self, case):
        return one_wider_on_the_left(case.window)


class RaisesInDecode(Backend):
    """Correct prefill, raises on every decode call (Sq = 1)."""

    name = "raises-in-decode"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        if max(case.q_lens) == 1:
            raise RuntimeError("planted failure in decode")
        out.copy_(attention_reference(inputs))
        return out


class RecordingOnCuda(ReferenceBackend):
    """The reference, declaring a CUDA device (the memory tests' stand-in for a GPU backend; inputs made where the
    test puts them), recording the case id of each row it runs in its class's ``calls`` (a subclass sets its own,
    and a test resets it)."""

    name, device = "test-recording-cuda", "cuda"
    calls: list[str] = []

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        type(self).calls.append(case.case_id)
        return super().run(case, inputs, out)
