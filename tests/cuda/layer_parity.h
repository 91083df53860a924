// A mixer layer run once on the GPU in bf16 and once in f64 on the CPU on the very values the GPU sees (its bf16
// weights — the initialisation is keyed by parameter name — and the bf16 input and output gradient, with f32-kept
// parameters taken as they are), for the bf16-layer-vs-f64 tests of each mixer.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd/functions.h"
#include "layers/mixer.h"
#include "tests/cuda/parity_util.h"
#include "tests/support/mixer_checks.h"

namespace primer::test {

// One mixer layer of hidden 256 with `heads` query and `kv_heads` key/value heads of head_dim D.
inline ModelConfig one_layer_config(int64_t heads, int64_t kv_heads, int64_t D) {
  ModelConfig c = tiny_mixer_config(heads, kv_heads, 1);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = D;
  c.max_position_embeddings = 512;
  return c;
}

struct LayerRun {
  Tensor y, dx;
  std::vector<Tensor> states;  // the mixer's final recurrent states, on the CPU in f64
  std::vector<Tensor> grads;   // every parameter's gradient in registration order, on the CPU in f64
};

// `dtype` F64 runs on the CPU with the bf16 weights the GPU run gets; BF16 runs on `device`.
template <class Mixer> LayerRun run_layer(const ModelConfig& c, const std::string& prefix, Device device, DType dtype,
                                          const Tensor& x_in, const Tensor& dy_in, uint64_t seed) {
  ParameterRegistry params;
  Mixer mixer(c, prefix, params);
  params.materialize(device, dtype, seed);
  if (dtype == DType::F64)
    for (Parameter* p : params.all())
      p->var->value = (p->keep_f32 ? p->master : p->master.to(DType::BF16)).to(DType::F64);
  const ag::Var x = ag::leaf(x_in.to(dtype).to(device));
  layers::MixerState state;
  const ag::Var y = mixer.forward(x, {}, nullptr, &state);
  ag::backward(y, dy_in.to(dtype).to(device));
  LayerRun r{cpu_f64(y->value), cpu_f64(x->grad), {}, {}};
  for (const ag::Var& s : state.recurrent) r.states.push_back(cpu_f64(s->value));
  for (Parameter* p : params.all()) r.grads.push_back(cpu_f64(p->var->grad));
  return r;
}

// Prints the relative L2 error and expects it within `tol`, with every element finite.
inline void expect_rel_l2(const Tensor& gpu, const Tensor& ref, double tol, const std::string& what) {
  const Diff d = compare(gpu, ref);
  std::printf("  %-40s rel L2 %.2e (tolerance %.0e)\n", what.c_str(), d.rel_l2, tol);
  EXPECT_EQ(d.nonfinite, 0) << what;
  EXPECT_LE(d.rel_l2, tol) << what << ": max abs " << d.max_abs;
}

// Every parameter gradient against its reference: tensors of kFewElements values or more each within tol(name);
// smaller ones — per-head vectors (A_log, dt_bias, a gate's bias: one value per head, each a sum over every token
// with cancellation) are a statistic of a handful of heavy-tailed draws, not an average — are printed, checked
// finite, and held to `whole_tol` together with every other gradient (the concatenation of all of them).
constexpr int64_t kFewElements = 32;
inline void expect_gradients_track(const std::vector<Tensor>& gpu, const std::vector<Tensor>& ref,
                                   const std::vector<std::string>& names,
                                   const std::function<double(const std::string&)>& tol, double whole_tol) {
  std::vector<double> gpu_all, ref_all;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].numel() >= kFewElements) {
      expect_rel_l2(gpu[i], ref[i], tol(names[i]), names[i]);
    } else {
      const Diff d = compare(gpu[i], ref[i]);
      std::printf("  %-40s rel L2 %.2e (%lld values: in the whole-gradient check)\n", names[i].c_str(), d.rel_l2,
                  static_cast<long long>(ref[i].numel()));
      EXPECT_EQ(d.nonfinite, 0) << names[i];
    }
    for (double v : gpu[i].to_vector<double>()) gpu_all.push_back(v);
    for (double v : ref[i].to_vector<double>()) ref_all.push_back(v);
  }
  const Shape whole{int64_t(ref_all.size())};
  expect_rel_l2(Tensor::from_vector(gpu_all, whole, DType::F64), Tensor::from_vector(ref_all, whole, DType::F64),
                whole_tol, "every parameter gradient together");
}

// The parameters' names in registration order (the order of LayerRun::grads).
template <class Mixer> std::vector<std::string> parameter_names(const ModelConfig& c, const std::string& prefix) {
  ParameterRegistry params;
  Mixer mixer(c, prefix, params);
  std::vector<std::string> names;
  for (Parameter* p : params.all()) names.push_back(p->name);
  return names;
}

// The bf16 layer on the GPU against the f64 CPU layer at head_dim 64 and 128 (hidden 256, 4 query and 2 key/value
// heads, B = 2, T = 100, the mixer's default options unless `configure` changes them): output and final states within
// `out_tol`, the input gradient and every parameter gradient within `grad_tol`.
template <class Mixer> void expect_bf16_layer_tracks_f64(const std::string& prefix, uint64_t seed, double out_tol,
                                                         double grad_tol,
                                                         const std::function<void(ModelConfig&)>& configure = {}) {
  for (int64_t D : {64, 128}) {
    ModelConfig c = one_layer_config(4, 2, D);
    if (configure) configure(c);
    const int64_t B = 2, T = 100;
    const Tensor x = randn({B, T, c.hidden_size}, seed + 1).to(DType::BF16);
    const Tensor dy = randn({B, T, c.hidden_size}, seed + 2).to(DType::BF16);
    std::printf("head_dim %ld\n", long(D));
    const LayerRun ref = run_layer<Mixer>(c, prefix, Device::cpu(), DType::F64, x, dy, seed);
    const LayerRun gpu = run_layer<Mixer>(c, prefix, Device::cuda(), DType::BF16, x, dy, seed);
    expect_rel_l2(gpu.y, ref.y, out_tol, "y");
    ASSERT_EQ(gpu.states.size(), ref.states.size());
    for (size_t i = 0; i < ref.states.size(); ++i)
      expect_rel_l2(gpu.states[i], ref.states[i], out_tol, "state " + std::to_string(i));
    expect_rel_l2(gpu.dx, ref.dx, grad_tol, "dx");
    const std::vector<std::string> names = parameter_names<Mixer>(c, prefix);
    for (size_t i = 0; i < ref.grads.size(); ++i) expect_rel_l2(gpu.grads[i], ref.grads[i], grad_tol, names[i]);
  }
}

}  // namespace primer::test
