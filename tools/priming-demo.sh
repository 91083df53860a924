#!/usr/bin/env bash
# The Priming pipeline end to end with the primer CLI: pretrain a Qwen3-architecture teacher, score its layers, turn
# half of them into SSM layers (Stage 0), align them to the teacher (Stage 1), unfuse, train end to end (Stage 2),
# and train the same hybrid from random initialisation with Stage 2's token budget for comparison. Prints held-out
# perplexities of every stage at the end (also in <runs>/summary.md), and draws the Stage 2 and from-scratch training
# curves into <runs>/curves.svg (`primer plot`).
#
#   tools/priming-demo.sh            small: the license texts as bytes, a tiny model, GKA; a few minutes on a CPU
#   tools/priming-demo.sh full       the kernel docs through the Qwen3 tokenizer, recipes/examples/priming/*.yaml,
#                                    GKA (selective and uniform), GDN, Mamba-2 and B'MOJO-F (over GKA); meant for a GPU
# Options after the size: --device auto|cpu|cuda (default auto), --build DIR (default build), --variants a,b (a
# subset of the size's hybrids, e.g. gdn-selective), --reuse-teacher (keep an existing teacher and its layer scores).
# Assumes the build exists (tools/run.sh builds it); `full` needs data-cache/linux-doc-qwen3 (docs/priming.md).
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-small}"
[ $# -gt 0 ] && shift
device=auto
build=build
only=""
reuse_teacher=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --variants) only="$2"; shift 2 ;;
    --reuse-teacher) reuse_teacher=1; shift ;;
    *) echo "priming-demo: unknown argument '$1' (expected --device, --build, --variants, --reuse-teacher)" >&2; exit 2 ;;
  esac
done
primer="$build/primer"
[ -x "$primer" ] || { echo "priming-demo: $primer is not built (run tools/build.sh)" >&2; exit 2; }
recipes=recipes/examples/priming

case "$size" in
  small)
    runs=runs/priming-small
    corpus=/usr/share/common-licenses
    [ -d "$corpus" ] || corpus=README.md
    # The full recipes, shrunk: bytes as tokens, a 4-layer model, short runs.
    common=(--set device="$device" --set tokenized_path=null --set "dataset=$corpus" --set cutoff_len=64
            --set per_device_train_batch_size=8 --set eval_batches=16 --set logging_steps=50)
    model='{model_type: qwen3, vocab_size: 256, hidden_size: 128, intermediate_size: 384, num_hidden_layers: 4,
            num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32, max_position_embeddings: 1024,
            rope_theta: 10000.0, rms_norm_eps: 1.0e-6, tie_word_embeddings: true, torch_dtype: float32}'
    teacher_steps=300 stage1_steps=80 stage2_steps=80 window=8
    variants=("gka-selective GKA selective")
    ;;
  full)
    runs=runs/priming
    [ -e data-cache/linux-doc-qwen3/manifest.json ] || {
      echo "priming-demo: data-cache/linux-doc-qwen3 is missing; see docs/priming.md (tools/fetch-linux-doc.sh," \
           "tools/fetch-qwen3-tokenizer.sh, primer tokenize recipes/examples/tokenize_linux_doc_qwen3.yaml)" >&2
      exit 2
    }
    common=(--set device="$device")
    model=""
    teacher_steps=1200 stage1_steps=300 stage2_steps=300 window=64
    # B'MOJO-F: GKA's fading outputs and a window of 64 tokens (an eighth of the context, as the selection window).
    # gka-bf16-iterate: GKA without its precise mode, one bf16 per tensor-core operand (docs/perf.md, GKA in bf16).
    variants=("gka-selective GKA selective" "gka-uniform GKA uniform" "gdn-selective GDN selective"
              "m2-selective M2 selective" "bmf-selective BMF selective bmojo.ssm_mixer=gka bmojo.window_size=64"
              "gka-bf16-iterate GKA selective gka.precise_iterate=false"
              "gka-fp16-iterate GKA selective gka.iterate_fp16=true")
    ;;
  *) echo "priming-demo: unknown size '$size' (expected small or full)" >&2; exit 2 ;;
esac
mkdir -p "$runs"
log="$runs/demo.log"
: >"$log"
step() { echo "== $*" | tee -a "$log"; }
# Runs a stage: everything to the log, the progress lines to the console; stops the demo if the stage fails.
run() {
  set +e
  "$@" 2>&1 | tee -a "$log" | grep --line-buffered -E "^(train step|eval|held-out|select-layers|prime-init|unfuse|plot|primer: error)"
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    echo "priming-demo: '$*' failed (exit $rc); the whole log is $log" >&2
    exit "$rc"
  fi
}

# Held-out perplexity at the first and at the last evaluation of a run (metrics.jsonl).
perplexity() {
  printf '%.2f' "$(grep -o '"eval_perplexity": *[0-9.e+-]*' "$1/metrics.jsonl" | sed 's/.*: *//' | sed -n "$2")"
}

model_args=()
[ -n "$model" ] && model_args=(--set "model_config=$model")
if [ "$reuse_teacher" = 1 ] && [ -e "$runs/teacher/config.json" ] && [ -e "$runs/select/layer_importance.csv" ]; then
  step "teacher and layer scores: reusing $runs/teacher and $runs/select"
else
  step "teacher: $recipes/teacher.yaml"
  rm -rf "$runs/teacher"
  run "$primer" train "$recipes/teacher.yaml" "${common[@]}" "${model_args[@]}" --set output_dir="$runs/teacher" \
    --set max_steps="$teacher_steps"
  step "layer selection (window $window)"
  run "$primer" select-layers "$recipes/select.yaml" "${common[@]}" --set model_name_or_path="$runs/teacher" \
    --set output_dir="$runs/select" --window "$window" --ratio 0.5
fi

summary="$runs/summary.md"
plotted=()
{
  echo "Held-out perplexity ($size demo; teacher: $(perplexity "$runs/teacher" '$p') after $teacher_steps steps)"
  echo
  echo "| hybrid (50%) | pattern | after Stage 0 | after Stage 1 ($stage1_steps steps) | after Stage 2 ($stage2_steps steps) | from scratch ($stage2_steps steps) |"
  echo "|---|---|---|---|---|---|"
} >"$summary"
for v in "${variants[@]}"; do
  read -r name mixer pattern mixer_sets <<<"$v"  # mixer_sets: the mixer's Stage 0 options (key=value ...)
  [ -n "$only" ] && [[ ",$only," != *",$name,"* ]] && continue
  module=$(case "$mixer" in GKA) echo gka ;; GDN) echo gdn ;; M2) echo mamba ;; BMF) echo bmojo_f ;; esac)
  dir="$runs/$name"
  rm -rf "$dir"
  stage0_args=(--set importance_scores="$runs/select/layer_importance.csv")
  [ "$pattern" = uniform ] && stage0_args=(--set importance_scores=null)
  for kv in ${mixer_sets:-}; do stage0_args+=(--set "$kv"); done
  step "$name: Stage 0"
  run "$primer" prime-init "$recipes/stage0.yaml" --set base_model_name_or_path="$runs/teacher" "${stage0_args[@]}" \
    --set ssm_mixer="$mixer" --set output_dir="$dir/stage0"
  step "$name: Stage 1 (only $module parameters train)"
  run "$primer" train "$recipes/stage1.yaml" "${common[@]}" --set model_name_or_path="$dir/stage0" \
    --set hybrid_learnable_params="$module" --set output_dir="$dir/stage1" --set max_steps="$stage1_steps"
  step "$name: unfuse"
  run "$primer" unfuse "$dir/stage1" --save-dir "$dir/hybrid"
  step "$name: Stage 2"
  run "$primer" train "$recipes/stage2.yaml" "${common[@]}" --set model_name_or_path="$dir/hybrid" \
    --set output_dir="$dir/stage2" --set max_steps="$stage2_steps"
  step "$name: the same hybrid from random initialisation, Stage 2's token budget"
  run "$primer" train "$recipes/scratch.yaml" "${common[@]}" --set "model_config=$(cat "$dir/hybrid/config.json")" \
    --set output_dir="$dir/scratch" --set max_steps="$stage2_steps"
  hybrid_pattern=$(grep -o '"hybrid_override_pattern": *"[^"]*"' "$dir/hybrid/config.json" | sed 's/.*: *"//; s/"$//')
  echo "| $name | \`$hybrid_pattern\` | $(perplexity "$dir/stage1" 1p) | $(perplexity "$dir/stage1" '$p') |" \
       "$(perplexity "$dir/stage2" '$p') | $(perplexity "$dir/scratch" '$p') |" >>"$summary"
  plotted+=("$dir/stage2" "$dir/scratch")
done
if [ ${#plotted[@]} -gt 0 ]; then
  run "$primer" plot "${plotted[@]}" --out "$runs/curves.svg"
  echo >>"$summary"
  echo "Training curves of Stage 2 and the from-scratch runs: curves.svg" >>"$summary"
fi
cat "$summary"
