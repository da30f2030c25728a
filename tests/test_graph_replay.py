"""CUDA graph replay (``parity run --graph-replay``, :mod:`parity.graphs`), its logic on the CPU: a fake
``CUDAGraph`` (and a fake capture) stand in for CUDA, a "CUDA" backend computes on CPU tensors. What it must
catch: a replay that does not recompute, a call that copied the inputs' values outside the captured function;
what it must say: needs CUDA on a CPU backend, a backend's refusal, a capture's error (the context lost where
the device is left in error). The real capture runs on a GPU (the lead's loan)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from parity import Case, Window, evaluate
from parity import graphs as graphs_mod
from parity.backends.base import Unsupported
from parity.backends.jax_attn import JaxBackend
from parity.case import make_inputs
from parity.execute import context_lost
from parity.graphs import PAD_SEQS, capture, copy_values, run_graph_check, static_copy
from parity.judge import judge_checks
from parity.selftest.bugs import EagerAttention

CASE = Case(q_lens=(4, 6), k_lens=(9, 6), hq=2, hkv=1, head_dim=8, dtype="float32", window=Window(3, 0), seed=4)


class FakeCuda(EagerAttention):
    """An honest eager backend that says it is a CUDA one (its tensors stay on the CPU here)."""

    name = "fake-cuda"
    device = "cuda"


class Padded(FakeCuda):
    """With a padded layout: an empty sequence appended, its output dropped (as an engine's padded slot)."""

    def graph_padded_call(self, case, inputs, pad):
        self.pads = pad

        def fn(out):
            return self.run(case, inputs, out)

        return fn


class CopiesOutside(FakeCuda):
    """The documented mistake: its graph_call copies the keys into its own buffer once, outside the function the
    graph captures, so a replay reads the old keys."""

    def graph_call(self, case, inputs):
        k = inputs.k.clone()  # host-side "layout" work that copies values: baked in at capture
        return lambda out: self.run(case, inputs.with_tensors(inputs.q, k, inputs.v), out)


class Refuses(FakeCuda):
    no_graph = "this library's call runs host code between its kernels"


class Raises(FakeCuda):
    def graph_call(self, case, inputs):
        def fn(out):
            raise RuntimeError("operation not permitted when stream is capturing")

        return fn


def honest_capture(fn):
    """A capture whose replay runs the captured work again on the buffers' current values (what a CUDA graph does)."""
    fn()
    return fn


def stale_capture(fn):
    """A replay that does not recompute: the output of capture time comes back (a graph that captured nothing)."""
    held = fn()
    return lambda: held


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)


def test_a_cpu_backend_needs_cuda():
    got = run_graph_check(EagerAttention(), CASE, make_inputs(CASE))
    assert got == {"status": "not_run", "detail": "needs CUDA (a CPU backend)"}
    row = evaluate(EagerAttention(), CASE, checks=("graph",))
    assert row["verdict"] == "pass" and row["graph_check"] == "not_run" and row["graph_detail"] == "needs CUDA (a CPU backend)"
    assert row["repro"].endswith(" --graph-replay")


def test_a_cuda_backend_without_a_device_is_not_run():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert run_graph_check(FakeCuda(), CASE, make_inputs(CASE))["detail"] == "needs CUDA (no CUDA device here)"


def test_an_honest_replay_is_bit_for_bit(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    got = run_graph_check(FakeCuda(), CASE, make_inputs(CASE))
    assert got["status"] == "ok" and got["max_diff"] == 0.0, got
    assert "replay: bit for bit equal to eager" in got["detail"] and "padded (+1 sequence of 0 keys): not run" in got["detail"]


def test_the_padded_pass_runs_where_the_backend_has_a_layout(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    backend = Padded()
    got = run_graph_check(backend, CASE, make_inputs(CASE))
    assert got["status"] == "ok" and backend.pads == PAD_SEQS
    assert "padded (+1 sequence of 0 keys): bit for bit equal to eager" in got["detail"]


def test_a_replay_that_does_not_recompute_is_caught(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs_mod, "capture", stale_capture)
    got = run_graph_check(FakeCuda(), CASE, make_inputs(CASE))
    assert got["status"] == "differs" and got["max_diff"] > 0.1 and "max |replayed - eager|" in got["detail"]
    cols = judge_checks({"status": "ok", "graph": got}, threshold_max=1e-5)
    assert cols["graph_check"] == "mismatch" and cols["reasons"] == ["graph_replay"]


def test_values_copied_outside_the_captured_function_are_caught(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    got = run_graph_check(CopiesOutside(), CASE, make_inputs(CASE))
    assert got["status"] == "differs" and got["max_diff"] > 0


class SeesLayout(FakeCuda):
    """Records the case (whose seed draws a paged cache's page order) each call was given."""

    def __init__(self):
        self.seen = []

    def run(self, case, inputs, out=None):
        self.seen.append(inputs.case)
        return super().run(case, inputs, out)


def test_eager_runs_on_the_captured_layout(fake_cuda, monkeypatch):
    """The eager call on the new values reads the layout the graph captured (the row's case, its seed), not one
    drawn from the replay seed: else a paged case's eager call reads other physical pages than the replay."""
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    backend = SeesLayout()
    paged = Case(**{**CASE.to_dict(), "window": CASE.window, "page_size": 4})
    assert run_graph_check(backend, paged, make_inputs(paged))["status"] == "ok"
    assert backend.seen and all(seen == paged for seen in backend.seen), [c.seed for c in backend.seen]


def test_a_refusal_and_a_capture_error(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    assert run_graph_check(Refuses(), CASE, make_inputs(CASE)) == {"status": "not_run", "detail": Refuses.no_graph}
    err = run_graph_check(Raises(), CASE, make_inputs(CASE))
    assert err["status"] == "error" and "not permitted when stream is capturing" in err["detail"] and "lost" not in err
    cols = judge_checks({"status": "ok", "graph": err}, threshold_max=1e-5)
    assert cols["graph_check"] == "error" and cols["reasons"] == []  # recorded, not a failure of the row

    class Unsup(FakeCuda):
        def graph_call(self, case, inputs):
            raise Unsupported("no graphs for paged calls")

    assert run_graph_check(Unsup(), CASE, make_inputs(CASE))["detail"] == "capture refused: no graphs for paged calls"


def test_a_capture_that_leaves_the_device_in_error_restarts_the_worker(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def broken_sync(*a, **k):
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(torch.cuda, "synchronize", broken_sync)
    monkeypatch.setattr(graphs_mod, "capture", honest_capture)
    got = run_graph_check(Raises(), CASE, make_inputs(CASE))
    assert got["status"] == "error" and got["lost"] is True and "previous error during capture" in got["detail"]
    assert context_lost({"status": "ok", "graph": got})
    assert context_lost({"status": "ok", "invariance": {"status": "error", "detail": "CUDA error: an illegal memory access"}})
    assert not context_lost({"status": "ok", "graph": {"status": "error", "detail": "RuntimeError: capture refused"}})


def test_jax_refuses_capture():
    assert "XLA" in JaxBackend.no_graph and JaxBackend().graph_unsupported_reason(CASE) == JaxBackend.no_graph
    assert EagerAttention().graph_unsupported_reason(CASE) is None and EagerAttention().graph_padded_call(CASE, None, 1) is None


def test_judge_checks_table():
    """Within the row's max budget a difference is close (a nondeterministic kernel), beyond it or NaN a mismatch;
    a check not asked is not_run, off."""
    close = judge_checks({"graph": {"status": "differs", "max_diff": 1e-6, "detail": "x"}}, threshold_max=1e-5)
    assert close["graph_check"] == "close" and close["reasons"] == [] and close["graph_max_diff"] == 1e-6
    nan = judge_checks({"graph": {"status": "differs", "max_diff": float("inf"), "detail": "x"}}, threshold_max=1e-5)
    assert nan["graph_check"] == "mismatch" and nan["reasons"] == ["graph_replay"]
    off = judge_checks({}, threshold_max=1e-5)
    assert off["graph_check"] == off["invariance_check"] == "not_run" and off["graph_max_diff"] is None
    assert off["invariance_detail"] == "off (parity run --invariance)" and off["graph_detail"] == "off (parity run --graph-replay)"
    inv = judge_checks({"invariance": {"status": "mismatch", "max_diff": 1e-9, "detail": "seq 0 alone"}}, threshold_max=1.0)
    assert inv["invariance_check"] == "mismatch" and inv["reasons"] == ["batch_invariance"]  # bitwise: no budget


def test_static_buffers_are_copies_and_take_the_new_values():
    inputs = make_inputs(CASE)
    static = static_copy(inputs)
    assert static.q.data_ptr() != inputs.q.data_ptr() and torch.equal(static.q, inputs.q)
    fresh = make_inputs(Case(**{**CASE.to_dict(), "window": CASE.window, "seed": 99}))
    ptr = static.k.data_ptr()
    copy_values(static, fresh)
    assert static.k.data_ptr() == ptr and torch.equal(static.k, fresh.k) and not torch.equal(static.k, inputs.k)


class FakeGraph:
    """A stand-in for ``torch.cuda.CUDAGraph``: counts its replays."""

    made: list[FakeGraph] = []

    def __init__(self):
        self.replays = 0
        FakeGraph.made.append(self)

    def replay(self):
        self.replays += 1


def test_capture_warms_up_then_captures_once_and_replays_the_graph(monkeypatch):
    """:func:`capture` on a fake CUDAGraph: one warm-up call on a side stream, one call inside ``torch.cuda.graph``,
    and each replay replays that graph (no further call of the function) and returns the captured output."""
    events: list[str] = []

    class Stream:
        def wait_stream(self, other):
            events.append("wait")

    @contextlib.contextmanager
    def graph(g):
        events.append("capture-begin")
        yield
        events.append("capture-end")

    @contextlib.contextmanager
    def stream(s):
        events.append("side")
        yield

    FakeGraph.made.clear()
    for name, value in {
        "CUDAGraph": FakeGraph,
        "graph": graph,
        "Stream": Stream,
        "stream": stream,
        "current_stream": lambda: Stream(),
        "synchronize": lambda: events.append("sync"),
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)
    out = torch.zeros(3)

    def fn():
        events.append("call")
        return out

    replay = capture(fn)
    assert events == ["sync", "wait", "side", "call", "wait", "capture-begin", "call", "capture-end"]
    assert replay() is out and replay() is out
    assert len(FakeGraph.made) == 1 and FakeGraph.made[0].replays == 2 and events.count("call") == 2
