// ops::scale_heads on CUDA against the f64 CPU reference on the very inputs the GPU saw, f32 and bf16, s per row and
// head (Mamba-2's Δ) and per head (D), with and without the addend, GKA's lerp and bf16-to-f32 output, with poisoned
// outputs; and the bf16 split of an f32 output that GKA's readout reads.
//
// Tolerances (tests/cuda/parity_util.h): out and dx are one f32 product or a sum of G of them, rounded to the output
// dtype (bf16 4e-3, f32 1e-5). ds per row is an f32 dot over head_dim ≤ 384 terms (f32, 1e-5); per head it is then
// summed over the rows in another order than the CPU's: twice the f32 bound.
#include <gtest/gtest.h>

#include <string>

#include "core/ops/scale_heads.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

struct Case {
  int64_t B, T, x_heads, groups, head_dim;
};

// Random values on the GPU; when unaligned, a view one element past an allocation's start (the element-wise paths).
Tensor input_on_cuda(const Shape& shape, uint64_t key, DType dtype, bool unaligned) {
  if (!unaligned) return test::random_on_cuda(shape, key, dtype);
  const int64_t n = shape_numel(shape);
  return test::random_on_cuda({n + 1}, key, dtype).slice(0, 1, n + 1).view(shape);
}

void check_case(const Case& c, DType dt, bool per_row, bool with_base, bool unaligned, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " Hx " +
               std::to_string(c.x_heads) + " G " + std::to_string(c.groups) + " D " + std::to_string(c.head_dim) +
               (per_row ? " s per row" : " s per head") + (with_base ? " with base" : "") +
               (unaligned ? " unaligned" : "") + " seed " + std::to_string(seed));
  const int64_t H = c.x_heads * c.groups;
  const Shape x_shape = {c.B, c.T, c.x_heads, c.head_dim}, out_shape = {c.B, c.T, H, c.head_dim};
  auto input = [&](const Shape& shape, uint64_t key) { return input_on_cuda(shape, key, dt, unaligned); };
  const Tensor x = input(x_shape, seed), base = with_base ? input(out_shape, seed + 1) : Tensor();
  const Tensor s = per_row ? test::random_on_cuda({c.B, c.T, H}, seed + 2, DType::F32)
                           : test::random_on_cuda({H}, seed + 2, DType::F32);
  const Tensor dout = input(out_shape, seed + 3);
  auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };

  test::poison_pool();
  test::expect_parity(ops::scale_heads(x, s, base, H), ops::scale_heads(ref(x), ref(s), ref(base), H), "out");
  test::poison_pool();
  const ops::ScaleHeadsGrads g = ops::scale_heads_backward(dout, x, s);
  const ops::ScaleHeadsGrads g_ref = ops::scale_heads_backward(ref(dout), ref(x), ref(s));
  test::expect_parity(g.dx, g_ref.dx, "dx");
  test::expect_parity(g.ds, g_ref.ds, "ds", per_row ? 1.0 : 2.0);
}

TEST(ScaleHeadsCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  // Mamba-2's GQA shape (8 heads in pairs, D 128), D 64 in groups of 4, a head of 40 (5 bf16 packs, 10 f32 ones),
  // one of 6 (no whole pack: element-wise), one of 384 (48 bf16 packs: more than a warp per row), MHA (G = 1).
  const std::vector<Case> cases = {
      {2, 37, 8, 2, 128}, {1, 5, 2, 4, 64}, {3, 7, 3, 1, 40}, {2, 9, 2, 3, 6}, {1, 11, 2, 2, 384},
  };
  for (const DType dt : {DType::BF16, DType::F32})
    for (const Case& c : cases)
      for (const bool per_row : {true, false}) check_case(c, dt, per_row, /*with_base=*/!per_row, false, seed);
  // Both kinds of s with and without the addend, and inputs one element off their alignment (element-wise path).
  check_case({2, 13, 4, 2, 128}, DType::BF16, true, true, false, seed + 10);
  check_case({2, 13, 4, 2, 128}, DType::BF16, false, false, false, seed + 11);
  check_case({2, 13, 4, 2, 128}, DType::BF16, true, true, true, seed + 12);
  check_case({2, 13, 4, 2, 64}, DType::F32, false, true, true, seed + 13);
}

// The backward that sums a gradient x already holds (Mamba-2's second use of x) in its pass.
TEST(ScaleHeadsCuda, AddsTheGradientXAlreadyHolds) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const DType dt : {DType::BF16, DType::F32}) {
    const Tensor x = test::random_on_cuda({2, 29, 8, 128}, seed, dt),
                 addend = test::random_on_cuda(x.shape(), seed + 1, dt);
    const Tensor s = test::random_on_cuda({2, 29, 16}, seed + 2, DType::F32);
    const Tensor dout = test::random_on_cuda({2, 29, 16, 128}, seed + 3, dt);
    test::poison_pool();
    const ops::ScaleHeadsGrads g = ops::scale_heads_backward(dout, x, s, addend);
    const ops::ScaleHeadsGrads g_ref =
        ops::scale_heads_backward(test::cpu_f64(dout), test::cpu_f64(x), test::cpu_f64(s), test::cpu_f64(addend));
    test::expect_parity(g.dx, g_ref.dx, std::string("dx with an addend, ") + dtype_name(dt));
    test::expect_parity(g.ds, g_ref.ds, std::string("ds, ") + dtype_name(dt));
  }
}

// GKA's uses: β·k and β·v from bf16 heads to an f32 output (grouped, in one pass), and q̃ = q + α (x̂ − q) as a lerp
// (f32, and bf16 into f32 with grouped heads, and bf16 throughout), against the f64 reference on the GPU's inputs.
TEST(ScaleHeadsCuda, LerpAndF32OutputsMatchTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  struct Mixed {
    DType x_dtype, out_dtype;
    bool lerp, unaligned;
    int64_t x_heads, groups, head_dim;
  };
  const std::vector<Mixed> cases = {
      {DType::BF16, DType::F32, false, false, 8, 2, 128},  // GKA's k and v (Hk 8 → H 16)
      {DType::BF16, DType::F32, false, true, 4, 2, 64},    // one element off alignment: the element-wise path
      {DType::F32, DType::F32, true, false, 16, 1, 128},   // GKA's q̃ in the precise mode
      {DType::BF16, DType::F32, true, false, 3, 2, 40},    // a lerp onto f32 from grouped bf16 heads
      {DType::BF16, DType::BF16, true, false, 4, 1, 64},   // q̃ in the fast mode
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Mixed& c = cases[i];
    const uint64_t key = seed + 10 * i;
    SCOPED_TRACE(std::string(dtype_name(c.x_dtype)) + " to " + dtype_name(c.out_dtype) + (c.lerp ? " lerp" : "") +
                 (c.unaligned ? " unaligned" : "") + " Hx " + std::to_string(c.x_heads) + " G " +
                 std::to_string(c.groups) + " D " + std::to_string(c.head_dim) + " seed " + std::to_string(key));
    const int64_t B = 2, T = 19, H = c.x_heads * c.groups;
    auto input = [&](const Shape& shape, uint64_t k, DType dt) { return input_on_cuda(shape, k, dt, c.unaligned); };
    const Tensor x = input({B, T, c.x_heads, c.head_dim}, key, c.x_dtype);
    const Tensor base = c.lerp ? input({B, T, H, c.head_dim}, key + 1, c.out_dtype) : Tensor();
    const Tensor s = test::random_on_cuda({B, T, H}, key + 2, DType::F32);
    const Tensor dout = input({B, T, H, c.head_dim}, key + 3, c.out_dtype);
    const ops::ScaleHeadsOptions options{c.lerp ? ops::HeadBase::Lerp : ops::HeadBase::Add, c.out_dtype};
    const ops::ScaleHeadsOptions ref_options{options.base, std::nullopt};
    auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };

    test::poison_pool();
    const Tensor out = ops::scale_heads(x, s, base, H, options);
    EXPECT_EQ(out.dtype(), c.out_dtype);
    test::expect_parity(out, ops::scale_heads(ref(x), ref(s), ref(base), H, ref_options), "out");
    test::poison_pool();
    const ops::ScaleHeadsGrads g = ops::scale_heads_backward(dout, x, s, Tensor(), base);
    const ops::ScaleHeadsGrads g_ref = ops::scale_heads_backward(ref(dout), ref(x), ref(s), Tensor(), ref(base));
    EXPECT_EQ(g.dx.dtype(), c.x_dtype);
    test::expect_parity(g.dx, g_ref.dx, "dx");
    test::expect_parity(g.ds, g_ref.ds, "ds");
    if (c.lerp) test::expect_parity(g.dbase, g_ref.dbase, "dbase");
  }
}

// GKA's readout operands written beside the f32 output (ops::ScaleHeadsOptions' bf16 split): the output unchanged,
// hi its rounding to bf16 and lo the rest rounded, bit for bit as a separate rounding (Tensor::to) and split would
// form them: β·k (hi only), q̃'s lerp (hi + lo), and an element-wise one off alignment. Outputs are poisoned.
TEST(ScaleHeadsCuda, SplitsAnF32OutputIntoBf16Halves) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  struct Split {
    DType x_dtype;
    bool lerp, lo, unaligned;
    int64_t x_heads, groups, head_dim;
  };
  const std::vector<Split> cases = {
      {DType::BF16, false, false, false, 8, 2, 128},  // β·k, β·v: the rounding only
      {DType::F32, true, true, false, 16, 1, 128},    // q̃ = q + α (x̂ − q): hi + lo
      {DType::BF16, true, true, true, 3, 2, 40},      // one element off alignment: element by element
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Split& c = cases[i];
    const uint64_t key = seed + 10 * i;
    SCOPED_TRACE(std::string(dtype_name(c.x_dtype)) + (c.lerp ? " lerp" : "") + (c.unaligned ? " unaligned" : "") +
                 " D " + std::to_string(c.head_dim) + " seed " + std::to_string(key));
    const int64_t B = 2, T = 23, H = c.x_heads * c.groups;
    auto input = [&](const Shape& shape, uint64_t k, DType dt) { return input_on_cuda(shape, k, dt, c.unaligned); };
    const Tensor x = input({B, T, c.x_heads, c.head_dim}, key, c.x_dtype);
    const Tensor base = c.lerp ? input({B, T, H, c.head_dim}, key + 1, DType::F32) : Tensor();
    const Tensor s = test::random_on_cuda({B, T, H}, key + 2, DType::F32);
    ops::ScaleHeadsOptions options{c.lerp ? ops::HeadBase::Lerp : ops::HeadBase::Add, DType::F32};
    const Tensor plain = ops::scale_heads(x, s, base, H, options);
    Tensor hi, lo;
    options.bf16_hi_out = &hi;
    options.bf16_lo_out = c.lo ? &lo : nullptr;
    test::poison_pool();
    const Tensor out = ops::scale_heads(x, s, base, H, options);
    test::expect_close(out, plain, 0, 0, "the f32 output beside its split");
    ASSERT_EQ(hi.dtype(), DType::BF16);
    test::expect_close(hi, plain.to(DType::BF16), 0, 0, "hi: the output rounded to bf16");
    if (!c.lo) continue;
    const Tensor o = plain.to(Device::cpu()), h = hi.to(Device::cpu()).to(DType::F32);
    Tensor rest = Tensor::empty(o.shape(), DType::F32, Device::cpu());
    for (int64_t e = 0; e < o.numel(); ++e) rest.data<float>()[e] = o.data<float>()[e] - h.data<float>()[e];
    test::expect_close(lo, rest.to(DType::BF16), 0, 0, "lo: what hi left, rounded");
  }
  // The split is of an f32 output, and its lo half comes with its hi half.
  const Tensor x = test::random_on_cuda({1, 3, 2, 64}, seed, DType::BF16);
  const Tensor s = test::random_on_cuda({1, 3, 4}, seed + 1, DType::F32);
  Tensor hi, lo;
  test::expect_error([&] { ops::scale_heads(x, s, Tensor(), 4, {.bf16_hi_out = &hi}); },
                     {"scale_heads", "bf16 output", "expected an f32 output on CUDA"});
  test::expect_error([&] { ops::scale_heads(x, s, Tensor(), 4, {.out_dtype = DType::F32, .bf16_lo_out = &lo}); },
                     {"scale_heads", "bf16_lo_out", "without bf16_hi_out"});
}

TEST(ScaleHeadsCuda, EmptyRowsWriteNothing) {
  PRIMER_REQUIRE_CUDA();
  const Tensor x = test::random_on_cuda({0, 4, 2, 128}, 1, DType::BF16);
  const Tensor s = test::random_on_cuda({4}, 2, DType::F32);
  EXPECT_EQ(ops::scale_heads(x, s, Tensor(), 4).shape(), (Shape{0, 4, 4, 128}));
  const ops::ScaleHeadsGrads g = ops::scale_heads_backward(test::random_on_cuda({0, 4, 4, 128}, 3, DType::BF16), x, s);
  EXPECT_EQ(g.dx.shape(), x.shape());
  test::expect_close(g.ds, Tensor::zeros({4}, DType::F32, Device::cuda()), 0, 0, "ds of no rows");
}

}  // namespace
}  // namespace primer
