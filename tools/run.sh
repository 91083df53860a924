#!/usr/bin/env bash
# Sets up and runs primer's main job on its built-in default: installs dependencies, builds, then runs the Priming
# pipeline end to end on a small model (tools/priming-demo.sh: teacher → layer selection → Stage 0 → Stage 1 →
# unfuse → Stage 2, and the same hybrid trained from scratch), printing held-out perplexities at the end.
# Arguments go to tools/priming-demo.sh: `tools/run.sh full --device cuda` runs the full demonstration
# (docs/priming.md). Without a usable GPU the build skips the CUDA kernels (the CPU demo does not need them; compiling
# them takes long on a small machine) even where the CUDA toolkit is installed: PRIMER_CUDA=ON or OFF forces either.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
if [ -z "${PRIMER_CUDA:-}" ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "run: no GPU found: building for the CPU (PRIMER_CUDA=ON tools/run.sh builds the CUDA kernels anyway)"
  export PRIMER_CUDA=OFF
fi
tools/build.sh
exec tools/priming-demo.sh "$@"
