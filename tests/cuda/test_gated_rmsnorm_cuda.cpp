// The mixers' RMSNorm variants on CUDA (gate after / before the norm, L2 normalisation, per-head and unit weights)
// against the f64 CPU reference on the very inputs the GPU saw, f32 and bf16, with poisoned outputs.
//
// Tolerances (tests/cuda/parity_util.h): f32 outputs rel L2 1e-5 (fp32 math, a row sum of D ≤ 256 terms); bf16
// outputs 4e-3 (one rounding to 8 significant bits, ≤ 2^-9 relative, plus the fp32 math); every element within the
// same bound of the largest reference magnitude. dw: an f32 sum over up to ~2k rows per weight row, in another order
// than the CPU's: rel L2 2e-5 (the f32 bound times 2).
#include <gtest/gtest.h>

#include <string>

#include "core/ops/rmsnorm.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

using ops::NormGate;

struct Variant {
  std::string name;
  NormGate gate;
  bool l2;
  int weight_rows;  // 0: unit weight, 1: [D], else per head [H, D]
};

// What the mixers run (GDN/GKA: L2 of q and k, gate after with a [D] weight; Mamba-2: gate before with per-head
// weights) and the combinations between them.
const std::vector<Variant> kVariants = {
    {"l2_unit", NormGate::None, true, 0},
    {"plain_per_head", NormGate::None, false, 2},
    {"after_channel", NormGate::After, false, 1},
    {"after_per_head_l2", NormGate::After, true, 2},
    {"before_per_head", NormGate::Before, false, 2},
    {"before_unit", NormGate::Before, false, 0},
};

struct Shape4 {
  int64_t B, T, H, D;
};

void check_variant(const Variant& v, const Shape4& s, DType dt, uint64_t seed, bool unaligned) {
  SCOPED_TRACE(v.name + " " + dtype_name(dt) + " [" + std::to_string(s.B) + ", " + std::to_string(s.T) + ", " +
               std::to_string(s.H) + ", " + std::to_string(s.D) + "]" + (unaligned ? " unaligned" : "") + " seed " +
               std::to_string(seed));
  const Shape shape = {s.B, s.T, s.H, s.D};
  const int64_t n = s.B * s.T * s.H * s.D;
  auto input = [&](uint64_t key, double std) {
    if (!unaligned) return test::random_on_cuda(shape, key, dt, std);
    return test::random_on_cuda({n + 1}, key, dt, std).slice(0, 1, n + 1).view(shape);  // one element in
  };
  const Tensor x = input(seed, 2.0), dy = input(seed + 2, 1.0);
  const Tensor z = v.gate == NormGate::None ? Tensor() : input(seed + 1, 2.0);
  const Tensor w = v.weight_rows == 0   ? Tensor()
                   : v.weight_rows == 1 ? test::random_on_cuda({s.D}, seed + 3, dt)
                                        : test::random_on_cuda({s.H, s.D}, seed + 3, dt);
  const Tensor dw = w.defined() ? test::random_on_cuda(w.shape(), seed + 4, DType::F32) : Tensor();
  const Tensor dw_ref = dw.defined() ? test::cpu_f64(dw) : Tensor();
  auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };
  const ops::NormSpec spec{1e-6, v.gate, v.l2};

  Tensor rstd, rstd_ref;
  test::poison_pool();
  const Tensor y = ops::rmsnorm(x, w, z, spec, &rstd);
  const Tensor y_ref = ops::rmsnorm(ref(x), ref(w), ref(z), spec, &rstd_ref);
  test::expect_parity(y, y_ref, "y");
  test::expect_parity(rstd, rstd_ref, "rstd");

  test::poison_pool();
  const ops::NormGrads g = ops::rmsnorm_backward(dy, x, w, z, rstd, spec, dw);
  const ops::NormGrads g_ref = ops::rmsnorm_backward(ref(dy), ref(x), ref(w), ref(z), rstd_ref, spec, dw_ref);
  test::expect_parity(g.dx, g_ref.dx, "dx");
  if (z.defined()) test::expect_parity(g.dz, g_ref.dz, "dz");
  if (dw.defined()) test::expect_parity(dw, dw_ref, "dw", 2.0);
}

TEST(GatedRmsNormCuda, VariantsMatchTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  // Head-wide rows (64, 128, 256) over few and many rows; per-head weights with H = 16 (a multiple of the rows a
  // block holds) and H = 3 (coprime to it), so the backward's row step is widened to a multiple of H.
  const std::vector<Shape4> shapes = {
      {1, 1, 3, 64}, {2, 37, 16, 128}, {3, 129, 3, 128}, {1, 300, 16, 64}, {2, 33, 4, 256}};
  for (DType dt : {DType::F32, DType::BF16})
    for (const Variant& v : kVariants)
      for (const Shape4& s : shapes) check_variant(v, s, dt, test::fresh_seed(), false);
}

// A view one element into its storage is contiguous but not 16-byte aligned: the narrow packs run.
TEST(GatedRmsNormCuda, UnalignedViewsMatchTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  for (DType dt : {DType::F32, DType::BF16})
    for (const Variant& v : kVariants) check_variant(v, {2, 21, 3, 128}, dt, test::fresh_seed(), true);
}

TEST(GatedRmsNormCuda, BackwardIsDeterministic) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Shape shape = {4, 500, 16, 128};
  const Tensor x = test::random_on_cuda(shape, seed, DType::BF16),
               z = test::random_on_cuda(shape, seed + 1, DType::BF16);
  const Tensor dy = test::random_on_cuda(shape, seed + 2, DType::BF16);
  const Tensor w = test::random_on_cuda({16, 128}, seed + 3, DType::BF16);
  const ops::NormSpec spec{1e-6, NormGate::Before};
  Tensor rstd;
  ops::rmsnorm(x, w, z, spec, &rstd);
  Tensor a = Tensor::zeros({16, 128}, DType::F32, Device::cuda()),
         b = Tensor::zeros({16, 128}, DType::F32, Device::cuda());
  const ops::NormGrads ga = ops::rmsnorm_backward(dy, x, w, z, rstd, spec, a);
  const ops::NormGrads gb = ops::rmsnorm_backward(dy, x, w, z, rstd, spec, b);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(ga.dz.to_vector<float>(), gb.dz.to_vector<float>());
}

TEST(GatedRmsNormCuda, RowsBeyondTheGatedKernelsAreRefused) {
  PRIMER_REQUIRE_CUDA();
  const ops::NormSpec spec{1e-6, NormGate::After};
  for (int64_t D : {int64_t(4104), int64_t(100)}) {  // too wide; not whole 16-byte packs
    const Tensor x = Tensor::zeros({2, D}, DType::BF16, Device::cuda());
    EXPECT_THROW(ops::rmsnorm(x, Tensor(), x, spec, nullptr), Error) << "D = " << D;
  }
}

}  // namespace
}  // namespace primer
