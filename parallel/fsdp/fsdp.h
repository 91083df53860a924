// FSDP / ZeRO over the data-parallel ranks: a model's parameters, grouped into units (the embedding, each decoder
// block, the final norm with the LM head), live in flat buffers cut evenly across ranks; ZeRO stages are policies
// on that one machinery (the ZeRO paper: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models"; FSDP2 in pytorch/torchtitan, docs/fsdp.md):
//   0  replicated: every rank holds everything; gradients are all-reduced after the last micro-batch;
//   1  the f32 master weights and AdamW moments are sharded: gradients are reduce-scattered after the last
//      micro-batch, each rank updates its shard, the compute weights are all-gathered after the step;
//   2  also the gradients: each unit's gradient is reduce-scattered right after its backward in every micro-batch
//      and its full buffer released, so a rank keeps only its gradient shard;
//   3  also the compute weights: a unit's weights are all-gathered before its forward (and again before its
//      backward, where recomputation also runs) and released after; the next unit's gather is issued while the
//      current one computes.
// Within a unit, parameters are grouped by (trainable, weight decay, f32 compute): each group is one flat buffer,
// padded to a multiple of the rank count, rank r holding elements [r·S, (r+1)·S). Frozen groups (Stage 1's teacher,
// whatever hybrid_learnable_params leaves out) are sharded like the rest but carry no gradient and no moments, and
// give up their f32 master shards where the bf16 compute shards hold the same values (release_frozen_masters).
// Gradients are sums over ranks: the trainer scales the loss by the global token count, so N ranks equal one.
// The model reaches this class only through core's ag::UnitHooks; the optimizer sees shards() as its parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/unit_hooks.h"
#include "core/parameters.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel {

enum class ZeroStage { Replicated = 0, OptimizerState = 1, Gradients = 2, Weights = 3 };
ZeroStage zero_stage_from_int(int64_t stage);  // 0..3, an error otherwise

// A run of one parameter's flattened elements [offset, offset + count) that this rank holds: the checkpoint atom.
// `master` is the f32 view into this rank's master shard, or undefined where the group's master was released;
// `compute` is then the view of the same elements in the compute shard, which holds them exactly. `group` names the
// optimizer parameter (shards()) whose state holds the same elements at [group_offset, group_offset + count).
struct ParameterChunk {
  Parameter* param = nullptr;
  int64_t offset = 0, count = 0;
  Tensor master, compute;
  std::string group;
  int64_t group_offset = 0;
};

class Fsdp final : public ag::UnitHooks {
 public:
  // `units` list every parameter of the materialized registry exactly once, in the order the model uses them.
  // Trainable flags must be final. Takes over the registry's storage: afterwards a parameter's compute value and
  // gradient are views into flat buffers, and its master is undefined from ZeRO-1 on (shards hold it).
  Fsdp(ParameterRegistry& params, const std::vector<ag::UnitSpec>& units, Communicator& dp, ZeroStage stage);
  // Sharded start-up: the registry is declared, not materialized (its compute dtype set), and each parameter's
  // value comes from `values` one at a time, straight into the flat buffers on `device`: this rank never holds the
  // whole model, only its shards and one unit's buffers at a time (ZeRO-3; ZeRO-0/1/2 keep every compute weight
  // resident anyway). The same layout and values as materializing first.
  Fsdp(ParameterRegistry& params, const std::vector<ag::UnitSpec>& units, Communicator& dp, ZeroStage stage,
       Device device, const ParameterValues& values);
  ~Fsdp() override;

  // The optimizer's parameters: one per trainable group, holding this rank's shard (f32 master, compute copy,
  // gradient). Frozen groups appear with trainable = false.
  ParameterRegistry& shards() { return shards_; }
  ZeroStage stage() const { return stage_; }
  Communicator& comm() { return dp_; }

  // Zeroes every gradient (before a step's first micro-batch).
  void zero_grads();
  // Whether this micro-batch's backward ends the step: ZeRO-0/1 communicate gradients only then.
  void begin_micro_batch(bool last);
  // Waits for every gradient reduction (before clipping and the optimizer step).
  void finish_backward();
  // Refreshes the compute weights from the updated shards (ZeRO-1/2 all-gather; ZeRO-3 gathers lazily).
  void after_optimizer_step();

  // The chunks this rank holds (every element, under ZeRO-0), or only those it owns (an even cut that no two ranks
  // share: what it writes to a checkpoint); in unit, group and registry order.
  std::vector<ParameterChunk> chunks(bool owned_only) const;
  // Refreshes compute copies from the master shards (after a checkpoint wrote into them); refused once masters
  // were released.
  void masters_changed();
  // Frees the master shards of the frozen groups whose compute shards (bf16) hold every element exactly on every
  // rank — weights loaded from a bf16 checkpoint, as Stage 1's teacher is: they are never updated, so the compute
  // copy is the whole value, and a checkpoint or an export widens it. Collective over the ranks (they decide
  // together, so that later gathers match). Call once the weights are final (after a resume). Returns the bytes
  // this rank freed.
  int64_t release_frozen_masters();
  // Every rank's registry weights full again (Parameter::exact_value(): f32 masters, or the compute copies of
  // released groups; on the parameters' device): for exporting weights. The registry is only read afterwards.
  void gather_full_masters();

  // Bytes this rank holds for parameters, gradients and optimizer inputs (for the log).
  struct Footprint {
    int64_t master_bytes = 0, compute_bytes = 0, grad_bytes = 0;
    int64_t released_master_bytes = 0;  // frozen groups' masters given up (release_frozen_masters)
  };
  Footprint footprint() const;

  // ag::UnitHooks
  void before_forward(size_t unit) override;
  void after_forward(size_t unit) override;
  void before_backward(size_t unit) override;
  void after_backward(size_t unit) override;

 private:
  struct Group;
  struct Unit;
  void gather(Unit& unit);
  void wait_gathered(Unit& unit);
  void release_weights(Unit& unit);
  void prepare_grads(Unit& unit);
  void reduce_grads(Unit& unit);
  void complete_reductions();

  ParameterRegistry& params_;
  Communicator& dp_;
  ZeroStage stage_;
  int shards_count_ = 1;  // ranks a group is cut across (1 for ZeRO-0)
  std::vector<std::unique_ptr<Unit>> units_;
  ParameterRegistry shards_;
  bool sync_grads_ = true;
  int64_t released_master_bytes_ = 0;
  struct PendingReduction;
  std::vector<std::unique_ptr<PendingReduction>> pending_;
};

}  // namespace primer::parallel
