"""Greedy-decode divergence (parity/decode): honest backends show no real divergence,
window bugs show a real one beyond the window, a raising backend costs only its rows."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from parity import Backend, Case, Inputs, Window
from parity.cli import main
from parity.decode.model import config_for
from parity.decode.run import COLUMNS, DecodeConfig, margins, run_decode, score
from parity.decode.task import load_or_train
from parity.reference import attention_reference

WINDOW = 16
PROMPTS = (8, 16, 17, 40)  # below, at, one past and well beyond the window
STEPS = 20


class PagedGather(Backend):
    """Reads the paged cache (inputs.paged()), gathers it back and runs the reference."""

    name = "paged-gather"
    supports_paged = True
    calls: list = []

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        if case.page_size is not None:
            k, v = inputs.paged().gather()
            inputs = inputs.with_tensors(inputs.q, k, v)
            PagedGather.calls.append(case.page_size)
        out.copy_(attention_reference(inputs))
        return out


HONEST = ["examples.my_kernel:MyKernel", "sdpa", "reference"]
BUGGY = ["examples.my_kernel:MyKernelOffByOne", "parity.selftest.bugs:DecodeDropsWindow"]


@pytest.fixture(scope="module")
def mistral_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("decode")
    cfg = DecodeConfig(models=("mistral",), dtype="float32", prompt_lens=PROMPTS, steps=STEPS, window=WINDOW)
    res = run_decode([*HONEST, *BUGGY, "tests.helpers:RaisesInDecode"], cfg, out)
    return res, out


def _rows(res, backend):
    rows = [r for r in res.rows if r["backend"] == backend]
    assert len(rows) == len(PROMPTS), rows
    return rows


def test_model_is_confident(mistral_run):
    res, _ = mistral_run
    m = res.meta["models"]["mistral"]
    assert m["training"]["heldout_accuracy"] >= 0.99
    # margins far above the measured float32 noise: the classification means something
    assert m["reference_margin_median"] > 1000 * m["tie_threshold"]
    assert m["noise"] < 1e-3


@pytest.mark.parametrize("backend", HONEST)
def test_honest_backend_shows_no_real_divergence(mistral_run, backend):
    res, _ = mistral_run
    for r in _rows(res, backend):
        assert r["verdict"] == "pass", r
        assert r["div_class"] in ("none", "near_tie"), r
        assert r["tf_real_flips"] == 0
        assert float(r["tf_max_abs_err"]) <= 4 * float(r["noise"]), r
        assert float(r["err_over_noise"]) <= 4, r


@pytest.mark.parametrize("backend", BUGGY)
def test_window_bug_shows_real_divergence_beyond_the_window(mistral_run, backend):
    res, _ = mistral_run
    rows = _rows(res, backend)
    for r in rows:
        # every prompt reaches beyond the window during decode; the divergence is real and
        # sits at a query that has keys outside its window, never before
        assert r["verdict"] == "fail", r
        assert r["div_class"] == "real", r
        assert r["first_div_pos"] >= WINDOW, r
        assert r["first_div_step"] >= r["window_exceeded_step"], r
        assert float(r["ref_margin"]) > float(r["tie_threshold"])
        assert float(r["token_agreement"]) < 1.0
    beyond = next(r for r in rows if r["prompt_len"] == 40)
    if backend.endswith("DecodeDropsWindow"):
        assert beyond["first_div_step"] >= 1  # its prefill is right; decode is where it breaks
    else:
        assert beyond["first_div_step"] == 0  # the prefill of a 40-token prompt already sees one key too many


def test_raising_backend_costs_only_its_rows(mistral_run):
    res, _ = mistral_run
    rows = _rows(res, "tests.helpers:RaisesInDecode")
    assert all(r["verdict"] == "error" and "planted failure in decode" in r["detail"] for r in rows)
    assert all(r["verdict"] == "pass" for r in _rows(res, "reference"))


def test_outputs_written(mistral_run):
    res, out = mistral_run
    with open(out / "decode.csv") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        rows = list(reader)
    assert len(rows) == len(res.rows) == len(PROMPTS) * (1 + len(HONEST) + len(BUGGY) + 1)
    meta = json.loads((out / "decode.json").read_text())
    assert meta["models"]["mistral"]["layer_kinds"] == ["local", "local"]
    with open(out / "decode_steps.csv") as f:
        steps = list(csv.DictReader(f))
    assert {s["backend"] for s in steps} >= {"baseline", "reference", "examples.my_kernel:MyKernelOffByOne"}


def test_score_classifies_near_tie_and_real():
    ref = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.999, 0.0], [3.0, 0.0, 0.0]], dtype=torch.float64)
    tf = ref.clone()
    tf[1, 1] = 1.002  # flips a near-tie (margin 0.001)
    row, _ = score(tf, [0, 0, 0], ref, [0, 0, 0], threshold=0.01, noise=0.0025)
    assert (row["first_div_step"], row["div_class"], row["tf_real_flips"], row["verdict"]) == (1, "near_tie", 0, "pass")
    tf[2, 2] = 4.0  # flips a confident step (margin 3)
    row, _ = score(tf, [0, 1, 2], ref, [0, 0, 0], threshold=0.01, noise=0.0025)
    assert (row["first_div_step"], row["div_class"], row["tf_flips"], row["tf_real_flips"], row["verdict"]) == (1, "near_tie", 2, 1, "fail")
    assert row["token_agreement"] == "0.3333"
    assert margins(ref).tolist() == pytest.approx([1.0, 0.001, 3.0])


def test_gemma2_local_global_and_unsupported(tmp_path):
    cfg = DecodeConfig(models=("gemma2",), prompt_lens=(17,), steps=12, window=WINDOW)
    res = run_decode(["sdpa", "examples.my_kernel:MyKernel", "examples.my_kernel:MyKernelOffByOne"], cfg, tmp_path)
    m = res.meta["models"]["gemma2"]
    assert m["layer_kinds"] == ["local", "global"]
    by = {r["backend"]: r for r in res.rows}
    assert by["sdpa"]["verdict"] == "unsupported" and "softcap" in by["sdpa"]["detail"]
    assert by["examples.my_kernel:MyKernel"]["verdict"] == "pass"
    assert by["examples.my_kernel:MyKernelOffByOne"]["div_class"] == "real"


def test_paged_decode_reaches_the_backend(tmp_path):
    PagedGather.calls.clear()
    cfg = DecodeConfig(models=("mistral",), prompt_lens=(20,), steps=6, window=WINDOW, page_size=4)
    res = run_decode(["tests.test_decode:PagedGather", "examples.my_kernel:MyKernel"], cfg, tmp_path)
    by = {r["backend"]: r for r in res.rows}
    assert by["tests.test_decode:PagedGather"]["verdict"] == "pass"
    assert PagedGather.calls and set(PagedGather.calls) == {4}
    assert by["examples.my_kernel:MyKernel"]["verdict"] == "unsupported"


def test_bfloat16_honest_backend(tmp_path):
    """In bf16 the noise is real; an honest kernel may flip only near-ties."""
    cfg = DecodeConfig(models=("mistral",), dtype="bfloat16", prompt_lens=(8, 40), steps=16, window=WINDOW)
    res = run_decode(["examples.my_kernel:MyKernel", "examples.my_kernel:MyKernelOffByOne"], cfg, tmp_path)
    noise = res.meta["models"]["mistral"]["noise"]
    assert 1e-4 < noise < 1.0  # bf16 rounding is measured, not assumed
    for r in res.rows:
        if r["backend"] == "examples.my_kernel:MyKernel":
            assert r["verdict"] == "pass" and r["div_class"] in ("none", "near_tie"), r
        if r["backend"] == "examples.my_kernel:MyKernelOffByOne":
            assert r["div_class"] == "real", r


def test_training_is_cached_and_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_CACHE_DIR", str(tmp_path))
    cfg = config_for("mistral", window=WINDOW)
    from parity.decode.task import TrainConfig

    tc = TrainConfig(steps=3)
    a, info_a = load_or_train(cfg, tc)
    b, info_b = load_or_train(cfg, tc)
    assert info_a["cached"] == "" and info_b["cached"]
    c, _ = load_or_train(cfg, tc, use_cache=False)
    for (n, pa), pb, pc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(pa, pb) and torch.equal(pa, pc), n


def test_window_of_layers():
    assert config_for("mistral").layer_window(1) == Window.tokens(16)
    g = config_for("gemma2", window=8)
    assert [g.layer_window(i) for i in range(2)] == [Window(7, 0), Window.causal()]


def test_cli(tmp_path, capsys):
    rc = main(["decode", "-b", "reference", "--model", "mistral", "--prompt-lens", "17", "--steps", "4", "--out", str(tmp_path), "-q"])
    assert rc == 0
    assert (tmp_path / "decode.csv").exists() and (tmp_path / "decode.json").exists()
    assert "reference" in capsys.readouterr().out
    assert main(["decode", "-b", "no-such-backend", "--out", str(tmp_path)]) == 2
    assert main(["decode", "--prompt-lens", "0", "--out", str(tmp_path)]) == 2
    rc = main(
        [
            "decode",
            "-b",
            "examples.my_kernel:MyKernelOffByOne",
            "--model",
            "mistral",
            "--prompt-lens",
            "40",
            "--steps",
            "4",
            "--out",
            str(tmp_path),
            "-q",
        ]
    )
    assert rc == 1


def _transformers_reason() -> str | None:
    from parity.decode.hf import unavailable_reason

    return unavailable_reason()


@pytest.mark.skipif(_transformers_reason() is not None, reason=f"transformers not usable here: {_transformers_reason()}")
def test_hf_architectures(tmp_path):
    """HF Mistral / Qwen2 / Gemma2 (random init + short training), attention routed through the backends."""
    cfg = DecodeConfig(models=("hf-mistral", "hf-qwen2", "hf-gemma2"), prompt_lens=(8, 40), steps=12, window=WINDOW)
    res = run_decode(["examples.my_kernel:MyKernel", "examples.my_kernel:MyKernelOffByOne"], cfg, tmp_path)
    kinds = {m: res.meta["models"][m]["layer_kinds"] for m in cfg.models}
    assert kinds == {"hf-mistral": ["local", "local"], "hf-qwen2": ["global", "local"], "hf-gemma2": ["local", "global"]}
    for r in res.rows:
        if r["backend"] == "examples.my_kernel:MyKernel":
            assert r["verdict"] == "pass" and r["div_class"] in ("none", "near_tie"), r
    bad = [r for r in res.rows if r["backend"].endswith("OffByOne") and r["model"] == "hf-mistral"]
    assert bad and all(r["div_class"] == "real" for r in bad), bad


@pytest.mark.skipif(_transformers_reason() is not None, reason=f"transformers not usable here: {_transformers_reason()}")
@pytest.mark.parametrize("arch", ["hf-mistral", "hf-qwen2", "hf-gemma2"])
def test_hf_routing_matches_hf_eager(arch):
    """The window / softcap / scale handed to the backends is HF's own: routed through the
    reference, prefill + decode logits equal HF's eager attention with its own masks."""
    from parity.decode import hf
    from parity.decode.run import reference_attn
    from parity.decode.task import prompt

    cfg, model, _ = hf.load(arch, window=WINDOW)
    x = prompt(3, 40, WINDOW, cfg.vocab)
    with torch.no_grad():
        eager = model(x[None])[0]  # (T, V)
    attn = reference_attn(torch.float64, cfg.hq, cfg.hkv, cfg.head_dim)
    cache = model.new_cache(40, torch.float32, "cpu")
    routed = [model.extend(x[:20], 0, cache, attn)]
    routed += [model.extend(x[t : t + 1], t, cache, attn) for t in range(20, 40)]
    assert torch.allclose(torch.stack(routed), eager[19:40], atol=1e-4, rtol=0)


def test_hf_models_refused_without_transformers(tmp_path, monkeypatch):
    import parity.decode.hf as hf

    monkeypatch.setattr(hf, "unavailable_reason", lambda: "transformers missing (test)")
    assert main(["decode", "--model", "hf-mistral", "--out", str(tmp_path)]) == 2
    assert main(["decode", "--model", "hf-checkpoint", "--out", str(tmp_path)]) == 2
