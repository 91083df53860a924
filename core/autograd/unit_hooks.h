// The seam through which FSDP reaches a model without the model knowing it (parallel/ implements it, layers/
// calls it, recipes/ wires the two). A unit is a group of parameters sharded together: the embedding, one decoder
// block, the final norm with the LM head. Around a unit's forward the model calls before_forward / after_forward;
// run_unit also puts two always-run nodes on the tape, so that backward calls before_backward(unit) before the
// unit's first backward node and after_backward(unit) after its last (with recomputation, around the recompute).
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd/variable.h"

namespace primer::ag {

// A unit as a model declares it: its parameters' names, and whether its gradient arrives during the forward pass
// (the fused LM-head cross-entropy computes the head's weight gradient there).
struct UnitSpec {
  std::vector<std::string> parameters;
  bool gradient_in_forward = false;
};

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(size_t unit) = 0;   // the unit's weights must be usable when it returns
  virtual void after_forward(size_t unit) = 0;    // the unit's forward is recorded (or done, without grad)
  virtual void before_backward(size_t unit) = 0;  // weights usable again; gradient buffers ready
  virtual void after_backward(size_t unit) = 0;   // every gradient of this use of the unit has arrived
};

// fn(x) between the hooks of `unit` (just fn(x) when hooks is null).
Var run_unit(UnitHooks* hooks, size_t unit, const Var& x, const std::function<Var(const Var&)>& fn);

}  // namespace primer::ag
