#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/functions.h"
#include "core/ops/conv1d.h"
#include "core/ops/embedding.h"
#include "tests/cuda/parity_util.h"
#include "tests/support/test_util.h"

// CUDA vs CPU parity. The CPU reference runs in f64 on the very values the GPU saw (bf16 inputs are rounded first
// and upcast), so the only differences are the GPU's output rounding and its f32 accumulation order.
// Tolerances (relative L2): f32 outputs 1e-5; bf16 outputs 4e-3 (one rounding to 8 mantissa bits is at most 2^-9
// relative per element, ~1.1e-3 in L2, with margin); f32 parameter gradients summed over B*T terms in a different
// order than the reference: 1e-4 for either input dtype.

namespace primer {
namespace {

Tensor reference(const Tensor& t) { return t.defined() ? t.to(Device::cpu()).to(DType::F64) : Tensor(); }

double output_tol(DType dt) { return dt == DType::BF16 ? 4e-3 : 1e-5; }
// Largest single-element error: outputs stay below 16 in magnitude here, where a bf16 half-ulp is 2^-5.
double output_abs_tol(DType dt) { return dt == DType::BF16 ? 0.04 : 1e-4; }

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what << " differs between two identical runs";
}

// ---- embedding ----

struct EmbeddingCase {
  int64_t vocab, dim;
  Shape ids_shape;
};

TEST(EmbeddingCuda, ForwardAndBackwardMatchCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 16-byte path (D multiple of 8), scalar path (odd D), many repeats (small V), one token.
  const std::vector<EmbeddingCase> cases = {{1000, 1024, {4, 37}}, {97, 13, {3, 5}}, {7, 40, {2000}}, {50, 8, {1}}};
  for (DType dt : {DType::F32, DType::BF16})
    for (DType it : {DType::I32, DType::I64})
      for (const EmbeddingCase& c : cases) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + dtype_name(it) + " V=" + std::to_string(c.vocab) +
                     " D=" + std::to_string(c.dim));
        const Tensor w = test::randn({c.vocab, c.dim}, seed, dt, Device::cuda());
        const Tensor ids = test::rand_ints(c.ids_shape, seed + 1, 0, c.vocab, it, Device::cuda());
        const Tensor y = ops::embedding(w, ids);
        test::expect_close(y, ops::embedding(reference(w), ids.to(Device::cpu())), 0, 0, "embedding forward (a copy)");

        Shape dy_shape = c.ids_shape;
        dy_shape.push_back(c.dim);
        const Tensor dy = test::randn(dy_shape, seed + 2, dt, Device::cuda());
        const Tensor init = test::randn({c.vocab, c.dim}, seed + 3, DType::F32, Device::cuda());
        const Tensor dw = init.clone(), dw_again = init.clone();
        ops::embedding_backward(dy, ids, dw);
        ops::embedding_backward(dy, ids, dw_again);
        const Tensor dw_ref = reference(init);
        ops::embedding_backward(reference(dy), ids.to(Device::cpu()), dw_ref);
        test::expect_close(dw, dw_ref, 1e-5, 1e-4, "embedding dweight");  // f32 sums of a few rows per id
        expect_same_bits(dw, dw_again, "embedding dweight");
      }
}

TEST(EmbeddingCuda, OutOfRangeIdsGiveNanRowsAndNoGradient) {
  PRIMER_REQUIRE_CUDA();
  const Tensor w = Tensor::full({5, 8}, 1.0, DType::F32, Device::cuda());
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{2, 5, -1, 2}, {4}, DType::I64, Device::cuda());
  const auto y = ops::embedding(w, ids).to_vector<float>();
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(y[d], 1.0f);
    EXPECT_TRUE(std::isnan(y[8 + d]) && std::isnan(y[16 + d]));
  }
  const Tensor dw = Tensor::zeros({5, 8}, DType::F32, Device::cuda());
  ops::embedding_backward(Tensor::full({4, 8}, 1.0, DType::F32, Device::cuda()), ids, dw);
  const auto g = dw.to_vector<float>();
  for (int i = 0; i < 40; ++i) EXPECT_EQ(g[i], i / 8 == 2 ? 2.0f : 0.0f) << "element " << i;
}

// ---- causal conv1d ----

struct ConvCase {
  int64_t batch, time, channels;
  int taps;
  bool state;
};

std::string describe(const ConvCase& c, DType dt, bool silu) {
  return std::string(dtype_name(dt)) + " B=" + std::to_string(c.batch) + " T=" + std::to_string(c.time) +
         " C=" + std::to_string(c.channels) + " K=" + std::to_string(c.taps) + (c.state ? " state" : "") +
         (silu ? " silu" : "");
}

// Packed paths (C multiple of 8), scalar path (C = 4096 + 3), decoding (T = 1), T < K-1, odd T, K = 2..8.
const std::vector<ConvCase> kConvCases = {{2, 37, 4099, 4, true},  {3, 129, 1024, 4, true}, {1, 1, 24, 4, true},
                                          {2, 2, 40, 4, true},     {1, 333, 72, 2, false},  {2, 45, 64, 8, true},
                                          {1, 77, 6144, 3, false}, {1, 500, 16, 4, true}};

TEST(CausalConv1dCuda, ForwardMatchesCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F32, DType::BF16})
    for (const ConvCase& c : kConvCases)
      for (bool silu : {false, true}) {
        SCOPED_TRACE(describe(c, dt, silu));
        const Device gpu = Device::cuda();
        const Tensor x = test::randn({c.batch, c.time, c.channels}, seed, dt, gpu);
        const Tensor w = test::randn({c.channels, c.taps}, seed + 1, dt, gpu, 0.5);
        const Tensor bias = test::randn({c.channels}, seed + 2, dt, gpu);
        const Tensor state = c.state ? test::randn({c.batch, c.channels, c.taps - 1}, seed + 3, dt, gpu) : Tensor();
        Tensor state_out, state_out_ref;
        const Tensor y = ops::causal_conv1d(x, w, bias, silu, state, &state_out);
        const Tensor y_ref =
            ops::causal_conv1d(reference(x), reference(w), reference(bias), silu, reference(state), &state_out_ref);
        test::expect_close(y, y_ref, output_tol(dt), output_abs_tol(dt), "y");
        test::expect_close(state_out, state_out_ref, 0, 0, "state_out (a copy of inputs)");
      }
}

TEST(CausalConv1dCuda, BackwardMatchesCpuAndIsDeterministic) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (DType dt : {DType::F32, DType::BF16})
    for (const ConvCase& c : kConvCases)
      for (bool silu : {false, true}) {
        SCOPED_TRACE(describe(c, dt, silu));
        const Device gpu = Device::cuda();
        const int K = c.taps;
        const Tensor x = test::randn({c.batch, c.time, c.channels}, seed, dt, gpu);
        const Tensor w = test::randn({c.channels, K}, seed + 1, dt, gpu, 0.5);
        const Tensor bias = test::randn({c.channels}, seed + 2, dt, gpu);
        const Tensor state = c.state ? test::randn({c.batch, c.channels, K - 1}, seed + 3, dt, gpu) : Tensor();
        const Tensor dy = test::randn({c.batch, c.time, c.channels}, seed + 4, dt, gpu);
        const Tensor dstate_out = c.state ? test::randn({c.batch, c.channels, K - 1}, seed + 5, dt, gpu) : Tensor();
        const Tensor dw_init = test::randn({c.channels, K}, seed + 6, DType::F32, gpu);
        const Tensor db_init = test::randn({c.channels}, seed + 7, DType::F32, gpu);

        Tensor dw = dw_init.clone(), db = db_init.clone(), dstate;
        const Tensor dx = ops::causal_conv1d_backward(dy, x, w, bias, silu, state, dstate_out, dw, db, &dstate);
        const Tensor dw_ref = reference(dw_init), db_ref = reference(db_init);
        Tensor dstate_ref;
        const Tensor dx_ref =
            ops::causal_conv1d_backward(reference(dy), reference(x), reference(w), reference(bias), silu,
                                        reference(state), reference(dstate_out), dw_ref, db_ref, &dstate_ref);
        test::expect_close(dx, dx_ref, output_tol(dt), output_abs_tol(dt), "dx");
        test::expect_close(dstate, dstate_ref, output_tol(dt), output_abs_tol(dt), "dstate_in");
        test::expect_close(dw, dw_ref, 1e-4, 1e-2, "dw_accum");
        test::expect_close(db, db_ref, 1e-4, 1e-2, "dbias_accum");

        const Tensor dw_again = dw_init.clone(), db_again = db_init.clone();
        (void)ops::causal_conv1d_backward(dy, x, w, bias, silu, state, dstate_out, dw_again, db_again, nullptr);
        expect_same_bits(dw_again, dw, "dw_accum");
        expect_same_bits(db_again, db, "dbias_accum");
      }
}

// The conv with each head L2-normalised (ag::causal_conv1d_l2) against the CPU's conv then norm in f64 on the values
// the GPU saw, into a poisoned pool: y, r and the final state, then every gradient through the autograd node. Heads of
// 128 and 64 channels run in the conv's pass (16 and 8 lanes of 16-byte bf16 packs, 32 and 16 of f32 ones), a head of
// 48 f32 channels (12 lanes) and an unaligned x run the conv and the norm in turn; SiLU off runs them in turn too.
// Tolerances: the outputs' as above (one bf16 rounding of y, the conv's output rounded before its norm as the
// unfused ops do); dx and dstate_in pass two more roundings (ŷ, read back by the norm's backward, and the gradient
// at the conv's output, stored in the inputs' dtype between the two backward kernels), so twice the output bound;
// the parameter gradients sum B·T such terms, each rounded once in bf16 (4e-3) or summed in another order (1e-4).
TEST(CausalConv1dCuda, HeadNormalisedMatchesCpu) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct NormCase {
    DType dt;
    int64_t batch, time, heads, head_dim;
    bool silu, unaligned;
  };
  const NormCase cases[] = {{DType::BF16, 2, 150, 4, 128, true, false}, {DType::BF16, 1, 37, 6, 64, true, false},
                            {DType::F32, 2, 70, 2, 128, true, false},   {DType::F32, 1, 90, 4, 64, true, false},
                            {DType::F32, 2, 33, 3, 48, true, false},    {DType::BF16, 2, 40, 2, 128, true, true},
                            {DType::BF16, 1, 50, 2, 64, false, false}};
  const double eps = 1e-6;
  const int K = 4;
  for (const NormCase& c : cases) {
    const int64_t C = c.heads * c.head_dim;
    SCOPED_TRACE(describe({c.batch, c.time, C, K, true}, c.dt, c.silu) + " head_dim " + std::to_string(c.head_dim) +
                 (c.unaligned ? " unaligned" : ""));
    const Device gpu = Device::cuda();
    // Unaligned: x starts one element into its buffer, so its rows start off the 16-byte packs.
    const int64_t n = c.batch * c.time * C;
    const Tensor x = test::randn({n + 1}, seed, c.dt, gpu)
                         .slice(0, c.unaligned ? 1 : 0, n + (c.unaligned ? 1 : 0))
                         .view({c.batch, c.time, C});
    const Tensor w = test::randn({C, K}, seed + 1, c.dt, gpu, 0.5);
    const Tensor bias = test::randn({C}, seed + 2, c.dt, gpu);
    const Tensor state = test::randn({c.batch, C, K - 1}, seed + 3, c.dt, gpu);
    const Tensor dy = test::randn({c.batch, c.time, C}, seed + 4, c.dt, gpu);
    const Tensor dstate_out = test::randn({c.batch, C, K - 1}, seed + 5, c.dt, gpu);

    struct Run {
      Tensor y, rstd, state_out;
      std::vector<Tensor> grads;
    };
    auto run = [&](auto to) {
      std::vector<ag::Var> leaves;
      for (const Tensor& t : {x, w, bias, state}) leaves.push_back(ag::leaf(to(t)));
      ag::Var so;
      const ag::Var y = ag::causal_conv1d_l2(leaves[0], leaves[1], leaves[2], c.silu, leaves[3], &so, c.head_dim, eps);
      Tensor rstd;
      ops::causal_conv1d_l2(to(x), to(w), to(bias), c.silu, to(state), nullptr, c.head_dim, eps, &rstd);
      y->grad = to(dy);
      so->grad = to(dstate_out);
      ag::current_tape().backward();
      Run r{y->value, rstd, so->value, {}};
      for (const ag::Var& l : leaves) r.grads.push_back(l->grad);
      return r;
    };
    test::poison_pool();
    const Run got = run([](const Tensor& t) { return t; });
    const Run want = run([](const Tensor& t) { return reference(t); });
    test::expect_close(got.y, want.y, output_tol(c.dt), output_abs_tol(c.dt), "y");
    test::expect_close(got.rstd, want.rstd, output_tol(c.dt), 1.0, "rstd");
    test::expect_close(got.state_out, want.state_out, 0, 0, "state_out (a copy of inputs)");
    const char* names[] = {"dx", "dw", "dbias", "dstate_in"};
    for (size_t i = 0; i < 4; ++i) {
      const bool param = i == 1 || i == 2;
      const double tol = param ? (c.dt == DType::BF16 ? 4e-3 : 1e-4) : 2 * output_tol(c.dt);
      test::expect_close(got.grads[i], want.grads[i], tol, param ? 1.0 : 2 * output_abs_tol(c.dt), names[i]);
    }
  }
}

}  // namespace
}  // namespace primer
