"""The models profile (issue 27, parts 2 and 3): a config.json's attention layers, the table's cases,
``parity run --model`` end to end on the CPU, the model / layer columns and the per-model report table."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from parity import models
from parity.case import Case
from parity.cli import main
from parity.errors import UserError
from parity.window import Window


def _kinds(m: models.ModelAttention) -> dict[str, tuple[int | None, tuple[int, ...]]]:
    return {k.name: (k.window, k.layers) for k in m.kinds}


def test_gemma2_style_alternation_softcap_and_scale():
    cfg = {
        "model_type": "gemma2",
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "num_hidden_layers": 6,
        "sliding_window": 4096,
        "query_pre_attn_scalar": 144,
        "attn_logit_softcapping": 50.0,
    }
    m = models.parse_config(cfg, "g2")
    assert _kinds(m) == {"local": (4096, (0, 2, 4)), "global": (None, (1, 3, 5))}  # layer i local when (i + 1) % 2
    assert (m.hq, m.hkv, m.head_dim, m.softcap) == (32, 16, 128, 50.0)
    assert m.scale == pytest.approx(1 / 12)  # query_pre_attn_scalar 144, not head_dim 128
    # query_pre_attn_scalar equal to head_dim: the default scale (None), no explicit scale in the case
    assert models.parse_config({**cfg, "query_pre_attn_scalar": 128}, "g2").scale is None


def test_qwen2_max_window_layers_and_use_sliding_window():
    cfg = {
        "model_type": "qwen2",
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_size": 3584,
        "num_hidden_layers": 6,
        "sliding_window": 4096,
        "use_sliding_window": True,
        "max_window_layers": 4,
    }
    m = models.parse_config(cfg, "q")
    assert m.head_dim == 128  # hidden_size / heads
    assert _kinds(m) == {"local": (4096, (4, 5)), "global": (None, (0, 1, 2, 3))}  # local from max_window_layers on
    off = models.parse_config({**cfg, "use_sliding_window": False}, "q")
    assert _kinds(off) == {"global": (None, tuple(range(6)))} and off.notes


def test_layer_types_pattern_per_layer_windows_and_text_config():
    lt = ["sliding_attention", "full_attention", "sliding_attention"]
    cfg = {
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 3,
        "sliding_window": 128,
        "layer_types": lt,
    }
    assert _kinds(models.parse_config(cfg, "x")) == {"local": (128, (0, 2)), "global": (None, (1,))}
    pattern = {**cfg, "layer_types": None, "num_hidden_layers": 8, "sliding_window_pattern": 4}
    assert _kinds(models.parse_config(pattern, "x"))["global"] == (None, (3, 7))
    per_layer = {**cfg, "layer_types": None, "sliding_window": [128, None, 4096]}
    assert _kinds(models.parse_config(per_layer, "x")) == {"local-w128": (128, (0,)), "local-w4096": (4096, (2,)), "global": (None, (1,))}
    wrapped = {"model_type": "gemma3", "text_config": {**pattern, "model_type": "gemma3_text"}}
    assert _kinds(models.parse_config(wrapped, "x")) == _kinds(models.parse_config(pattern, "x"))


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"num_attention_heads": None}, "num_attention_heads"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"head_dim": None, "hidden_size": None}, "hidden_size"),
        ({"sliding_window": "4k"}, "sliding_window"),
        ({"layer_types": ["sliding_attention"]}, "layer_types"),
        ({"layer_types": ["sliding_attention", "linear_attention"]}, "layer_types"),
        ({"attn_logit_softcapping": -1}, "attn_logit_softcapping"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        # a TypeError (unhashable list) / MemoryError traceback, or the machine's memory, before these were refused
        ({"layer_types": [["sliding_attention"], "full_attention"]}, "layer_types"),
        ({"num_hidden_layers": 10**12}, "num_hidden_layers' must be at most"),
        ({"num_attention_heads": 2**64, "num_key_value_heads": 2**64}, "num_attention_heads' must be at most"),
    ],
)
def test_bad_configs_name_the_key(bad, key):
    cfg = {"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2, "sliding_window": 16}
    with pytest.raises(UserError, match=key):
        models.parse_config({**cfg, **bad}, "m")


def test_every_table_entry_gives_valid_cases_with_model_and_layer():
    for name in models.known_names():
        m = models.table_model(name)
        assert m.source, name
        cases = models.model_cases(m, scale_down=models.CPU_SCALE_DOWN)
        assert len(cases) == len(m.kinds) * len(models.CALLS)
        for c in cases:
            assert Case.from_json(c.to_json()) == c and c.model == name and c.layer in {k.name for k in m.kinds}
        assert {c.family for c in cases} >= {"dense", "chunked", "decode", "varlen", "paged"}
        assert {c.page_size for c in cases} == {None, 16, 32, 256}
    full = models.model_cases(models.table_model("gemma-2-9b"))
    assert max(max(c.k_lens) for c in full) == 131072 and any(c.q_lens == (5, 5) for c in full)
    assert {c.window for c in full} == {Window.tokens(4096), Window.causal()}
    assert all(c.softcap == 50.0 and c.scale is None and (c.hq, c.hkv, c.head_dim) == (16, 8, 256) for c in full)


def test_model_fields_leave_other_case_ids_alone():
    plain = Case(q_lens=(3,), k_lens=(5,), hq=1, hkv=1, head_dim=8)
    # the JSON (and so the id) of a case without a model is what it was before the fields existed
    assert plain.to_json() == (
        '{"q_lens":[3],"k_lens":[5],"hq":1,"hkv":1,"head_dim":8,"dtype":"bfloat16","window":{"left":null,'
        '"right":null,"align":"bottom_right"},"scale":null,"softcap":null,"page_size":null,"seed":0}'
    )
    tagged = Case(q_lens=(3,), k_lens=(5,), hq=1, hkv=1, head_dim=8, model="m", layer="local")
    assert tagged.case_id != plain.case_id and Case.from_json(tagged.to_json()).layer == "local"


def test_unknown_model_lists_the_known_names():
    assert main(["run", "--model", "llama-9000", "--backend", "reference", "--list-cases"]) == 2
    with pytest.raises(UserError, match="gemma-2-9b"):
        models.resolve("llama-9000")


def test_model_run_on_the_cpu_end_to_end(tmp_path, capsys):
    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(
        json.dumps(
            {
                "model_type": "gemma2",
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "num_hidden_layers": 2,
                "sliding_window": 2048,
                "attn_logit_softcapping": 50.0,
            }
        )
    )
    out = tmp_path / "run"
    code = main(
        [
            "run",
            "--model",
            str(cfg),
            "--model",
            "gpt-oss-20b",
            "--model",
            "mistral-7b-v0.1",
            "--model",
            "command-r7b",
            "--backend",
            "reference",
            "--no-isolate",
            "--length-scale",
            "512",
            "--out",
            str(out),
            "-q",
            "--shrink",
            "0",
            "--no-probes",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "models at REDUCED lengths" in printed
    with (out / "results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # gpt-oss's learned sinks reach every one of its calls, and no other model's
    assert {r["model"] for r in rows if json.loads(r["case_json"]).get("sinks")} == {"gpt-oss-20b"}
    assert {(r["model"], r["layer"]) for r in rows} == {
        ("tiny", "local"),
        ("tiny", "global"),
        ("gpt-oss-20b", "local"),
        ("gpt-oss-20b", "global"),
        ("mistral-7b-v0.1", "local"),
        ("command-r7b", "global"),  # its local layers make Mistral's calls: run once, named
    }
    assert len(rows) == 6 * len(models.CALLS) and {r["verdict"] for r in rows} == {"pass"}
    assert "model command-r7b/local: the same calls as mistral-7b-v0.1/local" in printed
    env = json.loads((out / "environment.json").read_text())
    assert env["profile"] == "models" and env["design"]["length_scale"] == 512 and "divided by 512" in env["design"]["reduced_why"]
    assert env["design"]["shared_calls"] == {"command-r7b/local": "mistral-7b-v0.1/local"}
    summary = (out / "summary.md").read_text()
    assert "### Models" in summary and "Reduced lengths" in summary
    assert f"| tiny | local | pass {len(models.CALLS)} |" in summary and "Run once: command-r7b/local ran as mistral" in summary
    assert 'id="models-table"' in (out / "report.html").read_text()


def test_report_shows_peak_memory_when_the_column_exists(tmp_path):
    from parity.report.runs import load_run
    from parity.report.text import markdown_summary

    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--model",
                "gemma-3-1b",
                "--backend",
                "reference",
                "--no-isolate",
                "--length-scale",
                "512",
                "--out",
                str(out),
                "-q",
                "--shrink",
                "0",
                "--no-probes",
                "--no-report",
            ]
        )
        == 0
    )
    assert "Peak device memory" not in markdown_summary(load_run(out))  # no peak_mem_mb column: no line, no error
    path = out / "results.csv"
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), list(reader.fieldnames or [])
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*fields, "peak_mem_mb"])
        w.writeheader()
        w.writerows({**r, "peak_mem_mb": str(10 + n)} for n, r in enumerate(rows))
    text = markdown_summary(load_run(out))
    assert f"`reference` max {10 + len(rows) - 1} MB" in text and "| gemma-3-1b | global |" in text


def test_resume_of_a_folder_without_the_model_columns(tmp_path, capsys):
    case = '{"q_lens":[3],"k_lens":[5],"hq":1,"hkv":1,"head_dim":8,"dtype":"float32","window":{"left":2,"right":0}}'
    base = ["run", "--backend", "reference", "--no-isolate", "-q", "--no-report", "--shrink", "0", "--out", str(tmp_path)]
    assert main([*base, "--case", case]) == 0
    path = tmp_path / "results.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    old = [c for c in rows[0] if c not in ("model", "layer")]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main([*base, "--resume", "--model", "gemma-3-1b", "--length-scale", "512", "--no-probes"]) == 0
    assert "written before the model, layer columns" in capsys.readouterr().err
    with path.open(newline="") as fh:
        new = list(csv.DictReader(fh))
    assert new[0]["case_id"] == rows[0]["case_id"] and new[0]["model"] == ""
    assert {r["model"] for r in new[1:]} == {"gemma-3-1b"}


def test_layer_kinds_with_the_same_calls_run_once_and_are_named():
    """Command-R7B's layers make Mistral-7B's and Mixtral's calls: run once (lab/runs/cpu-models-cost-2026-12-07)."""
    every, _ = models.profile_cases([], dedupe=False)
    shared = models.shared_calls(every)
    assert shared == {"command-r7b/local": "mistral-7b-v0.1/local", "command-r7b/global": "mixtral-8x7b-v0.1/global"}
    kept, _ = models.profile_cases([])
    assert len(every) == 240 and len(kept) == 220
    assert {(c.model, c.layer) for c in every} - {(c.model, c.layer) for c in kept} == {("command-r7b", "local"), ("command-r7b", "global")}
    keys = {models.call_key(c) for c in kept}
    assert len(keys) == len(kept) and {models.call_key(c) for c in every} == keys
    alone, _ = models.profile_cases(["command-r7b"])
    assert len(alone) == 2 * len(models.CALLS) and {c.model for c in alone} == {"command-r7b"}
    soft = [dataclasses.replace(c, softcap=30.0) if (c.model, c.layer, c.q_lens) == ("command-r7b", "local", (4096,)) else c for c in every]
    assert models.shared_calls(soft) == {"command-r7b/global": "mixtral-8x7b-v0.1/global"}
