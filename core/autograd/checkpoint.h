// Activation checkpointing at block granularity: the forward of `fn` runs without recording (so none of its
// intermediates stay alive); backward re-runs `fn` on a private tape and backpropagates through it.
// `fn` must be deterministic (same outputs for the same inputs), which every primer op is.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/autograd/variable.h"

namespace primer::ag {

using BlockFn = std::function<std::vector<Var>(const std::vector<Var>&)>;

std::vector<Var> checkpoint(const std::string& name, const BlockFn& fn, const std::vector<Var>& inputs);

}  // namespace primer::ag
