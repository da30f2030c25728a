"""``python -m parity backends``: every backend, its availability and the reason, its version.

The backends are probed in one worker process per distinct worker path (``PARITY_WORKER_PATH``:
a backend is checked where it will run, a variant such as ``vllm-fa3-split2-cuda`` on its base backend's
path unless it has its own entry, and its row says which: ``[worker path of vllm-fa3-cuda: DIR]``;
``--no-isolate``: in this process). A backend whose check kills its worker is re-checked alone in its
own worker and costs only its own row. Exit 0.
"""

from __future__ import annotations

import argparse
import json

from ..errors import UserError
from ..process import ProcessExecutor, worker_paths
from ..results import Outcome
from .common import EXIT_OK


def add_parser(subparsers) -> argparse.ArgumentParser:
    b = subparsers.add_parser(
        "backends",
        help="list every backend, its availability and reason, and the worker path it runs with ($PARITY_WORKER_PATH; "
        "a variant takes its base backend's unless it has its own)",
    )
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.add_argument("--no-isolate", action="store_true", help="probe availability in this process")
    b.add_argument(
        "--cache-key",
        action="store_true",
        help="print one line: a key for a CI cache of --compile-cache's folder, from the GPU model, Python, torch and "
        "every available backend's version (a cache built for other ones is never restored)",
    )
    return b


def run(args: argparse.Namespace) -> int:
    try:  # PARITY_WORKER_PATH: such a backend is checked where it will run
        given = worker_paths(None)
    except ValueError as exc:
        raise UserError(f"$PARITY_WORKER_PATH: {exc}") from None
    # the shared worker starts before this process imports the registry (torch): the two overlap
    shared = None if args.no_isolate else SharedProbe(None, [], skip=sorted(given))
    if shared is not None and not given and shared.specs_checked():
        names, paths = shared.specs_checked(), given  # the worker's registry: this process needs no torch at all
    else:
        from .. import backends

        names = backends.names()
        paths = backends.with_variants(given, names)  # a variant checked where it runs: on its base's worker path
    if args.no_isolate:
        from ..execute import backend_info

        by = {n: _inline_info(backend_info, n) for n in names if n not in paths}
    else:
        assert shared is not None
        by = {n: info for n, info in zip(shared.specs_checked(), shared.infos(paths)) if n not in paths}
    rest = [n for n in names if n not in by]
    by.update(zip(rest, _infos_fast(rest, paths)))
    if args.cache_key:
        print(cache_key([by[n] for n in names]))
        return EXIT_OK
    return _print_backends([_with_path(by[n], given) for n in names], args.json)


def _with_path(info: dict, given: dict[str, list[str]]) -> dict:
    """``info`` and, where its worker ran on a worker path, ``worker_path`` (the folders) and ``worker_path_of`` (whose
    entry: the backend's own, or its base backend's for a variant, :func:`parity.backends.worker_path_owner`)."""
    if not given:
        return info
    from ..backends import worker_path_owner

    owner = worker_path_owner(given, info["spec"])
    return info if owner is None else {**info, "worker_path": given[owner], "worker_path_of": owner}


def cache_key(infos: list[dict]) -> str:
    """``parity-compile-<GPU model>-py<X.Y>-<hash>``: the hash over the GPU model, Python, torch and each available
    backend's (name, version); the compilers' caches are valid for one GPU model and library build (docs/ci.md)."""
    import hashlib
    import platform

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    py = ".".join(platform.python_version_tuple()[:2])
    versions = sorted((i["spec"], i.get("version", "")) for i in infos if not i.get("unavailable"))
    blob = json.dumps({"gpu": gpu, "python": py, "torch": torch.__version__, "backends": versions}, sort_keys=True)
    slug = "".join(ch if ch.isalnum() or ch in ".-" else "-" for ch in gpu)
    return f"parity-compile-{slug}-py{py}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def _inline_info(backend_info, name: str) -> dict:
    try:
        return backend_info(name)
    except Exception as exc:  # noqa: BLE001
        return {"spec": name, "name": name, "device": "?", "unavailable": f"{type(exc).__name__}: {exc}", "version": ""}


def _infos_in_workers(names: list[str], paths: dict[str, list[str]], at_once: int = 8) -> list[dict]:
    """Each backend's info from its own worker process (a crash costs that row only), ``at_once``
    workers starting together instead of one after another."""
    out: list[dict] = []
    for start in range(0, len(names), at_once):
        batch = [ProcessExecutor(n, timeout=120, extra_path=paths.get(n), wait=False) for n in names[start : start + at_once]]
        for ex in batch:
            out.append(ex.info)
            ex.close()
    return out


def _infos_fast(names: list[str], paths: dict[str, list[str]]) -> list[dict]:
    """Every backend's info from one worker per distinct worker path (torch is imported once, not
    once per backend), all started together. A worker that dies while checking a backend costs
    only that backend: it is checked alone in its own worker (its row gives the crash), and the
    ones after it go to a fresh shared worker."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, n in enumerate(names):
        groups.setdefault(tuple(paths.get(n, [])), []).append(i)
    probes = [(idx, SharedProbe([names[i] for i in idx], list(key))) for key, idx in groups.items()]
    rows: list[dict] = [{}] * len(names)
    for idx, probe in probes:
        for i, info in zip(idx, probe.infos(paths)):
            rows[i] = info
    return rows


class SharedProbe(ProcessExecutor):
    """One worker that answers ``backend_info`` for several backends, one reply each (``backend_names=None``:
    every registered backend but ``skip``, the worker says which first)."""

    def __init__(self, backend_names: list[str] | None, extra_path: list[str], skip: list[str] | None = None):
        self.backend_names, self.skip = backend_names, skip or []
        super().__init__(backend_names[0] if backend_names else "*", timeout=120, extra_path=extra_path, wait=False)

    def _first_request(self) -> dict:
        return {"op": "infos", "specs": self.backend_names, "skip": self.skip}

    def specs_checked(self) -> list[str]:
        if self.backend_names is None:
            reply = self._reply(self.timeout)
            if reply.get("status") != "ok":  # the registry itself failed there: each in its own worker
                self.backend_names = []
                return []
            self.backend_names = reply["specs"]
        return self.backend_names

    def infos(self, paths: dict[str, list[str]]) -> list[dict]:
        out: list[dict] = []
        for backend in self.specs_checked():
            reply = self._reply(self.timeout)
            if reply.get("status") in (Outcome.CRASH, Outcome.TIMEOUT):  # this spec took the worker down
                out += _infos_in_workers([backend], paths)
                rest = self.specs_checked()[len(out) :]
                return out + (SharedProbe(rest, self.extra_path).infos(paths) if rest else [])
            out.append(reply["info"] if reply.get("status") == "ok" else _bad_spec(backend, reply))
        self.close()
        return out


def _bad_spec(backend: str, reply: dict) -> dict:
    # the same row as a worker of its own gives (ProcessExecutor's failed start)
    detail = f"worker failed to start: {reply.get('detail')}"
    return {"spec": backend, "name": backend, "device": "?", "description": "", "unavailable": detail, "version": "", "fatal": True}


def _print_backends(rows: list, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max([len("backend"), *(len(info["spec"]) for info in rows)]) + 2  # the longest name keeps its column
    print(f"{'backend':<{width}}{'device':<8}{'status':<12}version / reason")
    for info in rows:
        status = "available" if not info.get("unavailable") else "unavailable"
        path = _path_words(info)
        print(f"{info['spec']:<{width}}{info.get('device', '?'):<8}{status:<12}{info.get('unavailable') or info.get('version', '')}{path}")
    return EXIT_OK


def _path_words(info: dict) -> str:
    """`` [worker path DIR]``, `` [worker path of BASE: DIR]`` for a variant on its base's entry; '' without one."""
    if "worker_path" not in info:
        return ""
    folders = ":".join(info["worker_path"])
    of = info["worker_path_of"]
    return f"  [worker path {folders}]" if of == info["spec"] else f"  [worker path of {of}: {folders}]"
