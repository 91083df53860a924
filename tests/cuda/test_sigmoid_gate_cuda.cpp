// ops::sigmoid_gate on CUDA against the f64 CPU reference on the very inputs the GPU saw: a in bf16 and f32, a bias
// in bf16, in f32 or none, with poisoned outputs.
//
// Tolerances (tests/cuda/parity_util.h): y and da are a few f32 operations (expf within 2 ulp) from the same inputs,
// so the output dtype's bound: f32 1e-5 for y, and da rounded to a's dtype. dbias is by definition the column sums of
// da as rounded: it is checked against the f64 sums of the GPU's own da, where only the f32 accumulation over up to
// ~600 rows (in another order than the CPU's: twice the f32 bound) and the rounding to the bias's dtype remain.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/ops/reduce.h"
#include "core/ops/sigmoid_gate.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

TEST(SigmoidGateCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const std::vector<Shape> shapes = {{4, 151, 16}, {3, 7, 3}, {2, 37, 4, 8}};
  for (const Shape& shape : shapes)
    for (const DType a_dtype : {DType::BF16, DType::F32})
      for (const std::optional<DType> bias_dtype :
           {std::optional(DType::BF16), std::optional(DType::F32), std::optional<DType>()}) {
        SCOPED_TRACE(shape_str(shape) + " a " + dtype_name(a_dtype) + " bias " +
                     (bias_dtype ? dtype_name(*bias_dtype) : "none") + " seed " + std::to_string(seed));
        const Tensor a = test::random_on_cuda(shape, seed, a_dtype, 3.0);
        const Tensor bias = bias_dtype ? test::random_on_cuda({shape.back()}, seed + 1, *bias_dtype) : Tensor();
        const Tensor dy = test::random_on_cuda(shape, seed + 2, DType::F32);
        auto ref = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };

        test::poison_pool();
        const Tensor y = ops::sigmoid_gate(a, bias, 1e-6);
        ASSERT_EQ(y.dtype(), DType::F32);
        test::expect_parity(y, ops::sigmoid_gate(ref(a), ref(bias), 1e-6), "y");

        test::poison_pool();
        const ops::SigmoidGateGrads grads = ops::sigmoid_gate_backward(dy, a, bias);
        test::expect_parity(grads.da, ops::sigmoid_gate_backward(ref(dy), ref(a), ref(bias)).da, "da");
        if (!bias_dtype) {
          EXPECT_FALSE(grads.dbias.defined());
          continue;
        }
        ASSERT_EQ(grads.dbias.dtype(), *bias_dtype);
        const Tensor own_da = ref(grads.da);
        test::expect_parity(grads.dbias, ops::sum(own_da.view({own_da.numel() / shape.back(), shape.back()}), 0),
                            "dbias", 2.0);
      }
}

}  // namespace
}  // namespace primer
