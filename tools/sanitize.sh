#!/usr/bin/env bash
# Builds the CPU code with AddressSanitizer + UndefinedBehaviorSanitizer (build-sanitize/, no CUDA) and runs the tests
# that read user input and write files under it: parsers (and their fuzz loops), I/O, checkpoints, data, the CLI.
# Any sanitizer report fails the run. Usage: tools/sanitize.sh [ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-Json|Config|Yaml|Safetensors|Tokenizer|ChatFormat|Checkpoint|TokenShards|TokenCorpus|Loader|FuzzParsers|Inspect|HybridConfig|ModelConfig|Soup|Cli\.|Decoding|Generate|MetricsPlot}"
# -O1 with line tables (-g1) is what the sanitizers need (readable reports, no optimised-away checks) and compiles in
# half the time of RelWithDebInfo's -O2 -g (25 of CI's 49 minutes went to this build). Warnings are the main build's
# to enforce: another optimisation level brings GCC's flow-based false positives of its own.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DPRIMER_WERROR=OFF -DPRIMER_CUDA=OFF -DPRIMER_SANITIZE=ON >/dev/null
cmake --build build-sanitize -j "${JOBS:-$(nproc)}" --target primer_tests primer_cli
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"  # leaks: HDF5/MPI keep process-lifetime state
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd build-sanitize && ctest -L cpu -R "$filter" --output-on-failure -j "${JOBS:-$(nproc)}"
