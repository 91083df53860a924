// The parameter registry: every weight of a model under its Hugging Face name, with shape, trainable and
// weight-decay flags and an init rule. Values are drawn from the counter-based RNG keyed by (seed, name) and
// the element index, so every parallel layout (and every rebuild) yields identical weights.
// Storage per parameter: `master` (f32, what the optimizer updates), `var->value` (the compute copy: bf16 for
// mixed precision, else the master itself) and `var->grad` (f32, accumulated by backward). A parameter that is never
// updated can give its master up where the compute copy holds the same value (release_masters): Stage 1's frozen
// teacher loaded from a bf16 checkpoint keeps 2 bytes per weight instead of 6.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/variable.h"

namespace primer {

struct InitRule {
  // LogUniform: log(u), u ~ U(a, b) (an SSM's A_log). SoftplusInverseLogUniform: softplus⁻¹(dt) with
  // dt = exp(U(log a, log b)) clamped below at c (an SSM's dt_bias, so that softplus(dt_bias) = dt).
  // GqaReplication: [H, Hk] with element (h, j) = 1 iff h / a == j (I_Hk ⊗ 1_{a×1}; Adaptive GQA's residual).
  enum class Kind {
    Normal,
    Uniform,
    Constant,
    LogUniform,
    SoftplusInverseLogUniform,
    GqaReplication
  } kind = Kind::Normal;
  double a = 0.0;  // Normal: std; Uniform, LogUniform, SoftplusInverseLogUniform: low; Constant: value
  double b = 0.0;  // high
  double c = 0.0;  // SoftplusInverseLogUniform: floor of dt
  static InitRule normal(double std) { return {Kind::Normal, std, 0.0}; }
  static InitRule uniform(double lo, double hi) { return {Kind::Uniform, lo, hi}; }
  static InitRule constant(double v) { return {Kind::Constant, v, 0.0}; }
  static InitRule log_uniform(double lo, double hi) { return {Kind::LogUniform, lo, hi}; }
  static InitRule softplus_inverse_log_uniform(double lo, double hi, double floor) {
    return {Kind::SoftplusInverseLogUniform, lo, hi, floor};
  }
  static InitRule gqa_replication(int64_t groups) { return {Kind::GqaReplication, double(groups), 0.0}; }
};

struct Parameter {
  std::string name;
  Shape shape;
  InitRule init;
  bool trainable = true;
  bool weight_decay = true;
  // Compute in f32 even under bf16 mixed precision (an SSM's A_log, dt_bias and D feed fp32 gate math): the
  // compute copy is then the master itself. (An f64 reference model computes every parameter in f64.)
  bool keep_f32 = false;
  Tensor master;  // f32; undefined once released (the compute copy then holds the value)
  ag::Var var;    // value = compute copy, grad = f32 accumulator

  // The parameter's value at full precision: the master, or where it was released the compute copy, which holds
  // the value exactly (for frozen parameters) or is all inference runs on. f32, or the compute dtype.
  const Tensor& exact_value() const { return master.defined() ? master : var->value; }
};

// A parameter's whole f32 value on the host as its init rule draws it from `seed` (what materialize gives it).
Tensor initial_value(const Parameter& p, uint64_t seed);

// Where a layout that never holds the whole model at once (FSDP's sharded start-up) takes the parameters' values
// from, one parameter at a time: its whole f32 value, of its shape, on any device.
using ParameterValues = std::function<Tensor(const Parameter&)>;
// Each parameter's initial_value from `seed`, as a ParameterValues.
ParameterValues initial_values(uint64_t seed);
// values(p), checked to be f32 of p's shape (an error naming the parameter otherwise).
Tensor value_of(const ParameterValues& values, const Parameter& p);

// Whether every element of `values` (f32, any device) comes back unchanged from a round trip through `dtype`
// (bitwise: a master that bf16 holds exactly). Reads `values` on the host in bounded pieces.
bool representable_in(const Tensor& values, DType dtype);

// Which masters release_masters frees.
enum class MasterRelease {
  FrozenExact,  // frozen parameters whose compute copy holds the master exactly: nothing is lost
  All,          // every one (inference: it runs on the compute copies and never updates them)
};

class ParameterRegistry {
 public:
  // Declares a parameter (no memory yet). Names are unique.
  Parameter& add(const std::string& name, const Shape& shape, InitRule init, bool weight_decay = true);
  // Allocates every parameter on `device`, initialises masters from (seed, name), and makes compute copies.
  void materialize(Device device, DType compute_dtype, uint64_t seed);
  // For inference: each parameter's compute copy made from `values`, one parameter at a time, with no f32 master
  // beside a bf16 copy: the state release_masters(All) leaves, without ever holding both (a bf16 model loads in 2
  // bytes per parameter and one parameter in flight, not 6). Where the compute copy is f32 (f32 compute,
  // keep_f32) it is the master.
  void materialize_compute_copies(Device device, DType compute_dtype, const ParameterValues& values);
  // Registers a parameter whose storage exists already (FSDP's shards): `master` f32, `compute` its compute copy
  // (the master itself for f32 compute), `grad` its f32 gradient (undefined when frozen). The registry's compute
  // dtype must be set (set_compute_dtype) before compute copies are synced.
  Parameter& adopt(const std::string& name, Tensor master, Tensor compute, Tensor grad, bool trainable,
                   bool weight_decay, bool keep_f32);
  // The compute dtype, set without materializing (FSDP's sharded start-up lays the values out itself).
  void set_compute_dtype(DType dtype) { compute_dtype_ = dtype; }
  // A parameter's compute dtype: the registry's, but f32 for keep_f32 parameters under bf16.
  DType compute_dtype_of(const Parameter& p) const;
  // Refreshes compute copies from the masters (after an optimizer step); released masters are skipped.
  void sync_compute_copies();
  // Frees the masters `which` names among those that are not the compute copy itself (f32 compute, keep_f32);
  // returns the bytes freed. Nothing may write a released master afterwards (a checkpoint restore, a weight load).
  int64_t release_masters(MasterRelease which);
  void zero_grads();
  // Trainable iff the name contains one of `substrings` (an empty list makes everything trainable).
  void set_trainable(const std::vector<std::string>& substrings);

  Parameter& get(const std::string& name);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  std::vector<Parameter*> all();
  std::vector<Parameter*> trainable();
  int64_t count(bool trainable_only = false) const;
  DType compute_dtype() const { return compute_dtype_; }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;  // registration order = export and optimizer order
  std::map<std::string, size_t> index_;
  DType compute_dtype_ = DType::F32;
};

}  // namespace primer
