"""The end of a sweep: why it stopped, its timing written, its result (:class:`SweepResult`), and the result so far
(:meth:`SweepEnd.snapshot`) that ``parity run`` writes environment.json from before the first row and on a signal.
:class:`SweepEnd` is the part of :class:`.run.Sweep` that only reads what the lanes left (its attributes are set by
``Sweep.__init__``)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..case import Case
from ..judge import BaselineCache
from ..results import FAIL_VERDICTS
from . import precompile
from .deferred import Deferrals
from .inputstore import InputStore
from .lanes import save_costs
from .options import SweepOptions
from .timing import SweepTiming, gate_line, split_line, write_timing
from .writers import RowSink

#: What :meth:`SweepEnd._stopped_by` says of the rows a --time-limit left: held back to run alone (:mod:`.deferred`),
#: set aside by a lane while the pre-pass built their key (:meth:`.run.Sweep._set_aside`).
_HELD = "held back to run alone after the others"
_ASIDE = "set aside while the pre-pass built their key"


@dataclasses.dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    infos: dict[str, dict[str, Any]]
    seconds: float
    reference_seconds: float
    out_dir: Path | None
    partial: bool = False  # stopped before every row ran (--time-limit, --fail-fast, a lost CUDA context)
    already: int = 0  # rows found in the folder on --resume
    total: int = 0  # backends x cases
    split: str = ""  # how the work was split (lanes, GPUs, shard), one line; empty for one plain lane
    gate: str = ""  # the memory gates: rows that ran alone, the lanes' waits (:func:`.timing.gate_line`); "" for none
    stopped_by: str = ""  # why a partial run stopped ("" when it did not stop early)
    interrupted: str = ""  # the signal that ended it ("SIGTERM"; "" when none did)

    @property
    def planned(self) -> int:
        """Rows this run set out to produce."""
        return self.total - self.already

    def counts(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for r in self.rows:
            table.setdefault(r["backend"], {}).setdefault(r["verdict"], 0)
            table[r["backend"]][r["verdict"]] += 1
        return table

    @property
    def failed(self) -> bool:
        return any(r["verdict"] in FAIL_VERDICTS for r in self.rows)


def note_reference_stages(timing: SweepTiming, caches: Iterable[BaselineCache], shared: InputStore | None = None) -> None:
    """The baseline caches' stage seconds and recomputations, into ``timing``; ``shared``: the sweep's draws of the
    cases' inputs (``shared_inputs``: their seconds; the caches' ``inputs`` then maps them)."""
    stages: dict[str, float] = {}
    caches = list(caches)
    for b in caches:
        for k, v in b.stage_seconds.items():
            stages[k] = stages.get(k, 0.0) + v
    if shared is not None:
        stages["shared_inputs"] = shared.seconds
    timing.reference_stages = stages
    timing.reference_recomputed = sum(b.recomputed for b in caches)


class SweepEnd:
    """Why a sweep stopped and what it returns; mixed into :class:`.run.Sweep`, whose ``__init__`` sets these."""

    backend_names: list[str]
    cases: list[Case]
    options: SweepOptions
    out_dir: Path | None
    baselines: dict[Any, BaselineCache]
    shared_inputs: InputStore
    infos: dict[str, dict[str, Any]]
    timing: SweepTiming
    sink: RowSink
    retries: list
    deferred: Deferrals
    lost_context: str
    aside_unsent: int
    interrupted: str
    timed_out: threading.Event
    t0: float

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.sink.rows

    def _reference_s(self) -> float:
        """The references' seconds: the caches' computations and the shared draws of the cases' inputs (each charged,
        as the reference's own draw was, to the first row to meet its case)."""
        return sum(b.seconds for b in self.baselines.values()) + self.shared_inputs.seconds

    def _timing_summary(self, partial: bool, wall: float | None = None) -> dict[str, Any]:
        """timing.json's record (``wall``: the run's seconds; None: so far)."""
        note_reference_stages(self.timing, self.baselines.values(), self.shared_inputs)
        wall = time.perf_counter() - self.t0 if wall is None else wall
        self.timing.held_back = self.deferred.held
        return {"partial": partial, **self.timing.summary(wall, self._reference_s())}

    def _stopped_by(self) -> str:
        """Why the run stopped before every row ran; "" when it did not."""
        if self.interrupted:
            return f"interrupted by {self.interrupted} (the rows in flight were dropped)"
        if self.retries:
            why = (
                f" (--time-limit {self.options.time_limit:g} s reached: a build in flight then was cut)" if self.timed_out.is_set() else ""
            )
            return f"{len(self.retries)} row(s) that timed out were not retried before the run stopped{why}"
        if self.lost_context:
            return f"CUDA context lost in {self.lost_context} (--no-isolate)"
        if self.sink.failed_fast.is_set():
            return "--fail-fast: stopped after the first failing row"
        if self.timed_out.is_set():
            held, aside = self.deferred.left, self.aside_unsent
            left = [f"{n} row(s) {what} not run" for n, what in ((held, _HELD), (aside, _ASIDE)) if n]
            return f"--time-limit {self.options.time_limit:g} s reached" + (f" ({'; '.join(left)})" if left else "")
        return ""

    def _result(self, wall: float) -> SweepResult:
        stopped_by = self._stopped_by()
        partial = bool(stopped_by)
        summary = self._timing_summary(partial, wall)
        if self.out_dir:
            write_timing(self.out_dir, summary)
        if self.options.cost_file:  # what the next run plans its lanes by
            save_costs(self.options.cost_file, summary["per_backend"])
        precompile.remember(precompile.cache_root(), self.timing.kernel_keys)  # what the next pre-pass may skip
        return dataclasses.replace(
            self.snapshot(), seconds=wall, partial=partial, split=split_line(summary), gate=gate_line(summary), stopped_by=stopped_by
        )

    def snapshot(self) -> SweepResult:
        """The sweep so far, as a partial result (no file written): the rows judged, the backends' infos gathered
        (a unit's worker not started yet is missing), why it stopped ("in progress" while it runs)."""
        ids = {c.case_id for c in self.cases}
        done = self.sink.writer.done if self.sink.writer else set()  # the folder's rows before this run (--resume)
        return SweepResult(
            list(self.rows),
            dict(self.infos),
            time.perf_counter() - self.t0,
            self._reference_s(),
            self.out_dir,
            partial=True,
            already=sum(1 for b, c in done if b in self.backend_names and c in ids),
            total=len(self.backend_names) * len(self.cases),
            stopped_by=self._stopped_by(),
            interrupted=self.interrupted,
        )
