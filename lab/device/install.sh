#!/usr/bin/env bash
# Last device call, after parking its own part: join and check every payload, install each group
# into its own /tmp/site-* folder, print the PYTHONPATH / --worker-path values (also written to
# /tmp/parity-stage/worker-paths.txt). Idempotent; exit 3 names a missing part, 4 a corrupt payload.
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/stage.py" install "$@"
