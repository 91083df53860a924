// CPU RMSNorm (f32/f64; the f64 path is the reference). Tensors are contiguous and already validated.
#pragma once
#include "core/tensor.h"

namespace primer::ops::cpu {

// y, x [rows, D]; w [D]; rstd [rows]; all of one dtype.
void rmsnorm(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps);
// dx, dy, x [rows, D]; w [D]; rstd [rows]; dw_accum [D] += sum over rows of dy * x * rstd.
void rmsnorm_backward(const Tensor& dx, const Tensor& dw_accum, const Tensor& dy, const Tensor& x, const Tensor& w,
                      const Tensor& rstd);

}  // namespace primer::ops::cpu
