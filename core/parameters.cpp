#include "core/parameters.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/rng.h"

namespace primer {
namespace {

// The two log-space SSM rules, element i from uniform01(key, i) as every rule draws.
void fill_log_rule(const Tensor& host, const InitRule& rule, uint64_t key) {
  float* out = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    const double u = uniform01(key, uint64_t(i));
    if (rule.kind == InitRule::Kind::LogUniform) {
      out[i] = float(std::log(rule.a + (rule.b - rule.a) * u));
    } else {
      const double dt = std::max(std::exp(std::log(rule.a) + (std::log(rule.b) - std::log(rule.a)) * u), rule.c);
      out[i] = float(dt + std::log(-std::expm1(-dt)));  // softplus⁻¹(dt) = log(e^dt − 1), stable for small dt
    }
  }
}

void fill_gqa_replication(const Tensor& host, int64_t groups, const std::string& name) {
  PRIMER_CHECK(host.dim() == 2 && groups > 0 && host.size(0) == host.size(1) * groups,
               "parameter '{}' {}: a GQA replication needs shape [H, H / {}]", name, host.describe(), groups);
  float* out = host.data<float>();
  for (int64_t h = 0; h < host.size(0); ++h)
    for (int64_t j = 0; j < host.size(1); ++j) out[h * host.size(1) + j] = h / groups == j ? 1.0f : 0.0f;
}

// Whether a parameter's compute copy is a separate tensor from its master (bf16 under mixed precision).
bool has_separate_compute_copy(const Parameter& p) {
  return p.master.defined() && p.var->value.defined() && p.var->value.storage() != p.master.storage();
}

}  // namespace

bool representable_in(const Tensor& values, DType dtype) {
  PRIMER_CHECK(values.dtype() == DType::F32, "representable_in: expected f32 values, got {}", values.describe());
  const Tensor flat = values.reshape({values.numel()});
  constexpr int64_t kPiece = int64_t(1) << 24;  // 64 MB of f32 on the host at a time
  for (int64_t lo = 0; lo < flat.numel(); lo += kPiece) {
    const Tensor host = flat.slice(0, lo, std::min(lo + kPiece, flat.numel())).to(Device::cpu()).contiguous();
    const Tensor back = host.to(dtype).to(DType::F32);
    if (std::memcmp(host.data<float>(), back.data<float>(), size_t(host.numel()) * sizeof(float)) != 0) return false;
  }
  return true;
}

Parameter& ParameterRegistry::add(const std::string& name, const Shape& shape, InitRule init, bool weight_decay) {
  PRIMER_CHECK(!contains(name), "parameter '{}' registered twice", name);
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->shape = shape;
  p->init = init;
  p->weight_decay = weight_decay;
  p->var = ag::constant(Tensor(), name);
  p->var->accumulates = true;
  p->var->requires_grad = true;
  index_[name] = params_.size();
  params_.push_back(std::move(p));
  return *params_.back();
}

Parameter& ParameterRegistry::adopt(const std::string& name, Tensor master, Tensor compute, Tensor grad, bool trainable,
                                    bool weight_decay, bool keep_f32) {
  PRIMER_CHECK(master.defined() && master.dtype() == DType::F32, "adopted parameter '{}' needs an f32 master, got {}",
               name, master.describe());
  Parameter& p = add(name, master.shape(), InitRule::constant(0.0), weight_decay);
  p.keep_f32 = keep_f32;
  p.trainable = trainable;
  p.master = std::move(master);
  p.var->value = std::move(compute);
  p.var->grad = std::move(grad);
  p.var->requires_grad = trainable;
  return p;
}

Tensor initial_value(const Parameter& p, uint64_t seed) {
  Tensor host = Tensor::empty(p.shape, DType::F32);
  switch (p.init.kind) {
    case InitRule::Kind::Normal: fill_normal(host, key_for(seed, p.name), 0.0, p.init.a); break;
    case InitRule::Kind::Uniform: fill_uniform(host, key_for(seed, p.name), p.init.a, p.init.b); break;
    case InitRule::Kind::Constant: host.fill_(p.init.a); break;
    case InitRule::Kind::LogUniform:
    case InitRule::Kind::SoftplusInverseLogUniform: fill_log_rule(host, p.init, key_for(seed, p.name)); break;
    case InitRule::Kind::GqaReplication: fill_gqa_replication(host, int64_t(p.init.a), p.name); break;
  }
  return host;
}

ParameterValues initial_values(uint64_t seed) {
  return [seed](const Parameter& p) { return initial_value(p, seed); };
}

Tensor value_of(const ParameterValues& values, const Parameter& p) {
  Tensor value = values(p);
  PRIMER_CHECK(value.defined() && value.dtype() == DType::F32 && value.shape() == p.shape,
               "the value of parameter '{}' is {}, expected f32 of shape {}", p.name,
               value.defined() ? value.describe() : "missing", shape_str(p.shape));
  return value;
}

void ParameterRegistry::materialize(Device device, DType compute_dtype, uint64_t seed) {
  compute_dtype_ = compute_dtype;
  for (auto& p : params_) {
    p->master = initial_value(*p, seed).to(device);
    p->var->grad = Tensor();
  }
  sync_compute_copies();
}

void ParameterRegistry::materialize_compute_copies(Device device, DType compute_dtype, const ParameterValues& values) {
  compute_dtype_ = compute_dtype;
  for (auto& p : params_) {
    // Rounded on the device, as sync_compute_copies rounds a master.
    const Tensor on_device = value_of(values, *p).to(device);
    const bool master_is_compute = compute_dtype_of(*p) == DType::F32;
    p->master = master_is_compute ? on_device : Tensor();
    p->var->value = master_is_compute ? on_device : on_device.to(compute_dtype_of(*p));
    p->var->grad = Tensor();
  }
}

DType ParameterRegistry::compute_dtype_of(const Parameter& p) const {
  // keep_f32 keeps f32 under bf16; an f64 reference computes everything in f64.
  return p.keep_f32 && compute_dtype_ != DType::F64 ? DType::F32 : compute_dtype_;
}

void ParameterRegistry::sync_compute_copies() {
  for (auto& p : params_) {
    if (!p->master.defined()) continue;  // released: the compute copy is the value
    if (compute_dtype_of(*p) == DType::F32) {
      p->var->value = p->master;
    } else {
      if (!p->var->value.defined() || p->var->value.dtype() != compute_dtype_)
        p->var->value = Tensor::empty(p->shape, compute_dtype_, p->master.device());
      p->var->value.copy_from(p->master);
    }
  }
}

int64_t ParameterRegistry::release_masters(MasterRelease which) {
  int64_t freed = 0;
  for (auto& p : params_) {
    if (!has_separate_compute_copy(*p)) continue;
    if (which == MasterRelease::FrozenExact && (p->trainable || !representable_in(p->master, p->var->value.dtype())))
      continue;
    freed += int64_t(p->master.nbytes());
    p->master = Tensor();
  }
  return freed;
}

void ParameterRegistry::zero_grads() {
  for (auto& p : params_)
    if (p->var->grad.defined()) p->var->grad.zero_();
}

void ParameterRegistry::set_trainable(const std::vector<std::string>& substrings) {
  for (auto& p : params_) {
    bool on = substrings.empty();
    for (const auto& s : substrings) on |= p->name.find(s) != std::string::npos;
    p->trainable = on;
    p->var->requires_grad = on;
  }
}

Parameter& ParameterRegistry::get(const std::string& name) {
  auto it = index_.find(name);
  PRIMER_CHECK(it != index_.end(), "no parameter named '{}'", name);
  return *params_[it->second];
}

std::vector<Parameter*> ParameterRegistry::all() {
  std::vector<Parameter*> out;
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

std::vector<Parameter*> ParameterRegistry::trainable() {
  std::vector<Parameter*> out;
  for (auto& p : params_)
    if (p->trainable) out.push_back(p.get());
  return out;
}

int64_t ParameterRegistry::count(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& p : params_)
    if (!trainable_only || p->trainable) n += shape_numel(p->shape);
  return n;
}

}  // namespace primer
