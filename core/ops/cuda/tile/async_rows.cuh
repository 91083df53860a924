// A per-thread prefetch queue for streaming kernels: the units (aligned chunks of kBytes) a thread needs from the
// row it is about to use are copied into its own shared-memory slots by cp.async, kDepth - 1 rows ahead, so many
// rows' loads are in flight without holding registers. Each thread reads back only what it copied itself, so no
// barrier is needed. With kAsync false (addresses cp.async cannot copy) `at` hands back the global address and
// nothing is staged.
#pragma once
#include <cstdint>

namespace primer::ops::cuda_ops {

template <int kBytes, int kUnits, int kDepth, bool kAsync> class AsyncRows {
  static_assert(!kAsync || kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  static_assert((kDepth & (kDepth - 1)) == 0 && kDepth >= 2, "slots are indexed by row & (kDepth - 1)");

 public:
  // Dynamic shared memory a block of `threads` threads needs.
  static constexpr size_t smem_bytes(int threads) { return kAsync ? size_t(threads) * kDepth * kUnits * kBytes : 0; }

  // smem: the block's dynamic shared memory; slots are interleaved by thread so a warp's accesses are contiguous.
  __device__ AsyncRows(unsigned char* smem, int thread, int threads)
      : smem_(smem + size_t(thread) * kBytes), threads_(threads) {}

  // Starts the copy of row `row` (any integer; rows are used in consecutive order); src[u] null skips unit u.
  // Always closes one commit group, so that `wait` can count rows.
  __device__ __forceinline__ void fetch(int64_t row, const void* const (&src)[kUnits]) {
    if constexpr (kAsync) {
#pragma unroll
      for (int u = 0; u < kUnits; ++u)
        if (src[u]) copy(slot(row, u), src[u]);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
  }

  // Waits until the oldest row still in flight (the one about to be used) has landed, given that rows up to
  // row + kDepth - 2 have been fetched.
  __device__ __forceinline__ void wait() {
    if constexpr (kAsync) asm volatile("cp.async.wait_group %0;\n" ::"n"(kDepth - 2) : "memory");
  }

  // Where unit u of `row` is to be read: its slot, or `global` itself when nothing is staged.
  __device__ __forceinline__ const void* at(int64_t row, int u, const void* global) const {
    if constexpr (kAsync)
      return slot(row, u);
    else
      return global;
  }

 private:
  __device__ __forceinline__ unsigned char* slot(int64_t row, int u) const {
    return smem_ + (size_t(row & (kDepth - 1)) * kUnits + u) * size_t(threads_) * kBytes;
  }
  static __device__ __forceinline__ void copy(void* dst, const void* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if constexpr (kBytes == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(kBytes) : "memory");
  }

  unsigned char* smem_;
  int threads_;
};

}  // namespace primer::ops::cuda_ops
