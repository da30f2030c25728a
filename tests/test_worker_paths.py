"""Worker paths of variants: a split-KV variant (``vllm-fa3-split2-cuda``) calls its base backend's library
(``vllm-fa3-cuda``), so a library staged once on the base's worker path (``--worker-path``, ``$PARITY_WORKER_PATH``)
serves it too, unless the variant has its own entry. On an H100 every split variant's rows came out ``unavailable:
No module named 'vllm'`` while their base backends ran (89 rows each): the sweep, ``parity backends``, the pytest
plugin and the repro scripts must each find the base's entry."""

from __future__ import annotations

import json
import re

import pytest

from parity import Case, Window, backends, pytest_plugin
from parity.backends.reference import ReferenceBackend
from parity.cli import main
from parity.export_repro import worker_paths as repro_paths
from parity.sweep import run_sweep

#: a "library" only the base's worker path holds
LIBRARY = "parity_test_staged_library"
BASE = "tests.test_worker_paths:StagedBase"
CASE = Case(q_lens=(8,), k_lens=(8,), hq=1, hkv=1, head_dim=8, dtype="float32", window=Window(2, 0), seed=0)


class StagedBase(ReferenceBackend):
    """A backend whose library is importable only where a worker path puts it."""

    name = "staged-base"

    def unavailable_reason(self):
        try:
            __import__(LIBRARY)
        except ModuleNotFoundError as exc:
            return f"cannot import {LIBRARY}: {exc}"
        return None


class StagedSplit(StagedBase):
    name = "staged-split"
    variant_of = BASE


def _stage(tmp_path) -> str:
    (tmp_path / f"{LIBRARY}.py").write_text("VERSION = 1\n")
    return str(tmp_path)


def test_every_split_variant_names_its_base_and_no_other_backend_is_a_variant():
    split = [n for n in backends.BUILTIN if "-split" in n]
    assert len(split) >= 12  # fa2-kvcache, fa3, vllm-fa3: 3 each; flashinfer-decode: 3
    for n in backends.BUILTIN:
        want = re.sub(r"-split[a-z0-9]+", "", n) if n in split else None
        assert backends.get(n).variant_of == want, n
        assert want is None or want in backends.BUILTIN


def test_a_variant_takes_its_base_entry_unless_it_has_its_own():
    given = {"vllm-fa3-cuda": ["/s/vllm"], "flashinfer-decode-cuda": ["/s/fi"], "fa3-split4-cuda": ["/s/own"]}
    assert backends.worker_path(given, "vllm-fa3-split2-cuda") == ["/s/vllm"]
    assert backends.worker_path_owner(given, "vllm-fa3-split256-cuda") == "vllm-fa3-cuda"
    assert backends.worker_path(given, "flashinfer-decode-splitmax-cuda") == ["/s/fi"]
    assert backends.worker_path_owner(given, "fa3-split4-cuda") == "fa3-split4-cuda"  # its own entry wins
    assert backends.worker_path(given, "fa3-split2-cuda") is None  # fa3-cuda has none
    assert backends.worker_path(given, "vllm-fa2-cuda") is None  # another build of vLLM: not a variant
    assert backends.worker_path(given, "no.such.module:Kernel") is None  # unresolvable here: no variant
    full = backends.with_variants(given, backends.names())
    assert full["vllm-fa3-split4-cuda"] == ["/s/vllm"] and full["flashinfer-decode-split2-cuda"] == ["/s/fi"]
    assert "fa3-split2-cuda" not in full and "vllm-fa2-cuda" not in full and full["fa3-split4-cuda"] == ["/s/own"]
    assert backends.with_variants({}, backends.names()) == {}


def test_a_sweep_runs_a_variant_on_its_base_worker_path(tmp_path):
    """The H100's symptom on the CPU: the variant's worker must import the library staged for its base."""
    (tmp_path / "site").mkdir()
    site = _stage(tmp_path / "site")
    variant = "tests.test_worker_paths:StagedSplit"
    res = run_sweep([BASE, variant], [CASE], out_dir=tmp_path / "run", progress=False, worker_paths={BASE: [site]})
    verdicts = {r["backend"]: r["verdict"] for r in res.rows}
    assert verdicts == {BASE: "pass", variant: "pass"}, [(r["backend"], r["verdict"], r["detail"]) for r in res.rows]
    own = run_sweep([variant], [CASE], out_dir=tmp_path / "own", progress=False, worker_paths={BASE: [site], variant: ["/nowhere"]})
    assert [r["verdict"] for r in own.rows] == ["unavailable"] and LIBRARY in own.rows[0]["detail"]  # its own entry wins


def test_parity_backends_says_which_worker_path_a_variant_runs_with(tmp_path, monkeypatch, capsys):
    site = _stage(tmp_path)
    monkeypatch.setenv("PARITY_WORKER_PATH", f"vllm-fa3-cuda={site} fa3-split4-cuda=/own")
    assert main(["backends", "--json"]) == 0
    rows = {r["spec"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["vllm-fa3-split2-cuda"]["worker_path_of"] == "vllm-fa3-cuda" and rows["vllm-fa3-split2-cuda"]["worker_path"] == [site]
    assert rows["vllm-fa3-cuda"]["worker_path_of"] == "vllm-fa3-cuda" and rows["fa3-split4-cuda"]["worker_path"] == ["/own"]
    assert "worker_path" not in rows["fa3-split2-cuda"] and rows["fa3-split2-cuda"]["variant_of"] == "fa3-cuda"
    assert main(["backends"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["vllm-fa3-split4-cuda"].endswith(f"[worker path of vllm-fa3-cuda: {site}]")
    assert lines["vllm-fa3-cuda"].endswith(f"[worker path {site}]") and "worker path" not in lines["fa3-split2-cuda"]


class _Config:
    """What the plugin's ``worker_paths`` reads of a pytest config."""

    def __init__(self, items):
        self.stash = pytest.Stash()
        self.items = items

    def getoption(self, name):
        return self.items


def test_the_pytest_plugin_gives_a_variant_its_base_path(monkeypatch):
    monkeypatch.delenv("PARITY_WORKER_PATH", raising=False)
    config = _Config(["vllm-fa3-cuda=/s/vllm", f"{BASE}=/s/staged"])
    assert pytest_plugin.worker_paths(config)["vllm-fa3-split2-cuda"] == ["/s/vllm"]  # what parity_worker_paths.get gives
    assert pytest_plugin._worker_path(config, "tests.test_worker_paths:StagedSplit") == ["/s/staged"]  # module:Class too
    assert pytest_plugin._worker_path(_Config([]), "vllm-fa3-split2-cuda") is None


def test_a_repro_script_of_a_variant_row_runs_on_its_base_path():
    command = "python -m parity run --backend all-gpu --worker-path vllm-fa3-cuda=/s/vllm --worker-path fa3-split4-cuda=/own"
    assert repro_paths(command, "vllm-fa3-split2-cuda", "vllm-fa3-cuda") == ["/s/vllm"]
    assert repro_paths(command, "fa3-split4-cuda", "fa3-cuda") == ["/own"]
    assert repro_paths(command, "vllm-fa3-cuda") == ["/s/vllm"] and repro_paths(command, "fa3-split2-cuda", "fa3-cuda") == []


def test_a_repro_reads_a_recorded_command_as_the_run_did_and_passes_over_what_is_malformed():
    """One parser (:func:`parity.process.read_worker_path_items`): folders split on the path separator, a malformed
    item or command passed over, a variant's base found in the registry where the run recorded none."""
    command = "parity run --worker-path oops --worker-path vllm-fa3-cuda= --worker-path vllm-fa3-cuda=/a:/b --worker-path =/c"
    assert repro_paths(command, "vllm-fa3-split2-cuda") == ["/a", "/b"]
    assert repro_paths("parity run --worker-path 'vllm-fa3-cuda=/a", "vllm-fa3-cuda") == []  # an unclosed quote


@pytest.mark.parametrize("form", ["two words", "one word"])
def test_a_recorded_worker_path_reads_in_either_of_argparses_forms(form, tmp_path):
    """``--worker-path B=P`` and ``--worker-path=B=P``: the CLI takes both, ``--resume`` restores both (it parses the
    recorded command with the CLI's parser), so a repro script must read both from the recorded command line."""
    from parity.cli import build_parser, common
    from parity.cli import run as run_command

    words = ["--worker-path", "vllm-fa3-cuda=/a:/b"] if form == "two words" else ["--worker-path=vllm-fa3-cuda=/a:/b"]
    argv = ["run", "--backend", "all-gpu", *words, "--worker-path", "fa3-split4-cuda=/own"]
    items = ["vllm-fa3-cuda=/a:/b", "fa3-split4-cuda=/own"]
    assert build_parser().parse_args(argv).worker_path == items
    command = " ".join(["parity", *argv])
    (tmp_path / "environment.json").write_text(json.dumps({"command": command}))  # a run recorded before argv was
    resumed = common.resumed(build_parser().parse_args(["run", "--resume", "--out", str(tmp_path)]), run_command.add_parser)
    assert resumed.worker_path == items
    assert repro_paths(command, "vllm-fa3-cuda") == ["/a", "/b"], f"{command!r} read as {repro_paths(command, 'vllm-fa3-cuda')}"
    assert repro_paths(command, "vllm-fa3-split2-cuda", "vllm-fa3-cuda") == ["/a", "/b"]
    assert repro_paths(command, "fa3-split4-cuda", "fa3-cuda") == ["/own"]


def test_a_run_records_each_workers_path_and_its_repro_scripts_name_it(tmp_path, monkeypatch):
    """A run whose paths came from $PARITY_WORKER_PATH (the lab's way) has no --worker-path on its command line:
    environment.json records the folders each worker used, and the repro script's command puts them first."""
    import types

    from parity.export_repro import _meta

    (tmp_path / "site").mkdir()
    site = _stage(tmp_path / "site")
    variant = "tests.test_worker_paths:StagedSplit"
    monkeypatch.setenv("PARITY_WORKER_PATH", f"{BASE}={site}")
    out = tmp_path / "run"
    assert main(["run", "--backend", variant, "--case", CASE.to_json(), "-q", "--no-report", "--shrink", "0", "--out", str(out)]) == 0
    env = json.loads((out / "environment.json").read_text())
    assert env["backends"][variant]["worker_path"] == [site]
    run = types.SimpleNamespace(env=env, path=out)
    meta = _meta(run, 0, {"case_id": CASE.case_id}, variant, out / "repro.py")
    assert meta["command"] == f"PYTHONPATH={site} python repro.py"
