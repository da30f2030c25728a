"""The canonical sliding-window specification.

A :class:`Window` says which keys each query may see. It is the only window
type the harness passes around; every backend translates it into its own
native argument inside its own file.

Semantics (the flash-attn convention)
-------------------------------------
Query row ``i`` (0-based) of a sequence with ``Sq`` queries and ``Sk`` keys may
see key ``j`` iff::

    i + d - left <= j <= i + d + right      (both ends INCLUSIVE)

where the alignment offset ``d`` is

* ``Sk - Sq`` for ``align="bottom_right"`` (the default: the last query lines
  up with the last key, as in flash-attn >= 2.1, decode and chunked prefill),
* ``0`` for ``align="top_left"`` (the first query lines up with the first
  key, as in SDPA's ``is_causal`` and xformers' non-``FromBottomRight`` masks).

``left=None`` / ``right=None`` means unbounded on that side. ``right=0`` is
causal. ``Window.tokens(W)`` is "W tokens including the current one", the
vLLM / HF / xformers convention, equal to ``Window(left=W - 1, right=0)``.

Sides are never negative, so the band always holds the aligned diagonal key
``j = i + d`` and is never empty as a whole; single rows still see no key when
``i + d`` falls outside ``[0, Sk)`` (``Sq > Sk`` bottom-right, ``Sq > Sk`` top-left
with a bounded right side...). A row whose band holds no key outputs **0** (see
:mod:`parity.reference`).

Truth table, Sq = Sk = 4 (``d = 0``), ``x`` = visible::

    Window(left=1, right=0)        Window.tokens(3)            Window(left=None, right=0)
    (1 previous + self)            == Window(2, 0)             (plain causal)
         j: 0 1 2 3                    j: 0 1 2 3                  j: 0 1 2 3
    i=0     x . . .               i=0     x . . .             i=0     x . . .
    i=1     x x . .               i=1     x x . .             i=1     x x . .
    i=2     . x x .               i=2     x x x .             i=2     x x x .
    i=3     . . x x               i=3     . x x x             i=3     x x x x

Alignment, Sq = 2, Sk = 4, Window(left=1, right=0)::

    bottom_right (d = 2)           top_left (d = 0)
         j: 0 1 2 3                    j: 0 1 2 3
    i=0     . x x .               i=0     x . . .
    i=1     . . x x               i=1     x x . .

Chunked local attention (Llama 4's ``attention_chunk``, ``Case.chunk = C``)
-----------------------------------------------------------------------------
On top of the window, key ``j`` is visible to query ``i`` only when ``j`` and the query's
absolute position ``p = i + Sk - Sq`` lie in the same chunk of ``C`` keys. Chunks are
aligned at ABSOLUTE key positions: the chunk of ``p`` starts at ``p - p % C`` (floor
modulo: a query with ``p < 0`` lies in no chunk that holds a key), whatever the window's
alignment. :func:`chunk_band` is the one place this rule lives (the reference, the
baseline, the mask probe and the read probe all use it through ``Case.band``).

Truth table, Sq = 3, Sk = 6 (``p = i + 3``), ``C = 4``::

    Window.causal(), chunk 4       Window.tokens(2), chunk 4    top-left chunk (the planted bug)
         j: 0 1 2 3 4 5                j: 0 1 2 3 4 5               j: 0 1 2 3 4 5
    i=0     x x x x . .           i=0     . . x x . .         i=0     x x x x . .   (p=3: ok)
    i=1     . . . . x .           i=1     . . . . x .         i=1     x x x x . .   (wrong)
    i=2     . . . . x x           i=2     . . . . x x         i=2     x x x x . .   (wrong)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

from .errors import UserError

#: The largest window side a library's C ``int`` argument holds (:meth:`Window.native_sides`).
C_INT_MAX = 2**31 - 1

Align = Literal["bottom_right", "top_left"]
ALIGNMENTS: tuple[str, ...] = ("bottom_right", "top_left")


def chunk_band(lo: torch.Tensor, hi: torch.Tensor, sq: int, sk: int, chunk: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi)`` of a window band ``(Sq,)`` each, intersected with each query's chunk of ``chunk``
    keys (``None``: unchanged): query ``i`` at absolute position ``p = i + Sk - Sq`` sees keys
    ``p - p % chunk .. p - p % chunk + chunk - 1`` only. The rule of the module docstring, in one place."""
    if chunk is None:
        return lo, hi
    p = torch.arange(sq, device=lo.device, dtype=torch.int64) + (sk - sq)  # (Sq,) absolute positions
    start = p - torch.remainder(p, chunk)  # (Sq,) first key of p's chunk (floor modulo)
    return torch.maximum(lo, start), torch.minimum(hi, start + chunk - 1)


class SpecError(UserError):
    """An invalid window or case specification. The message names the field and value."""


#: The largest int a case's field may hold: band arithmetic and the harness's tensors are int64.
INT_MAX = 2**63 - 1


def _check_side(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"Window.{name} must be a non-negative int or None (unbounded), got {value!r}")
    if value > INT_MAX:
        raise SpecError(f"Window.{name} must be at most 2**63 - 1 (an int64; None is unbounded), got {value}")
    if value < 0:
        hint = " (-1 is flash-attn 2's sentinel for 'unbounded'; the canonical spelling is None)" if value == -1 else ""
        raise SpecError(
            f"Window.{name} must be >= 0 or None, got {value}{hint}; a negative side would push the band "
            "off the aligned diagonal and can leave it empty"
        )
    return value


@dataclasses.dataclass(frozen=True)
class Window:
    """Visible band ``i + d - left <= j <= i + d + right``, inclusive, ``None`` = unbounded.

    ``align`` picks ``d``: ``"bottom_right"`` -> ``Sk - Sq``, ``"top_left"`` -> ``0``.
    """

    left: int | None = None
    right: int | None = None
    align: Align = "bottom_right"

    def __post_init__(self) -> None:
        _check_side("left", self.left)
        _check_side("right", self.right)
        if self.align not in ALIGNMENTS:
            raise SpecError(f"Window.align must be one of {ALIGNMENTS}, got {self.align!r}")

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def tokens(cls, w: int, align: Align = "bottom_right") -> Window:
        """``w`` visible keys including the query's own position: ``Window(w - 1, 0)``.

        This is vLLM's / HF's ``sliding_window=w`` and xformers'
        ``LowerTriangularFromBottomRightLocalAttentionMask(w)``.
        """
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise SpecError(f"Window.tokens(w) needs w >= 1 (w counts the current token), got {w!r}")
        return cls(left=w - 1, right=0, align=align)

    @classmethod
    def causal(cls, align: Align = "bottom_right") -> Window:
        return cls(left=None, right=0, align=align)

    @classmethod
    def full(cls) -> Window:
        return cls(left=None, right=None)

    # -- properties ---------------------------------------------------------------------
    @property
    def is_causal(self) -> bool:
        return self.right == 0

    @property
    def is_local(self) -> bool:
        """True when at least one side is bounded."""
        return self.left is not None or self.right is not None

    def offset(self, sq: int, sk: int) -> int:
        """The alignment offset ``d``."""
        return sk - sq if self.align == "bottom_right" else 0

    def sides(self, sq: int, sk: int) -> tuple[int | None, int | None]:
        """``(left, right)`` for an ``(Sq, Sk)`` sequence, a side wider than ``Sq + Sk`` capped there: it reaches
        past every key from every row either way, and ``i + d +- side`` stays in int64 (int32 below 2**30 keys)."""
        return self.cap(self.left, sq, sk), self.cap(self.right, sq, sk)

    def native_sides(self, q_lens, k_lens) -> tuple[int | None, int | None]:
        """``(left, right)`` as a library's window argument takes them (every backend's translation passes these): a
        side as given where it fits a C ``int``, so a window wider than the sequence is still tested as named; a side
        past :data:`C_INT_MAX` (2**62 says "every key") passed as the longest ``Sq`` plus the longest ``Sk``, which
        reaches past every key from every row of the batch just the same.

        ====================  ======================  ==================
        side                  Sq, Sk (longest)        passed
        ====================  ======================  ==================
        None                  any                     None (unbounded)
        15                    4, 9                    15
        2**31 - 1             4, 9                    2**31 - 1
        2**31                 4, 9                    13
        ====================  ======================  ==================
        """
        reach = max(q_lens, default=0) + max(k_lens, default=0)
        return self._native(self.left, reach), self._native(self.right, reach)

    @staticmethod
    def _native(side: int | None, reach: int) -> int | None:
        return side if side is None or side <= C_INT_MAX else min(side, reach)

    @staticmethod
    def cap(side: int | None, sq: int, sk: int) -> int | None:
        """A side (or a chunk: a chunk of ``Sq + Sk`` keys or more holds every key and every query) capped at ``Sq + Sk``."""
        return None if side is None else min(side, sq + sk)

    def band(self, sq: int, sk: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Per query row, the first and last visible key, inclusive, clipped to ``[0, Sk-1]``.

        Returns ``(lo, hi)``, int64 tensors of shape ``(Sq,)``; a row with ``lo > hi``
        sees no key.
        """
        i = torch.arange(sq, device=device, dtype=torch.int64)  # (Sq,)
        d = self.offset(sq, sk)
        left, right = self.sides(sq, sk)
        lo = torch.zeros_like(i) if left is None else (i + d - left).clamp(min=0)
        hi = torch.full_like(i, sk - 1) if right is None else (i + d + right).clamp(max=sk - 1)
        return lo, hi

    def mask(self, sq: int, sk: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Dense boolean mask, ``True`` = visible. Shape ``(Sq, Sk)``."""
        lo, hi = self.band(sq, sk, device)
        j = torch.arange(sk, device=device, dtype=torch.int64)  # (Sk,)
        return (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)

    def visible(self, i: int, j: int, sq: int, sk: int) -> bool:
        """Scalar form of the rule, for documentation and tests."""
        d = self.offset(sq, sk)
        if not (0 <= j < sk):
            return False
        if self.left is not None and j < i + d - self.left:
            return False
        if self.right is not None and j > i + d + self.right:
            return False
        return True

    def describe(self) -> str:
        left = "inf" if self.left is None else str(self.left)
        right = "inf" if self.right is None else str(self.right)
        return f"({left},{right}){'' if self.align == 'bottom_right' else ' top-left'}"

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"left": self.left, "right": self.right, "align": self.align}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Window:
        if not isinstance(data, dict):
            raise SpecError(f"window must be an object with left/right/align, got {data!r}")
        unknown = set(data) - {"left", "right", "align"}
        if unknown:
            raise SpecError(f"window has unknown field(s) {sorted(unknown)}")
        return cls(left=data.get("left"), right=data.get("right"), align=data.get("align", "bottom_right"))
