"""The lab's GPU-loan tooling, checked here on the CPU: the stage's part size, the vLLM stub it
writes, the detached jobs of ``lab/device/bg.sh`` that outlive one device call, the shell scripts' syntax.

======================================  ==============================================
situation                               expected
======================================  ==============================================
small tracked tree                      parts of PART_LIMIT (44 MiB)
tracked tree of 30 MiB                  parts of 64 - 30 - 3 = 31 MiB
job started, then collected             NAME.tgz holds log, cmd, rc, out/, watch.tgz
job still running at collect's limit    NAME.tgz without rc; the line says running
stop NAME                               the job's process group ends, rc 143
two jobs collected                      two tarballs, nothing else in $OUT
======================================  ==============================================
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1]
BG = LAB / "device" / "bg.sh"


def _lab_module(name: str, relpath: str):
    """A lab script as a module (the lab's scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, LAB / relpath)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stage_module():
    return _lab_module("parity_lab_stage", "device/stage.py")


def _git_tree(tmp_path: Path, mib: int) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "big.bin").write_bytes(b"\0" * (mib << 20))
    subprocess.run(["git", "-C", str(tmp_path), "add", "big.bin"], check=True)
    return tmp_path


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_part_limit_leaves_room_for_the_tracked_tree(tmp_path):
    stage = _stage_module()
    assert stage.part_limit(_git_tree(tmp_path / "small", 1)) == stage.PART_LIMIT
    big = stage.part_limit(_git_tree(tmp_path / "big", 30))
    assert big == (64 - 30) * stage.MIB - stage.TREE_MARGIN, f"part limit {big / stage.MIB:.1f} MiB for a 30 MiB tree"


def _bg(tmp_path: Path, *args: str, out: Path | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BG_ROOT": str(tmp_path / "bg")}
    if out is not None:
        env["OUT"] = str(out)
    res = subprocess.run(["bash", str(BG), *args], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, f"bg.sh {' '.join(args)}: rc {res.returncode}\n{res.stdout}{res.stderr}"
    return res.stdout


@pytest.mark.skipif(shutil.which("setsid") is None, reason="setsid is not installed")
def test_bg_jobs_are_collected_into_one_tarball_each(tmp_path):
    watch = tmp_path / "watched"
    out = tmp_path / "out"
    out.mkdir()
    _bg(
        tmp_path,
        "start",
        "quick",
        "--watch",
        str(watch),
        "--",
        "bash",
        "-c",
        f"mkdir -p {watch}; echo row > {watch}/results.csv; echo mine > $OUT/f.txt; echo finished",
    )
    _bg(tmp_path, "start", "slow", "--", "sleep", "30")
    lines = _bg(tmp_path, "collect", "4", out=out)
    assert "quick" in lines and "done rc=0" in lines, lines
    assert "slow" in lines and "running" in lines, lines
    assert sorted(p.name for p in out.iterdir()) == ["quick.tgz", "slow.tgz"]
    with tarfile.open(out / "quick.tgz") as tf:
        names = set(tf.getnames())
        assert {"log", "cmd", "rc", "out/f.txt", "watch.tgz"} <= names, names
        assert tf.extractfile("log").read().decode().strip() == "finished"
    with tarfile.open(out / "slow.tgz") as tf:
        assert "rc" not in tf.getnames()
    assert "done rc=143" in _bg(tmp_path, "stop", "slow")
    assert "running" not in _bg(tmp_path, "status")


def test_bg_without_a_command_is_a_usage_error(tmp_path):
    res = subprocess.run(
        ["bash", str(BG), "start", "x", "--"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "BG_ROOT": str(tmp_path)}
    )
    assert res.returncode == 2 and "no command" in res.stderr


def test_the_vllm_stub_is_the_one_the_backend_reads():
    """tests/test_vllm_fa.py stages the same stub by hand: the version line and the marker the backend reads."""
    stub = _stage_module().VLLM_STUB
    assert '__version__ = "0.26.0"' in stub and "_parity_stub = True" in stub


def test_the_staged_worker_paths_reach_the_split_variants():
    """install.sh prints (and worker-paths.txt holds) one ``--worker-path`` per staged base backend; the split
    variants of a staged library take their base's (parity.backends.worker_path): on the H100 of the report they
    came out unavailable, "No module named 'vllm'", while their bases ran."""
    from parity import backends
    from parity.process import parse_worker_paths

    groups = _stage_module().GROUPS
    items = [f"{b}={':'.join(g['paths'])}" for g in groups.values() if g["paths"] for b in g["backends"]]
    paths = backends.with_variants(parse_worker_paths(items), backends.names())
    for variant in ("vllm-fa3-split2-cuda", "vllm-fa3-split4-cuda", "vllm-fa3-split256-cuda"):
        assert paths[variant] == ["/tmp/site-vllm-fa"], variant
    for variant in ("flashinfer-decode-split2-cuda", "flashinfer-decode-split4-cuda", "flashinfer-decode-splitmax-cuda"):
        assert paths[variant] == ["/tmp/site-flashinfer"], variant


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", sorted(p.relative_to(LAB).as_posix() for p in LAB.glob("*/*.sh")))
def test_lab_scripts_parse(script):
    res = subprocess.run(["bash", "-n", str(LAB / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


#: variables the device's environment may export and that compilers or build tools read: a lab script that assigns
#: one changes what its children run (2026-12-05: `CC=/tmp/parity-cc` made Inductor run the cache folder as its C
#: compiler, and every flex-cuda row errored)
TOOL_VARIABLES = ("CC", "CXX", "CUDA_HOME", "CPATH", "LD", "CFLAGS", "LDFLAGS", "NVCC", "HOME", "TMPDIR", "PATH")


def test_lab_scripts_leave_the_build_tools_variables_alone():
    # an assignment: at a statement's start (a line, after ; && || or a parenthesis), or after export / env
    pattern = re.compile(r"(?:^\s*|[;(&|]\s*|\bexport\s+|\benv\s+(?:\w+=\S*\s+)*)(" + "|".join(TOOL_VARIABLES) + r")=")
    hits = []
    for script in sorted(LAB.glob("*/*.sh")):
        for n, line in enumerate(script.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and pattern.search(line) and "PATH=$PATH" not in line.replace('"', ""):
                hits.append(f"{script.relative_to(LAB)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_lab_paths_point_at_files_that_exist():
    """Every ``lab/...`` or ``benchmarks/...`` path a lab script or README names exists (the tooling moved once)."""
    root = LAB.parent
    missing = []
    for f in [*LAB.glob("*/*.sh"), *LAB.glob("*/*.py"), *LAB.glob("**/README.md")]:
        for m in re.finditer(r"(?<![\w/.$-])((?:lab|benchmarks)/[\w./-]+\.(?:sh|py|md))", f.read_text()):
            if not (root / m.group(1)).exists():
                missing.append(f"{f.relative_to(root)}: {m.group(1)}")
    assert not missing, missing


def test_fatbin_entries_are_counted_by_kind_and_arch():
    """Two containers (one after 8 bytes of padding): SASS and PTX for sm_80, SASS for sm_90."""
    import struct

    tool = _lab_module("fatbin_archs", "fatbin_archs.py")

    def entry(kind: int, arch: int, payload: int) -> bytes:
        head = struct.pack("<HHIQ", kind, 0, 64, payload) + bytes(12) + struct.pack("<I", arch)  # 28 bytes, then arch
        return head + bytes(64 - len(head)) + bytes(payload)

    def container(*items: bytes) -> bytes:
        body = b"".join(items)
        return struct.pack("<IHHQ", tool.MAGIC, 1, 16, len(body)) + body

    data = container(entry(2, 80, 24), entry(1, 80, 8)) + bytes(8) + container(entry(2, 90, 16))
    got = tool.entries(data)
    assert got == {("ELF", "sm_80"): 1, ("PTX", "sm_80"): 1, ("ELF", "sm_90"): 1}
    assert not tool.entries(bytes(64))
