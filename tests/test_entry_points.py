"""A backend published through the attn_parity.backends entry-point group resolves by name."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_entry_point_backend_runs_by_name(tmp_path):
    dist = tmp_path / "mykernels-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mykernels\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attn_parity.backends]\nmy-kernel = examples.my_kernel:MyKernel\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    case = '{"q_lens":[20],"k_lens":[20],"hq":2,"hkv":1,"head_dim":16,"dtype":"float32","window":{"left":4,"right":0}}'
    cmd = [sys.executable, "-m", "parity", "run", "--backend", "my-kernel", "--case", case, "--out", str(tmp_path / "o"), "-q"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "my-kernel" in p.stdout.splitlines()[-1]
    listed = subprocess.run([sys.executable, "-m", "parity", "backends", "--no-isolate"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "my-kernel" in listed.stdout
