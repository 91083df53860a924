// Activation checkpointing at block granularity: the forward of `fn` runs without recording (so none of its
// intermediates stay alive); backward re-runs `fn` on a private tape and backpropagates through it.
// `fn` must be deterministic (same outputs for the same inputs), which every primer op is.
//
// Selective recomputation (KeepPolicy): an op whose results cost much to recompute and little to hold forms them
// through kept_across_recompute: attention's output and log-sum-exp (a whole flash forward for 2·Dh + 4 bytes per
// token and query head in bf16), GKA's Chebyshev solve (its iterations for x, 4·Dh bytes per token and head), the
// GLA readout of Mamba-2 and GKA (its state scan and output pass for o, 2·Dh bytes in bf16), the gated delta rule's o
// (GDN, KZLA: its backward then recomputes the chunk scratch without forming o), and the projections back
// into the residual stream (ag::linear_kept: a GEMM for [hidden] values a token). In the block's first forward they
// are kept, and when backward re-runs the block the op is handed them back, in the same order, instead of computing
// them again (PyTorch's selective activation checkpointing, with the policy fixed by the ops and the layers).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/variable.h"

namespace primer::ag {

using BlockFn = std::function<std::vector<Var>(const std::vector<Var>&)>;

// The bytes the kept results of a model's checkpointed blocks may hold at once (from a block's first forward to its
// recompute). An op whose results would pass the limit keeps nothing, and the recompute computes them again: with
// the blocks in order, the first ones keep and the later ones recompute whole, where memory runs short.
class KeepBudget {
 public:
  explicit KeepBudget(size_t limit_bytes) : limit_(limit_bytes) {}
  bool take(size_t bytes);  // false, taking nothing, past the limit
  void give_back(size_t bytes) { held_ -= bytes; }
  size_t held() const { return held_; }
  size_t limit() const { return limit_; }

 private:
  size_t limit_, held_ = 0;
};

// Whether a checkpointed block keeps costly results for its recompute, and within which budget (null: no limit).
struct KeepPolicy {
  KeepPolicy(bool keep_costly = true, std::shared_ptr<KeepBudget> budget = nullptr)  // NOLINT: a bool converts
      : keep(keep_costly), budget(std::move(budget)) {}
  bool keep;
  std::shared_ptr<KeepBudget> budget;
};

std::vector<Var> checkpoint(const std::string& name, const BlockFn& fn, const std::vector<Var>& inputs,
                            const KeepPolicy& policy = {});

// compute() outside a checkpointed block (or with keeping off); inside one, compute() kept in the first forward (within
// the policy's budget) and the kept results handed back in the recompute. `op` names the op in the error raised when a
// recompute asks for other results than the first forward kept (a block that is not deterministic).
std::vector<Tensor> kept_across_recompute(const char* op, const std::function<std::vector<Tensor>()>& compute);

// In its scope ops keep nothing for a recompute: for a call whose main results the caller discards (a GLA run only for
// its final state, under P2P), where keeping them would hold memory for nothing.
struct KeptResults;  // a checkpointed block's kept results (checkpoint.cpp)
class NothingKept {
 public:
  NothingKept();
  ~NothingKept();
  NothingKept(const NothingKept&) = delete;
  NothingKept& operator=(const NothingKept&) = delete;

 private:
  KeptResults* previous_;
};

}  // namespace primer::ag
