#!/usr/bin/env bash
# Logits/loss parity with Hugging Face transformers, where PyTorch + transformers are installed (the GPU
# machine): creates tiny random Qwen3 and Llama checkpoints with transformers, then runs primer's parity tests
# on them (fp32 on the CPU: relative error < 1e-4; bf16 on the GPU: reported).
# Usage: tools/hf/parity.sh [build-dir]   (default: build; built beforehand)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
dir="$(mktemp -d)/hf-parity"
python3 tools/hf/make_tiny_models.py "$dir"
rc=0
PRIMER_HF_PARITY_DIR="$dir" "$build/tests/primer_tests" --gtest_filter='HfParity.*' >"$dir/parity.log" 2>&1 || rc=$?
grep -E "hf-parity|OK \]|FAILED|Failure|SKIPPED|exception|rel" "$dir/parity.log"
exit $rc
