// Counter-based random numbers (Philox-4x32-10). A value depends only on (key, element index), never on
// call order or on how the work is split, so parameter initialisation is identical under any parallel
// layout: parameter `name` element i always gets normal(key_for(seed, name), i).
#pragma once
#include <cstdint>
#include <string_view>

namespace primer {
class Tensor;

struct Philox {
  uint32_t out[4];
  Philox(uint64_t key, uint64_t counter);
};

uint64_t key_for(uint64_t seed, std::string_view name);          // seed mixed with a 64-bit hash of name
double uniform01(uint64_t key, uint64_t index);                  // in (0, 1)
double normal01(uint64_t key, uint64_t index);                   // standard normal
int64_t uniform_below(uint64_t key, uint64_t index, int64_t n);  // an integer in [0, n), n > 0

// Fill every element (row-major index i) of `t` from (key, i); any device and floating dtype.
void fill_normal(const Tensor& t, uint64_t key, double mean, double std);
void fill_uniform(const Tensor& t, uint64_t key, double lo, double hi);

}  // namespace primer
