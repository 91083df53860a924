// CPU RMSNorm and its gated / L2 variants (f32/f64; the f64 path is the reference). Tensors are contiguous and
// already validated.
#pragma once
#include "core/ops/rmsnorm.h"

namespace primer::ops::cpu {

// y, x, z [rows, D] (z undefined without a gate); w [G, D] or [D] (G = 1) or undefined; rstd [rows]; one dtype.
void rmsnorm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& z,
             const NormSpec& spec);
// dx, dz (undefined without a gate), dy, x, z [rows, D]; dw_accum like w += Σ over rows of dy ∂y/∂w.
void rmsnorm_backward(const Tensor& dx, const Tensor& dz, const Tensor& dw_accum, const Tensor& dy, const Tensor& x,
                      const Tensor& w, const Tensor& z, const Tensor& rstd, const NormSpec& spec);

}  // namespace primer::ops::cpu
