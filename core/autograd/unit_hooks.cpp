#include "core/autograd/unit_hooks.h"

#include <string>

namespace primer::ag {

Var run_unit(UnitHooks* hooks, size_t unit, const Var& x, const std::function<Var(const Var&)>& fn) {
  if (!hooks) return fn(x);
  const std::string name = "unit " + std::to_string(unit);
  // Recorded first, so it runs last in backward.
  record_always(name + " backward done", [hooks, unit] { hooks->after_backward(unit); });
  hooks->before_forward(unit);
  Var y = fn(x);
  hooks->after_forward(unit);
  record_always(name + " backward starts", [hooks, unit] { hooks->before_backward(unit); });
  return y;
}

}  // namespace primer::ag
