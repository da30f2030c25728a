"""Which GPU architectures a CUDA extension carries code for: per ``.so``, its fatbin's entries counted by kind
(``ELF``: SASS, machine code for one architecture family; ``PTX``: portable code the driver compiles on first use).

    python lab/fatbin_archs.py EXTENSION.so ...

A card runs SASS built for its own major architecture (sm_80 SASS runs on sm_86 / sm_89, not on sm_90); otherwise the
driver JIT-compiles the PTX of a compatible older target when each kernel is first loaded, and keeps the result in
its cache (``CUDA_CACHE_PATH``, which ``parity run --compile-cache`` points into its folder). Found with it
(2026-12-07, lab/runs/h100-2026-12-07-versions): vLLM 0.26.0's and 0.33.0's ``_vllm_fa2_C.abi3.so`` hold 76 sm_80
SASS and 76 compute_80 PTX entries, nothing for sm_90, so on an H100 every FA2 kernel is compiled by the driver on
its first call. Reads the ELF section table with ``readelf`` and the fatbin headers as laid out by CUDA's
``fatbinary_section.h`` (magic ``0xBA55ED50``); compressed payloads are not opened, only counted.
"""

from __future__ import annotations

import collections
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "ELF"}


def fatbin_section(so: str) -> bytes:
    """The bytes of ``so``'s ``.nv_fatbin`` section (empty when it has none)."""
    table = subprocess.run(["readelf", "-S", "-W", so], capture_output=True, text=True, check=True).stdout
    for line in table.splitlines():
        parts = line.split()
        if ".nv_fatbin" in parts:
            i = parts.index(".nv_fatbin")
            offset, size = int(parts[i + 3], 16), int(parts[i + 4], 16)
            with open(so, "rb") as fh:
                fh.seek(offset)
                return fh.read(size)
    return b""


def entries(data: bytes) -> collections.Counter:
    """``(kind, sm)`` -> count over every fatbin container in ``data``."""
    counts: collections.Counter = collections.Counter()
    pos = 0
    while pos + 16 <= len(data):
        magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:
            pos += 8  # containers are 8-byte aligned
            continue
        entry, end = pos + header, pos + header + size
        while entry < end:
            kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            counts[(KINDS.get(kind, str(kind)), f"sm_{arch}")] += 1
            entry += entry_header + entry_size
        pos = end
    return counts


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python lab/fatbin_archs.py EXTENSION.so ...", file=sys.stderr)
        return 2
    for so in argv:
        counts = entries(fatbin_section(so))
        listed = ", ".join(f"{kind} {arch}: {n}" for (kind, arch), n in sorted(counts.items())) or "no fatbin"
        print(f"{so}: {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
