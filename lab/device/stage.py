#!/usr/bin/env python3
"""Carry GPU packages the lent machine lacks onto it, in parts small enough for one device call each.

Three steps (see lab/device/README.md):

* ``prepare [GROUP...]`` (here, in the repository root, with network): download each group's
  wheels, build its payload, split every payload over numbered part folders ``.stage/p00``,
  ``.stage/p01``, ... of at most ``PART_LIMIT`` bytes, each with the same ``MANIFEST.json``
  (payloads, chunks, sha256 sums, which part holds which chunk), and print the device calls;
* ``park PART`` (device call k): copy ``.stage/PART`` of the carried working tree to
  ``/tmp/parity-stage``, where later calls on the same warm machine find it;
* ``install`` (the last call, after parking its own part): per group, join the chunks, check
  sha256, unpack into the group's own ``/tmp/site-*`` folder, print the ``PYTHONPATH`` /
  ``--worker-path`` of each backend and write them to ``/tmp/parity-stage/worker-paths.txt``.
  Idempotent: a group already installed from the same payload is skipped. A missing chunk
  names its part and the call that carries it.

Payload kinds: ``tree`` (a ``tar.xz`` of a ready folder: wheels installed here with
``pip install --target`` for the device's Python, or the ``vllm/vllm_flash_attn`` subfolder of
a vLLM wheel; unpacked as it is) and ``wheels`` (a ``tar`` of small pure-Python dependency
wheels, each installed on the device only when the device's Python cannot already import its
module, so nothing the image has is shadowed). xz because the CUDA binaries in these wheels
shrink several-fold more than the wheels' own zip deflate (vLLM's FA3 extension: 38 MB deflated,
8 MB xz).

Uses only the standard library (and pip, here and for ``wheels`` payloads on the device).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

MIB = 1 << 20
#: One part folder at most: a device call carries 64 MiB in all, the tracked tree with it.
PART_LIMIT = 44 * MIB
#: What a part leaves free beside the tracked tree (untracked files, the tree growing a little).
TREE_MARGIN = 3 * MIB


def part_limit(root: Path) -> int:
    """PART_LIMIT, or less where the tracked tree leaves less of the 64 MiB a device call carries."""
    try:
        names = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return PART_LIMIT
    tree = sum((root / n).stat().st_size for n in names.decode().split("\0") if n and (root / n).is_file())
    return max(8 * MIB, min(PART_LIMIT, 64 * MIB - tree - TREE_MARGIN))


STAGE = Path("/tmp/parity-stage")
CACHE = Path(os.environ.get("PARITY_WHEEL_CACHE", "/tmp/parity-wheels"))
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_27_x86_64",  # jaxlib 0.12 and its CUDA plugin
    "--platform",
    "manylinux_2_24_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
]

VLLM_VERSION = "0.26.0"  # the newest vLLM whose METADATA pins torch==2.11.0 (the H200's torch)
#: The newest vLLM on the index (2026-11). Its METADATA pins torch==2.14.0, but its two FA extensions link
#: only libtorch / libtorch_cpu / libtorch_cuda / cudart 13, and every torch symbol they import is defined by
#: torch 2.11.0's libraries (`bash lab/device/abi_check.sh`, 2026-12-06): staged beside 0.26.0 to find out on the GPU.
VLLM_NEW = "0.33.0"


def vllm_stub(version: str) -> str:
    """The ``vllm/__init__.py`` of a staged ``vllm/vllm_flash_attn``: the version line and the marker the backend reads."""
    return f'''"""Stub written by lab/device/stage.py: only vllm/vllm_flash_attn of the vLLM {version} wheel is staged.

vllm/vllm_flash_attn/__init__.py imports its interface as vllm.vllm_flash_attn.*; nothing else of
vLLM is needed to call flash_attn_varlen_func(fa_version=2|3).
"""

__version__ = "{version}"
_parity_stub = True
'''


VLLM_STUB = vllm_stub(VLLM_VERSION)

#: name -> what it carries. ``tree``: wheels installed into one folder; ``vllm``: one extension of
#: vLLM's flash-attn build; ``deps``: (wheel spec, module it provides) installed only where missing.
GROUPS: dict[str, dict] = {
    "fa4": {
        "tree": [
            "flash-attn-4==4.0.0b36",
            "quack-kernels==0.6.5",
            "apache-tvm-ffi==0.1.15.post2",
            "torch-c-dlpack-ext==0.1.5",
            "nvidia-cutlass-dsl==4.8.1",
            "nvidia-cutlass-dsl-libs-base==4.8.1",
            "nvidia-cutlass-dsl-libs-core==4.8.1",
            "nvidia-cutlass-dsl-libs-cu13==4.8.1",
        ],
        "site": "/tmp/site-fa4",
        "paths": ["/tmp/site-fa4", "/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages"],
        "backends": ["fa4-cuda", "fa4-varlen-cuda"],
    },
    "xformers": {
        "tree": ["xformers==0.0.35"],
        "site": "/tmp/site-xformers",
        "paths": ["/tmp/site-xformers"],
        "backends": ["xformers-cutlass-cuda", "xformers-flash-cuda"],
        "note": "built for torch 2.10: set PARITY_XFORMERS_SHIM=1 on torch 2.11 (README, GPU runs)",
    },
    "vllm-fa2": {
        "vllm": "_vllm_fa2_C.abi3.so",
        "site": "/tmp/site-vllm-fa",
        "paths": ["/tmp/site-vllm-fa"],
        "backends": ["vllm-fa2-cuda"],
    },
    "vllm-fa3": {
        "vllm": "_vllm_fa3_C.abi3.so",
        "site": "/tmp/site-vllm-fa",
        "paths": ["/tmp/site-vllm-fa"],
        "backends": ["vllm-fa3-cuda"],
    },
    "vllm33-fa2": {
        "vllm": "_vllm_fa2_C.abi3.so",
        "vllm_version": VLLM_NEW,
        "site": "/tmp/site-vllm33-fa",
        "paths": ["/tmp/site-vllm33-fa"],
        "backends": [],  # not in worker-paths.txt: vllm-fa2-cuda stays 0.26.0's unless a run says otherwise
        "note": f"vLLM {VLLM_NEW}'s FA2: vllm-fa2-cuda=/tmp/site-vllm33-fa runs it (lab/loan/h200_versions.sh)",
    },
    "vllm33-fa3": {
        "vllm": "_vllm_fa3_C.abi3.so",
        "vllm_version": VLLM_NEW,
        "site": "/tmp/site-vllm33-fa",
        "paths": ["/tmp/site-vllm33-fa"],
        "backends": [],
        "note": f"vLLM {VLLM_NEW}'s FA3: vllm-fa3-cuda=/tmp/site-vllm33-fa runs it",
    },
    "flashinfer": {
        "tree": ["flashinfer-python==0.7.2.post1"],
        "deps": [
            ("apache-tvm-ffi==0.1.15.post2", "tvm_ffi"),
            ("einops==0.8.2", "einops"),
            ("tabulate==0.10.0", "tabulate"),
            ("nvidia-ml-py==13.615.71", "pynvml"),
            ("tqdm==4.70.1", "tqdm"),
            ("click==8.4.0", "click"),
            ("ninja==1.13.0", "ninja"),
        ],
        "site": "/tmp/site-flashinfer",
        "paths": ["/tmp/site-flashinfer"],
        "backends": ["flashinfer-cuda", "flashinfer-paged-cuda", "flashinfer-decode-cuda"],
        "note": "JIT-compiles its kernels with nvcc on first use (lab/device/README.md, FlashInfer)",
    },
    "jax012": {
        "tree": ["jax==0.12.1", "jaxlib==0.12.1", "jax-cuda13-plugin==0.12.1", "jax-cuda13-pjrt==0.12.1"],
        "site": "/tmp/site-jax012",
        "paths": ["/tmp/site-jax012"],
        "backends": [],  # not in worker-paths.txt: the JAX backends stay the image's 0.11.2 unless a run says otherwise
        "note": "JAX 0.12.1 beside the image's 0.11.2 (issue 50): jax-cudnn-cuda=/tmp/site-jax012 (and jax-xla-cuda, "
        "jax-cudnn-causal-cuda) runs it; the CUDA libraries (cuDNN, cuBLAS) stay the image's",
    },
    "nox": {
        "tree": [
            "nox==2026.10.20",
            "argcomplete==3.7.2",
            "colorlog==6.12.0",
            "dependency-groups==1.3.2",
            "humanize==4.17.0",
            "python-discovery==1.9.9",
            "platformdirs==4.14.9",
            "filelock==4.3.2",
            "distlib==0.4.4",
            "packaging==26.4",
            "attrs==26.1.0",
        ],
        "site": "/tmp/site-nox",
        "paths": [],
        "backends": [],
        "note": "nox for `nox -s gpu` (its gpu session needs no virtualenv): PYTHONPATH=/tmp/site-nox python3 -m nox -s gpu",
    },
    "nvcc": {
        "tree": ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88"],
        "site": "/tmp/site-nvcc",
        "paths": [],
        "backends": [],
        "note": "experimental: nvcc 13.0 for FlashInfer's JIT; CUDA_HOME needs the image's CUDA headers too (lab/device/README.md)",
    },
}
ALIASES = {
    "vllm-fa": ["vllm-fa2", "vllm-fa3"],
    "vllm33-fa": ["vllm33-fa2", "vllm33-fa3"],
    "all": ["vllm-fa2", "vllm-fa3", "flashinfer", "fa4", "xformers"],
    "gate": ["fa4", "xformers", "nox"],
}
DEFAULT = ["vllm-fa2", "vllm-fa3", "flashinfer"]


def say(*a: object) -> None:
    print(*a, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(8 * MIB), b""):
            h.update(block)
    return h.hexdigest()


def expand(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names or DEFAULT:
        for g in ALIASES.get(n, [n]):
            if g not in GROUPS:
                raise SystemExit(f"prepare: unknown group {n!r}; groups: {', '.join([*GROUPS, *ALIASES])}")
            if g not in out:
                out.append(g)
    return out


# -- here ------------------------------------------------------------------------------------------


def download(specs: list[str]) -> list[Path]:
    """The wheels for ``specs`` (cached in ``CACHE``), for the device's CPython 3.12 on x86_64."""
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(CACHE), *specs], check=True)
    found = []
    for spec in specs:
        name, _, ver = spec.partition("==")
        stem = name.replace("-", "_").lower() + "-" + ver + "-"
        hits = sorted(p for p in CACHE.glob("*.whl") if p.name.lower().startswith(stem))
        hits = [p for p in hits if "cp312" in p.name or "-py3" in p.name or "py39" in p.name or "abi3" in p.name] or hits
        if not hits:
            raise SystemExit(f"prepare: pip downloaded no wheel for {spec} into {CACHE}")
        found.append(hits[-1])
    return found


def xz_tar(src: Path, members: list[str], dest: Path) -> None:
    """``tar -C src -cf - members | xz -9`` (multi-threaded xz where there is one, else Python's lzma)."""
    if shutil.which("xz"):
        with dest.open("wb") as fh:
            tar = subprocess.Popen(
                ["tar", "-C", str(src), "--sort=name", "--owner=0", "--group=0", "--mtime=@0", "-cf", "-", *members], stdout=subprocess.PIPE
            )
            subprocess.run(["xz", "-T0", "-9", "-c"], stdin=tar.stdout, stdout=fh, check=True)
            if tar.wait():
                raise SystemExit(f"prepare: tar of {src} failed")
    else:
        with tarfile.open(dest, "w:xz", preset=9) as tf:
            for m in members:
                tf.add(src / m, arcname=m)


def build_payloads(group: str, work: Path) -> list[dict]:
    """The group's payload files in ``work``, reused when their inputs have not changed."""
    spec = GROUPS[group]
    out: list[dict] = []
    if "tree" in spec:
        wheels = download(spec["tree"])
        key = hashlib.sha256("\n".join(sha256(w) for w in wheels).encode()).hexdigest()[:16]
        dest = work / f"{group}.tree-{key}.tar.xz"
        if not dest.exists():
            say(f"  {group}: installing {len(wheels)} wheel(s) into a folder for Python 3.12, packing with xz ...")
            with tempfile.TemporaryDirectory() as tmp:
                site = Path(tmp) / "site"
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--no-deps",
                        "--no-index",
                        "--no-compile",
                        "--ignore-requires-python",  # the target is the device's 3.12 (PLATFORM), not this interpreter
                        *PLATFORM,
                        "--target",
                        str(site),
                        *map(str, wheels),
                    ],
                    check=True,
                )
                shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts with this machine's interpreter
                xz_tar(site, sorted(os.listdir(site)), dest)
        out.append({"name": dest.name, "kind": "tree", "from": [w.name for w in wheels], "path": dest})
    if "vllm" in spec:
        version = spec.get("vllm_version", VLLM_VERSION)
        (wheel,) = download([f"vllm=={version}"])
        dest = work / f"{group}.vllm-{version}.tar.xz"
        if not dest.exists():
            say(f"  {group}: vllm/vllm_flash_attn of {wheel.name} with {spec['vllm']} only, packing with xz ...")
            other = {"_vllm_fa2_C.abi3.so", "_vllm_fa3_C.abi3.so"} - {spec["vllm"]}
            with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
                root = Path(tmp)
                for name in zf.namelist():
                    if name.startswith("vllm/vllm_flash_attn/") and Path(name).name not in other:
                        zf.extract(name, root)
                (root / "vllm" / "__init__.py").write_text(vllm_stub(version))
                xz_tar(root, ["vllm"], dest)
        out.append({"name": dest.name, "kind": "tree", "from": [wheel.name], "path": dest})
    if "deps" in spec:
        wheels = download([s for s, _ in spec["deps"]])
        dest = work / f"{group}.deps.tar"
        with tarfile.open(dest, "w") as tf:
            for w in wheels:
                tf.add(w, arcname=w.name)
        mods = {w.name: mod for w, (_, mod) in zip(wheels, spec["deps"])}
        out.append({"name": dest.name, "kind": "wheels", "from": [w.name for w in wheels], "modules": mods, "path": dest})
    return out


def prepare(groups: list[str], root: Path) -> int:
    groups = expand(groups)
    stage = root / ".stage"
    work = CACHE / "payloads"
    work.mkdir(parents=True, exist_ok=True)
    for old in stage.glob("p[0-9][0-9]"):
        shutil.rmtree(old)
    stage.mkdir(exist_ok=True)
    say(f"groups: {' '.join(groups)} (wheel cache {CACHE})")
    payloads: list[tuple[str, dict]] = []
    for g in groups:
        for p in build_payloads(g, work):
            payloads.append((g, p))
    # Chunk the payloads in order, filling each part up to its limit (a payload may straddle parts).
    most = part_limit(root)
    limit = most - 64 * 1024  # room for MANIFEST.json
    parts: list[list[dict]] = [[]]
    room = limit
    manifest_groups: dict[str, dict] = {}
    for g, p in payloads:
        size = p["path"].stat().st_size
        entry = {k: v for k, v in p.items() if k != "path"}
        entry.update(size=size, sha256=sha256(p["path"]), chunks=[])
        off, n = 0, 0
        while off < size:
            if room == 0:
                parts.append([])
                room = limit
            take = min(room, size - off)
            chunk = {"file": f"{p['name']}.{n:02d}", "part": f"p{len(parts) - 1:02d}", "offset": off, "size": take}
            parts[-1].append({**chunk, "src": p["path"]})
            entry["chunks"].append(chunk)
            off, room, n = off + take, room - take, n + 1
        info = manifest_groups.setdefault(g, {k: GROUPS[g].get(k) for k in ("site", "paths", "backends", "note")} | {"payloads": []})
        info["payloads"].append(entry)
    manifest = {
        "id": hashlib.sha256(json.dumps(manifest_groups, sort_keys=True).encode()).hexdigest()[:12],
        "created_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "part_limit": most,
        "parts": [f"p{i:02d}" for i in range(len(parts))],
        "groups": manifest_groups,
    }
    for i, chunks in enumerate(parts):
        d = stage / f"p{i:02d}"
        d.mkdir()
        for c in chunks:
            with c["src"].open("rb") as src, (d / c["file"]).open("wb") as dst:
                src.seek(c["offset"])
                left = c["size"]
                while left:
                    buf = src.read(min(8 * MIB, left))
                    dst.write(buf)
                    left -= len(buf)
        (d / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    report(manifest, stage)
    return 0


def report(manifest: dict, stage: Path) -> None:
    say("")
    say("payloads (MiB):")
    for g, info in manifest["groups"].items():
        for p in info["payloads"]:
            where = sorted({c["part"] for c in p["chunks"]})
            say(f"  {g:11s} {p['name']:48s} {p['size'] / MIB:7.1f}  in {' '.join(where)}")
        total = sum(p["size"] for p in info["payloads"])
        most = manifest["part_limit"]
        say(f"  {g:11s} {'(group total)':48s} {total / MIB:7.1f}  = {total / most:.2f} parts of {most / MIB:.1f} MiB")
    say("parts (MiB):")
    for part in manifest["parts"]:
        size = sum(f.stat().st_size for f in (stage / part).iterdir())
        groups = sorted({g for g, info in manifest["groups"].items() for p in info["payloads"] for c in p["chunks"] if c["part"] == part})
        say(f"  .stage/{part}  {size / MIB:6.1f}  {' '.join(groups)}")
    say("")
    say("device calls, one after the other (the machine is given back after ~30 s idle):")
    n = len(manifest["parts"])
    for i, part in enumerate(manifest["parts"]):
        cmd = f"bash lab/device/park.sh {part}"
        if i == n - 1:
            cmd += " && bash lab/device/install.sh && bash lab/device/h200_seed_systems.sh 300"
        say(f'  {i + 1}. carry [".stage/{part}"]  command: {cmd}')
    say("(the working tree of the checkout that makes the calls must hold lab/device/ and .stage/: run prepare there)")


# -- on the device -------------------------------------------------------------------------------


def load_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        say(
            f"{path} is missing: no part was parked on this machine (a fresh one: it is given back "
            "after ~30 s idle). Park every part again, one call right after the other."
        )
        raise SystemExit(3) from None


def park(part: str, root: Path) -> int:
    src = root / ".stage" / part
    if not src.is_dir():
        raise SystemExit(f'park: {src} is not in this call\'s working tree: carry [".stage/{part}"] with the call')
    mine = load_manifest(src / "MANIFEST.json")
    STAGE.mkdir(parents=True, exist_ok=True)
    have = STAGE / "MANIFEST.json"
    if have.exists() and json.loads(have.read_text())["id"] != mine["id"]:
        say(f"park: /tmp/parity-stage held parts of another prepare (manifest {json.loads(have.read_text())['id']}); clearing it")
        shutil.rmtree(STAGE)
        STAGE.mkdir(parents=True)
    for f in src.iterdir():
        shutil.copyfile(f, STAGE / f.name)
    parked = sorted(
        {c["part"] for info in mine["groups"].values() for p in info["payloads"] for c in p["chunks"] if (STAGE / c["file"]).exists()}
    )
    missing = [p for p in mine["parts"] if p not in parked]
    say(
        f"park: {part} parked in {STAGE} (manifest {mine['id']}); parked so far: {' '.join(parked)}; "
        f"still to park: {' '.join(missing) or 'none'}"
    )
    return 0


def extract(tf: tarfile.TarFile, dest: Path) -> None:
    """Unpack a payload built by ``prepare`` (trusted: its sha256 was checked against the manifest)."""
    if hasattr(tarfile, "fully_trusted_filter"):
        tf.extractall(dest, filter="fully_trusted")
    else:
        tf.extractall(dest)


def importable_on_device(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def install(root: Path) -> int:
    manifest = load_manifest(STAGE / "MANIFEST.json")
    status = 0
    paths_out: list[str] = []
    for g, info in manifest["groups"].items():
        site = Path(info["site"])
        site.mkdir(parents=True, exist_ok=True)
        for p in info["payloads"]:
            done = site / f".parity-{p['name']}.sha256"
            if done.exists() and done.read_text().strip() == p["sha256"]:
                say(f"install: {g}: {p['name']} already installed in {site}")
                continue
            missing = [c for c in p["chunks"] if not (STAGE / c["file"]).exists()]
            if missing:
                for c in missing:
                    say(
                        f"install: {g}: MISSING {c['file']} (part {c['part']}): make the call that carries "
                        f"[\".stage/{c['part']}\"] and runs 'bash lab/device/park.sh {c['part']}' first, on this same warm machine"
                    )
                status = 3
                break
            joined = STAGE / p["name"]
            with joined.open("wb") as dst:
                for c in p["chunks"]:
                    with (STAGE / c["file"]).open("rb") as src:
                        shutil.copyfileobj(src, dst, 8 * MIB)
            got = sha256(joined)
            if got != p["sha256"]:
                say(f"install: {g}: {p['name']} is corrupt after joining (sha256 {got}, manifest {p['sha256']}); park its parts again")
                joined.unlink()
                status = 4
                break
            if p["kind"] == "tree":
                with tarfile.open(joined) as tf:
                    extract(tf, site)
            else:
                with tempfile.TemporaryDirectory() as tmp, tarfile.open(joined) as tf:
                    extract(tf, Path(tmp))
                    need = [str(Path(tmp) / w) for w, mod in p["modules"].items() if not importable_on_device(mod)]
                    kept = [mod for w, mod in p["modules"].items() if importable_on_device(mod)]
                    if kept:
                        say(f"install: {g}: the image already has {' '.join(kept)}: not installed again")
                    if need:
                        subprocess.run(
                            [
                                sys.executable,
                                "-m",
                                "pip",
                                "install",
                                "-q",
                                "--no-index",
                                "--no-deps",
                                "--no-compile",
                                "--target",
                                str(site),
                                *need,
                            ],
                            check=True,
                        )
            joined.unlink()
            done.write_text(p["sha256"] + "\n")
            say(f"install: {g}: {p['name']} -> {site}")
        else:
            for b in info["backends"]:
                if info["paths"]:
                    paths_out.append(f"{b}={':'.join(info['paths'])}")
            note = f"  ({info['note']})" if info.get("note") else ""
            path = ":".join(info["paths"]) or info["site"]
            say(f"ready: {g:10s} PYTHONPATH={path}  backends: {' '.join(info['backends']) or '-'}{note}")
    (STAGE / "worker-paths.txt").write_text("".join(f"{x}\n" for x in paths_out))
    if paths_out:
        say("--worker-path " + " --worker-path ".join(paths_out))
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lab/device/stage.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("groups", nargs="*", help=f"groups ({', '.join([*GROUPS, *ALIASES])}); default: {' '.join(DEFAULT)}")
    k = sub.add_parser("park")
    k.add_argument("part")
    sub.add_parser("install")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[2]  # the repository root (this file is lab/device/stage.py) (the device's copy has no .git)
    if args.cmd == "prepare":
        return prepare(args.groups, root)
    if args.cmd == "park":
        return park(args.part, root)
    return install(root)


if __name__ == "__main__":
    sys.exit(main())
