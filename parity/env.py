"""What the run ran on: written next to results.csv as ``environment.json``."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from typing import Any

import torch


def _gpu() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"available": False}
    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {
        "available": True,
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda,
    }
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        info["driver"] = ""
    return info


def collect(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    from . import __version__

    env = {
        "attn_parity": __version__,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "gpu": _gpu(),
        "shims": [s for s in os.environ.get("PARITY_SHIMS", "").split(",") if s],
        "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
        "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],  # the same, unjoined: --resume restores it
    }
    if extra:
        env.update(extra)
    return env
