"""Tensors across the worker boundary as shared-memory files (parity.transfer): the bytes sent are the bytes read,
a large answer's bytes never go through the pickle, and no file outlives its message, a dead worker or a dead
harness."""

import errno
import os
import subprocess
import sys

import pytest
import torch

from parity import Case, Window, transfer
from parity.backends.reference import ReferenceBackend
from parity.execute import InlineExecutor
from parity.process import ProcessExecutor

#: a row whose output is 4 MiB (4096 x 4 x 64 float32): over transfer.MIN_BYTES, so it crosses as a file
BIG = Case(q_lens=(4096,), k_lens=(4096,), hq=4, hkv=2, head_dim=64, dtype="float32", window=Window(15, 0), seed=3)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)  # (nbytes,)


def _mapped_from(t: torch.Tensor) -> str | None:
    """The file ``t``'s memory is mapped from (this process's /proc/self/maps), None for anonymous memory."""
    ptr = t.data_ptr()
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= ptr < hi:
                return parts[5].strip() if len(parts) == 6 and parts[5].startswith("/") else None
    return None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3fn", "int32", "bool", "complex64"])
def test_a_large_tensor_crosses_as_a_file_with_its_exact_bytes(tmp_path, dtype):
    x = torch.randn(2048, 8, 96, generator=torch.Generator().manual_seed(1)) * 300  # (2048, 8, 96)
    x = (x > 0) if dtype == "bool" else x.to(getattr(torch, dtype))
    x = x.transpose(0, 1)  # not contiguous: sent as its values, in its shape
    prefix = transfer.owner_prefix(tag="t-")
    msg = transfer.dumps({"output": x, "small": torch.arange(4)}, prefix, [str(tmp_path)])
    assert len(msg) < 1024, f"the message carries {len(msg)} bytes of a {x.nbytes}-byte tensor: it went through the pickle"
    assert len(transfer.listing(prefix, [str(tmp_path)])) == 1
    got = transfer.loads(msg)
    assert got["output"].dtype == x.dtype and got["output"].shape == x.shape
    diff = int((_bytes(got["output"]) != _bytes(x)).sum())
    assert diff == 0, f"{diff} of {x.nbytes} bytes differ after the round trip"
    assert torch.equal(got["small"], torch.arange(4))
    assert transfer.listing(prefix, [str(tmp_path)]) == [], "the reader unlinks the file once mapped"


def test_small_tensors_and_folders_without_room_are_pickled(tmp_path, monkeypatch):
    prefix = transfer.owner_prefix(tag="t-")
    small = torch.ones(16)
    big = torch.randn(1 << 19)  # 2 MiB
    msg = transfer.dumps([small], prefix, [str(tmp_path)])
    assert transfer.listing(prefix, [str(tmp_path)]) == [] and torch.equal(transfer.loads(msg)[0], small)
    msg = transfer.dumps([big], prefix, [str(tmp_path / "missing")])
    assert len(msg) > big.nbytes and torch.equal(transfer.loads(msg)[0], big)

    def full(fd, offset, n):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    msg = transfer.dumps([big], prefix, [str(tmp_path)])
    assert len(msg) > big.nbytes and torch.equal(transfer.loads(msg)[0], big)
    assert transfer.listing(prefix, [str(tmp_path)]) == [], "a folder without room keeps no half-written file"


def test_a_file_gone_before_it_is_read_says_so(tmp_path):
    prefix = transfer.owner_prefix(tag="t-")
    msg = transfer.dumps([torch.randn(1 << 19)], prefix, [str(tmp_path)])
    transfer.remove_prefix(prefix, [str(tmp_path)])
    with pytest.raises(transfer.SpillError, match="tensor file"):
        transfer.loads(msg)


def test_a_workers_answer_crosses_as_a_file_and_leaves_none(tmp_path, monkeypatch):
    monkeypatch.setenv(transfer.DIRS_ENV, str(tmp_path))
    ex = ProcessExecutor("reference", probes=False)
    try:
        res = ex.run(BIG)
        assert res["status"] == "ok", res.get("detail")
        where = _mapped_from(res["output"])
        assert where is not None and where.startswith(str(tmp_path)), f"the output came as pickled bytes (mapped from {where})"
        assert where.endswith("(deleted)"), f"the output's file {where} was not unlinked once mapped"
        assert transfer.listing(ex.spill_prefix, [str(tmp_path)]) == []
    finally:
        ex.close()
    inline = InlineExecutor("reference", probes=False).run(BIG)["output"]
    diff = int((_bytes(res["output"]) != _bytes(inline)).sum())
    assert diff == 0, f"{diff} bytes of the worker's output differ from the same row run in this process"


class _ExitsWhenPickled:
    def __reduce__(self):
        os._exit(7)


class DiesSendingItsAnswer(ReferenceBackend):
    """Answers, then dies while its answer is pickled: after the output's file is written, before the message is sent."""

    name = "dies-sending"
    lse_empty = (_ExitsWhenPickled(),)  # pickled after the output (parity.execute's result order)


def test_a_worker_that_dies_mid_answer_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv(transfer.DIRS_ENV, str(tmp_path))
    ex = ProcessExecutor("tests.test_transfer:DiesSendingItsAnswer", probes=False)
    written: list[str] = []
    remove = transfer.remove_prefix
    monkeypatch.setattr(transfer, "remove_prefix", lambda p, d=None: written.extend(map(str, transfer.listing(p, d))) or remove(p, d))
    try:
        res = ex.run(BIG)
        assert res["status"] == "crash" and "status 7" in res["detail"], res
        assert written, "the worker died before it wrote its output's file: the test does not reach the case it is for"
        assert transfer.listing(ex.spill_prefix, [str(tmp_path)]) == [], "the dead worker's file was left"
    finally:
        ex.close()


class Hangs(ReferenceBackend):
    name = "hangs"

    def run(self, case, inputs, out):
        import time

        time.sleep(600)


def test_a_worker_killed_at_its_time_limit_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv(transfer.DIRS_ENV, str(tmp_path))
    ex = ProcessExecutor("tests.test_transfer:Hangs", probes=False, timeout=600)
    try:
        (tmp_path / f"{ex.spill_prefix}0").write_bytes(b"x" * 10)  # what a worker killed while writing leaves
        assert ex.submit(BIG) is None
        res = ex.collect(timeout=3)
        assert res["status"] == "timeout"
        assert transfer.listing(ex.spill_prefix, [str(tmp_path)]) == []
    finally:
        ex.close()


def test_files_of_dead_harness_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{transfer.owner_prefix(dead.pid, 'w0-')}0"
    live = tmp_path / f"{transfer.owner_prefix(os.getppid(), 'w0-')}0"
    own = tmp_path / f"{transfer.owner_prefix(tag='w0-')}0"
    other = tmp_path / "unrelated-123-0"
    for f in (stale, live, own, other):
        f.write_bytes(b"x")
    assert transfer.remove_stale([str(tmp_path)]) == 1
    assert not stale.exists() and live.exists() and own.exists() and other.exists()


def test_spill_dirs_off_pickles_everything(tmp_path, monkeypatch):
    monkeypatch.setenv(transfer.DIRS_ENV, "off")
    assert transfer.spill_dirs() == []
    ex = ProcessExecutor("reference", probes=False)
    try:
        res = ex.run(BIG)
        assert res["status"] == "ok" and _mapped_from(res["output"]) is None
    finally:
        ex.close()
