#include "optim/adamw.h"

#include <cmath>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "optim/adamw_kernels.h"

namespace primer::optim {
namespace {
// The gradient the fused kernels read: contiguous f32 of the parameter's shape.
const Tensor& checked_grad(const Parameter& p) {
  const Tensor& g = p.var->grad;
  PRIMER_CHECK(g.dtype() == DType::F32 && g.is_contiguous() && g.shape() == p.shape,
               "gradient of '{}' must be contiguous f32 {}, got {}", p.name, shape_str(p.shape), g.describe());
  return g;
}
}  // namespace

AdamW::AdamW(ParameterRegistry& params, AdamWConfig config) : params_(params), config_(config) {}

Tensor& AdamW::first_moment(const std::string& name) {
  return const_cast<Tensor&>(std::as_const(*this).first_moment(name));
}

Tensor& AdamW::second_moment(const std::string& name) {
  return const_cast<Tensor&>(std::as_const(*this).second_moment(name));
}

const Tensor& AdamW::first_moment(const std::string& name) const {
  auto it = m_.find(name);
  PRIMER_CHECK(it != m_.end(), "no AdamW first moment for '{}'", name);
  return it->second;
}

const Tensor& AdamW::second_moment(const std::string& name) const {
  auto it = v_.find(name);
  PRIMER_CHECK(it != v_.end(), "no AdamW second moment for '{}'", name);
  return it->second;
}

void AdamW::set_state(const std::string& name, Tensor m, Tensor v) {
  const Parameter& p = params_.get(name);
  for (const Tensor* t : {&m, &v})
    PRIMER_CHECK(
        t->dtype() == DType::F32 && t->shape() == p.shape && t->is_contiguous() && t->device() == p.master.device(),
        "AdamW state for '{}' must be contiguous f32{} on {}, got {}", name, shape_str(p.shape),
        p.master.device().str(), t->describe());
  m_[name] = std::move(m);
  v_[name] = std::move(v);
}

void AdamW::init_state() {
  for (Parameter* p : params_.trainable())
    if (!has_state(p->name)) {
      m_[p->name] = Tensor::zeros(p->shape, DType::F32, p->master.device());
      v_[p->name] = Tensor::zeros(p->shape, DType::F32, p->master.device());
    }
}

void AdamW::compute_grad_norm() {
  const std::vector<Parameter*> trainable = params_.trainable();
  PRIMER_CHECK(!trainable.empty(), "AdamW step with no trainable parameters");
  const Device device = trainable.front()->master.device();
  for (Parameter* p : trainable)
    if (!p->var->grad.defined()) p->var->grad = Tensor::zeros(p->shape, DType::F32, device);
  // Global squared norm of all gradients, summed on the device.
  if (device.is_cpu()) {
    grad_sumsq_ = Tensor::zeros({1}, DType::F32, device);
    for (Parameter* p : trainable) ops::add_(grad_sumsq_, ops::sumsq_all(p->var->grad));
  } else {
    grad_sumsq_ = Tensor::empty({1}, DType::F32, device);
    std::vector<GradSpan> grads;
    for (Parameter* p : trainable) grads.push_back({checked_grad(*p).data<float>(), p->var->grad.numel()});
    PRIMER_ON_CUDA(grad_sumsq_cuda(grads, grad_sumsq_.data<float>()));
  }
  if (reduce_grad_norm_) reduce_grad_norm_(grad_sumsq_);
  norm_current_ = true;
}

bool AdamW::gradient_norm_finite() {
  compute_grad_norm();
  return std::isfinite(grad_sumsq_.item());
}

void AdamW::step(double lr) {
  if (!norm_current_) compute_grad_norm();
  norm_current_ = false;
  const std::vector<Parameter*> trainable = params_.trainable();
  const Device device = trainable.front()->master.device();

  ++steps_;
  AdamWStep s{};
  s.lr = float(lr);
  s.beta1 = float(config_.beta1);
  s.beta2 = float(config_.beta2);
  s.eps = float(config_.eps);
  s.bias_correction1 = float(1.0 - std::pow(config_.beta1, double(steps_)));
  s.bias_correction2 = float(1.0 - std::pow(config_.beta2, double(steps_)));
  s.max_grad_norm = float(config_.max_grad_norm);

  std::vector<AdamWBuffers> buffers;
  for (Parameter* p : trainable) {
    Tensor& m = m_[p->name];
    Tensor& v = v_[p->name];
    if (!m.defined()) {
      m = Tensor::zeros(p->shape, DType::F32, device);
      v = Tensor::zeros(p->shape, DType::F32, device);
    }
    // keep_f32 parameters compute on the master; bf16 ones get their compute copy from the CUDA kernel.
    const bool bf16_copy = device.is_cuda() && p->var->value.dtype() == DType::BF16;
    buffers.push_back({p->master.data<float>(), m.data<float>(), v.data<float>(), checked_grad(*p).data<float>(),
                       bf16_copy ? p->var->value.data_ptr() : nullptr, p->master.numel(),
                       p->weight_decay ? float(config_.weight_decay) : 0.0f});
  }
  if (device.is_cpu()) {
    for (const AdamWBuffers& b : buffers) adamw_update_cpu(b, s, grad_sumsq_.data<float>());
  } else {
    PRIMER_ON_CUDA(adamw_update_cuda(buffers, s, grad_sumsq_.data<float>()));
  }
  // The CUDA kernel already wrote bf16 compute copies; other dtypes are refreshed here.
  if (device.is_cpu() || params_.compute_dtype() != DType::BF16) params_.sync_compute_copies();
}

double AdamW::grad_norm() const { return grad_sumsq_.defined() ? std::sqrt(grad_sumsq_.item()) : 0.0; }

}  // namespace primer::optim
