// The variants of ops::rmsnorm the SSM mixers use (gate after / before the norm, L2 normalisation, per-head and unit
// weights): the forward against direct formulas in f64, f64 finite-difference gradients of x, w and z, argument
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/ops/rmsnorm.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

using ops::NormGate;
using test::expect_error;

struct Variant {
  std::string name;
  NormGate gate;
  bool l2;
  int weight_rows;  // 0: unit weight, 1: [D], G: [G, D]
};

const std::vector<Variant> kVariants = {
    {"plain_l2_unit", NormGate::None, true, 0},      {"plain_per_head", NormGate::None, false, 3},
    {"after_channel", NormGate::After, false, 1},    {"after_unit_l2", NormGate::After, true, 0},
    {"before_per_head", NormGate::Before, false, 3}, {"before_channel", NormGate::Before, false, 1},
};

constexpr int64_t kB = 2, kT = 4, kG = 3, kD = 5;

Tensor weight_for(const Variant& v, uint64_t seed) {
  if (v.weight_rows == 0) return Tensor();
  return v.weight_rows == 1 ? test::randn({kD}, seed) : test::randn({kG, kD}, seed);
}

// The gate z (wider than x, so silu's curvature shows) when the variant has one.
Tensor gate_for(const Variant& v, uint64_t seed) {
  return v.gate == NormGate::None ? Tensor() : test::randn({kB, kT, kG, kD}, seed, DType::F64, Device::cpu(), 2.0);
}

// y from the definition, element by element.
std::vector<double> direct(const Variant& v, const Tensor& x, const Tensor& w, const Tensor& z, double eps) {
  const auto xv = x.to_vector<double>();
  const auto wv = w.defined() ? w.to_vector<double>() : std::vector<double>();
  const auto zv = z.defined() ? z.to_vector<double>() : std::vector<double>();
  const int64_t rows = x.numel() / kD;
  std::vector<double> y(xv.size());
  auto silu = [](double a) { return a / (1 + std::exp(-a)); };
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> u(kD);
    double ss = 0;
    for (int64_t i = 0; i < kD; ++i) {
      u[size_t(i)] = xv[size_t(r * kD + i)] * (v.gate == NormGate::Before ? silu(zv[size_t(r * kD + i)]) : 1.0);
      ss += u[size_t(i)] * u[size_t(i)];
    }
    const double rs = 1 / std::sqrt((v.l2 ? ss : ss / double(kD)) + eps);
    for (int64_t i = 0; i < kD; ++i) {
      const double wi = v.weight_rows == 0 ? 1.0 : wv[size_t((r % v.weight_rows) * kD + i)];
      const double gate = v.gate == NormGate::After ? silu(zv[size_t(r * kD + i)]) : 1.0;
      y[size_t(r * kD + i)] = wi * u[size_t(i)] * rs * gate;
    }
  }
  return y;
}

TEST(GatedRmsNorm, VariantsMatchTheirDefinitions) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const double eps = 1e-5;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Tensor x = test::randn({kB, kT, kG, kD}, seed), w = weight_for(v, seed + 1);
    const Tensor z = gate_for(v, seed + 2);
    const ops::NormSpec spec{eps, v.gate, v.l2};
    Tensor rstd;
    const Tensor y = ops::rmsnorm(x, w, z, spec, &rstd);
    test::expect_close(y, Tensor::from_vector(direct(v, x, w, z, eps), x.shape(), DType::F64), 1e-14, 1e-13, "y");
    // The f32 path agrees to f32 rounding.
    auto f32 = [](const Tensor& t) { return t.defined() ? t.to(DType::F32) : Tensor(); };
    test::expect_close(ops::rmsnorm(f32(x), f32(w), f32(z), spec, nullptr), y, 1e-6, 1e-5, "y f32");
  }
}

// The backward from the output (NormSpec::from_output: x is y = x_in·r, for a norm formed in another op's pass)
// gives what the backward from the input gives, for the L2 and the RMS norm with unit weight.
TEST(GatedRmsNorm, BackwardFromTheOutputIsTheBackwardFromTheInput) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (bool l2 : {true, false}) {
    SCOPED_TRACE(l2 ? "l2" : "rms");
    ops::NormSpec spec{1e-5, NormGate::None, l2};
    const Tensor x = test::randn({kB, kT, kG, kD}, seed), dy = test::randn({kB, kT, kG, kD}, seed + 1);
    Tensor rstd;
    const Tensor y = ops::rmsnorm(x, Tensor(), Tensor(), spec, &rstd);
    const Tensor from_input = ops::rmsnorm_backward(dy, x, Tensor(), Tensor(), rstd, spec, Tensor()).dx;
    spec.from_output = true;
    const Tensor from_output = ops::rmsnorm_backward(dy, y, Tensor(), Tensor(), rstd, spec, Tensor()).dx;
    test::expect_close(from_output, from_input, 1e-13, 1e-13, "dx");
  }
  ops::NormSpec spec{1e-5, NormGate::None, true};
  spec.from_output = true;
  const Tensor x = test::randn({kB, kD}, seed), w = test::randn({kD}, seed + 1);
  expect_error([&] { ops::rmsnorm_backward(x, x, w, Tensor(), Tensor::full({kB}, 1.0, DType::F64), spec, w); },
               {"rmsnorm_backward", "from_output", "unit weight"});
}

TEST(GatedRmsNorm, GradientsOfXWAndZ) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const double eps = 1e-5;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const bool has_w = v.weight_rows > 0, has_z = v.gate != NormGate::None;
    const ops::NormSpec spec{eps, v.gate, v.l2};
    test::GradCheck check;
    check.inputs = {test::randn({kB, kT, kG, kD}, seed)};
    check.names = {"x"};
    if (has_w) check.inputs.push_back(weight_for(v, seed + 1)), check.names.push_back("w");
    if (has_z) check.inputs.push_back(gate_for(v, seed + 2)), check.names.push_back("z");
    auto unpack = [=](const std::vector<Tensor>& in) {
      return std::pair<Tensor, Tensor>{has_w ? in[1] : Tensor(), has_z ? in.back() : Tensor()};
    };
    check.forward = [=](const std::vector<Tensor>& in) {
      const auto [w, z] = unpack(in);
      return std::vector<Tensor>{ops::rmsnorm(in[0], w, z, spec, nullptr)};
    };
    check.backward = [=](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      const auto [w, z] = unpack(in);
      Tensor rstd;
      ops::rmsnorm(in[0], w, z, spec, &rstd);
      const Tensor dw = has_w ? Tensor::zeros(w.shape(), DType::F64) : Tensor();
      const ops::NormGrads g = ops::rmsnorm_backward(dout[0], in[0], w, z, rstd, spec, dw);
      std::vector<Tensor> grads = {g.dx};
      if (has_w) grads.push_back(dw);
      if (has_z) grads.push_back(g.dz);
      return grads;
    };
    test::run_gradcheck(check, seed);
  }
}

TEST(GatedRmsNorm, BadArgumentsNameTheArgument) {
  const Tensor x = Tensor::zeros({2, 3, 4}, DType::F32), z = Tensor::zeros({2, 3, 4}, DType::F32);
  const ops::NormSpec after{1e-6, NormGate::After};
  expect_error([&] { ops::rmsnorm(x, Tensor(), Tensor(), after, nullptr); }, {"rmsnorm", "'z'", "undefined"});
  expect_error([&] { ops::rmsnorm(x, Tensor(), z, ops::NormSpec{}, nullptr); }, {"rmsnorm", "'z'", "None"});
  expect_error(
      [&] {
        ops::rmsnorm(x, Tensor(), Tensor::zeros({2, 3, 5}, DType::F32), after, nullptr);
      },
      {"rmsnorm", "'z'", "[2, 3, 4]"});
  expect_error(
      [&] {
        ops::rmsnorm(x, Tensor::zeros({2, 4}, DType::F32), Tensor(), ops::NormSpec{}, nullptr);
      },
      {"rmsnorm", "per-head", "[..., 2, 4]"});
  Tensor rstd;
  ops::rmsnorm(x, Tensor(), z, after, &rstd);
  expect_error([&] { ops::rmsnorm_backward(x, x, Tensor(), z, rstd, after, Tensor::zeros({4}, DType::F32)); },
               {"rmsnorm_backward", "'dw_accum'", "unit weight"});
  const Tensor w = Tensor::zeros({3, 4}, DType::F32);
  ops::rmsnorm(x, w, z, after, &rstd);
  expect_error([&] { ops::rmsnorm_backward(x, x, w, z, rstd, after, Tensor::zeros({4}, DType::F32)); },
               {"rmsnorm_backward", "'dw_accum'", "[3, 4]"});
}

}  // namespace
}  // namespace primer
