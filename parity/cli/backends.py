"""``python -m parity backends``: every backend, its availability and the reason, its version.

Each backend is probed in its own worker process (``--no-isolate``: in this one), where it will
run (``PARITY_WORKER_PATH``). Exit 0.
"""

from __future__ import annotations

import argparse
import json

from ..sweep.options import read_worker_paths as worker_paths
from .common import EXIT_OK


def add_parser(subparsers) -> argparse.ArgumentParser:
    b = subparsers.add_parser("backends", help="list every backend, its availability and reason")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.add_argument("--no-isolate", action="store_true", help="probe availability in this process")
    return b


def run(args: argparse.Namespace) -> int:
    from .. import backends
    from ..execute import backend_info

    paths = worker_paths(None)  # PARITY_WORKER_PATH: such a backend is checked where it will run
    names = backends.names()
    if args.no_isolate:
        rows = [_inline_info(backend_info, n) if n not in paths else None for n in names]
    else:
        rows = [None] * len(names)
    todo = [i for i, r in enumerate(rows) if r is None]
    infos = _infos_in_workers([names[i] for i in todo], paths)
    for i, info in zip(todo, infos):
        rows[i] = info
    return _print_backends(rows, args.json)


def _inline_info(backend_info, name: str) -> dict:
    try:
        return backend_info(name)
    except Exception as exc:  # noqa: BLE001
        return {"spec": name, "name": name, "device": "?", "unavailable": f"{type(exc).__name__}: {exc}", "version": ""}


def _infos_in_workers(names: list[str], paths: dict[str, list[str]], at_once: int = 8) -> list[dict]:
    """Each backend's info from its own worker process (a crash costs that row only), ``at_once``
    workers starting together instead of one after another."""
    from ..execute import ProcessExecutor

    out: list[dict] = []
    for start in range(0, len(names), at_once):
        batch = [ProcessExecutor(n, timeout=120, extra_path=paths.get(n), wait=False) for n in names[start:start + at_once]]
        for ex in batch:
            out.append(ex.info)
            ex.close()
    return out


def _print_backends(rows: list, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    print(f"{'backend':<26}{'device':<8}{'status':<12}version / reason")
    for info in rows:
        status = "available" if not info.get("unavailable") else "unavailable"
        print(f"{info['spec']:<26}{info.get('device', '?'):<8}{status:<12}{info.get('unavailable') or info.get('version', '')}")
    return EXIT_OK
