// CUDA flash attention against the f64 CPU reference on the same bf16-rounded inputs: forward (out, lse) and
// backward (dq, dk, dv) for B = 2, T in {1, 63, 128, 257, 1000}, MHA and GQA, head_dim 64 and 128, causal with and
// without a sliding window, with query/key offsets (a query chunk after a key chunk, keys starting after the first
// queries so some rows see nothing) and non-causal; dq also as the f32 accumulator (f32_dq).
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/attention.h"
#include "core/ops/attention_over_cache.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

struct Case {
  int64_t Tq, Tk, Hq, Hkv, Dh;
  ops::AttentionOptions opt;
};

const Case kCases[] = {
    {1, 63, 8, 8, 64, {0, true, 0, 62, 0}},  // one decoded token over a cache (a single key would make dq = dk = 0)
    {63, 63, 8, 2, 128, {}},
    {63, 128, 8, 2, 64, {0, true, 0, 65, 0}},    // query chunk right after a key chunk (sequence parallelism)
    {128, 128, 8, 8, 128, {0, false, 0, 0, 0}},  // non-causal
    {257, 257, 8, 2, 64, {0, true, 100, 0, 0}},  // sliding window
    {257, 200, 8, 8, 128, {0, true, 0, 0, 10}},  // keys start at 10: rows 0..9 see nothing
    {1000, 1000, 8, 2, 128, {}},
    {1000, 1000, 8, 8, 64, {0, true, 256, 300, 300}},
    {128, 1000, 8, 2, 128, {0, true, 300, 900, 0}},  // decoding-like: late queries over a long key range
};

std::string describe(const Case& c) {
  return fmt::format("Tq {} Tk {} H {}/{} Dh {} causal {} window {} q_offset {} k_offset {}", c.Tq, c.Tk, c.Hq, c.Hkv,
                     c.Dh, c.opt.causal, c.opt.window, c.opt.q_offset, c.opt.k_offset);
}

// Outputs are allocated inside the op: poisoning a same-sized block just before and releasing it makes the
// stream-ordered pool hand that NaN-filled memory to the op, so an element a kernel forgets to write shows up.
void poison_next_allocation(const Shape& shape, DType dtype) {
  test::poison(Tensor::empty(shape, dtype, Device::cuda()));
}

TEST(AttentionCuda, ForwardAndBackwardMatchTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t B = 2;
  for (const Case& c : kCases) {
    const std::string what = describe(c);
    SCOPED_TRACE(what);
    const Tensor q = test::random_on_cuda({B, c.Tq, c.Hq, c.Dh}, seed, DType::BF16);
    const Tensor k = test::random_on_cuda({B, c.Tk, c.Hkv, c.Dh}, seed + 1, DType::BF16);
    const Tensor v = test::random_on_cuda({B, c.Tk, c.Hkv, c.Dh}, seed + 2, DType::BF16);
    const Tensor dout = test::random_on_cuda({B, c.Tq, c.Hq, c.Dh}, seed + 3, DType::BF16);
    const Tensor rq = test::cpu_f64(q), rk = test::cpu_f64(k), rv = test::cpu_f64(v), rdout = test::cpu_f64(dout);

    Tensor lse, rlse;
    poison_next_allocation(q.shape(), DType::BF16);
    const Tensor out = ops::attention(q, k, v, c.opt, &lse);
    const Tensor rout = ops::attention(rq, rk, rv, c.opt, &rlse);
    // The probabilities enter P V as bf16 (2^-9 relative each) and out is rounded to bf16 (2^-9): rel L2 well
    // under 1e-2; per element within 1e-2 of the largest |out|.
    test::expect_close(out, rout, 1e-2, 1e-2 * test::max_abs(rout) + 1e-6, "out " + what);

    // lse comes from fp32 scores of the same bf16 values: absolute error ~1e-5; rows with no key are -inf on both.
    const auto lv = lse.to_vector<double>(), rl = rlse.to_vector<double>();
    ASSERT_EQ(lse.shape(), rlse.shape());
    int64_t lse_mismatches = 0;
    for (size_t i = 0; i < lv.size(); ++i) {
      const bool ok = std::isinf(rl[i]) ? (std::isinf(lv[i]) && lv[i] < 0) : std::abs(lv[i] - rl[i]) <= 1e-3;
      if (!ok && ++lse_mismatches <= 3) ADD_FAILURE() << "lse[" << i << "] = " << lv[i] << ", expected " << rl[i];
    }
    EXPECT_EQ(lse_mismatches, 0);

    Tensor dq, dk, dv, rdq, rdk, rdv;
    poison_next_allocation(k.shape(), DType::BF16);
    ops::attention_backward(dout, q, k, v, out, lse, c.opt, &dq, &dk, &dv);
    ops::attention_backward(rdout, rq, rk, rv, rout, rlse, c.opt, &rdq, &rdk, &rdv);
    // dP and dS pass through bf16 operands of the tensor-core products (2^-9 relative each) and dq/dk/dv are
    // rounded to bf16; sums over up to 1000 keys (x4 heads for GQA dk/dv) average these: rel L2 <= 1e-2.
    for (auto [g, r, name] : {std::tuple{dq, rdq, "dq"}, std::tuple{dk, rdk, "dk"}, std::tuple{dv, rdv, "dv"}}) {
      test::expect_close(g, r, 1e-2, 2e-2 * test::max_abs(r) + 1e-6, std::string(name) + " " + what);
    }
    // Under f32_dq the unrounded accumulator comes back: f32, and within the same bound of the f64 dq.
    ops::AttentionOptions f32_dq = c.opt;
    f32_dq.f32_dq = true;
    Tensor dq32, dk32, dv32;
    ops::attention_backward(dout, q, k, v, out, lse, f32_dq, &dq32, &dk32, &dv32);
    EXPECT_EQ(dq32.dtype(), DType::F32);
    test::expect_close(dq32, rdq, 1e-2, 2e-2 * test::max_abs(rdq) + 1e-6, "f32 dq " + what);
  }
}

// A decode step over a long cache in chunks (layers' attention decoding from 4096 keys): bf16 on the GPU against the
// f64 attention over the whole cache, within the bound of one attention (the parts are merged in f32 and rounded to
// bf16 once).
TEST(AttentionCuda, OverACacheInChunksMatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const int64_t Dh : {64, 128}) {
    const int64_t keys = 5000;
    const Tensor q = test::random_on_cuda({1, 1, 16, Dh}, seed, DType::BF16);
    const Tensor k = test::random_on_cuda({1, keys, 8, Dh}, seed + 1, DType::BF16);
    const Tensor v = test::random_on_cuda({1, keys, 8, Dh}, seed + 2, DType::BF16);
    ops::AttentionOptions all;
    all.causal = false;
    const Tensor ref = ops::attention(test::cpu_f64(q), test::cpu_f64(k), test::cpu_f64(v), all, nullptr);
    poison_next_allocation(q.shape(), DType::BF16);
    test::expect_close(ops::attention_over_cache(q, k, v, 0, 640), ref, 1e-2, 1e-2 * test::max_abs(ref) + 1e-6,
                       "head_dim " + std::to_string(Dh));
  }
}

TEST(AttentionCuda, RejectsUnsupportedHeadDim) {
  PRIMER_REQUIRE_CUDA();
  const Tensor q = test::random_on_cuda({1, 4, 2, 32}, test::fresh_seed(), DType::BF16);
  try {
    ops::attention(q, q, q, {}, nullptr);
    ADD_FAILURE() << "expected an error for head_dim 32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 64 or 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace primer
