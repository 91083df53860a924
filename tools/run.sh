#!/usr/bin/env bash
# Sets up and runs primer's main job on its built-in default: installs dependencies, builds, trains.
# Extra arguments go to `primer train` (e.g. --steps 1000 --device cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
exec build/primer train "$@"
