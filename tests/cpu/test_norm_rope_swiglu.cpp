// RMSNorm, RoPE and SwiGLU on the CPU: forward against direct formulas, f64 finite-difference gradient checks,
// and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using test::expect_error;

TEST(RmsNorm, ForwardMatchesFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t rows = 6, D = 7;
  const double eps = 1e-6;
  Tensor x = test::randn({2, 3, D}, seed);
  Tensor w = test::randn({D}, seed + 1);
  Tensor rstd;
  Tensor y = ops::rmsnorm(x, w, eps, &rstd);
  ASSERT_EQ(rstd.shape(), (Shape{rows}));
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> ye(size_t(rows * D));
  std::vector<double> re(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < D; ++i) ms += xv[r * D + i] * xv[r * D + i] / double(D);
    re[r] = 1 / std::sqrt(ms + eps);
    for (int64_t i = 0; i < D; ++i) ye[r * D + i] = wv[i] * xv[r * D + i] * re[r];
  }
  test::expect_close(y, Tensor::from_vector(ye, {2, 3, D}, DType::F64), 1e-14, 1e-13, "y");
  test::expect_close(rstd, Tensor::from_vector(re, {rows}, DType::F64), 1e-14, 1e-13, "rstd");
  // The f32 path agrees to f32 rounding.
  Tensor rstd32;
  test::expect_close(ops::rmsnorm(x.to(DType::F32), w.to(DType::F32), eps, &rstd32), y, 1e-6, 1e-5, "y f32");
  EXPECT_EQ(rstd32.dtype(), DType::F32);
}

TEST(RmsNorm, GradientsOfXAndW) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const double eps = 1e-5;
  test::GradCheck check;
  check.inputs = {test::randn({5, 6}, seed), test::randn({6}, seed + 1)};  // random w, not ones
  check.names = {"x", "w"};
  check.forward = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::rmsnorm(in[0], in[1], eps, nullptr)};
  };
  check.backward = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
    Tensor rstd;
    ops::rmsnorm(in[0], in[1], eps, &rstd);
    Tensor dw = Tensor::zeros({6}, DType::F64);
    Tensor dx = ops::rmsnorm_backward(dout[0], in[0], in[1], rstd, dw);
    return std::vector<Tensor>{dx, dw};
  };
  test::run_gradcheck(check, seed);
}

TEST(RmsNorm, BackwardAccumulatesIntoDw) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor x = test::randn({4, 9}, seed), w = test::randn({9}, seed + 1), dy = test::randn({4, 9}, seed + 2);
  Tensor rstd;
  ops::rmsnorm(x, w, 1e-6, &rstd);
  Tensor once = Tensor::zeros({9}, DType::F64);
  ops::rmsnorm_backward(dy, x, w, rstd, once);
  Tensor start = test::randn({9}, seed + 3);
  Tensor twice = start.clone();
  ops::rmsnorm_backward(dy, x, w, rstd, twice);
  ops::rmsnorm_backward(dy, x, w, rstd, twice);
  const auto o = once.to_vector<double>(), s = start.to_vector<double>(), t = twice.to_vector<double>();
  for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(t[i], s[i] + 2 * o[i], 1e-12);
}

TEST(RmsNorm, BadArgumentsNameTheArgument) {
  Tensor x = Tensor::zeros({3, 4}, DType::F32), w = Tensor::zeros({4}, DType::F32);
  expect_error([&] { ops::rmsnorm(x, Tensor::zeros({5}, DType::F32), 1e-6, nullptr); }, {"rmsnorm", "'w'", "[4]"});
  expect_error([&] { ops::rmsnorm(x, w.to(DType::F64), 1e-6, nullptr); }, {"rmsnorm", "'w'", "f32"});
  expect_error([&] { ops::rmsnorm(x.to(DType::BF16), w, 1e-6, nullptr); }, {"rmsnorm", "'x'", "f32/f64"});
  Tensor rstd;
  ops::rmsnorm(x, w, 1e-6, &rstd);
  expect_error([&] { ops::rmsnorm_backward(x, x, w, rstd, Tensor::zeros({4}, DType::BF16)); },
               {"rmsnorm_backward", "'dw_accum'", "f32"});
  expect_error([&] { ops::rmsnorm_backward(x, x, w, Tensor::zeros({4}, DType::F32), Tensor::zeros({4}, DType::F32)); },
               {"rmsnorm_backward", "'rstd'", "[3]"});
  expect_error([&] { ops::rmsnorm_backward(x.slice(0, 0, 2), x, w, rstd, Tensor::zeros({4}, DType::F32)); },
               {"rmsnorm_backward", "'dy'"});
}

// Hugging Face reference: out = x * cos(emb) + rotate_half(x) * sin(emb), emb = cat(freqs, freqs),
// rotate_half(x) = cat(-x[half:], x[:half]).
TEST(Rope, ForwardMatchesRotateHalfFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t B = 2, T = 3, H = 2, Dh = 8, half = Dh / 2;
  Tensor x = test::randn({B, T, H, Dh}, seed);
  Tensor pos = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 5, 0, 1000}, {B, T}, DType::I32);  // resets, offsets
  Tensor inv_freq = ops::rope_inv_freq(Dh, 10000.0);
  const auto f = inv_freq.to_vector<float>();
  for (int64_t i = 0; i < half; ++i) EXPECT_FLOAT_EQ(f[i], float(std::pow(10000.0, -2.0 * i / Dh)));
  Tensor y = ops::rope(x, pos, inv_freq);
  const auto xv = x.to_vector<double>();
  const auto pv = pos.to_vector<int32_t>();
  std::vector<double> ye(xv.size());
  for (int64_t t = 0; t < B * T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < Dh; ++d) {
        const int64_t base = (t * H + h) * Dh;
        const double emb = double(pv[t]) * double(f[d % half]);
        const double rotated = d < half ? -xv[base + d + half] : xv[base + d - half];
        ye[base + d] = xv[base + d] * std::cos(emb) + rotated * std::sin(emb);
      }
  test::expect_close(y, Tensor::from_vector(ye, x.shape(), DType::F64), 1e-14, 1e-13, "rope");
  // The f32 path forms the angle in fp32: at position 1000 that moves it by up to ~3e-5 rad.
  test::expect_close(ops::rope(x.to(DType::F32), pos, inv_freq), y, 2e-5, 1e-4, "rope f32");
  test::expect_close(ops::rope_backward(y, pos, inv_freq), x, 1e-14, 1e-13, "inverse rotation");
}

TEST(Rope, GradientOfX) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor pos = test::rand_ints({2, 3}, seed + 1, 0, 4096);
  Tensor inv_freq = ops::rope_inv_freq(6, 1e6);
  test::GradCheck check;
  check.inputs = {test::randn({2, 3, 2, 6}, seed)};
  check.names = {"x"};
  check.forward = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rope(in[0], pos, inv_freq)}; };
  check.backward = [&](const std::vector<Tensor>&, const std::vector<Tensor>& dout) {
    return std::vector<Tensor>{ops::rope_backward(dout[0], pos, inv_freq)};
  };
  test::run_gradcheck(check, seed);
}

TEST(Rope, BadArgumentsNameTheArgument) {
  Tensor x = Tensor::zeros({1, 2, 3, 8}, DType::F32);
  Tensor pos = Tensor::zeros({1, 2}, DType::I32), inv_freq = ops::rope_inv_freq(8, 1e4);
  expect_error([&] { ops::rope(x, pos.to(DType::I64), inv_freq); }, {"rope", "'positions'", "i32"});
  expect_error([&] { ops::rope(x, Tensor::zeros({2, 1}, DType::I32), inv_freq); }, {"rope", "'positions'", "[1, 2]"});
  expect_error([&] { ops::rope(x, pos, ops::rope_inv_freq(6, 1e4)); }, {"rope", "'inv_freq'", "[4]"});
  expect_error(
      [&] {
        ops::rope(Tensor::zeros({2, 3, 8}, DType::F32), pos, inv_freq);
      },
      {"rope", "'x'", "[B, T, H, Dh]"});
  expect_error(
      [&] {
        ops::rope_backward(Tensor::zeros({1, 2, 3, 7}, DType::F32), pos, inv_freq);
      },
      {"rope_backward", "'dy'", "Dh even"});
  expect_error([&] { ops::rope_inv_freq(7, 1e4); }, {"rope_inv_freq", "head_dim"});
}

TEST(SwiGlu, ForwardMatchesFormula) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tensor gate = test::randn({3, 11}, seed, DType::F64, Device::cpu(), 3.0), up = test::randn({3, 11}, seed + 1);
  Tensor h = ops::swiglu(gate, up);
  const auto g = gate.to_vector<double>(), u = up.to_vector<double>();
  std::vector<double> he(g.size());
  for (size_t i = 0; i < g.size(); ++i) he[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  test::expect_close(h, Tensor::from_vector(he, gate.shape(), DType::F64), 1e-14, 1e-13, "swiglu");
  test::expect_close(ops::swiglu(gate.to(DType::F32), up.to(DType::F32)), h, 1e-6, 1e-5, "swiglu f32");
}

TEST(SwiGlu, GradientsOfGateAndUp) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::GradCheck check;
  check.inputs = {test::randn({4, 5}, seed, DType::F64, Device::cpu(), 3.0), test::randn({4, 5}, seed + 1)};
  check.names = {"gate", "up"};
  check.forward = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::swiglu(in[0], in[1])}; };
  check.backward = [](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
    Tensor dgate, dup;
    ops::swiglu_backward(dout[0], in[0], in[1], &dgate, &dup);
    return std::vector<Tensor>{dgate, dup};
  };
  test::run_gradcheck(check, seed);
}

TEST(SwiGlu, BadArgumentsNameTheArgument) {
  Tensor g = Tensor::zeros({2, 3}, DType::F32);
  Tensor dgate, dup;
  expect_error([&] { ops::swiglu(g, Tensor::zeros({3, 2}, DType::F32)); }, {"swiglu", "'up'", "[2, 3]"});
  expect_error([&] { ops::swiglu(g, g.to(DType::F64)); }, {"swiglu", "'up'", "f32"});
  expect_error([&] { ops::swiglu_backward(g.to(DType::F64), g, g, &dgate, &dup); }, {"swiglu_backward", "'dh'"});
  expect_error([&] { ops::swiglu_backward(g, g, g, nullptr, &dup); }, {"swiglu_backward", "dgate"});
}

}  // namespace
}  // namespace primer
