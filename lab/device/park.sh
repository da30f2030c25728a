#!/usr/bin/env bash
# Device call k: copy the carried part .stage/PART to /tmp/parity-stage, where the next calls on the
# same warm machine find it. Usage: bash lab/device/park.sh p00
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/stage.py" park "$@"
