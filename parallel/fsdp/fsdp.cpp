#include "parallel/fsdp/fsdp.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/check.h"
#include "core/ops/elementwise.h"

namespace primer::parallel {

ZeroStage zero_stage_from_int(int64_t stage) {
  PRIMER_CHECK(stage >= 0 && stage <= 3, "zero_stage {}: expected 0, 1, 2 or 3", stage);
  return ZeroStage(stage);
}

// One flat buffer of a unit: parameters with the same trainable flag, weight-decay flag and compute dtype.
struct Fsdp::Group {
  std::string name;
  std::vector<Parameter*> params;
  std::vector<int64_t> offsets;  // of each parameter in the flat buffer
  int64_t numel = 0, padded = 0, shard = 0;
  bool trainable = true;
  Tensor master_shard;   // f32 [shard]; undefined once released (frozen, the compute shard holds it exactly)
  Tensor compute_shard;  // compute dtype [shard]; the master shard itself when compute is f32
  Tensor full_compute;   // compute dtype [padded]; the parameters' values are views of it
  Tensor full_grad;      // f32 [padded]; the parameters' gradients are views of it (trainable groups)
  Tensor grad_shard;     // f32 [shard]; ZeRO-0: full_grad itself
  bool grads_resident = true;
  bool master_released = false;
  // Whether the compute copy is a tensor of its own (bf16), not the master shard.
  bool separate_compute() const { return compute_shard.storage() != master_shard.storage(); }
};

struct Fsdp::Unit {
  ag::UnitSpec spec;
  std::vector<Group> groups;
  int uses_pending_backward = 0;  // forward uses recorded with grad whose backward has not finished
  bool gathered = true;
  std::vector<Work> gathers;  // in flight (ZeRO-3)
};

struct Fsdp::PendingReduction {
  Work work;
  Group* group = nullptr;
  Tensor reduced;  // ZeRO-2/3: this micro-batch's reduced shard, added into the group's gradient shard on completion
};

namespace {

Tensor flat_view(const Tensor& flat, int64_t offset, const Shape& shape) {
  return flat.slice(0, offset, offset + shape_numel(shape)).view(shape);
}

Device materialized_device(ParameterRegistry& params) {
  PRIMER_CHECK(!params.all().empty() && params.all().front()->master.defined(),
               "FSDP needs a materialized parameter registry");
  return params.all().front()->master.device();
}

}  // namespace

Fsdp::Fsdp(ParameterRegistry& params, const std::vector<ag::UnitSpec>& units, Communicator& dp, ZeroStage stage)
    : Fsdp(params, units, dp, stage, materialized_device(params), [](const Parameter& p) { return p.master; }) {}

Fsdp::Fsdp(ParameterRegistry& params, const std::vector<ag::UnitSpec>& units, Communicator& dp, ZeroStage stage,
           Device device, const ParameterValues& values)
    : params_(params), dp_(dp), stage_(stage), shards_count_(stage == ZeroStage::Replicated ? 1 : dp.size()) {
  PRIMER_CHECK(!params.all().empty(), "FSDP: the parameter registry is empty");
  std::map<std::string, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u)
    for (const std::string& name : units[u].parameters) {
      PRIMER_CHECK(params.contains(name), "FSDP unit {} names '{}', which the model does not have", u, name);
      PRIMER_CHECK(unit_of.emplace(name, u).second, "FSDP: parameter '{}' is in two units", name);
    }
  for (Parameter* p : params.all())
    PRIMER_CHECK(unit_of.count(p->name), "FSDP: parameter '{}' belongs to no unit", p->name);
  const int rank = shards_count_ == 1 ? 0 : dp.rank();
  shards_.set_compute_dtype(params.compute_dtype());

  for (size_t u = 0; u < units.size(); ++u) {
    auto unit = std::make_unique<Unit>();
    unit->spec = units[u];
    std::map<std::tuple<bool, bool, DType>, size_t> group_of;
    for (const std::string& name : units[u].parameters) {
      Parameter& p = params.get(name);
      const auto key = std::make_tuple(p.trainable, p.weight_decay, params.compute_dtype_of(p));
      auto [it, fresh] = group_of.emplace(key, unit->groups.size());
      if (fresh) {
        Group g;
        g.trainable = p.trainable;
        g.name = fmt::format("unit{}.{}.{}.{}", u, p.trainable ? "trainable" : "frozen",
                             p.weight_decay ? "decay" : "no_decay", dtype_name(params.compute_dtype_of(p)));
        unit->groups.push_back(std::move(g));
      }
      Group& g = unit->groups[it->second];
      g.params.push_back(&p);
      g.offsets.push_back(g.numel);
      g.numel += shape_numel(p.shape);
    }
    for (Group& g : unit->groups) {
      g.padded = (g.numel + shards_count_ - 1) / shards_count_ * shards_count_;
      g.shard = g.padded / shards_count_;
      const DType compute = params.compute_dtype_of(*g.params.front());
      const int64_t lo = int64_t(rank) * g.shard, hi = lo + g.shard;
      g.master_shard = Tensor::zeros({g.shard}, DType::F32, device);
      g.full_compute = Tensor::zeros({g.padded}, compute, device);
      for (size_t i = 0; i < g.params.size(); ++i) {
        Parameter& p = *g.params[i];
        const int64_t off = g.offsets[i], n = shape_numel(p.shape);
        const Tensor flat = value_of(values, p).to(device).reshape({n});
        const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
        if (a < b) g.master_shard.slice(0, a - lo, b - lo).copy_from(flat.slice(0, a - off, b - off));
        // A materialized registry's own compute copy; else the value rounded as sync_compute_copies rounds it.
        g.full_compute.slice(0, off, off + n).copy_from(p.var->value.defined() ? p.var->value.reshape({n}) : flat);
      }
      // One shard holding everything (ZeRO-0) computes on its shard directly; ZeRO-3 keeps a separate gather target
      // even on one rank, since it releases that between uses.
      const bool whole = shards_count_ == 1 && stage != ZeroStage::Weights;
      g.compute_shard = compute == DType::F32 ? g.master_shard
                        : whole               ? g.full_compute
                                              : g.full_compute.slice(0, lo, hi).clone();
      if (whole && compute == DType::F32) g.full_compute = g.master_shard;
      if (g.trainable) {
        // ZeRO-2/3 hold the full gradient only from a unit's backward to its reduction (prepare_grads).
        g.grads_resident = stage < ZeroStage::Gradients;
        g.full_grad = g.grads_resident ? Tensor::zeros({g.padded}, DType::F32, device)
                                       : Tensor::released({g.padded}, DType::F32, device);
        // ZeRO-0 reduces in place; the other stages reduce into a shard of their own (ZeRO-2/3 release full_grad).
        g.grad_shard = stage == ZeroStage::Replicated ? g.full_grad : Tensor::zeros({g.shard}, DType::F32, device);
      }
      for (size_t i = 0; i < g.params.size(); ++i) {
        Parameter& p = *g.params[i];
        p.var->value = flat_view(g.full_compute, g.offsets[i], p.shape);
        p.master = stage == ZeroStage::Replicated ? flat_view(g.master_shard, g.offsets[i], p.shape) : Tensor();
        p.var->grad = g.trainable ? flat_view(g.full_grad, g.offsets[i], p.shape) : Tensor();
      }
      // keep_f32 marks the f32-compute groups of a bf16 model: their compute copy is the master itself.
      const bool keep_f32 = compute == DType::F32 && params.compute_dtype() != DType::F32;
      shards_.adopt(g.name, g.master_shard, g.compute_shard, g.grad_shard, g.trainable, g.params.front()->weight_decay,
                    keep_f32);
    }
    if (stage == ZeroStage::Weights) release_weights(*unit);
    units_.push_back(std::move(unit));
  }
}

Fsdp::~Fsdp() = default;

void Fsdp::zero_grads() {
  complete_reductions();
  for (auto& unit : units_)
    for (Group& g : unit->groups) {
      if (!g.trainable) continue;
      if (g.grads_resident) g.full_grad.zero_();
      if (stage_ != ZeroStage::Replicated) g.grad_shard.zero_();
    }
}

void Fsdp::begin_micro_batch(bool last) {
  // The previous micro-batch's last reduction releases its buffer: finish it before this forward writes gradients.
  complete_reductions();
  sync_grads_ = last || stage_ >= ZeroStage::Gradients;
}

void Fsdp::gather(Unit& unit) {
  if (unit.gathered) return;
  for (Group& g : unit.groups) {
    g.full_compute.storage()->restore_memory();
    unit.gathers.push_back(dp_.all_gather_async(g.compute_shard, g.full_compute, "fsdp-gather"));
  }
  unit.gathered = true;
}

void Fsdp::wait_gathered(Unit& unit) {
  for (Work& w : unit.gathers) w.wait();
  unit.gathers.clear();
}

void Fsdp::release_weights(Unit& unit) {
  wait_gathered(unit);
  for (Group& g : unit.groups) g.full_compute.storage()->release_memory();
  unit.gathered = false;
}

void Fsdp::prepare_grads(Unit& unit) {
  for (Group& g : unit.groups) {
    if (!g.trainable || g.grads_resident) continue;
    g.full_grad.storage()->restore_memory();
    g.full_grad.zero_();
    g.grads_resident = true;
  }
}

void Fsdp::before_forward(size_t u) {
  Unit& unit = *units_.at(u);
  const bool grad = ag::grad_enabled();
  if (grad) ++unit.uses_pending_backward;
  if (stage_ == ZeroStage::Weights) {
    gather(unit);
    wait_gathered(unit);
    if (u + 1 < units_.size()) gather(*units_[u + 1]);  // prefetch: overlaps this unit's compute
  }
  if (grad && stage_ >= ZeroStage::Gradients && unit.spec.gradient_in_forward) prepare_grads(unit);
}

void Fsdp::after_forward(size_t u) {
  Unit& unit = *units_.at(u);
  // A unit whose gradient arrives in the forward (the LM head) stays gathered until its backward.
  if (stage_ == ZeroStage::Weights && !(ag::grad_enabled() && unit.spec.gradient_in_forward)) release_weights(unit);
}

void Fsdp::before_backward(size_t u) {
  Unit& unit = *units_.at(u);
  if (stage_ == ZeroStage::Weights) {
    gather(unit);
    wait_gathered(unit);
    if (u > 0) gather(*units_[u - 1]);  // backward runs the units in reverse
  }
  if (stage_ >= ZeroStage::Gradients) prepare_grads(unit);
}

void Fsdp::after_backward(size_t u) {
  Unit& unit = *units_.at(u);
  PRIMER_CHECK(unit.uses_pending_backward > 0, "FSDP: backward of unit {} without a recorded forward", u);
  if (--unit.uses_pending_backward > 0) return;  // a unit used twice (tied embeddings) reduces after its last use
  if (sync_grads_) reduce_grads(unit);
  if (stage_ == ZeroStage::Weights) release_weights(unit);
}

void Fsdp::reduce_grads(Unit& unit) {
  // At most one unit's reduction stays in flight behind the next unit's backward: bounded gradient memory.
  complete_reductions();
  for (Group& g : unit.groups) {
    if (!g.trainable) continue;
    auto pending = std::make_unique<PendingReduction>();
    pending->group = &g;
    if (stage_ == ZeroStage::Replicated) {
      pending->work = dp_.all_reduce_async(g.full_grad, ReduceOp::Sum, "fsdp-grads");
    } else if (stage_ == ZeroStage::OptimizerState) {
      pending->work = dp_.reduce_scatter_async(g.full_grad, g.grad_shard, ReduceOp::Sum, "fsdp-grads");
    } else {
      pending->reduced = Tensor::empty({g.shard}, DType::F32, g.grad_shard.device());
      pending->work = dp_.reduce_scatter_async(g.full_grad, pending->reduced, ReduceOp::Sum, "fsdp-grads");
    }
    pending_.push_back(std::move(pending));
  }
}

void Fsdp::complete_reductions() {
  for (auto& p : pending_) {
    p->work.wait();
    if (p->reduced.defined()) {
      ops::add_(p->group->grad_shard, p->reduced);
      p->group->full_grad.storage()->release_memory();
      p->group->grads_resident = false;
    }
  }
  pending_.clear();
}

void Fsdp::finish_backward() { complete_reductions(); }

void Fsdp::after_optimizer_step() {
  if (stage_ != ZeroStage::OptimizerState && stage_ != ZeroStage::Gradients) return;
  std::vector<Work> gathers;
  for (auto& unit : units_)
    for (Group& g : unit->groups)
      if (g.trainable) gathers.push_back(dp_.all_gather_async(g.compute_shard, g.full_compute, "fsdp-weights"));
  for (Work& w : gathers) w.wait();
}

void Fsdp::masters_changed() {
  PRIMER_CHECK(released_master_bytes_ == 0,
               "FSDP: master weights were written after frozen groups gave theirs up; restore checkpoints before "
               "release_frozen_masters");
  shards_.sync_compute_copies();
  if (stage_ != ZeroStage::OptimizerState && stage_ != ZeroStage::Gradients) return;
  for (auto& unit : units_)
    for (Group& g : unit->groups) dp_.all_gather(g.compute_shard, g.full_compute, "fsdp-weights");
}

std::vector<ParameterChunk> Fsdp::chunks(bool owned_only) const {
  // Ownership is the even cut over the data-parallel ranks also under ZeRO-0, where every rank holds everything.
  const int64_t cut = owned_only ? dp_.size() : shards_count_;
  const int rank = owned_only || shards_count_ > 1 ? dp_.rank() : 0;
  std::vector<ParameterChunk> out;
  for (const auto& unit : units_)
    for (const Group& g : unit->groups) {
      const int64_t piece = (g.numel + cut - 1) / cut;
      const int64_t stored_lo = shards_count_ == 1 ? 0 : int64_t(dp_.rank()) * g.shard;
      const int64_t lo = int64_t(rank) * piece, hi = std::min(lo + piece, g.numel);
      for (size_t i = 0; i < g.params.size(); ++i) {
        const int64_t off = g.offsets[i], n = shape_numel(g.params[i]->shape);
        const int64_t a = std::max(off, lo), b = std::min(off + n, hi);
        if (a >= b) continue;
        ParameterChunk c{g.params[i], a - off, b - a, Tensor(), Tensor(), g.name, a - stored_lo};
        if (g.master_released)
          c.compute = g.compute_shard.slice(0, a - stored_lo, b - stored_lo);
        else
          c.master = g.master_shard.slice(0, a - stored_lo, b - stored_lo);
        out.push_back(std::move(c));
      }
    }
  return out;
}

int64_t Fsdp::release_frozen_masters() {
  std::vector<Group*> candidates;
  std::vector<float> inexact;
  for (auto& unit : units_)
    for (Group& g : unit->groups)
      if (!g.trainable && !g.master_released && g.separate_compute()) {
        candidates.push_back(&g);
        inexact.push_back(representable_in(g.master_shard, g.compute_shard.dtype()) ? 0.f : 1.f);
      }
  if (candidates.empty()) return 0;
  // A group is released on every rank or on none: a rank whose shard bf16 does not hold keeps it for all.
  const Tensor votes =
      Tensor::from_vector(inexact, {int64_t(inexact.size())}, DType::F32, candidates.front()->master_shard.device());
  dp_.all_reduce(votes, ReduceOp::Sum, "fsdp-release-masters");
  const std::vector<float> inexact_anywhere = votes.to_vector<float>();
  int64_t freed = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (inexact_anywhere[i] != 0.f) continue;
    Group& g = *candidates[i];
    freed += int64_t(g.master_shard.nbytes());
    g.master_shard = Tensor();
    g.master_released = true;
    for (Parameter* p : g.params) p->master = Tensor();  // ZeRO-0's views of the shard
    shards_.get(g.name).master = Tensor();
  }
  released_master_bytes_ += freed;
  return freed;
}

void Fsdp::gather_full_masters() {
  for (auto& unit : units_)
    for (Group& g : unit->groups) {
      // A released group's compute shard holds its values; with one shard it is the full buffer already (ZeRO-3's
      // full_compute may be released meanwhile, its compute shard never is).
      const Tensor& shard = g.master_released ? g.compute_shard : g.master_shard;
      Tensor full = shard;
      if (shards_count_ > 1) {
        full = Tensor::empty({g.padded}, shard.dtype(), shard.device());
        dp_.all_gather(shard, full, "fsdp-export");
      }
      for (size_t i = 0; i < g.params.size(); ++i) {
        Parameter& p = *g.params[i];
        (g.master_released ? p.var->value : p.master) = flat_view(full, g.offsets[i], p.shape);
      }
    }
}

Fsdp::Footprint Fsdp::footprint() const {
  Footprint f;
  for (const auto& unit : units_)
    for (const Group& g : unit->groups) {
      (g.master_released ? f.released_master_bytes : f.master_bytes) += g.shard * 4;
      if (g.separate_compute()) f.compute_bytes += int64_t(g.compute_shard.nbytes());
      if (g.trainable) f.grad_bytes += stage_ >= ZeroStage::Gradients ? g.shard * 4 : g.padded * 4;
    }
  return f;
}

}  // namespace primer::parallel
