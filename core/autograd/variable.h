// Autograd on a tape of coarse nodes. A Var is a tensor value plus the gradient flowing into it; a Node is one
// op or one whole layer with a hand-written backward. Forward code records nodes on the current Tape; backward()
// walks them in reverse. Gradient rules: parameter gradients always accumulate (+=) into their f32 buffer;
// an activation's gradient is assigned by its first contributor and summed only where paths merge.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace primer::ag {

struct VarNode {
  Tensor value;
  Tensor grad;  // undefined until a gradient arrives
  bool requires_grad = false;
  bool accumulates = false;  // parameters: `grad` is a persistent f32 buffer that only ever grows by +=
  std::string name;          // for error messages and NaN reports
  // Where paths merge, the contributions after the first are kept here, unsummed, when the Var's producer adds them in
  // its own backward pass (record_summing): the sum then costs no pass over memory of its own. Else always empty.
  bool sums_grad_parts = false;
  std::vector<Tensor> grad_parts;
};
using Var = std::shared_ptr<VarNode>;

Var constant(const Tensor& value, const std::string& name = "");  // no gradient
Var leaf(const Tensor& value, const std::string& name = "");      // an input that wants its gradient

// Adds `g` into v's gradient following the rules above (no-op when v does not require grad).
void accumulate_grad(const Var& v, const Tensor& g);
// The f32 buffer that backward kernels accumulate weight-like gradients into (+=); created zeroed on first use.
Tensor grad_accumulator(const Var& v);
// Where a backward kernel that always accumulates a weight gradient writes it: v's accumulator, or a scratch
// buffer of the accumulator's dtype when v wants no gradient.
Tensor grad_accumulator_or_scratch(const Var& v);
// The contributions to v's gradient kept apart from v->grad (VarNode::grad_parts), summed into one when several, or
// undefined when none; v keeps none after. For a record_summing backward, which adds it in its own pass.
Tensor take_grad_part(const Var& v);
// v's gradient, or zeros like its value when none arrived (a node with several outputs runs its backward when
// any one of them has a gradient).
Tensor grad_or_zeros(const Var& v);

struct Node {
  std::string name;
  std::vector<Var> outputs;
  std::function<void()> backward;  // reads the outputs' grads, accumulates into inputs
  bool always_run = false;         // run in backward even when no output has a gradient (unit hooks)
  bool takes_grad_parts = false;   // backward adds its outputs' grad_parts itself (else the tape sums them first)
};

class Tape {
 public:
  void record(Node node) { nodes_.push_back(std::move(node)); }
  // Runs every node's backward in reverse order, then releases the nodes and what they saved (also when one throws).
  void backward();
  void clear() { nodes_.clear(); }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<Node> nodes_;
};

// The tape forward code records on (thread-local). GradMode off (NoGrad) records nothing.
Tape& current_tape();
bool grad_enabled();

class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// Swaps in `tape` as the current tape for the lifetime of the guard (recomputation records on a private tape).
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

// True when any input needs a gradient and grad mode is on: only then is a node recorded.
bool needs_grad(std::initializer_list<const Var*> inputs);
// Records a node producing `outputs` whose backward is `fn`; marks the outputs as requiring grad.
void record(const std::string& name, std::vector<Var> outputs, std::function<void()> fn);
// The same for a backward that adds what reaches its outputs by further paths (take_grad_part) in its own pass,
// instead of a sum over memory where the paths merge.
void record_summing(const std::string& name, std::vector<Var> outputs, std::function<void()> fn);

// Records a node producing `outputs` whose backward runs at its place whatever gradients arrived (fn reads missing
// ones as zeros): a collective's backward, which every rank must take part in. No-op when grad mode is off.
void record_collective(const std::string& name, std::vector<Var> outputs, std::function<void()> fn);
// Records a node without outputs whose `fn` backward runs at its place in the reverse order, whatever gradients
// arrived (no-op when grad mode is off).
void record_always(const std::string& name, std::function<void()> fn);

// Seeds d(loss)/d(loss) = seed (default ones) and runs the current tape backward.
void backward(const Var& loss, const Tensor& seed = Tensor());

}  // namespace primer::ag
