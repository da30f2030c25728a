"""flex-cuda's compile key is exact: one Dynamo graph per key, whatever the lengths (issue 47).

Measured on an H200 (lab/runs/h200-2026-12-06d-coldwarm): flex built 224 graphs for 119 keys. Two causes
show on the CPU with Dynamo's eager backend (no inductor, no GPU): duck shaping (lengths equal at the
first call share a symbol and a guard) and the 0/1 rule (a 128-row bucket is one block, specialised).
flex-cuda compiles without duck shaping and pads to 256 rows at least, so every case of a key traces
the same graph (in one worker, and in another process, which then hits the FX-graph cache). A third cause,
found on the CPU with inductor (lab/runs/cpu-flex-keys-2026-12-07): the softmax scale, a float specialised by
value, so the key names it.
"""

from __future__ import annotations

import functools

import pytest
import torch

from parity.backends import flex
from parity.case import Case, make_inputs
from parity.window import Window

LENGTHS = [((256,), (256,)), ((256,), (512,)), ((1,), (1024,)), ((100,), (100,)), ((300, 7), (1500, 7))]


class _FlexDynamicCpu(flex.FlexCudaBackend):
    name = "flex-dynamic-cpu"
    device = "cpu"
    compiled = True
    returns_lse = False


def _graphs_for_one_key(monkeypatch, min_bucket: int, no_duck: bool) -> tuple[int, set]:
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=True, backend="eager")  # Dynamo's guards, no inductor
    fn = flex._without_duck_shapes(compiled) if no_duck else compiled
    monkeypatch.setattr(flex, "_compiled_flex", functools.cache(lambda dynamic=False: fn))
    be = type("B", (_FlexDynamicCpu,), {"min_bucket": min_bucket})()
    g0, keys = counters["stats"]["unique_graphs"], set()
    for i, (ql, kl) in enumerate(LENGTHS):
        case = Case(ql, kl, 4, 2, 32, "float32", Window(63, 0), seed=i)
        keys.add(be.compile_key(case))
        inputs = make_inputs(case)
        be.run(case, inputs, torch.empty_like(inputs.q))  # (total_q, hq, d)
    return counters["stats"]["unique_graphs"] - g0, keys


def test_one_graph_per_compile_key(monkeypatch):
    graphs, keys = _graphs_for_one_key(monkeypatch, flex.FlexCudaBackend.min_bucket, no_duck=True)
    assert len(keys) == 1
    assert graphs == 1, f"{graphs} graphs for one compile key over lengths {LENGTHS}"


@pytest.mark.parametrize(("min_bucket", "no_duck"), [(128, True), (256, False)])
def test_either_cause_alone_builds_more(monkeypatch, min_bucket, no_duck):
    """The test above can fail: with 128-row buckets, or with duck shaping, the same key builds again."""
    graphs, keys = _graphs_for_one_key(monkeypatch, min_bucket, no_duck)
    assert len(keys) == 1 and graphs > 1


#: one (dtype, heads, head dim), three softmax scales (None: 1 / sqrt(32)), lengths in two buckets
SCALED = [(None, (256,)), (0.05, (256,)), (0.5, (300,)), (0.05, (600,)), (None, (1000,))]


def test_a_graph_per_compile_key_over_softmax_scales(monkeypatch):
    """flex_attention's ``scale`` is a Python float: Dynamo passes it as a 0-d tensor, then AOT's tensorify pass
    specialises it (guard ``scale == 0.05``: the flex op takes a float), so each scale builds a graph of its own;
    the key names the scale (the H100 run of 2026-12-07b built 209 graphs for 180 keys, 29 = the scales beyond a
    key's first: lab/runs/cpu-flex-keys-2026-12-07). ``aot_eager``: that pass runs, inductor does not."""
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    fn = flex._without_duck_shapes(torch.compile(flex_attention, dynamic=True, backend="aot_eager"))
    monkeypatch.setattr(flex, "_compiled_flex", functools.cache(lambda dynamic=False: fn))
    be, g0, keys = _FlexDynamicCpu(), counters["stats"]["unique_graphs"], set()
    for i, (scale, lens) in enumerate(SCALED):
        case = Case(lens, lens, 4, 2, 32, "float32", Window(63, 0), scale=scale, seed=i)
        keys.add(be.compile_key(case))
        inputs = make_inputs(case)
        be.run(case, inputs, torch.empty_like(inputs.q))  # (total_q, hq, d)
    graphs = counters["stats"]["unique_graphs"] - g0
    assert graphs == 3, f"{graphs} graphs for three scales: torch no longer specialises the scale?"
    assert len(keys) == graphs, f"{graphs} graphs for {len(keys)} compile keys over scales {[s for s, _ in SCALED]}"
