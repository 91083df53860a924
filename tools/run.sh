#!/usr/bin/env bash
# Sets up and runs primer's main job on its built-in default: installs dependencies, builds, then runs the Priming
# pipeline end to end on a small model (tools/priming-demo.sh: teacher → layer selection → Stage 0 → Stage 1 →
# unfuse → Stage 2, and the same hybrid trained from scratch), printing held-out perplexities at the end.
# Arguments go to tools/priming-demo.sh: `tools/run.sh full --device cuda` runs the full demonstration
# (docs/priming.md).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
exec tools/priming-demo.sh "$@"
