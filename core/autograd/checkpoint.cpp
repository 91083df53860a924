#include "core/autograd/checkpoint.h"

namespace primer::ag {
namespace {
// Fresh Vars over the same values, cut off from the outer graph.
std::vector<Var> detach(const std::vector<Var>& vs, bool keep_requires_grad) {
  std::vector<Var> out;
  for (const Var& v : vs) {
    Var d = constant(v->value, v->name);
    d->requires_grad = keep_requires_grad && v->requires_grad;
    out.push_back(d);
  }
  return out;
}
}  // namespace

std::vector<Var> checkpoint(const std::string& name, const BlockFn& fn, const std::vector<Var>& inputs) {
  if (!grad_enabled()) return fn(inputs);
  std::vector<Var> outputs;
  {
    NoGrad no_grad;
    for (const Var& o : fn(detach(inputs, false))) outputs.push_back(constant(o->value, o->name));
  }
  record(name, outputs, [fn, inputs, outputs] {
    Tape private_tape;
    std::vector<Var> ins = detach(inputs, true);
    std::vector<Var> outs;
    {
      TapeScope scope(private_tape);
      outs = fn(ins);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outputs[i]->grad.defined()) outs[i]->grad = outputs[i]->grad;
    }
    private_tape.backward();
    for (size_t i = 0; i < ins.size(); ++i) accumulate_grad(inputs[i], ins[i]->grad);
  });
  return outputs;
}

}  // namespace primer::ag
