// Hopper's bulk tensor copy engine (TMA, sm_90) and the shared-memory barriers it completes on: one thread issues
// a whole tile's copy, the hardware applies the tensor map's 128-byte swizzle, zero-fills what lies outside the
// tensor, and counts the bytes that landed on an mbarrier the consumers wait on (phase parity flips per use).
#pragma once
#include <cstdint>

#include "core/ops/cuda/tile/mma.cuh"

namespace primer::ops::cuda_ops::tma {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void barrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tile::smem_address(bar)), "r"(arrivals));
}
// Makes initialised barriers visible to the copy engine; a CTA barrier must follow before anyone uses them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The issuing thread's arrival, announcing how many bytes the copies completing on `bar` will bring.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tile::smem_address(bar)), "r"(bytes)
               : "memory");
}
// A plain arrival (a consumer releasing a buffer).
__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tile::smem_address(bar)) : "memory");
}
// Blocks until the barrier's phase with this parity has completed.
__device__ __forceinline__ void wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(tile::smem_address(bar)),
      "r"(parity)
      : "memory");
}
// Copies the box at coordinates (c0 innermost .. c3) of a 4-D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void load_4d(void* smem, const void* tensor_map, uint64_t* bar, int c0, int c1, int c2,
                                        int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(tile::smem_address(smem)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(tile::smem_address(bar))
      : "memory");
}
// Adds the box at coordinates (c0 innermost .. c3) of a 4-D tensor map from shared memory into global memory (an
// fp32 add for an fp32 map; elements outside the tensor are skipped), asynchronously. This thread's bulk stores and
// reduce-adds since the last commit_bulk_group() form one group.
__device__ __forceinline__ void reduce_add_4d(const void* tensor_map, const void* smem, int c0, int c1, int c2,
                                              int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(tensor_map)),
      "r"(tile::smem_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Writes the box at coordinates (c0 innermost .. c3) of a 4-D tensor map from shared memory to global memory
// (elements outside the tensor are skipped), asynchronously; one group with this thread's other bulk operations.
__device__ __forceinline__ void store_4d(const void* tensor_map, const void* smem, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tensor_map)),
               "r"(tile::smem_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void commit_bulk_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until all of this thread's committed bulk stores and reduce-adds have read their shared memory (kReadOnly:
// the buffer may be rewritten, or the CTA exit) or have completed.
template <bool kReadOnly> __device__ __forceinline__ void wait_bulk_groups() {
  if constexpr (kReadOnly)
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  else
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
#endif

}  // namespace primer::ops::cuda_ops::tma
