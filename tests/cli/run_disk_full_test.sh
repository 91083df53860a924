#!/bin/bash
# A checkpoint write that fails for lack of space must end the run with `primer: error: ...` and exit 2 (it used to
# segfault in HDF5's exit-time cleanup, exit 139), leave no partial checkpoint, and keep the previous one loadable.
#  1. Injected: the file-size limit (ulimit -f, SIGXFSZ ignored) makes the first checkpoint's write fail (EFBIG).
#  2. A real full disk: a tmpfs sized for two checkpoints, where this machine lets us mount one (skipped otherwise).
# Usage: run_disk_full_test.sh <primer> <source dir> <work dir>
set -u
primer="$1" source_dir="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $1"; [ -f "$2" ] && { echo "--- $2 ---"; tail -20 "$2"; }; exit 1; }
recipe() {  # output_dir, save_steps
  cat <<YAML
model_config: {model_type: qwen3, vocab_size: 256, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
  num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, max_position_embeddings: 64}
dataset: $source_dir/README.md
cutoff_len: 32
per_device_train_batch_size: 2
max_steps: 6
save_steps: $2
save_total_limit: 10
logging_steps: 1
eval_batches: 1
device: cpu
save_hf_model: false
output_dir: $1
YAML
}
expect_clean_failure() {  # log, status, step
  [ "$2" -eq 2 ] || fail "the run exited $2, expected 2" "$1"
  grep -q "primer: error: checkpoint at step $3 failed" "$1" || fail "no error names the failed checkpoint of step $3" "$1"
}

# 1. Injected write failure.
recipe "$work/limited" 1 > "$work/limited.yaml"
(trap '' XFSZ; ulimit -f 64; exec "$primer" train "$work/limited.yaml") > "$work/limited.log" 2>&1
expect_clean_failure "$work/limited.log" $? 1
[ -z "$(ls -d "$work"/limited/.checkpoint-* "$work"/limited/checkpoint-* 2>/dev/null)" ] ||
  fail "a partial checkpoint was left behind: $(ls -a "$work/limited")"
echo "injected write failure: exit 2, no partial checkpoint"

# 2. A full tmpfs: sized from one checkpoint so that two fit and the third does not.
recipe "$work/measure" 1 | sed 's/max_steps: 6/max_steps: 1/' > "$work/measure.yaml"
"$primer" train "$work/measure.yaml" > "$work/measure.log" 2>&1 || fail "the sizing run failed" "$work/measure.log"
checkpoint_kb=$(du -sk "$work/measure/checkpoint-1" | cut -f1)
mkdir -p "$work/tmpfs"
if ! mount -t tmpfs -o size=$((checkpoint_kb * 5 / 2 + 64))k tmpfs "$work/tmpfs" 2>/dev/null; then
  echo "tmpfs: this machine does not let us mount one; that part is skipped"
  echo "PASS"
  exit 0
fi
trap 'umount "$work/tmpfs"' EXIT
recipe "$work/tmpfs/out" 1 > "$work/full.yaml"
"$primer" train "$work/full.yaml" > "$work/full.log" 2>&1
expect_clean_failure "$work/full.log" $? 3
[ -z "$(ls -d "$work"/tmpfs/out/.checkpoint-* 2>/dev/null)" ] || fail "a partial checkpoint was left behind" "$work/full.log"
"$primer" inspect "$work/tmpfs/out/checkpoint-2" --verify > "$work/inspect.log" 2>&1 ||
  fail "the previous checkpoint does not verify" "$work/inspect.log"
cp -r "$work/tmpfs/out" "$work/resumed"
sed "s#output_dir: .*#output_dir: $work/resumed#" "$work/full.yaml" > "$work/resume.yaml"
"$primer" train "$work/resume.yaml" --set max_steps=3 --set save_steps=10 --set resume_from_checkpoint=auto \
  > "$work/resume.log" 2>&1 || fail "resuming from the previous checkpoint failed" "$work/resume.log"
grep -q "resumed from $work/resumed/checkpoint-2 at step 2" "$work/resume.log" ||
  fail "the resume did not start from checkpoint-2" "$work/resume.log"
echo "full tmpfs: exit 2, no partial checkpoint, checkpoint-2 verifies and resumes"
echo "PASS"
