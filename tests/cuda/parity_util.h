// Shared by the CUDA parity tests of the elementwise/reduce/softmax ops: the f64 CPU reference on identical inputs
// and the tolerance that the output dtype justifies.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tests/support/test_util.h"

namespace primer::test {

// The CPU reference runs on the very values the GPU saw (already rounded to the GPU dtype), upcast to f64, so the
// only differences are the GPU's fp32 math and its output rounding.
inline Tensor cpu_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }

inline Tensor random_on_cuda(const Shape& shape, uint64_t seed, DType dtype, double std = 1.0) {
  return randn(shape, seed, DType::F64, Device::cpu(), std).to(dtype).to(Device::cuda());
}

// The largest |element| of t (the scale per-element bounds are relative to).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// Relative tolerance by output dtype:
//  f32: fp32 math (expf/log1pf within 2 ulp, short sums) leaves ~1e-7 relative per element; 1e-5 leaves headroom.
//  bf16: rounding the output to 8 significant bits costs up to 2^-9 relative per element, so rel L2 <= 2^-9 ≈ 2e-3;
//        4e-3 allows for the fp32 math on top.
inline double parity_tolerance(DType out) { return out == DType::BF16 ? 4e-3 : 1e-5; }

// rel L2 within the dtype tolerance (times `slack` for long fp32 accumulations, justified at the call site) and every
// element within the same relative bound of the largest reference magnitude; NaN (an unwritten element) fails.
inline void expect_parity(const Tensor& gpu, const Tensor& reference, const std::string& what, double slack = 1.0) {
  const double rel = parity_tolerance(gpu.dtype()) * slack;
  expect_close(gpu, reference, rel, rel * max_abs(reference) + 1e-30, what);
}

// For ops that allocate their outputs (and scratch) inside: a NaN-filled 256 MB block released just before is what
// the stream-ordered pool hands them, so an element the kernels fail to write shows up.
inline void poison_pool() { poison(Tensor::empty({int64_t(64) << 20}, DType::F32, Device::cuda())); }

// Prints the relative L2 error against the reference and expects it within `tol` (NaN fails).
inline void expect_rel(const Tensor& gpu, const Tensor& ref, double tol, const char* what) {
  const Diff diff = compare(gpu, ref);
  std::printf("  %-16s rel L2 %.2e\n", what, diff.rel_l2);
  expect_close(gpu, ref, tol, 1e30, what);
}

}  // namespace primer::test
