// Hopper warpgroup matrix multiply (wgmma, sm_90a) for the attention kernels: 128-byte-swizzled shared-memory
// tiles, their matrix descriptors, fences, commit/wait, and m64nNk16 bf16 products with fp32 accumulators.
//
// A warpgroup (4 consecutive warps, the first at a warp index divisible by 4) computes D[64 x N] += A[64 x 16] B[16 x
// N]. B always comes from shared memory; A from shared memory (wgmma_ss) or from registers (wgmma_rs). Per warp w of
// the group, A's register fragment (rows 16w..16w+15) and D's accumulators have exactly the layout of mma.sync
// m16n8k16 (see mma.cuh), with D's n-tile j at d[4j .. 4j+3]: so probabilities go from one product into
// the next in registers, as in the mma.sync kernels.
//
// Shared-memory layout (Sw128Tile): a [rows][cols] bf16 tile is stored as cols/64 column blocks of [rows][64], each
// row 128 bytes whose 16-byte chunks are XOR-swizzled with row % 8 (the hardware's 128-byte swizzle); blocks must
// be 1024-byte aligned. An operand is "K-major" when its reduction index runs along the 64 contiguous columns
// (Q, K as S = Q K^T's operands) and "MN-major" when its output index does (V in O = P V: transpose flag 1).
// The functions that issue wgmma exist only in the sm_90a compilation pass (PRIMER_WGMMA); the layout helpers and
// the asynchronous tile loader compile everywhere.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/ops/cuda/tile/mma.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PRIMER_WGMMA 1
#endif

namespace primer::ops::cuda_ops::wgmma {

using tile::bf16;

template <int kRows, int kCols> struct Sw128Tile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "128-byte swizzle atoms are 8 rows of 64 bf16");
  static constexpr int kBlockElems = kRows * 64;  // one column block
  static constexpr int kElems = kRows * kCols;

  __device__ __forceinline__ static int offset(int row, int col) {
    return (col >> 6) * kBlockElems + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
  }
};

// The first 1024-byte boundary (a swizzle atom's alignment) at or after the start of dynamic shared memory, as a
// pointer derived from the __shared__ array itself: the compiler then knows every access through it is to shared
// memory (32-bit addresses, st.shared / ld.shared), which a pointer rounded through an integer hides (64-bit generic
// accesses, and the registers their addresses hold).
template <class E = unsigned char> __device__ __forceinline__ E* aligned_tiles(unsigned char* smem_raw) {
  return reinterpret_cast<E*>(smem_raw + ((1024 - (tile::smem_address(smem_raw) & 1023)) & 1023));
}

// Copies rows [0, kRows) and columns [0, kCols) of a bf16 matrix whose rows are `row_stride` elements apart into an
// Sw128Tile<kRows, kTileCols> with cp.async, `thread` of kThreads; rows at or beyond `valid_rows` are zero-filled
// (padded keys and values never inject NaN). Each thread keeps one 16-byte column chunk and steps down the rows by a
// multiple of 8, so its swizzle stays the same and every step's shared address is an immediate offset from its first
// (a kernel that loads tiles every step spends no integer work on their addresses).
template <int kRows, int kCols, int kThreads, int kTileCols = kCols>
__device__ __forceinline__ void load_tile_async(bf16* smem, const bf16* global, int64_t row_stride, int valid_rows,
                                                int thread) {
  constexpr int kChunksPerRow = kCols / 8, kRowStep = kThreads / kChunksPerRow;
  static_assert(
      kCols <= kTileCols && kThreads % kChunksPerRow == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
      "the threads cover whole rows of the tile's columns, a multiple of 8 at a time, and the tile whole steps");
  const int row0 = thread / kChunksPerRow, col = (thread % kChunksPerRow) * 8;
  bf16* dst = smem + Sw128Tile<kRows, kTileCols>::offset(row0, col);
  const bf16* src = global + row0 * row_stride + col;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool valid = row0 + i * kRowStep < valid_rows;
    tile::cp_async_16(dst + i * kRowStep * 64, valid ? src + i * kRowStep * row_stride : global, valid);
  }
}

// Matrix descriptor: start address, leading and stride byte offsets (16-byte units), 128-byte swizzle (mode 1).
__device__ __forceinline__ uint64_t descriptor(const void* start, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t address = tile::smem_address(start);
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t((leading_bytes >> 4) & 0x3FFF) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

// Operand [rows starting at row0][16 reduction columns from k0] of a K-major tile: 8-row groups 1024 bytes apart.
// (The tiles hold bf16, or fp16 for the products that take it: any 16-bit element E.)
template <int kRows, int kCols, class E> __device__ __forceinline__ uint64_t k_major(const E* tile, int row0, int k0) {
  static_assert(sizeof(E) == 2, "16-bit operands");
  return descriptor(tile + (k0 >> 6) * Sw128Tile<kRows, kCols>::kBlockElems + row0 * 64 + (k0 & 63), 16, 1024);
}

// Operand [16 reduction rows from k0][output columns from col0] of an MN-major tile: 8-row groups 1024 bytes
// apart along the reduction, 64-column blocks one block apart along the output; col0 a multiple of 64, or of 8 for an
// operand of at most the rest of its block (the swizzle applies to the address, so a start inside a 128-byte row
// stays on the tile's layout, as K-major operands' k-steps of 32 bytes do).
template <int kRows, int kCols, class E> __device__ __forceinline__ uint64_t mn_major(const E* tile, int k0, int col0) {
  static_assert(sizeof(E) == 2, "16-bit operands");
  using T = Sw128Tile<kRows, kCols>;
  return descriptor(tile + (col0 >> 6) * T::kBlockElems + k0 * 64 + (col0 & 63), T::kBlockElems * 2, 1024);
}

// Operand descriptors are stepped by adding byte offsets: the start address field is the low 14 bits (16-byte
// units) and shared addresses stay below 2^18, so the sum never carries out of it.
__device__ __forceinline__ uint64_t advance(uint64_t desc, int bytes) { return desc + uint64_t(bytes >> 4); }
// Byte offset of reduction column k0 (a multiple of 16) in a K-major Sw128Tile, and of reduction row k0 in an
// MN-major one.
template <class Tile> constexpr int k_major_step(int k0) { return (k0 / 64) * Tile::kBlockElems * 2 + (k0 % 64) * 2; }
constexpr int mn_major_step(int k0) { return k0 * 64 * 2; }

// mma.sync accumulator tiles (float[kTiles][4], tile/warp_mma.cuh) as the same registers in wgmma's m64nN layout
// (N = 8·kTiles): n-tile j is d[4j .. 4j + 3].
template <int kTiles> __device__ __forceinline__ float (&flat(float (&v)[kTiles][4]))[4 * kTiles] {
  return reinterpret_cast<float(&)[4 * kTiles]>(v);
}

// The reverse of load_tile_async: writes rows [0, kRows) and columns [0, kCols) of an Sw128Tile<kRows, kTileCols> to
// global rows `row_stride` elements apart, 16 bytes a thread (whole sectors), `thread` of kThreads; rows at or beyond
// `rows` are not written (a sequence's last, padded chunk); kNegate flips every element's sign on the way. The
// thread's shared reads all go out before its first store waits for one.
template <int kRows, int kCols, int kThreads, int kTileCols = kCols, bool kNegate = false>
__device__ __forceinline__ void store_tile_rows(bf16* global, int64_t row_stride, const bf16* smem, int thread,
                                                int rows = kRows) {
  constexpr int kChunksPerRow = kCols / 8, kRowStep = kThreads / kChunksPerRow, kSteps = kRows / kRowStep;
  static_assert(
      kCols <= kTileCols && kThreads % kChunksPerRow == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
      "the threads cover whole rows of the tile's columns, a multiple of 8 at a time, and the tile whole steps");
  const int row0 = thread / kChunksPerRow, col = (thread % kChunksPerRow) * 8;
  const bf16* src = smem + Sw128Tile<kRows, kTileCols>::offset(row0, col);
  bf16* dst = global + row0 * row_stride + col;
  uint4 v[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) v[i] = *reinterpret_cast<const uint4*>(src + i * kRowStep * 64);
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    if constexpr (kNegate) tile::negate_bf16x8(v[i]);
    if (kRows == rows || row0 + i * kRowStep < rows) *reinterpret_cast<uint4*>(dst + i * kRowStep * row_stride) = v[i];
  }
}

#ifdef PRIMER_WGMMA
// Orders this thread's register accesses before the warpgroup's next wgmma (required after writing accumulators
// or A fragments).
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups of this warpgroup are still in flight.
template <int kPending> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written by ordinary stores or cp.async becomes visible to wgmma (the async proxy) only after this
// fence in each writing thread, followed by a barrier.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of an accumulator across wgmma issue and wait, and (for register A
// operands) from reusing their registers while an issued wgmma may still read them: call after wait().
template <int kN> __device__ __forceinline__ void pin(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int kK> __device__ __forceinline__ void pin(uint32_t (&a)[kK][4]) {
#pragma unroll
  for (int i = 0; i < kK; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// Moves registers between warpgroups of a warp-specialised kernel: every warp of the group executes it, and the
// kernel must start with a register cap (__launch_bounds__(threads, 1)).
template <int kRegisters, bool kIncrease> __device__ __forceinline__ void set_max_registers() {
  if constexpr (kIncrease)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// D[64 x N] (+)= A B with D as float[N / 2]; `accumulate` 0 overwrites D. kTransA / kTransB: 1 for MN-major.
// One asm body per operand source (shared memory: _SS, registers: _RS), spelled once: per accumulator count C, the
// accumulators are operands %0 .. %(C-1) ("+f"(d[i])), and the operands after them are numbered from C.
#define PRIMER_WGMMA_REGS_BLOCK0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define PRIMER_WGMMA_REGS_BLOCK1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PRIMER_WGMMA_REGS_BLOCK2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define PRIMER_WGMMA_REGS_BLOCK3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PRIMER_WGMMA_REGS_BLOCK4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define PRIMER_WGMMA_REGS_BLOCK5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PRIMER_WGMMA_REGS_16 PRIMER_WGMMA_REGS_BLOCK0
#define PRIMER_WGMMA_REGS_32 PRIMER_WGMMA_REGS_16 "," PRIMER_WGMMA_REGS_BLOCK1
#define PRIMER_WGMMA_REGS_64 PRIMER_WGMMA_REGS_32 "," PRIMER_WGMMA_REGS_BLOCK2 "," PRIMER_WGMMA_REGS_BLOCK3
#define PRIMER_WGMMA_REGS_96 PRIMER_WGMMA_REGS_64 "," PRIMER_WGMMA_REGS_BLOCK4 "," PRIMER_WGMMA_REGS_BLOCK5
#define PRIMER_WGMMA_ACC8(i)                                                                                      \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define PRIMER_WGMMA_ACC_16 PRIMER_WGMMA_ACC8(0), PRIMER_WGMMA_ACC8(8)
#define PRIMER_WGMMA_ACC_32 PRIMER_WGMMA_ACC_16, PRIMER_WGMMA_ACC8(16), PRIMER_WGMMA_ACC8(24)
#define PRIMER_WGMMA_ACC_64 \
  PRIMER_WGMMA_ACC_32, PRIMER_WGMMA_ACC8(32), PRIMER_WGMMA_ACC8(40), PRIMER_WGMMA_ACC8(48), PRIMER_WGMMA_ACC8(56)
#define PRIMER_WGMMA_ACC_96 \
  PRIMER_WGMMA_ACC_64, PRIMER_WGMMA_ACC8(64), PRIMER_WGMMA_ACC8(72), PRIMER_WGMMA_ACC8(80), PRIMER_WGMMA_ACC8(88)
#define PRIMER_WGMMA_SHAPE_16 "m64n32k16"
#define PRIMER_WGMMA_PRED_SS_16 "%18"
#define PRIMER_WGMMA_TAIL_SS_16 "}, %16, %17, p, 1, 1, %19, %20;\n}\n"
#define PRIMER_WGMMA_PRED_RS_16 "%21"
#define PRIMER_WGMMA_TAIL_RS_16 "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
#define PRIMER_WGMMA_SHAPE_32 "m64n64k16"
#define PRIMER_WGMMA_PRED_SS_32 "%34"
#define PRIMER_WGMMA_TAIL_SS_32 "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
#define PRIMER_WGMMA_PRED_RS_32 "%37"
#define PRIMER_WGMMA_TAIL_RS_32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
#define PRIMER_WGMMA_SHAPE_64 "m64n128k16"
#define PRIMER_WGMMA_PRED_SS_64 "%66"
#define PRIMER_WGMMA_TAIL_SS_64 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
#define PRIMER_WGMMA_PRED_RS_64 "%69"
#define PRIMER_WGMMA_TAIL_RS_64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
#define PRIMER_WGMMA_SHAPE_96 "m64n192k16"
#define PRIMER_WGMMA_PRED_SS_96 "%98"
#define PRIMER_WGMMA_TAIL_SS_96 "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
#define PRIMER_WGMMA_BODY(C, SOURCE, TYPES)                            \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " PRIMER_WGMMA_PRED_##SOURCE##_##C \
      ", 0;\n"                                                         \
      "wgmma.mma_async.sync.aligned." PRIMER_WGMMA_SHAPE_##C           \
      ".f32." TYPES " {" PRIMER_WGMMA_REGS_##C PRIMER_WGMMA_TAIL_##SOURCE##_##C
#define PRIMER_WGMMA_SS(C, TYPES)              \
  asm volatile(PRIMER_WGMMA_BODY(C, SS, TYPES) \
               : PRIMER_WGMMA_ACC_##C          \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))
#define PRIMER_WGMMA_RS(C, TYPES)              \
  asm volatile(PRIMER_WGMMA_BODY(C, RS, TYPES) \
               : PRIMER_WGMMA_ACC_##C          \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))
template <int kTransA, int kTransB, class Op = bf16>
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<Op, __half>)
    PRIMER_WGMMA_SS(16, "f16.f16");
  else
    PRIMER_WGMMA_SS(16, "bf16.bf16");
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
  PRIMER_WGMMA_RS(16, "bf16.bf16");
}
// The m64n32 and m64n64 products take fp16 operands as well (Op = __half: the same rate, 2^-11 rounding where bf16 has
// 2^-8, within ±65504).
template <int kTransA, int kTransB, class Op = bf16>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<Op, __half>)
    PRIMER_WGMMA_SS(32, "f16.f16");
  else
    PRIMER_WGMMA_SS(32, "bf16.bf16");
}
template <int kTransB, class Op = bf16>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
  if constexpr (std::is_same_v<Op, __half>)
    PRIMER_WGMMA_RS(32, "f16.f16");
  else
    PRIMER_WGMMA_RS(32, "bf16.bf16");
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  PRIMER_WGMMA_SS(64, "bf16.bf16");
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
  PRIMER_WGMMA_RS(64, "bf16.bf16");
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  PRIMER_WGMMA_SS(96, "bf16.bf16");
}
#endif  // PRIMER_WGMMA

}  // namespace primer::ops::cuda_ops::wgmma
