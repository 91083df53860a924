#include <cub/device/device_radix_sort.cuh>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/embedding.h"
#include "core/ops/cuda/tile/vector_io.cuh"

namespace primer::ops::cuda_ops {
namespace {

template <class F> void visit_ids(DType id_dtype, F&& f) {
  if (id_dtype == DType::I64)
    f(int64_t{});
  else
    f(int32_t{});
}

// One thread per (token, pack of N columns).
template <class T, class I, int N> __global__ void gather_rows_kernel(const T* __restrict__ weight,
                                                                      const I* __restrict__ ids, int64_t n_tokens,
                                                                      int64_t vocab, int64_t dim, T* __restrict__ out) {
  cuda::await_prior_grid();
  const int64_t packs = dim / N;
  const int64_t total = n_tokens * packs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / packs, p = i - n * packs;
    const int64_t id = ids[n];
    Pack<T, N> v;
    if (id >= 0 && id < vocab) {
      v = reinterpret_cast<const Pack<T, N>*>(weight + id * dim)[p];
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(__int_as_float(0x7fc00000));  // NaN marks the bad id
    }
    reinterpret_cast<Pack<T, N>*>(out + n * dim)[p] = v;
  }
}

// Sort keys: the id, or `vocab` for an out-of-range id so that it sorts last and is skipped.
template <class I> __global__ void make_sort_keys_kernel(const I* __restrict__ ids, int64_t n_tokens, int64_t vocab,
                                                         uint32_t* __restrict__ keys, int32_t* __restrict__ positions) {
  cuda::await_prior_grid();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_tokens; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i];
    keys[i] = (id >= 0 && id < vocab) ? uint32_t(id) : uint32_t(vocab);
    positions[i] = int32_t(i);
  }
}

// One block per sorted token; only the block at the first token of each id works: it sums that id's rows in token
// order (the sort is stable) and adds the sum to the id's gradient row. No two blocks touch the same row.
template <class T, int N>
__global__ void sum_rows_by_id_kernel(const T* __restrict__ dy, const uint32_t* __restrict__ keys,
                                      const int32_t* __restrict__ positions, int64_t n_tokens, int64_t vocab,
                                      int64_t dim, float* __restrict__ dweight) {
  cuda::await_prior_grid();
  const int64_t first = blockIdx.x;
  const uint32_t key = keys[first];
  if (key >= vocab || (first > 0 && keys[first - 1] == key)) return;
  int64_t end = first + 1;
  while (end < n_tokens && keys[end] == key) ++end;
  for (int64_t p = threadIdx.x; p < dim / N; p += blockDim.x) {
    float acc[N] = {};
    for (int64_t j = first; j < end; ++j) {
      float v[N];
      load_floats<T, N>(dy + positions[j] * dim + p * N, v);
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += v[k];
    }
    float* row = dweight + int64_t(key) * dim + p * N;
    float cur[N];
    load_floats<float, N>(row, cur);
#pragma unroll
    for (int k = 0; k < N; ++k) cur[k] += acc[k];
    store_floats<float, N>(row, cur);
  }
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int key_bits(int64_t vocab) {  // bits that hold every key, the sentinel `vocab` included
  int bits = 1;
  while ((int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

size_t radix_sort_bytes(int64_t n_tokens, int64_t vocab) {
  size_t bytes = 0;
  PRIMER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(n_tokens), 0, key_bits(vocab),
      cuda::stream()));
  return bytes;
}

int block_for_packs(int64_t packs) {
  const int64_t warps = (packs + 31) / 32;
  return int(warps < 1 ? 32 : warps > 8 ? 256 : warps * 32);
}

}  // namespace

void embedding(const void* weight, DType dtype, const void* ids, DType id_dtype, int64_t n_tokens, int64_t vocab,
               int64_t dim, void* out) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    visit_ids(id_dtype, [&](auto i) {
      using I = decltype(i);
      auto launch = [&](auto n_tag) {
        constexpr int N = decltype(n_tag)::value;
        const int64_t total = n_tokens * (dim / N);
        cuda::launch_dependent(gather_rows_kernel<T, I, N>, grid_for(total, 256), 256, 0, static_cast<const T*>(weight),
                               static_cast<const I*>(ids), n_tokens, vocab, dim, static_cast<T*>(out));
      };
      if (dim % kPack<T> == 0 && aligned16(weight) && aligned16(out))
        launch(std::integral_constant<int, kPack<T>>{});
      else
        launch(std::integral_constant<int, 1>{});
    });
  });
}

size_t embedding_backward_workspace_bytes(int64_t n_tokens, int64_t vocab) {
  return 4 * align_up(size_t(n_tokens) * 4) + radix_sort_bytes(n_tokens, vocab);
}

void embedding_backward(const void* dy, DType dtype, const void* ids, DType id_dtype, int64_t n_tokens, int64_t vocab,
                        int64_t dim, float* dweight, void* workspace, size_t workspace_bytes) {
  char* ws = static_cast<char*>(workspace);
  const size_t slot = align_up(size_t(n_tokens) * 4);
  auto* keys_in = reinterpret_cast<uint32_t*>(ws);
  auto* keys_out = reinterpret_cast<uint32_t*>(ws + slot);
  auto* pos_in = reinterpret_cast<int32_t*>(ws + 2 * slot);
  auto* pos_out = reinterpret_cast<int32_t*>(ws + 3 * slot);
  size_t sort_bytes = workspace_bytes - 4 * slot;

  visit_ids(id_dtype, [&](auto i) {
    using I = decltype(i);
    cuda::launch_dependent(make_sort_keys_kernel<I>, grid_for(n_tokens, 256), 256, 0, static_cast<const I*>(ids),
                           n_tokens, vocab, keys_in, pos_in);
  });
  PRIMER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + 4 * slot, sort_bytes, keys_in, keys_out, pos_in, pos_out,
                                                    int(n_tokens), 0, key_bits(vocab), cuda::stream()));
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    auto launch = [&](auto n_tag) {
      constexpr int N = decltype(n_tag)::value;
      cuda::launch_dependent(sum_rows_by_id_kernel<T, N>, unsigned(n_tokens), block_for_packs(dim / N), 0,
                             static_cast<const T*>(dy), keys_out, pos_out, n_tokens, vocab, dim, dweight);
    };
    if (dim % kPack<T> == 0 && aligned16(dy) && aligned16(dweight))
      launch(std::integral_constant<int, kPack<T>>{});
    else
      launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace primer::ops::cuda_ops
