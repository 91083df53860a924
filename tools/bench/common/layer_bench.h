// One mixer layer's forward + backward on CUDA in bf16, timed, for the SSM benchmarks that set a new mixer's layer
// beside its peer's.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/functions.h"
#include "core/parameters.h"
#include "layers/mixer.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

namespace primer::bench {

// One forward + backward of `mixer` (its parameters already materialized) on a random bf16 input of `shape` with a
// random output gradient, as two phases (forward, then backward) for bench::phase_times; the output is released after
// the backward, as a layer's would be.
inline std::vector<std::function<void()>> mixer_train_phases(layers::SequenceMixer& mixer, const LayerShape& shape) {
  const int64_t hidden = shape.layer_config().hidden_size;
  const Tensor x = normal_gpu({shape.batch, shape.seq, hidden}, 8, DType::BF16);
  const Tensor dy = normal_gpu({shape.batch, shape.seq, hidden}, 9, DType::BF16);
  auto y = std::make_shared<ag::Var>();
  return {[&mixer, x, y] { *y = mixer.forward(ag::leaf(x), {}); },
          [dy, y] {
            (*y)->grad = dy;
            ag::current_tape().backward();
            y->reset();
          }};
}

// The same pass as one callable, for the timers.
inline std::function<void()> mixer_train_pass(layers::SequenceMixer& mixer, const LayerShape& shape) {
  return [phases = mixer_train_phases(mixer, shape)] {
    phases[0]();
    phases[1]();
  };
}

// Median milliseconds of one forward + backward of a `Mixer` layer of `shape` (its weights under `prefix`).
template <class Mixer> double mixer_train_ms(const LayerShape& shape, const std::string& prefix) {
  ParameterRegistry params;
  Mixer mixer(shape.layer_config(), prefix, params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  return median_ms(mixer_train_pass(mixer, shape));
}

// The table row of that: "<what> layer, fwd + bwd", the layer's shape, milliseconds.
template <class Mixer>
Row mixer_train_row(const LayerShape& shape, const std::string& what, const std::string& prefix) {
  return {{what + " layer, fwd + bwd", shape.layer(), fixed(mixer_train_ms<Mixer>(shape, prefix), 3), ""}};
}

}  // namespace primer::bench
