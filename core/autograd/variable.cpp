#include "core/autograd/variable.h"

#include "core/check.h"
#include "core/ops/elementwise.h"

namespace primer::ag {
namespace {
thread_local Tape default_tape;
thread_local Tape* active_tape = &default_tape;
thread_local bool grad_mode = true;
}  // namespace

Var constant(const Tensor& value, const std::string& name) {
  auto v = std::make_shared<VarNode>();
  v->value = value;
  v->name = name;
  return v;
}

Var leaf(const Tensor& value, const std::string& name) {
  Var v = constant(value, name);
  v->requires_grad = true;
  return v;
}

void accumulate_grad(const Var& v, const Tensor& g) {
  if (!v || !v->requires_grad || !g.defined()) return;
  PRIMER_CHECK(g.shape() == v->value.shape(), "gradient {} does not match the shape of '{}' {}", g.describe(), v->name,
               v->value.describe());
  if (v->accumulates) {
    ops::add_(grad_accumulator(v), g);
  } else if (!v->grad.defined()) {
    v->grad = g;  // first contributor assigns
  } else if (v->sums_grad_parts) {
    v->grad_parts.push_back(g.to(v->grad.dtype()));  // the producer's backward adds it
  } else {
    // Paths merge: a new sum (never mutate a tensor another node may hold), in the gradient's dtype, which
    // follows the activation's as in every mixed-precision framework.
    v->grad = ops::add(v->grad, g.to(v->grad.dtype()));
  }
}

namespace {
DType accumulator_dtype(const Tensor& value) { return value.dtype() == DType::F64 ? DType::F64 : DType::F32; }
}  // namespace

Tensor grad_accumulator(const Var& v) {
  if (!v->grad.defined()) v->grad = Tensor::zeros(v->value.shape(), accumulator_dtype(v->value), v->value.device());
  return v->grad;
}

Tensor grad_accumulator_or_scratch(const Var& v) {
  return v->requires_grad ? grad_accumulator(v)
                          : Tensor::zeros(v->value.shape(), accumulator_dtype(v->value), v->value.device());
}

Tensor grad_or_zeros(const Var& v) {
  return v->grad.defined() ? v->grad : Tensor::zeros(v->value.shape(), v->value.dtype(), v->value.device());
}

Tensor take_grad_part(const Var& v) {
  if (v->grad_parts.empty()) return Tensor();
  Tensor part = v->grad_parts[0];
  for (size_t i = 1; i < v->grad_parts.size(); ++i) part = ops::add(part, v->grad_parts[i]);
  v->grad_parts.clear();
  return part;
}

void Tape::backward() {
  // Released also when a node throws: a failed backward leaves no half-run graph for the next one.
  struct Release {
    std::vector<Node>& nodes;
    ~Release() { nodes.clear(); }
  } release{nodes_};
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    bool any = false;
    for (const Var& o : it->outputs) {
      any |= o->grad.defined();
      if (!it->takes_grad_parts && !o->grad_parts.empty()) o->grad = ops::add(o->grad, take_grad_part(o));
    }
    if (any || it->always_run) it->backward();
  }
}

Tape& current_tape() { return *active_tape; }
bool grad_enabled() { return grad_mode; }

NoGrad::NoGrad() : previous_(grad_mode) { grad_mode = false; }
NoGrad::~NoGrad() { grad_mode = previous_; }

TapeScope::TapeScope(Tape& tape) : previous_(active_tape) { active_tape = &tape; }
TapeScope::~TapeScope() { active_tape = previous_; }

bool needs_grad(std::initializer_list<const Var*> inputs) {
  if (!grad_mode) return false;
  for (const Var* v : inputs)
    if (v && *v && (*v)->requires_grad) return true;
  return false;
}

void record(const std::string& name, std::vector<Var> outputs, std::function<void()> fn) {
  for (const Var& o : outputs) o->requires_grad = true;
  current_tape().record(Node{name, std::move(outputs), std::move(fn)});
}

void record_summing(const std::string& name, std::vector<Var> outputs, std::function<void()> fn) {
  for (const Var& o : outputs) o->requires_grad = o->sums_grad_parts = true;
  Node node{name, std::move(outputs), std::move(fn)};
  node.takes_grad_parts = true;
  current_tape().record(std::move(node));
}

void record_collective(const std::string& name, std::vector<Var> outputs, std::function<void()> fn) {
  if (!grad_mode) return;
  for (const Var& o : outputs) o->requires_grad = true;
  current_tape().record(Node{name, std::move(outputs), std::move(fn), true});
}

void record_always(const std::string& name, std::function<void()> fn) {
  if (!grad_mode) return;
  current_tape().record(Node{name, {}, std::move(fn), true});
}

void backward(const Var& loss, const Tensor& seed) {
  PRIMER_CHECK(loss && loss->requires_grad, "backward() of '{}' which does not depend on any trainable value",
               loss ? loss->name : "<null>");
  loss->grad =
      seed.defined() ? seed : Tensor::full(loss->value.shape(), 1.0, loss->value.dtype(), loss->value.device());
  current_tape().backward();
}

}  // namespace primer::ag
