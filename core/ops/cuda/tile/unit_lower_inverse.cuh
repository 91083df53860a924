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

}  // namespace primer::ops::cuda_ops::tile
