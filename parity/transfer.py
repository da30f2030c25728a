"""Tensors across the worker boundary as files in shared memory, not pickled bytes.

A pickled CPU tensor crosses a pipe as ``torch.save`` bytes: saved, pickled, written through a 64 KiB pipe,
read back in chunks, joined, unpickled and loaded, five copies of a 256 MiB output (a 32k-token bfloat16
prefill's) and about a second a row on the H100 hosts. Here a large tensor (:data:`MIN_BYTES`) in a message is
written once to a file of its own (:func:`write_tensor`) under a spill folder (``/dev/shm`` first: memory, not
disk), and the pickle carries only its :class:`FileTensor` (path, dtype, shape; :class:`Pickler`). The reader maps
the file (``torch.from_file``, private: a write to the tensor stays in the reader) and, where the file is the
message's own, unlinks it at once (:class:`Unpickler`): the bytes are those written, the file lives from the
write to the read, and its pages go when the reader's tensor does.

Files are named ``parity-io-<pid>-...`` after the process that owns them (:func:`owner_prefix`; a worker's: its
executor's process), so what a crash leaves is found again: an executor removes its worker's files when the
worker ends (:func:`remove_prefix`), and :func:`remove_stale` those of processes no longer running. Where no
folder has room (``posix_fallocate`` fails), the tensor is pickled as before. ``PARITY_SPILL_DIRS`` names the
folders (``off``: none, every tensor pickled).

Importing this module costs no torch import (:mod:`parity.process` stays torch-free): a message holds a tensor
only where torch is loaded.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Tensors of fewer bytes are pickled with the message (a file costs a few system calls).
MIN_BYTES = 1 << 20
#: The spill folders (os.pathsep-separated; ``off``: none), else :func:`spill_dirs`' default.
DIRS_ENV = "PARITY_SPILL_DIRS"
#: A worker's file prefix (set by its executor): its files are ``<dir>/<prefix><n>``; unset: pickle everything.
PREFIX_ENV = "PARITY_SPILL_PREFIX"
#: Every spill file's name starts so, then the owner's process id and ``-``.
STEM = "parity-io-"
_TAG = "parity-file-tensor"
#: A small tensor's persistent id: its bytes, dtype and shape. torch 2.13's own pickling of a CPU tensor fails on the
#: load side for float8 and uint16/32/64 dtypes ("UntypedStorage has no attribute 'dtype'"): a small case's fp8 K/V in
#: the shared inputs crossed so and crashed its worker (found by the README's CPU sweep, 2026-12-07).
_RAW = "parity-raw-tensor"
_CHUNK = 1 << 30  # bytes per write(2): Linux writes at most 2 GiB - 4 KiB at once
_counter = itertools.count()
_counter_lock = threading.Lock()


class SpillError(OSError):
    """A message's tensor file could not be read back (gone, or not what its record says)."""


@dataclasses.dataclass(frozen=True)
class FileTensor:
    """A dense tensor's bytes in the file ``path``: ``dtype`` (torch's name, ``"bfloat16"``) and ``shape``."""

    path: str
    dtype: str
    shape: tuple[int, ...]

    def load(self, unlink: bool = False) -> Any:
        """The tensor, mapped privately from the file (a write to it is the caller's alone); ``unlink``: the file
        is removed once mapped (its pages live as long as the tensor). :class:`SpillError` where it cannot be."""
        import torch

        dtype = getattr(torch, self.dtype)
        n = 1
        for s in self.shape:
            n *= s
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        try:
            size = os.stat(self.path).st_size
            if size != nbytes:
                raise SpillError(f"{self.path} holds {size} bytes, its {self.dtype} {list(self.shape)} tensor {nbytes}")
            raw = torch.from_file(self.path, shared=False, size=nbytes, dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
        except (OSError, RuntimeError) as exc:
            raise SpillError(f"tensor file {self.path}: {exc}") from None
        finally:
            if unlink:
                _unlink(self.path)
        return raw.view(dtype).reshape(self.shape)  # (shape)


def spill_dirs() -> list[str]:
    """Where tensor files go, in order of preference: ``$PARITY_SPILL_DIRS``, else ``/dev/shm`` (where it is a
    folder) and the temp folder; ``[]`` for ``off``."""
    env = os.environ.get(DIRS_ENV)
    if env is not None:
        return [] if env.strip().lower() == "off" else [d for d in env.split(os.pathsep) if d]
    dirs = ["/dev/shm"] if os.path.isdir("/dev/shm") else []
    return [*dirs, tempfile.gettempdir()]


def owner_prefix(pid: int | None = None, tag: str = "") -> str:
    """The name prefix of files owned by process ``pid`` (this one by default): ``parity-io-<pid>-<tag>``; a
    fresh ``tag`` per writer (:func:`new_tag`) keeps writers apart."""
    return f"{STEM}{os.getpid() if pid is None else pid}-{tag}"


def new_tag(kind: str) -> str:
    """A tag unique in this process: ``<kind><n>-``."""
    with _counter_lock:
        return f"{kind}{next(_counter)}-"


def write_tensor(t: Any, prefix: str, dirs: list[str] | None = None) -> FileTensor | None:
    """``t``'s bytes in a new file ``<dir>/<prefix><n>`` of the first of ``dirs`` (:func:`spill_dirs`) with room
    for them; None where it is no plain dense tensor or no folder has room (then it is pickled)."""
    import torch

    if not isinstance(t, torch.Tensor) or type(t) is not torch.Tensor or t.layout != torch.strided or t.requires_grad:
        return None
    if t.device.type != "cpu" or t.is_quantized or t.is_conj() or t.is_neg():
        return None
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)  # (nbytes,)
    data = memoryview(flat.numpy().data)  # the array's buffer, (nbytes,)
    for d in spill_dirs() if dirs is None else dirs:
        with _counter_lock:
            path = os.path.join(d, f"{prefix}{next(_counter)}")
        if _write(path, data):
            return FileTensor(path, str(t.dtype).removeprefix("torch."), tuple(t.shape))
    return None


def _write(path: str, data: memoryview) -> bool:
    """``data`` into a new file at ``path``, its room reserved first (a full tmpfs fails here, not later); False
    (and no file) where it cannot be."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    try:
        if len(data):
            os.posix_fallocate(fd, 0, len(data))
        done = 0
        while done < len(data):
            done += os.write(fd, data[done : done + _CHUNK])
        return True
    except OSError:
        _unlink(path)
        return False
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class Pickler(pickle.Pickler):
    """A message's pickler: each tensor of :data:`MIN_BYTES` or more goes to a file (:func:`write_tensor`) that
    the reader unlinks; ``prefix``: the files' name prefix (None: everything pickled)."""

    def __init__(self, file: Any, prefix: str | None, dirs: list[str] | None = None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.prefix, self.dirs = prefix, dirs
        self.files: list[str] = []  # written for this message

    def persistent_id(self, obj: Any) -> Any:
        if "torch" not in sys.modules:
            return None
        torch = sys.modules["torch"]
        if type(obj) is not torch.Tensor:
            return None
        ft = None if self.prefix is None or obj.nbytes < MIN_BYTES else write_tensor(obj, self.prefix, self.dirs)
        if ft is None:
            return _raw_id(obj)
        self.files.append(ft.path)
        return (_TAG, ft.path, ft.dtype, ft.shape)


def _raw_id(t: Any) -> Any:
    """``t``'s :data:`_RAW` id where it is a plain dense CPU tensor (its bytes, dtype, shape), else None (pickled
    by torch). Every such tensor goes so, not only the dtypes torch fails on: one rule, a few bytes more."""
    import torch

    if t.device.type != "cpu" or t.layout != torch.strided or t.requires_grad or t.is_quantized or t.is_conj() or t.is_neg():
        return None
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()  # (nbytes,)
    return (_RAW, raw, str(t.dtype).removeprefix("torch."), tuple(t.shape))


def _raw_load(raw: bytes, dtype: str, shape: tuple[int, ...]) -> Any:
    import torch

    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)  # (nbytes,)
    return flat.view(getattr(torch, dtype)).reshape(shape)


class Unpickler(pickle.Unpickler):
    """A message's unpickler: a tensor sent as a file is mapped and its file unlinked (:meth:`FileTensor.load`), a
    small one rebuilt from its bytes."""

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 4 and pid[0] == _TAG:
            return FileTensor(pid[1], pid[2], tuple(pid[3])).load(unlink=True)
        if isinstance(pid, tuple) and len(pid) == 4 and pid[0] == _RAW:
            return _raw_load(pid[1], pid[2], tuple(pid[3]))
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def dumps(obj: Any, prefix: str | None, dirs: list[str] | None = None) -> bytes:
    """``obj`` pickled, its large tensors in files (:class:`Pickler`); a failure removes the files written."""
    import io

    buf = io.BytesIO()
    p = Pickler(buf, prefix, dirs)
    try:
        p.dump(obj)
    except BaseException:
        for f in p.files:
            _unlink(f)
        raise
    return buf.getvalue()


def loads(data: bytes) -> Any:
    """:func:`dumps`' message back (:class:`Unpickler`)."""
    import io

    return Unpickler(io.BytesIO(data)).load()


def remove_prefix(prefix: str, dirs: list[str] | None = None) -> int:
    """Remove every file ``<dir>/<prefix>*`` of ``dirs`` (:func:`spill_dirs`); how many there were."""
    n = 0
    for d, name in _spill_files(dirs):
        if name.startswith(prefix):
            _unlink(os.path.join(d, name))
            n += 1
    return n


def _spill_files(dirs: list[str] | None) -> Iterator[tuple[str, str]]:
    """(folder, file name) of every file in ``dirs`` (:func:`spill_dirs`), an unreadable folder skipped."""
    for d in spill_dirs() if dirs is None else dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        yield from ((d, name) for name in names)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(dirs: list[str] | None = None) -> int:
    """Remove the spill files of processes that no longer run (a harness killed before it cleaned up); how many."""
    n = 0
    for d, name in _spill_files(dirs):
        pid = name[len(STEM) :].split("-", 1)[0] if name.startswith(STEM) else ""
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _unlink(os.path.join(d, name))
            n += 1
    return n


_STALE_SWEPT: set[str] = set()


def remove_stale_once(dirs: list[str]) -> None:
    """:func:`remove_stale` once per process and folder (each executor and store of a run asks)."""
    todo = [d for d in dirs if d not in _STALE_SWEPT]
    if todo:
        _STALE_SWEPT.update(todo)
        remove_stale(todo)


def listing(prefix: str, dirs: list[str] | None = None) -> list[Path]:
    """The files ``<dir>/<prefix>*`` of ``dirs`` now (tests, and what a run leaves)."""
    out: list[Path] = []
    for d in spill_dirs() if dirs is None else dirs:
        try:
            out += [Path(d, n) for n in sorted(os.listdir(d)) if n.startswith(prefix)]
        except OSError:
            continue
    return out


__all__ = [
    "DIRS_ENV",
    "MIN_BYTES",
    "PREFIX_ENV",
    "FileTensor",
    "Pickler",
    "SpillError",
    "Unpickler",
    "dumps",
    "listing",
    "loads",
    "new_tag",
    "owner_prefix",
    "remove_prefix",
    "remove_stale",
    "remove_stale_once",
    "spill_dirs",
    "write_tensor",
]
