// One mixer layer's forward + backward on CUDA in bf16, timed, for the SSM benchmarks that set a new mixer's layer
// beside its peer's.
#pragma once
#include <string>

#include "core/autograd/functions.h"
#include "core/parameters.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

namespace primer::bench {

// Median milliseconds of one forward + backward of a `Mixer` layer of `shape` (its weights under `prefix`), with a
// random input and output gradient.
template <class Mixer> double mixer_train_ms(const LayerShape& shape, const std::string& prefix) {
  const ModelConfig c = shape.layer_config();
  const Tensor x = normal_gpu({shape.batch, shape.seq, c.hidden_size}, 8, DType::BF16);
  const Tensor dy = normal_gpu({shape.batch, shape.seq, c.hidden_size}, 9, DType::BF16);
  ParameterRegistry params;
  Mixer mixer(c, prefix, params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  return median_ms([&] {
    const ag::Var y = mixer.forward(ag::leaf(x), {});
    y->grad = dy;
    ag::current_tape().backward();
  });
}

// The table row of that: "<what> layer, fwd + bwd", the layer's shape, milliseconds.
template <class Mixer>
Row mixer_train_row(const LayerShape& shape, const std::string& what, const std::string& prefix) {
  return {{what + " layer, fwd + bwd", shape.layer(), fixed(mixer_train_ms<Mixer>(shape, prefix), 3), ""}};
}

}  // namespace primer::bench
