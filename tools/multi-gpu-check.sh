#!/usr/bin/env bash
# On a machine with several GPUs, one rank per GPU (NCCL): builds with CUDA, then checks and measures the
# distributed layer, and prints one table per section and a summary table last (docs/distributed.md, "Several GPUs").
# Usage: tools/multi-gpu-check.sh [section ...]
#   sections: build correctness fsdp fsdp-sharded sp-layer sp-model (default: all, in this order)
#   MULTI_GPU_SEQS="16384 32768 65536 131072"   the sequence lengths of the sp sections
#   MULTI_GPU_SHAPES="0.6b 1.7b"                 the Qwen3 shapes of the fsdp section
#   MULTI_GPU_TARGETS="all"                      what the build section builds (e.g. the four this script runs:
#                                                primer primer_dist_tests bench_fsdp bench_sp)
# Every section takes the fewest GPUs it needs, up to the machine's: correctness and sequence parallelism run on all
# of them (sp = GPU count), FSDP at 1, 2, 4, ... GPUs. The model that only fits sharded is the 8B shape with ZeRO-3
# on 4 GPUs, or the 4B shape on 2 where only 2 are present (18 bytes per parameter: 72 GB for 4B on one GPU).
# Logs go to $OUT (or ./multi-gpu-logs); the summary is also written to summary.md there.
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast (NVLS) stays off: on shared hosts a program using it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-$PWD/multi-gpu-logs}"
mkdir -p "$out"
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(build correctness fsdp fsdp-sharded sp-layer sp-model)
wants() { local s; for s in "${sections[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
seqs=(${MULTI_GPU_SEQS:-16384 32768 65536 131072})
shapes=(${MULTI_GPU_SHAPES:-0.6b 1.7b})
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# Host threads per rank (OpenMP: the model's random initialisation before FSDP shards it). With one thread a 0.6B run
# spent ~37 s before its first step, and the 8B shape had not started its first step after 200 s.
export PRIMER_RANK_THREADS=$(($(nproc) / (gpus > 0 ? gpus : 1)))
summary="$out/summary.md"
failures="$out/failures.txt"
: >"$summary"
: >"$failures"
note() { echo "$*" | tee -a "$summary"; }
mpi=(tests/dist/mpirun.sh "$(command -v mpirun)" -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
status=0

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
nvidia-smi topo -m >"$out/topology.txt" 2>&1 || true
note "# multi-gpu-check — $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%Y-%m-%d)"
if [ "$gpus" -lt 2 ]; then
  note "fewer than 2 GPUs: nothing here needs this script (tools/device-check.sh covers one GPU)"
  exit 1
fi

if wants build; then
  # Warnings stay warnings here (a measurement run should not stop on one); CI's build enforces them.
  cmake -S . -B build-device -G Ninja -DPRIMER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DPRIMER_WERROR=OFF >"$out/cmake.log" 2>&1 ||
    { tail -30 "$out/cmake.log"; exit 1; }
  if ! cmake --build build-device -j "$(nproc)" --target ${MULTI_GPU_TARGETS:-all} >"$out/build.log" 2>&1; then
    grep -E "error|Error" "$out/build.log" | head -40
    exit 1
  fi
  echo "build: ok"
fi
bin=build-device
dist_tests="$bin/tests/primer_dist_tests"

# 1. Correctness on NCCL, one GPU per rank: collectives, training at every ZeRO stage and sequence-parallel training
# against one process in bf16, every mixer under every SP mode against one rank and f64; then faults: a hung rank is
# named by the NCCL watchdog and every rank exits, a killed rank ends the job, and the last committed checkpoint loads.
if wants correctness; then
  note ""
  note "## 1. correctness, $gpus ranks, one GPU each"
  note "| check | ranks | result | seconds |"
  note "|---|---|---|---|"
  run_check() {  # name, log, command...
    local name="$1" log="$2" start=$SECONDS rc
    shift 2
    "$@" >"$out/$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { status=1; grep -E "FAILED|Failure|FAIL|error" "$out/$log" | head -20 >>"$failures"; }
    note "| $name | $gpus | $([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc, $log)") | $((SECONDS - start)) |"
  }
  run_check "dist tests on GPUs (collectives, ZeRO 0-3, SP training, SP mixers x modes)" dist-gpu.log \
    timeout 900 "${mpi[@]}" -np "$gpus" "$dist_tests" \
    --gtest_filter='Gpu/DistCollectives.*:DistTrainGpu.*:DistTrainSpGpu.*:Mixers/DistSpMixersGpu.*'
  grep -q "communicator: nccl over $gpus rank(s) for cuda" "$out/dist-gpu.log" ||
    { note "| the GPU communicator was not NCCL (see dist-gpu.log) | $gpus | FAIL | |"; status=1; }
  grep -E "GPU, ZeRO|GPU, (p2p|usp)|relative L2 error" "$out/dist-gpu.log" | sort -u >"$out/dist-gpu-accuracy.txt"
  run_check "hung rank named by the NCCL watchdog, every rank exits" fault-hang.log \
    env PRIMER_FAULT_DEVICE=cuda timeout 120 tests/dist/run_fault_test.sh "$(command -v mpirun)" "$gpus" "$dist_tests" \
    sleep 3 30 "all_reduce #" "'grad-sync'" "(step 12)" "did not arrive: $((gpus - 1))"
  run_check "killed rank ends the job" fault-kill.log \
    env PRIMER_FAULT_DEVICE=cuda timeout 120 tests/dist/run_fault_test.sh "$(command -v mpirun)" "$gpus" "$dist_tests" \
    sigkill 60 20
  for fault in "kill step 5 4 killed_during_step" "hang step 5 4 hung_in_step" "kill checkpoint 4 2 killed_while_saving_step"; do
    set -- $fault
    run_check "training: rank $((gpus - 1)) ${5//_/ } $3, the job ends, checkpoint-$4 loads" "fault-train-$1-$2.log" \
      timeout 180 tests/dist/run_train_fault_test.sh "$(command -v mpirun)" "$bin/primer" "$PWD" \
      "$out/fault-train-$1-$2" "$1" "$2" "$3" "$4" 60 "$gpus" cuda
    rm -rf "$out/fault-train-$1-$2/out"  # the checkpoints: kept out of $OUT, whose transfer is limited
  done
  # A failure's first lines beside the table, in case the logs do not come back.
  if [ -s "$failures" ]; then note ""; note '```'; cat "$failures" | tee -a "$summary"; note '```'; fi
fi

# 2. FSDP throughput against PyTorch FSDP2 (transformers' Qwen3, same shapes, same batch per GPU), ZeRO-2 and ZeRO-3,
# at 1, 2, 4, ... GPUs; then the model that only fits sharded.
if wants fsdp || wants fsdp-sharded; then
  fsdp_rows="$out/fsdp-rows.md"
  : >"$fsdp_rows"
  fsdp_pair() {  # shape, ranks, modes
    local shape="$1" n="$2" modes="$3"
    timeout 600 "${mpi[@]}" -np "$n" "$bin/bench_fsdp" --shape "$shape" --modes "$modes" --batch 4 --seq 4096 --steps 4 \
      >"$out/fsdp-$shape-$n.log" 2>&1 || { echo "bench_fsdp $shape on $n GPU(s) failed"; status=1; }
    PYTHONUNBUFFERED=1 timeout 600 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" tools/bench/fsdp2_peer.py \
      --shape "$shape" --modes "$modes" --batch 4 --seq 4096 --steps 4 >"$out/fsdp2-$shape-$n.log" 2>&1 ||
      { echo "fsdp2_peer $shape on $n GPU(s) failed"; status=1; }
    grep -h "^| \(ZeRO\|PyTorch\)" "$out/fsdp-$shape-$n.log" "$out/fsdp2-$shape-$n.log" | tee -a "$fsdp_rows"
  }
  if wants fsdp; then
    for shape in "${shapes[@]}"; do
      for ((n = 1; n <= gpus; n *= 2)); do fsdp_pair "$shape" "$n" 2,3; done
    done
  fi
  if wants fsdp-sharded; then
    if [ "$gpus" -ge 4 ]; then fsdp_pair 8b 4 3; else fsdp_pair 4b 2 3; fi
  fi
  note ""
  note "## 2. FSDP throughput: primer against PyTorch FSDP2, B=4 x T=4096 per GPU, bf16 compute, fp32 masters"
  python3 tools/bench/common/fsdp_summary.py "$fsdp_rows" | tee -a "$summary"
fi

# 3. Sequence parallelism over every GPU (sp = GPU count): one mixer layer (hidden 2048, 16 heads of 128) forward +
# backward per mode with the bytes each rank sent; then a 50% hybrid (Qwen3-0.6B shape, '*-GDN') training step.
if wants sp-layer; then
  note ""
  note "## 3a. one layer fwd+bwd under sequence parallelism, sp = $gpus, B=1"
  note "| mixer | mode | ranks | B x T (global) | fwd+bwd ms (max rank) | sent MB/rank (counters) | sent MB/rank (formula) |"
  note "|---|---|---|---|---|---|---|"
  for T in "${seqs[@]}"; do
    timeout 600 "${mpi[@]}" -np "$gpus" "$bin/bench_sp" --seq "$T" --modes p2p,p2p-serial,a2a,usp --iters 6 \
      >"$out/sp-layer-$T.log" 2>&1 || { echo "bench_sp at T=$T failed"; status=1; }
    grep -E "^\| (M2|GDN|GKA) " "$out/sp-layer-$T.log" | tee -a "$summary"
  done
fi
if wants sp-model; then
  note ""
  note "## 3b. 50% GDN hybrid training step (Qwen3-0.6B shape, '*-GDN', ZeRO-3) under sequence parallelism, sp = $gpus"
  note "| run | model | GPUs | B x T per data rank | step ms | tokens/s per GPU | MFU | peak memory (max rank) |"
  note "|---|---|---|---|---|---|---|---|"
  for T in "${seqs[@]}"; do
    for mode in "p2p log-depth zigzag-ring" "p2p serial zigzag-ring" "a2a log-depth ulysses" "usp log-depth all-gather"; do
      set -- $mode
      [ "$2" = serial ] && [ "$gpus" -lt 4 ] && continue  # at sp 2 the serial chain and log-depth are one hop
      log="$out/sp-model-$T-$1-$2.log"
      timeout 600 "${mpi[@]}" -np "$gpus" "$bin/bench_fsdp" --shape 0.6b --pattern '*-GDN' --modes 3 --batch 1 --seq "$T" \
        --steps 3 --sp "$gpus" --ssm-mode "$1" --state-passing "$2" --attention "$3" >"$log" 2>&1 ||
        { echo "bench_fsdp sp $mode at T=$T failed"; status=1; }
      grep -E "^\| ZeRO" "$log" | tee -a "$summary"
    done
  done
fi

echo
echo "=================== summary ($summary) ==================="
cat "$summary"
exit $status
