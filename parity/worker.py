"""Worker process: ``python -m parity.worker``, driven by :class:`parity.execute.ProcessExecutor`.

Reads length-prefixed pickled requests on stdin and answers on the original stdout (an
answer's large tensors as shared-memory files of its executor's prefix: :mod:`parity.transfer`);
the backend's own prints are sent to stderr (the run's log) so they cannot corrupt
the channel.

``PARITY_WORKER_PROFILE=DIR`` profiles the worker with cProfile and writes
``DIR/<backend>.pstats`` when it exits (to see where a sweep's time goes).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    out_dir = os.environ.get("PARITY_WORKER_PROFILE")
    if not out_dir:
        return serve()
    import cProfile

    prof = cProfile.Profile()
    backend: list[str] = []
    try:
        return prof.runcall(serve, backend)
    finally:
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in (backend[0] if backend else "worker"))
        os.makedirs(out_dir, exist_ok=True)
        prof.dump_stats(os.path.join(out_dir, f"{name}.{os.getpid()}.pstats"))


def serve(spec_seen: list[str] | None = None) -> int:
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the backend prints goes to the log
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer

    from .case import Case
    from .execute import backend_info, context_lost, execute, recv, send
    from .transfer import PREFIX_ENV

    spill = os.environ.get(PREFIX_ENV) or None  # an answer's large tensors go as files of this prefix (parity.transfer)
    backend = None
    while True:
        try:
            req = recv(proto_in.fileno())
        except EOFError:
            return 0
        op = req.get("op")
        if op == "exit":
            return 0
        if op == "init":
            try:
                from . import backends

                if spec_seen is not None:
                    spec_seen.append(req["spec"])
                info = backend_info(req["spec"])
                backend = backends.get(req["spec"])
                send(proto_out, {"status": "ok", "info": info})
            except Exception as exc:  # noqa: BLE001
                send(proto_out, {"status": "error", "detail": f"{type(exc).__name__}: {exc}", "fatal": True})
            continue
        if op == "infos":  # `parity backends`: every backend's info from this one process, one answer each
            backend_names = req["specs"]
            if backend_names is None:
                from . import backends

                backend_names = [n for n in backends.names() if n not in req.get("skip", [])]
                send(proto_out, {"status": "ok", "specs": backend_names})
            for backend_name in backend_names:
                send(proto_out, _info_reply(backend_info, backend_name))
            continue
        if op == "run":
            if backend is None:
                send(proto_out, {"status": "error", "detail": "worker has no backend"})
                continue
            case = Case.from_json(req["case"])
            checks = tuple(req.get("checks", ()))
            shared = req.get("inputs")  # the sweep's draw of the case (parity.shared_inputs), else drawn here
            result = execute(backend, case, req["probes"], req["max_passes"], req.get("repeats", 1), req.get("grad", False), checks, shared)
            if context_lost(result):
                # the CUDA context is unusable: later rows would fail here for this row's fault
                result["detail"] = result.get("detail", "") + " (CUDA context lost: the worker was restarted for the next row)"
                result["restart"] = True
            send(proto_out, result, spill)
            if result.get("restart"):
                return 3
            continue
        send(proto_out, {"status": "error", "detail": f"unknown op {op!r}"})


def _info_reply(backend_info, backend: str) -> dict:
    try:
        return {"status": "ok", "info": backend_info(backend)}
    except Exception as exc:  # noqa: BLE001 - a backend name that does not resolve: its row says why
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    sys.exit(main())
