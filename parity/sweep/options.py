"""The options of a sweep, built once (from the command line, or by a caller of
:func:`parity.sweep.run_sweep`) and passed down unchanged: to the executors, the lanes, the
judge and the shrinker. Nothing below re-reads the command line."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import shard
from ..errors import UserError
from ..expect import Expectations
from ..maskcheck import DEFAULT_MAX_PASSES
from ..process import env_worker_paths, read_worker_path_items
from ..results import ENGINE_CHECKS
from ..verdict import BUDGETS, Budget


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs. ``gpus``: the GPU ids (``CUDA_VISIBLE_DEVICES`` values) the lanes are
    placed on, empty for none (CPU: the workers' environment is left alone)."""

    isolate: bool = True  # each backend in a worker process (False: in this process)
    probes: bool = True  # the exact mask and GQA probes
    max_passes: int = DEFAULT_MAX_PASSES
    timeout: float | None = None  # fixed seconds per row before a worker is killed (--timeout); None: scaled per row
    timeout_floor: float = 120.0  # scaled limit: floor + timeout_scale x the reference's seconds on the case x the
    timeout_scale: float = 10.0  # backend's calls per row (1 + mask probe passes, or its measured ratio, the larger)
    retry_scale: float = 3.0  # a row that timed out is retried alone with its limit x this (a fixed --timeout: the same)
    compile_grace: float = 900.0  # --compile-grace: added to the limit of a compiling backend's first row of a configuration
    repeats: int = 1  # timed calls per case (the median is reported)
    budgets: Mapping[str, Budget] = dataclasses.field(default_factory=lambda: dict(BUDGETS))
    reference_device: str = "cpu"  # where the float64 reference runs ("cuda": the lane's GPU, when gpus are given)
    resume: bool = False
    progress: bool = True
    worker_paths: Mapping[str, list[str]] = dataclasses.field(default_factory=dict)
    jobs: int = 1  # lanes that run at once
    time_limit: float | None = None
    splits: Mapping[str, int] = dataclasses.field(default_factory=dict)  # backend -> workers (--split)
    auto_split: bool = False  # --split auto: split the other backends by their measured cost (lanes.auto_splits)
    expectations: Expectations | None = None
    gpus: tuple[str, ...] = ()
    shrink_calls: int = 0  # backend calls the shrinker may spend per failing backend (0: off)
    shard: Mapping[str, Any] | None = None  # --shard: this run's shard record (timing.json says it)
    fail_fast: bool = False  # --fail-fast: start no new row after the first failing one (the run is then partial)
    cost_file: str = ""  # measured seconds per row per backend (JSON), read to plan the lanes, updated after the run
    grad: bool = False  # --grad: each backend's backward too (parity.grad), judged with the row
    checks: tuple[str, ...] = ()  # --invariance / --graph-replay: the engine checks (parity.results.ENGINE_CHECKS) of each row
    precompile: str = "auto"  # --precompile: build each kernel key once before the lanes (parity.sweep.precompile)

    def __post_init__(self) -> None:
        # None where a mapping is meant: the default (as run_sweep's keyword arguments always took it)
        for name, default in (("budgets", BUDGETS), ("worker_paths", {}), ("splits", {})):
            if getattr(self, name) is None:
                object.__setattr__(self, name, dict(default))
        object.__setattr__(self, "gpus", tuple(str(g) for g in self.gpus or ()))
        object.__setattr__(self, "checks", tuple(self.checks or ()))
        if bad := [c for c in self.checks if c not in ENGINE_CHECKS]:
            raise ValueError(f"unknown engine check(s) {bad}: known {', '.join(ENGINE_CHECKS)}")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout:g}")
        if self.compile_grace < 0:
            raise ValueError(f"compile grace must be >= 0 seconds, got {self.compile_grace:g}")
        if self.precompile not in ("auto", "on", "off"):
            raise ValueError(f"precompile must be auto, on or off, got {self.precompile!r}")
        if self.precompile == "on" and not self.isolate:
            raise ValueError("--precompile on builds kernels in worker processes: drop --no-isolate")
        if self.gpus and not self.isolate and len(self.gpus) > 1:
            raise ValueError("several GPUs need one worker process per lane: drop --no-isolate or give one GPU")


def read_worker_paths(items: list[str] | None, backend_names: Sequence[str] | None = None) -> dict[str, list[str]]:
    """``--worker-path`` items, after those of ``PARITY_WORKER_PATH``; a malformed item of either is a UserError.

    With ``backend_names`` (the run's), a ``--worker-path`` BACKEND that names no backend, and a missing PATH of one
    of the run's backends (its own or a variant's base, :func:`parity.backends.worker_path_owner`), are UserErrors
    too; an item of another backend is passed over with a note (:func:`_check_given_paths`). The environment variable
    stays lenient: one list serves many runs and machines (lab/loan/h200_env.sh), so its entries for other backends
    are passed over silently, and a missing folder of one of the run's backends gets a note."""
    form = f"BACKEND=PATH[{os.pathsep}PATH]"
    env_items = env_worker_paths()
    env, bad = read_worker_path_items(env_items)
    if bad:
        raise UserError(f"$PARITY_WORKER_PATH item {bad[0]!r}: wants {form} (items separated by spaces or ';')")
    given, bad = read_worker_path_items(items or [])
    if bad:
        raise UserError(f"--worker-path {bad[0]!r}: wants {form}")
    if backend_names is not None:
        _check_given_paths(given, backend_names)
        _note_missing_env_paths(env, backend_names)
    return read_worker_path_items([*env_items, *(items or [])])[0]  # one list, the environment's items first


def _owners(name: str, backend_names: Sequence[str]) -> bool:
    """Whether a worker path entry for ``name`` is taken by one of ``backend_names`` (its own or a variant's base)."""
    from ..backends import worker_path_owner

    return any(worker_path_owner({name: []}, b) == name for b in backend_names)


def _check_given_paths(given: Mapping[str, list[str]], backend_names: Sequence[str]) -> None:
    """A ``--worker-path`` BACKEND that names no backend at all (nor a ``module:Class`` plugin) is a UserError (a typo
    would run the backend without its folder); one of another backend than the run's is passed over with a note (a
    script's one list for several runs: lab/device/h200_seed_systems.sh). A missing PATH of a backend of the run is a
    UserError."""
    from ..backends import names

    known = set(names())
    for name in given:
        if name not in known and ":" not in name:
            raise UserError(f"--worker-path {name}=...: {name!r} is not a backend (`python -m parity backends` lists them)")
    for name, paths in given.items():
        if not _owners(name, backend_names):
            print(
                f"parity: note: --worker-path {name}=...: no backend of this run is {name} or a variant of it: passed over", file=sys.stderr
            )
        elif missing := [p for p in paths if not os.path.exists(p)]:
            raise UserError(f"--worker-path {name}=...: {missing[0]!r} does not exist")


def _note_missing_env_paths(env: Mapping[str, list[str]], backend_names: Sequence[str]) -> None:
    """One stderr line per missing ``$PARITY_WORKER_PATH`` folder of a backend of this run (others: passed over)."""
    for name, paths in env.items():
        missing = [p for p in paths if not os.path.exists(p)]
        if missing and _owners(name, backend_names):
            print(f"parity: note: $PARITY_WORKER_PATH {name}=...: {', '.join(missing)} does not exist here", file=sys.stderr)


def read_gpus(text: str | None, isolate: bool) -> list[str]:
    """``--gpus`` (default: every visible GPU; none on a machine without one); a usage error for a
    bad list, and for several GPUs with ``--no-isolate`` (one process cannot be pinned to two)."""
    visible = shard.visible_gpus()
    try:
        gpus = visible if text is None else shard.parse_gpus(text, visible)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not isolate:
        if text is not None and len(gpus) > 1:
            raise UserError(f"--gpus {text} with --no-isolate: one process cannot be pinned to several GPUs")
        return []  # in this process: the backends use the GPU the process has
    return list(gpus)
