#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/tensor.h"

namespace primer {

Philox::Philox(uint64_t key, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0x5eed5eedu, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;  // Weyl key schedule
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint64_t key_for(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9E3779B97F4A7C15ull);
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

namespace {
double to_open01(uint32_t hi, uint32_t lo) {  // 53 random bits mapped into (0, 1)
  const uint64_t bits = (uint64_t(hi) << 21) ^ (lo >> 11);
  return (double(bits & ((1ull << 53) - 1)) + 0.5) / 9007199254740992.0;
}
}  // namespace

double uniform01(uint64_t key, uint64_t index) {
  Philox p(key, index);
  return to_open01(p.out[0], p.out[1]);
}

double normal01(uint64_t key, uint64_t index) {
  Philox p(key, index);
  const double u1 = to_open01(p.out[0], p.out[1]), u2 = to_open01(p.out[2], p.out[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

int64_t uniform_below(uint64_t key, uint64_t index, int64_t n) {
  return std::min<int64_t>(int64_t(uniform01(key, index) * double(n)), n - 1);
}

namespace {
// Element i of t (row-major) = gen(i), drawn in double and rounded once to t's dtype.
template <class Gen> void fill_with(const Tensor& t, Gen gen) {
  const int64_t n = t.numel();
  if (t.is_cpu() && t.is_contiguous() && t.dtype() == DType::F32) {  // a parameter's init: no staging copies
    float* out = t.data<float>();
#pragma omp parallel for schedule(static) if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) out[i] = float(gen(uint64_t(i)));
    return;
  }
  std::vector<double> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = gen(uint64_t(i));
  Tensor host = Tensor::from_vector(v, t.shape(), DType::F64);
  t.copy_from(host.to(t.dtype()));
}
}  // namespace

void fill_normal(const Tensor& t, uint64_t key, double mean, double std) {
  fill_with(t, [&](uint64_t i) { return mean + std * normal01(key, i); });
}

void fill_uniform(const Tensor& t, uint64_t key, double lo, double hi) {
  fill_with(t, [&](uint64_t i) { return lo + (hi - lo) * uniform01(key, i); });
}

}  // namespace primer
