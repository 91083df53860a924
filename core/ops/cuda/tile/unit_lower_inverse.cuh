// Column j of (I + L)⁻¹ for a strictly lower-triangular fp32 L [kN][kStride] in shared memory, by forward
// substitution with the column in registers (one thread per column): the chunked delta rules' UT transform. Four
// partial sums per row shorten the dependent chain of fused multiply-adds fourfold; rows must be 16-byte aligned.
#pragma once

namespace primer::ops::cuda_ops::tile {

template <int kN, int kStride>
__device__ __forceinline__ void unit_lower_inverse_column(const float* L, int j, float (&x)[kN]) {
  static_assert(kStride % 4 == 0, "float4 reads of L's rows");
#pragma unroll
  for (int r = 0; r < kN; ++r) {
    const float* Lr = L + r * kStride;
    float acc[4] = {r == j ? 1.f : 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int c = 0; c < (r & ~3); c += 4) {
      const float4 l = *reinterpret_cast<const float4*>(Lr + c);
      acc[0] -= l.x * x[c];
      acc[1] -= l.y * x[c + 1];
      acc[2] -= l.z * x[c + 2];
      acc[3] -= l.w * x[c + 3];
    }
#pragma unroll
    for (int c = r & ~3; c < r; ++c) acc[c & 3] -= Lr[c] * x[c];
    x[r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

// (I + L)⁻¹ for a strictly lower-triangular fp32 L [64][kStride] in shared memory, by the whole block in 16 × 16
// blocks: the four diagonal blocks by forward substitution (a thread per column), then the blocks below them one
// diagonal at a time, from (I + L) A = I:
//   A_ij = −A_ii M_ij,  M_ij = Σ_{k=j}^{i−1} L_ik A_kj   (i > j),
// each diagonal two short products over all threads. A thread per column of the whole 64 × 64 is a chain of ~2,000
// dependent multiply-adds on two warps while the block's others wait; here each thread runs ~250 in short chains.
// The result is written into L's own unused half: on return L's upper triangle, the diagonal included, holds Aᵀ
// (element (c, r) is A's (r, c), r ≥ c), the lower triangles of L's diagonal blocks are zero (they are needed only for
// the diagonal blocks' inverses), and L's blocks below the diagonal blocks are kept. `scratch`: 3 × 256 floats.
// Every thread of the block calls it; it ends with a barrier.
template <int kThreads, int kStride>
__device__ __forceinline__ void unit_lower_inverse_transposed_in_place(float* L, float* scratch, int tid) {
  static_assert(kStride % 4 == 0, "float4 reads of L's rows");
  constexpr int kB = 16;
  static_assert(kThreads >= 4 * kB, "a thread per column of the four diagonal blocks");
  auto at = [&](int row, int col) -> float& { return L[row * kStride + col]; };
  // The diagonal blocks: thread (block j, column c) forms column c of A_jj, then writes it as row c of A_jjᵀ over the
  // block's lower triangle (x[m] = 0 for m < c), once every thread has read that triangle.
  float x[kB];
  const bool diagonal_worker = tid < 4 * kB;
  const int jd = tid / kB, cd = tid % kB;
  if (diagonal_worker) {
#pragma unroll
    for (int m = 0; m < kB; ++m) {
      float acc[2] = {m == cd ? 1.f : 0.f, 0.f};
#pragma unroll
      for (int p = 0; p < m; ++p) acc[p & 1] -= at(kB * jd + m, kB * jd + p) * x[p];
      x[m] = acc[0] + acc[1];
    }
  }
  __syncthreads();
  if (diagonal_worker) {
#pragma unroll
    for (int m = 0; m < kB; m += 4)
      *reinterpret_cast<float4*>(&at(kB * jd + cd, kB * jd + m)) = make_float4(x[m], x[m + 1], x[m + 2], x[m + 3]);
  }
  __syncthreads();
  // The blocks (i, j = i − d), d = 1, 2, 3: the 4 − d blocks of a diagonal at once.
#pragma unroll
  for (int d = 1; d < 4; ++d) {
    const int elements = (4 - d) * kB * kB;
    // M_ij(r, c) = Σ over columns [16j, 16i) of L(16i + r, ·) Aᵀ(16j + c, ·): two rows, read as float4.
    for (int e = tid; e < elements; e += kThreads) {
      const int j = e / (kB * kB), i = j + d, r = e / kB % kB, c = e % kB;
      const float* l_row = &at(kB * i + r, 0);
      const float* a_row = &at(kB * j + c, 0);
      float acc[2] = {0.f, 0.f};
#pragma unroll
      for (int col = 0; col < kB * d; col += 4) {
        const float4 l = *reinterpret_cast<const float4*>(l_row + kB * j + col);
        const float4 a = *reinterpret_cast<const float4*>(a_row + kB * j + col);
        acc[0] = fmaf(l.x, a.x, fmaf(l.z, a.z, acc[0]));
        acc[1] = fmaf(l.y, a.y, fmaf(l.w, a.w, acc[1]));
      }
      scratch[e] = acc[0] + acc[1];
    }
    __syncthreads();
    // A_ij(r, c) = −Σ_m A_ii(r, m) M_ij(m, c), A_ii(r, m) = Aᵀ(16i + m, 16i + r) (zero for m > r); stored as Aᵀ.
    for (int e = tid; e < elements; e += kThreads) {
      const int j = e / (kB * kB), i = j + d, c = e / kB % kB, r = e % kB;
      const float* m_ij = scratch + j * kB * kB;
      float acc[2] = {0.f, 0.f};
#pragma unroll
      for (int m = 0; m < kB; ++m) acc[m & 1] = fmaf(at(kB * i + m, kB * i + r), m_ij[m * kB + c], acc[m & 1]);
      at(kB * j + c, kB * i + r) = -(acc[0] + acc[1]);
    }
    __syncthreads();
  }
}

}  // namespace primer::ops::cuda_ops::tile
