// What the multi-rank training tests share: recipes for tiny models, a run on every rank of the job (the MPI world)
// and the same run on one process (its reference), and comparisons of their loss curves and final weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace primer::test {

struct TinyRun {
  std::string pattern;    // hybrid_override_pattern; empty: a plain Qwen3
  bool tied = true;       // tie_word_embeddings
  bool distill = false;   // Stage 1 (stage: hkd) on a fused pattern, training only `learnable`
  std::string learnable;  // hybrid_learnable_params
  int zero_stage = 0;
  int64_t global_batch = 4;  // sequences per micro-step over all ranks
  int64_t accumulation = 2;
  bool recompute = true;
  int64_t max_steps = 3;
  int64_t save_steps = 0;
  std::string resume;               // resume_from_checkpoint
  std::string schedule = "cosine";  // lr_scheduler_type (constant_with_warmup: a run cut in two sees the same rates)
  bool cuda = false;                // train on the GPU in bf16 (else the CPU in f32)
  // Sequence parallelism: sequence_parallel_size and, when set, the other sequence_parallel_* keys.
  int sp = 1;
  std::string sp_mode, sp_layout, ssm_mode, state_passing;
  int64_t cutoff = 32;    // cutoff_len
  std::string overrides;  // more config_overrides_json entries ("\"key\": value, ...")
};

// A directory every rank names alike (rank 0's fresh seed), created by rank 0.
std::string shared_test_dir(const std::string& name);

// Trains `run` into `out_dir` on the world (every rank of the job; GPU tensors through the harness's GPU
// communicator: NCCL on one rank, MPI with host staging where ranks share a GPU) or on one process (each rank its
// own, as the reference). Returns the final held-out loss.
double train_on_world(const TinyRun& run, const std::string& out_dir);
double train_on_one_process(const TinyRun& run, const std::string& out_dir);

// Training losses by step from a run's metrics.jsonl (later lines win).
std::map<int64_t, double> train_losses(const std::string& out_dir);

// How two runs' exported weights (model.safetensors in f32) differ: the largest |a − b| over every element, and the
// largest relative L2 difference ‖a − b‖ / ‖b‖ over tensors (with the tensor's name).
struct WeightDifference {
  double max_abs = 0;
  double max_relative = 0;
  std::string worst_tensor;
  double whole_relative = 0;  // ‖a − b‖ / ‖b‖ over every tensor together
};
WeightDifference weight_difference(const std::string& out_a, const std::string& out_b);

// Expects `run` to have logged the reference's training loss at every step within `loss` (relative) and to have
// exported weights within `weights` (relative L2 per tensor, or over the whole model with whole_model); prints the
// measured differences on rank 0.
struct Tolerances {
  double loss = 0, weights = 0;
  bool whole_model = false;
};
void expect_same_training(const std::string& reference, const std::string& run, Tolerances tolerances,
                          const std::string& what);

}  // namespace primer::test
