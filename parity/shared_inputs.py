"""A case's inputs drawn once, held in shared-memory files that every worker running the case maps, and its
reference too (:class:`InputFiles`).

:func:`parity.case.make_inputs` draws a case's inputs from its seed on the CPU: a 32k-token prefill's or a
128k-key decode's take one to four seconds (``randn`` in float32, then the cast), and a sweep drew them again
for every backend's row and once more for the reference (23 backends of the H100's models run: 878 s of its
rows' ``inputs`` stage). :func:`write_inputs` writes what ``make_inputs(case, "cpu")`` returned, byte for byte,
to files (:mod:`parity.transfer`); :meth:`InputFiles.load` maps them back (privately: a backend that writes
into its inputs changes its own copy only). The backend and the reference therefore see the very bytes
``make_inputs`` drew; where the files are gone, :func:`case_inputs` draws again (the same bytes: the draw is
deterministic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from . import transfer
from .case import Case, Inputs, make_inputs
from .transfer import FileTensor, SpillError, write_tensor

#: The tensor fields of :class:`parity.case.Inputs`.
FIELDS = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "q_descale", "k_descale", "v_descale", "sinks")


@dataclasses.dataclass(frozen=True)
class InputFiles:
    """``make_inputs(case, "cpu")`` of the case ``case_json``: each large tensor as a :class:`FileTensor`, the
    small ones (lengths, descales, sinks) as they are; ``None`` where the inputs have none."""

    case_json: str
    tensors: dict[str, Any]

    @property
    def paths(self) -> list[str]:
        return [t.path for t in self.tensors.values() if isinstance(t, FileTensor)]

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(t) for t in self.tensors.values() if isinstance(t, FileTensor))

    def load(self, case: Case | None = None) -> Inputs:
        """The inputs of ``case`` (default: read from ``case_json``), their large tensors mapped from the files
        (:class:`SpillError` where one is gone)."""
        loaded = {k: t.load() if isinstance(t, FileTensor) else t for k, t in self.tensors.items()}
        return Inputs(case if case is not None else Case.from_json(self.case_json), **loaded)

    def remove(self) -> None:
        """Unlink the files (a worker or reference that mapped them keeps its pages)."""
        import os

        for p in self.paths:
            try:
                os.unlink(p)
            except OSError:
                pass


def _nbytes(ft: FileTensor) -> int:
    n = torch.empty((), dtype=getattr(torch, ft.dtype)).element_size()
    for s in ft.shape:
        n *= s
    return n


def write_inputs(inputs: Inputs, prefix: str, dirs: list[str] | None = None) -> InputFiles | None:
    """``inputs`` (on the CPU, as :func:`make_inputs` draws them, default read-probe fields) with each tensor of
    :data:`parity.transfer.MIN_BYTES` or more in a file ``<dir>/<prefix><n>``; None (no file left) where one cannot
    be written (no folder with room)."""
    if inputs.poison_kv or inputs.q.device.type != "cpu":
        raise ValueError("write_inputs takes make_inputs(case, 'cpu')'s inputs")
    out: dict[str, Any] = {}
    for name in FIELDS:
        t = getattr(inputs, name)
        if isinstance(t, torch.Tensor) and t.nbytes >= transfer.MIN_BYTES:
            ft = write_tensor(t, prefix, dirs)
            if ft is None:
                InputFiles("", out).remove()
                return None
            out[name] = ft
        else:
            out[name] = t
    return InputFiles(inputs.case.to_json(), out)


def case_inputs(case: Case, device: torch.device | str = "cpu", shared: InputFiles | None = None) -> Inputs:
    """``make_inputs(case, device)``: from ``shared`` (the sweep's draw of ``case``) where given and its files are
    still there, else drawn here. A ``shared`` of another case is a ValueError (the harness's fault)."""
    return shared_or_drawn(case, device, shared)[0]


def shared_or_drawn(
    case: Case, device: torch.device | str = "cpu", shared: InputFiles | None = None, draw: Callable[[Case, Any], Inputs] = make_inputs
) -> tuple[Inputs, bool]:
    """:func:`case_inputs`, and whether they came from ``shared``'s files (False: drawn here, by ``draw``)."""
    if shared is not None:
        if shared.case_json != case.to_json():
            raise ValueError(f"shared inputs of {shared.case_json} given for {case.to_json()}")
        try:
            loaded = shared.load(case)
        except SpillError:
            loaded = None  # removed meanwhile (the sweep's store made room): the same bytes, drawn again
        if loaded is not None:
            return (loaded if str(device) == "cpu" else loaded.to(device)), True
    return draw(case, device), False
