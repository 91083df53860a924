#!/bin/bash
# A NaN gradient on one rank (PRIMER_FAULT=1:step:3:nan, after the gradients are reduced, so only that rank sees it
# under ZeRO-0) must make every rank take the same decision: under nan_policy stop the job ends non-zero naming step 3
# and the parameter, with no checkpoint of step 3; under skip every rank leaves step 3's update out and the run ends 0
# with the other steps' losses logged.
# Usage: run_train_nan_test.sh <mpirun> <primer> <source dir> <work dir> <zero stage>
set -u
mpirun="$1" primer="$2" source_dir="$3" work="$4" zero="$5"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work" && mkdir -p "$work"
cat > "$work/run.yaml" <<YAML
model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2,
  num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, max_position_embeddings: 64}
dataset: $source_dir/README.md
cutoff_len: 32
per_device_train_batch_size: 2
zero_stage: $zero
max_steps: 5
save_steps: 1
logging_steps: 1
eval_batches: 1
device: cpu
collective_timeout: 30
save_hf_model: false
YAML
fail() { echo "FAIL: $1"; echo "--- job output ---"; cat "$2"; exit 1; }
run() {  # <log> <recipe overrides...>
  local log="$1"
  shift
  timeout --kill-after=5 120 "$here/mpirun.sh" "$mpirun" -np 2 -x PRIMER_FAULT=1:step:3:nan \
    "$primer" train "$work/run.yaml" "$@" > "$log" 2>&1
}

run "$work/stop.log" --set output_dir="$work/stop"
status=$?
[ "$status" -ne 0 ] || fail "the job exited 0 under nan_policy stop" "$work/stop.log"
grep -q "step 3: non-finite gradient (NaN or inf), first in '[a-z_.0-9]*'" "$work/stop.log" ||
  fail "no message names step 3 and the parameter" "$work/stop.log"
grep -q "the run stops (nan_policy: stop)" "$work/stop.log" || fail "no message says the run stops" "$work/stop.log"
[ ! -e "$work/stop/checkpoint-3" ] || fail "a checkpoint of the diverged step was written" "$work/stop.log"

run "$work/skip.log" --set output_dir="$work/skip" --set nan_policy=skip
status=$?
[ "$status" -eq 0 ] || fail "the job exited $status under nan_policy skip" "$work/skip.log"
grep -q "train step      3 | non-finite gradient (NaN or inf), first in '[a-z_.0-9]*'.*update skipped (1 of nan_skip_limit 10)" \
  "$work/skip.log" || fail "no line says step 3's update was skipped" "$work/skip.log"
losses=$(grep -c '"loss"' "$work/skip/metrics.jsonl")
[ "$losses" -eq 4 ] || fail "expected 4 logged losses (step 3 skipped), found $losses" "$work/skip.log"
echo "ZeRO-$zero: both ranks stopped at step 3 under stop, skipped step 3 under skip"
