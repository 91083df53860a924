#!/usr/bin/env bash
# Sets up and runs the whole test suite: installs dependencies, builds, runs every CTest test.
# Tests labelled `cuda` skip cleanly on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
cd build
ctest --output-on-failure -j "${JOBS:-$(nproc)}"
