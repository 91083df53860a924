#!/bin/bash
# A rank killed or hung during training (point "step") or while checkpointing (point "checkpoint") must end the job
# non-zero within <within> seconds (a hung rank through the collective timeout, 5 s here, with a message naming the
# step and the rank that did not arrive), and the newest committed checkpoint must be <expected> and load: a
# one-process `primer train ... resume_from_checkpoint=auto` resumes from it. A rank sent SIGTERM (term: a
# preemption) makes every rank finish that step, commit its checkpoint and exit 143. The last rank misbehaves.
# On device cuda (tools/multi-gpu-check.sh: a GPU per rank, NCCL) the hang is caught by the NCCL watchdog.
# Usage: run_train_fault_test.sh <mpirun> <primer> <source dir> <work dir> <kill|hang|term> <point> <step> <expected step>
#                                <within s> [ranks, default 3] [device cpu|cuda, default cpu]
set -u
mpirun="$1" primer="$2" source_dir="$3" work="$4" action="$5" point="$6" step="$7" expected="$8" within="$9"
ranks="${10:-3}" device="${11:-cpu}"
last=$((ranks - 1))
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work" && mkdir -p "$work"
if [ "$device" = cuda ]; then  # the GPU attention kernels take head_dim 64 or 128
  shape="hidden_size: 128, intermediate_size: 256, num_hidden_layers: 2, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 64"
else
  shape="hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8"
fi
cat > "$work/run.yaml" <<YAML
model_config: {model_type: qwen3, vocab_size: 256, $shape, max_position_embeddings: 64}
dataset: $source_dir/README.md
cutoff_len: 32
per_device_train_batch_size: 2
gradient_accumulation_steps: 2
zero_stage: 3
max_steps: 8
save_steps: 2
logging_steps: 1
eval_batches: 1
device: $device
collective_timeout: 5
save_hf_model: false
output_dir: $work/out
YAML
fail() { echo "FAIL: $1"; echo "--- job output ---"; cat "$work/job.log"; exit 1; }

start_ms=$(($(date +%s%N) / 1000000))
timeout --kill-after=5 $((within + 30)) "$here/mpirun.sh" "$mpirun" -np "$ranks" -x PRIMER_FAULT="$last:$point:$step:$action" \
  "$primer" train "$work/run.yaml" > "$work/job.log" 2>&1
status=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
echo "mpirun exited with status $status after $((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000))) s"
[ "$status" -ne 0 ] || fail "the job exited 0 although rank $last was killed"
[ "$elapsed_ms" -le $((within * 1000)) ] || fail "the job took more than $within s to end"
grep -q "PRIMER_FAULT: .* this rank at $point of step $step" "$work/job.log" || fail "the fault did not fire"
if [ "$action" = term ]; then
  [ "$status" -eq 143 ] || fail "a SIGTERMed job exited $status, expected 143 (128 + SIGTERM)"
  grep -q "interrupted by SIGTERM at step $step: checkpoint .*checkpoint-$step committed" "$work/job.log" ||
    fail "no message says the run was interrupted at step $step with a committed checkpoint"
fi
if [ "$action" = hang ]; then
  grep -q "(step $step)" "$work/job.log" || fail "no timeout message names step $step"
  grep -q "did not arrive: $last" "$work/job.log" || fail "no timeout message names rank $last"
fi

# A dead save's staging directory is removed by the next start once its owner (rank 0) is gone; mpirun can return
# while the killed job's processes are still being torn down, so wait for that owner first.
for staging in "$work"/out/.checkpoint-*.tmp-*; do
  [ -e "$staging" ] || continue
  owner="${staging##*.tmp-}"
  for _ in $(seq 50); do kill -0 "$owner" 2>/dev/null || break; sleep 0.2; done
done
# Rank 0 held the run lock; a killed job leaves it, and the resume below takes it over once its holder is gone.
if [ -e "$work/out/.primer-run.lock" ]; then
  holder=$(awk '{print $2}' "$work/out/.primer-run.lock")
  for _ in $(seq 50); do kill -0 "$holder" 2>/dev/null || break; sleep 0.2; done
fi
newest=$(ls -d "$work"/out/checkpoint-* 2>/dev/null | sed 's/.*checkpoint-//' | sort -n | tail -1)
[ "$newest" = "$expected" ] || fail "the newest committed checkpoint is '${newest}', expected $expected"
"$primer" train "$work/run.yaml" --set max_steps=$((expected + 1)) --set resume_from_checkpoint=auto \
  > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resuming from the last committed checkpoint failed"; }
grep -q "resumed from $work/out/checkpoint-$expected at step $expected" "$work/resume.log" ||
  { cat "$work/resume.log"; fail "the resume did not start from checkpoint-$expected"; }
[ -z "$(ls -d "$work"/out/.checkpoint-* 2>/dev/null)" ] || fail "a dead save's staging directory was left behind"
echo "PASS"
