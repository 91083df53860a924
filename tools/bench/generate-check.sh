#!/usr/bin/env bash
# `primer generate` on one GPU, after tools/device-check.sh's build (build-device/, or $BUILD_DIR): the CUDA decoding
# tests, then bench_generate for a Qwen3-0.6B Transformer and its 50% GKA, GDN and Mamba-2 hybrids at batch 1 and 32,
# context 1K and 32K, each Transformer point next to Hugging Face transformers' generate (hf_generate_peer.py) on the
# same random weights. Only $OUT/generate-summary.md is written under $OUT (test results, the table, the tail of any
# failed run); logs and the exported weights stay in a scratch directory removed at the end. The table is printed last.
# Usage: tools/bench/generate-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
out="${OUT:-$PWD/device-logs}"
build="${BUILD_DIR:-build-device}"
mkdir -p "$out"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
summary="$out/generate-summary.md"
rc=0

{
  echo "# generate check — $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)"
  echo
  echo "CUDA decoding tests (tests/cuda/test_decoding_cuda.cpp):"
  echo '```'
} >"$summary"
(cd "$build" && ctest -L cuda -R 'DecodingCuda' --output-on-failure) >"$scratch/ctest.log" 2>&1 || rc=1
{
  grep -E "tests passed|tests failed|\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)" "$scratch/ctest.log" | head -20
  echo "skipped: $(grep -c '\*\*\*Skipped' "$scratch/ctest.log")"
} >>"$summary"
echo '```' >>"$summary"

rows="$scratch/rows.md"
: >"$rows"
failures="$scratch/failures.md"
: >"$failures"
# Runs one benchmark command (its log in the scratch directory) and keeps its table row.
measure() {
  local name="$1"
  shift
  timeout 300 "$@" >"$scratch/$name.log" 2>&1
  local status=$?
  grep '^| ' "$scratch/$name.log" | grep -v -e '^| model |' -e '^|---' >>"$rows"
  if [ $status -ne 0 ]; then
    rc=1
    { echo "$name exited with $status:" && echo '```' && tail -5 "$scratch/$name.log" && echo '```'; } >>"$failures"
  fi
}

weights="$scratch/qwen3-0.6b"
for pattern in "" "*-GKA" "*-GDN" "*-M2"; do
  for batch in 1 32; do
    for context in 1024 32768; do
      new=$([ "$batch" = 1 ] && echo 64 || echo 32)
      args=(--shape 0.6b --batch "$batch" --context "$context" --new-tokens "$new")
      name="primer${pattern:+-${pattern#*-}}-b$batch-t$context"
      if [ -z "$pattern" ]; then
        # The Transformer's weights go to the peer: exported by the first run, reused by the others.
        [ -d "$weights" ] || args+=(--weights-out "$weights")
        measure "$name" "$build/bench_generate" "${args[@]}"
        measure "hf-b$batch-t$context" python3 tools/bench/hf_generate_peer.py --model "$weights" --batch "$batch" \
          --context "$context" --new-tokens "$new" --label "transformers Qwen3-0.6b (sdpa)"
      else
        measure "$name" "$build/bench_generate" "${args[@]}" --pattern "$pattern"
      fi
    done
  done
done

{
  echo
  echo "| model | batch | context | prefill ms | decode ms/token | tokens/s | peak memory |"
  echo "|---|---|---|---|---|---|---|"
  cat "$rows"
  [ -s "$failures" ] && echo && cat "$failures"
} >>"$summary"
cat "$summary"
exit $rc
