"""Worker processes without torch: the worker protocol (length-prefixed pickles, a large tensor of an answer as
a shared-memory file: :mod:`parity.transfer`), the worker-path settings, and :class:`ProcessExecutor`, which runs a
backend in ``python -m parity.worker``.

Importing this module costs no torch import, so ``parity backends`` starts its workers at once.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import transfer

if TYPE_CHECKING:
    from .case import Case
    from .shared_inputs import InputFiles


def read_worker_path_items(items: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``BACKEND=PATH[:PATH]`` items (``--worker-path``, ``PARITY_WORKER_PATH``, or a run's recorded command line) as
    ``{BACKEND: [PATH, ...]}``, and the items that are not of that form (never raises)."""
    out: dict[str, list[str]] = {}
    bad: list[str] = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            bad.append(item)
            continue
        out.setdefault(name, []).extend(p for p in path.split(os.pathsep) if p)
    return out, bad


def recorded_worker_path_items(words: Sequence[str]) -> list[str]:
    """The ``--worker-path`` values of a recorded command line (its words), in either of argparse's forms:
    ``--worker-path BACKEND=PATH`` and ``--worker-path=BACKEND=PATH``, for :func:`read_worker_path_items`."""
    items: list[str] = []
    i = 0
    while i < len(words):
        flag, sep, value = words[i].partition("=")
        if flag == "--worker-path" and sep:  # one word: argparse splits at the first '='
            items.append(value)
        elif flag == "--worker-path" and i + 1 < len(words):  # two words: the next is the value
            items.append(words[i + 1])
            i += 1
        i += 1
    return items


def parse_worker_paths(items: Iterable[str]) -> dict[str, list[str]]:
    """:func:`read_worker_path_items`'s ``{BACKEND: [PATH, ...]}``; raises ``ValueError`` naming the first bad item."""
    out, bad = read_worker_path_items(items)
    if bad:
        raise ValueError(f"worker path wants BACKEND=PATH[{os.pathsep}PATH], got {bad[0]!r}")
    return out


def env_worker_paths() -> list[str]:
    """``PARITY_WORKER_PATH``'s items (separated by whitespace or ``;``)."""
    return os.environ.get("PARITY_WORKER_PATH", "").replace(";", " ").split()


def worker_paths(items: Iterable[str] | None) -> dict[str, list[str]]:
    """The worker paths of a run or a pytest session: ``PARITY_WORKER_PATH``'s items, then
    ``items`` (the command line's), parsed by :func:`parse_worker_paths` (``ValueError``)."""
    return parse_worker_paths([*env_worker_paths(), *(items or [])])


# -- worker protocol: length-prefixed pickles over the worker's stdin / a dup of its stdout -------


def send(fp, obj: Any, spill: str | None = None) -> None:
    """``obj`` as one message; ``spill``: a file prefix, its large tensors then go as files (:mod:`parity.transfer`)."""
    data = transfer.dumps(obj, spill)  # spill None: no files; small tensors as their bytes either way
    fp.write(struct.pack("<Q", len(data)))
    fp.write(data)
    fp.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, timeout: float | None = None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    return transfer.loads(_read_exact(fd, n, deadline))  # a tensor sent as a file: mapped, the file unlinked


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class ProcessExecutor:
    """Runs the backend in a worker process; survives crashes and hangs of the backend."""

    def __init__(
        self,
        backend: str,
        probes: bool = True,
        max_passes: int | None = None,
        repeats: int = 1,
        timeout: float = 300.0,
        log_path: Path | None = None,
        extra_path: list[str] | None = None,
        env: dict[str, str] | None = None,
        wait: bool = True,
        grad: bool = False,
        checks: tuple[str, ...] = (),
    ):
        """``wait=False`` returns at once; :attr:`info` then waits for the worker (start many in parallel)."""
        self.backend_name = backend
        self.probes, self.max_passes, self.repeats = probes, max_passes, repeats
        self.grad = grad  # the backward too (parity run --grad)
        self.checks = tuple(checks)  # the engine checks (--invariance, --graph-replay)
        self.timeout = timeout
        self.log_path = log_path
        self.extra_path = extra_path or []
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self._submitted = False
        self.halted = False  # :meth:`halt`: the run was interrupted; no worker starts again
        #: the worker's tensor files (:mod:`parity.transfer`): their folders and name prefix (None: pickled)
        self.spill_dirs = transfer.spill_dirs()
        self.spill_prefix = transfer.owner_prefix(tag=transfer.new_tag("w")) if self.spill_dirs else None
        transfer.remove_stale_once(self.spill_dirs)  # what a killed harness left
        self._launch()
        self._info: dict[str, Any] | None = None
        if wait:
            self._info = self._await_init()

    @property
    def info(self) -> dict[str, Any]:
        """The backend's info (waits for the worker's start-up when ``wait=False`` was given)."""
        if self._info is None:
            self._info = self._await_init()
        return self._info

    @info.setter
    def info(self, value: dict[str, Any]) -> None:
        self._info = value

    def _start(self) -> dict[str, Any]:
        self._launch()
        return self._await_init()

    def _launch(self) -> None:
        """Start the worker process and send it the backend to load (does not wait)."""
        env = dict(os.environ)
        env.update(self.env)
        # the worker must import the same parity (and any plugin module) as this process
        path = [*self.extra_path, *[p for p in sys.path if p]]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[transfer.DIRS_ENV] = os.pathsep.join(self.spill_dirs) or "off"
        env.pop(transfer.PREFIX_ENV, None)
        if self.spill_prefix is not None:
            env[transfer.PREFIX_ENV] = self.spill_prefix
        log: Any = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "parity.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        if log is not subprocess.DEVNULL:
            log.close()
        assert self.proc.stdin is not None
        send(self.proc.stdin, self._first_request())

    def _first_request(self) -> dict[str, Any]:
        return {"op": "init", "spec": self.backend_name}

    def _await_init(self) -> dict[str, Any]:
        reply = self._reply(timeout=max(self.timeout, 120.0))
        if reply.get("status") != "ok":
            # import-time crash or a broken plugin: report it as the backend's info
            why = "the run was interrupted while its worker started" if self.halted else f"worker failed to start: {reply.get('detail')}"
            return {
                "spec": self.backend_name,
                "name": self.backend_name,
                "device": "?",
                "description": "",
                "unavailable": why,
                "version": "",
                "fatal": reply.get("fatal", False),
            }
        info = reply["info"]
        # the folders this worker imported the backend from: repro scripts name them (parity.export_repro)
        return {**info, "worker_path": list(self.extra_path)} if self.extra_path else info

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            return recv(self.proc.stdout.fileno(), timeout)
        except TimeoutError:
            self._kill()
            return {"status": "timeout", "detail": f"no answer within {timeout:g} s; worker killed"}
        except transfer.SpillError as exc:  # the answer came, its tensor file did not: a harness fault, the row's alone
            self._kill()
            return {"status": "crash", "detail": f"the worker's answer could not be read: {exc}"}
        except (EOFError, OSError, pickle.UnpicklingError, struct.error):
            code = self.proc.wait(timeout=30)
            self.proc = None
            self._remove_files()  # what the worker wrote of an answer it never sent
            return {"status": "crash", "detail": f"worker {_signal_name(code)}{self._log_tail()}"}

    def _remove_files(self) -> None:
        """The worker's tensor files not yet read (it died, or was killed, between writing and sending them)."""
        if self.spill_prefix is not None:
            transfer.remove_prefix(self.spill_prefix, self.spill_dirs)

    def _log_tail(self) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        return f"; last log line: {lines[-1][:200]}" if lines else ""

    def _kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        self._remove_files()

    def run(self, case: Case, inputs: InputFiles | None = None) -> dict[str, Any]:
        failed = self.submit(case, inputs)
        return failed if failed is not None else self.collect()

    def halt(self) -> None:
        """Stop the worker now (SIGKILL to its process group) and start none again: a run interrupted by a signal.
        Safe from a signal handler while a frame of this thread uses the executor: it only sends the signal,
        and the reader of the worker's pipe meets its end (a ``crash`` answer, which the interrupted sweep drops)."""
        self.halted = True
        proc = self.proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def submit(self, case: Case, inputs: InputFiles | None = None) -> dict[str, Any] | None:
        """Send ``case`` to the worker without waiting; a result dict if it could not be sent. ``inputs``: the case's
        shared draw (:mod:`parity.shared_inputs`: its files' names cross, the worker maps them), else it draws them."""
        if self.halted:
            return {"status": "crash", "detail": "the run was interrupted: its workers were stopped"}
        if self.proc is None or self.proc.poll() is not None:
            self.info = self._start()
            if self.info.get("unavailable"):
                return {"status": "crash", "detail": f"worker could not be restarted: {self.info['unavailable']}"}
        assert self.proc is not None and self.proc.stdin is not None
        from .maskcheck import DEFAULT_MAX_PASSES  # torch: only where cases run, not for `parity backends`

        passes = DEFAULT_MAX_PASSES if self.max_passes is None else self.max_passes
        try:
            req = {"op": "run", "case": case.to_json(), "probes": self.probes, "max_passes": passes, "repeats": self.repeats}
            req = {**req, "grad": True} if self.grad else req
            req = {**req, "inputs": inputs} if inputs is not None else req
            send(self.proc.stdin, {**req, "checks": list(self.checks)} if self.checks else req)
        except (BrokenPipeError, OSError):
            code = self.proc.wait(timeout=30)
            self.proc = None
            return {"status": "crash", "detail": f"worker {_signal_name(code)} before the case was sent"}
        self._submitted = True
        return None

    def answered(self, timeout: float = 0.0) -> bool:
        """Whether the answer to the case last :meth:`submit`-ted can be read now (or the worker's end: its crash),
        waiting up to ``timeout`` seconds for it; False with nothing submitted. :meth:`collect` still reads it."""
        proc = self.proc
        if not self._submitted or proc is None or proc.stdout is None:
            return False
        try:
            ready, _, _ = select.select([proc.stdout.fileno()], [], [], max(0.0, timeout))
        except (OSError, ValueError):  # its pipe closed under it (halted): collect says how it ended
            return True
        return bool(ready)

    def collect(self, timeout: float | None = None) -> dict[str, Any]:
        """The answer to the case last :meth:`submit`-ted (crash / timeout rows included), waited
        for ``timeout`` seconds (default: the executor's)."""
        if not self._submitted:
            return {"status": "error", "detail": "collect() without a submitted case"}
        self._submitted = False
        reply = self._reply(self.timeout if timeout is None else timeout)
        if reply.pop("restart", False):  # the worker saw a sticky CUDA error and is exiting
            self._kill()
        return reply

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            assert self.proc.stdin is not None
            send(self.proc.stdin, {"op": "exit"})
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._kill()
        self.proc = None
        self._remove_files()
