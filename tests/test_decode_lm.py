"""The decode study on a language model (parity/decode/lm.py, train.py, study.py): the byte-level
model of the standard library, its trainer and folder, and the study's measures. The model is the
``cpu-tiny`` preset, trained once (about 10 s of CPU) and cached like the synthetic models."""

from __future__ import annotations

import csv
import dataclasses

import pytest
import torch

from parity import Backend, Case, Inputs, Window
from parity.cli import main
from parity.decode import lm, study
from parity.decode.train import PRESETS, cached
from parity.reference import attention_reference

BUG = "parity.selftest.bugs:DecodeDropsWindow"


class RefusesBatches(Backend):
    """Refuses every call with more than one sequence."""

    name = "refuses-batches"

    def unsupported_reason(self, case: Case) -> str | None:
        return "one sequence at a time" if case.batch > 1 else None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        raise AssertionError("never called")


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one intra-op thread is several times faster on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny():
    model, config, metrics, folder = cached("cpu-tiny")
    return model, config, metrics


@pytest.fixture(scope="module")
def result(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm-decode")
    cfg = study.StudyConfig(model="cpu-tiny", dtypes=("bfloat16", "float32"), prompts=6, prompt_len=32, steps=32, time_limit=60)
    specs = ["sdpa", "reference", BUG, "tests.helpers:RaisesInDecode", "tests.test_decode_lm:RefusesBatches"]
    return study.run_study(specs, cfg, out), out


def _row(res, backend, dtype):
    return next(r for r in res.rows if r["backend"] == backend and r["dtype"] == dtype)


# -- corpus, tokenizer, prompts ---------------------------------------------------------------------


def test_corpus_is_deterministic_and_the_split_disjoint():
    a, b = lm.load_corpus(100_000), lm.load_corpus(100_000)
    assert a.digest == b.digest and a.train == b.train and a.heldout == b.heldout
    root = lm.stdlib_root()
    files = lm.corpus_files(root)
    held = [p for p in files if lm.is_heldout(p.relative_to(root).as_posix())]
    assert 0.01 < len(held) / len(files) < 0.15
    first_held = held[0].read_bytes()
    assert first_held in a.heldout + b"" and first_held not in a.train


def test_prompts_start_at_line_starts_and_are_reproducible():
    text = b"".join(b"line %d: " % i + b"x" * (i % 7) + b"\n" for i in range(300))
    p = lm.prompts_from(text, 5, 12, seed=3)
    assert p.shape == (5, 12) and torch.equal(p, lm.prompts_from(text, 5, 12, seed=3))
    for row in p:
        snippet = bytes(row.tolist())
        assert snippet.startswith(b"line ") and (b"\n" + snippet) in text


# -- the model ----------------------------------------------------------------------------------------


def test_batched_kv_step_equals_the_training_forward():
    """Prefill then one-token steps, every layer one packed call, equal the full forward of each sequence
    (float64): positions, the KV cache, the packing of the batch and each layer's window are right."""
    cfg = dataclasses.replace(PRESETS["cpu-tiny"].model, window=8)
    model = lm.TextLM(cfg).double().eval()
    tokens = torch.randint(0, 256, (3, 30), generator=torch.Generator().manual_seed(0))
    full = model(tokens)  # (3, 30, V)
    cache = model.new_batch_cache(3, 30, torch.float64, "cpu")
    attn = lm.dense_attention(torch.float64)
    got = [model.step(tokens[:, :20], 0, cache, attn)]
    got += [model.step(tokens[:, s : s + 1], s, cache, attn) for s in range(20, 30)]
    torch.testing.assert_close(torch.stack(got, 1), full[:, 19:], rtol=0, atol=1e-9)
    assert model.cfg.layer_kinds() == ["local", "local", "global"]


@pytest.mark.parametrize("window", [Window.tokens(5), Window.causal()])
@pytest.mark.parametrize("sq", [1, 7])
def test_dense_attention_matches_the_reference(window, sq):
    b, sk, hq, hkv, d = 3, 12, 4, 2, 16
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(b * sq, hq, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b * sk, hkv, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b * sk, hkv, d, generator=gen, dtype=torch.float64)
    case = Case((sq,) * b, (sk,) * b, hq, hkv, d, "float32", window)
    cu = [torch.arange(0, b + 1, dtype=torch.int32) * n for n in (sq, sk)]
    want = attention_reference(Inputs(case, q, k, v, *cu))
    got = lm.dense_attention(torch.float64)(0, q, k, v, window, None, (sq,) * b, (sk,) * b)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_cpu_tiny_has_realistic_entropy(tiny):
    """Learned (far below the 8 bits/byte of a uniform guess) and uncertain: near-ties exist."""
    model, config, metrics = tiny
    assert metrics["heldout_bits_per_byte"] < 4.0
    assert metrics["margin_share_below"]["0.1"] > 0.02
    assert config["model"]["head_dim"] == 64 and config["model"]["hq"] > config["model"]["hkv"]
    assert sum(metrics["margin_histogram"]["counts"]) == metrics["heldout_positions"]


def test_train_entry_point_writes_a_loadable_folder(tmp_path):
    out = tmp_path / "m"
    assert main(["decode-train", "--preset", "cpu-tiny", "--steps", "2", "--out", str(out), "-q"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["config.json", "metrics.json", "weights-00.pt"]
    assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())
    model, config, metrics = lm.load(out)
    assert config["preset"] == "cpu-tiny" and metrics["train_steps"] == 2 and "heldout_loss_nats_per_byte" in metrics
    assert config["tokenizer"] == {"type": "bytes", "vocab": 256}
    assert main(["decode-train", "--preset", "gpu", "--out", str(tmp_path / "g")]) == 2  # a time-budget preset needs --time-budget-s


def test_a_time_budget_stops_at_the_pass_cap_with_the_schedule_run_out(tmp_path, monkeypatch):
    """A time budget no longer over-trains the corpus: the steps stop at max_passes (cpu-tiny's 600 kB at 1 kB a step:
    0.01 passes, about 6 steps) though the budget allows far more, and the cosine schedule reaches its floor there."""
    from parity.decode import train as tr

    spec = dataclasses.replace(PRESETS["cpu-tiny"], steps=None, max_passes=0.01)
    assert tr.step_cap(spec, 600_000) == 6 and tr.step_cap(dataclasses.replace(spec, steps=4), 600_000) == 4
    assert tr.step_cap(dataclasses.replace(spec, max_passes=None), 600_000) is None
    lrs = []
    monkeypatch.setattr(tr, "lr_at", lambda s, step, frac: lrs.append(frac) or s.lr)
    model, extra, metrics = tr.train(spec, "cpu", time_budget=30.0)
    n = len(tr.load_corpus(spec.max_bytes).train)
    cap = tr.step_cap(spec, n)
    assert cap is not None and 5 <= cap <= 8 and metrics["train_steps"] == cap
    assert metrics["train_passes"] == round(cap * 16 * 64 / n, 3)
    assert lrs == pytest.approx([i / cap for i in range(cap)], abs=1e-3), lrs  # the schedule runs over the cap, not 30 s
    assert main(["decode-train", "--preset", "cpu-tiny", "--max-passes", "-1", "--out", str(tmp_path / "x")]) == 2


def test_the_command_line_knows_every_preset():
    from parity.cli import decode_train

    assert set(decode_train.PRESETS) == set(PRESETS)


def test_weights_are_sharded_below_16_mib(tmp_path):
    assert lm.TextLM(PRESETS["gpu"].model).state_dict()  # the gpu preset: one file (about 15 MB)
    cfg = dataclasses.replace(PRESETS["gpu"].model, d_model=512, hq=8, d_ff=2048, n_layers=3)  # 11 M parameters: 23 MB
    model = lm.TextLM(cfg)
    written = lm.save(model, tmp_path, {"preset": "x"}, {})
    shards = [p for p in written if p.name.startswith("weights-")]
    assert len(shards) == 2 and all(p.stat().st_size < 16 * 2**20 for p in shards)
    again, _, _ = lm.load(tmp_path)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a.to(lm.WEIGHTS_DTYPE).float(), b)


# -- measures -----------------------------------------------------------------------------------------


def test_classify_by_the_reference_margin():
    flip = torch.tensor([[True, False], [False, True], [True, True]])  # (n=3, B=2)
    margin = torch.tensor([[0.1, 5.0], [9.0, 0.3], [0.5, 2.0]])
    assert study.classify(flip, margin, threshold=0.4) == (4, 2, 2)  # margins 0.1, 0.3 near; 0.5, 2.0 real
    assert study.first_flips(flip).tolist() == [0, 1]
    assert study.first_flips(torch.zeros(4, 2, dtype=torch.bool)).tolist() == [4, 4]  # none: censored at n


def test_time_limit_keeps_the_steps_measured():
    model = lm.TextLM(PRESETS["cpu-tiny"].model).eval()
    prompts = torch.randint(0, 256, (2, 20))
    ref = torch.randint(0, 256, (2, 40))
    tf = study.teacher_forced(model, prompts, ref, lm.dense_attention(torch.float32), torch.float32, "cpu", time_limit=0.0)
    assert tf.shape[0] == 2  # the warm-up (prefill and the first step), then the limit
    assert study.teacher_forced(model, prompts, ref, lm.dense_attention(torch.float32), torch.float32, "cpu").shape == (40, 2, 256)


# -- the study ----------------------------------------------------------------------------------------


def test_honest_backends_flip_only_near_ties(result):
    res, _ = result
    for dtype in ("bfloat16", "float32"):
        for be in ("baseline", "sdpa", "reference"):
            r = _row(res, be, dtype)
            assert r["verdict"] == "pass" and r["real_flips"] == 0, r
            assert r["tokens"] == 6 * 32
            assert float(r["err_over_noise"]) < 2.0
    assert float(_row(res, "baseline", "float32")["noise"]) < float(_row(res, "baseline", "bfloat16")["noise"]) / 100


def test_the_planted_window_bug_shows_real_divergences(result):
    res, _ = result
    for dtype in ("bfloat16", "float32"):
        r = _row(res, BUG, dtype)
        assert r["verdict"] == "fail" and r["real_flips"] > 0 and r["swap_real_flips"] > 0
        assert float(r["max_flip_margin_over_noise"]) > 4
    assert res.failed
    assert any(f["backend"] == BUG and f["class"] == "real" for f in res.flips)


def test_errors_and_refusals_cost_only_their_rows(result):
    res, _ = result
    r = _row(res, "tests.helpers:RaisesInDecode", "float32")
    assert r["verdict"] == "error" and "planted failure in decode" in r["detail"]
    r = _row(res, "tests.test_decode_lm:RefusesBatches", "bfloat16")
    assert r["verdict"] == "unsupported" and r["detail"] == "one sequence at a time"


def test_the_summary_for_a_pr(result):
    res, out = result
    md = (out / "decode_summary.md").read_text()
    assert md == res.summary
    pr = md.split("## For the PR")[1]
    assert f"swapping sdpa for {BUG}: **" in pr and "real divergences" in pr
    assert "swapping sdpa for reference" in pr and pr.count("no real divergence") >= 3
    with open(out / "lm_decode.csv") as f:
        assert next(csv.reader(f)) == study.COLUMNS
    with open(out / "lm_flips.csv") as f:
        assert next(csv.reader(f)) == study.FLIP_COLUMNS


def test_pr_line_rates():
    row = {"backend": "b", "dtype": "bfloat16", "verdict": "pass", "real_flips": 0, "tokens": 1000, "flips": 4, "err_over_noise": "1.1"}
    swap = {**row, "swap_from": "a", "swap_flips": 2, "swap_real_flips": 0, "_swap_tokens": 1000}
    want = "bfloat16: swapping a for b flips a near-tie every 500 tokens on this model (2 in 1000); no real divergence"
    assert study.pr_lines([swap]) == [want]
    assert "against the float64 reference flips a near-tie every 250 tokens" in study.pr_lines([row])[0]
    assert "logits move 3 x the dtype's noise" in study.pr_lines([{**row, "err_over_noise": "3"}])[0]


def test_cli(tiny, tmp_path, capsys):
    argv = ["decode", "--lm", "cpu-tiny", "-b", "sdpa", "--dtype", "float32", "--prompts", "2", "--steps", "8", "-q"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("no real divergence") and "## For the PR" in out
    assert main([*argv, "-b", BUG, "--out", str(tmp_path / "b")]) == 1
    assert main([*argv, "--swap-from", "flex", "--out", str(tmp_path / "c")]) == 2
    assert main(["decode", "--dtype", "float32", "--dtype", "bfloat16", "--out", str(tmp_path / "d")]) == 2
    assert main([*argv[:2], "/nonexistent-model", *argv[3:], "--out", str(tmp_path / "e")]) == 2


class Interrupted(Backend):
    """The study's `timeout -s INT` arriving while this backend decodes."""

    name = "interrupted"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


def test_a_study_stopped_mid_dtype_still_states_its_noise(tiny, tmp_path):
    """H100, 2026-12-05: a study stopped by its time limit inside its first dtype wrote "Noise: ." in the summary
    beside rows judged with that noise; the dtype's noise is on disk once measured."""
    cfg = study.StudyConfig(model="cpu-tiny", dtypes=("float32",), prompts=2, prompt_len=32, steps=4)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(["sdpa", "tests.test_decode_lm:Interrupted"], cfg, tmp_path)
    text = (tmp_path / "decode_summary.md").read_text()
    assert "| float32 | sdpa |" in text and "Noise: float32 " in text and "(threshold " in text, text


def test_a_dtype_where_the_model_overflows_judges_nothing(tiny, monkeypatch):
    """Non-finite baseline logits leave no noise to class flips by: the dtype's rows are errors, not passes."""
    exact = lm.dense_attention

    def overflowing(compute_dtype):
        attn = exact(compute_dtype)
        return attn if compute_dtype == torch.float64 else (lambda *a: attn(*a) * float("inf"))

    monkeypatch.setattr(study.lm, "dense_attention", overflowing)
    cfg = study.StudyConfig(model="cpu-tiny", dtypes=("float32",), prompts=2, prompt_len=32, steps=4)
    res = study.run_study(["sdpa"], cfg)
    assert [(r["backend"], r["verdict"]) for r in res.rows] == [("baseline", "error"), ("sdpa", "error")]
    assert "non-finite logits" in res.rows[1]["detail"] and res.failed


def test_swap_from_a_later_backend(tiny):
    cfg = study.StudyConfig(model="cpu-tiny", dtypes=("float32",), prompts=3, prompt_len=32, steps=12, swap_from="sdpa")
    res = study.run_study([BUG, "sdpa"], cfg)
    bug = _row(res, BUG, "float32")
    assert bug["swap_from"] == "sdpa" and bug["swap_real_flips"] > 0
    assert "swap_from" not in _row(res, "sdpa", "float32")
    assert any(f["vs"] == "sdpa" and f["backend"] == BUG for f in res.flips)
