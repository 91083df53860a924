// Kalman linear attention's core (core/ops/kalman_scan.h) as one autograd node.
#pragma once
#include "core/autograd/variable.h"

namespace primer::ag {

struct KalmanScanResult {
  Var y;      // [B, T, H, D]
  Var y_var;  // [B, T, H, D] when with_variance, else null
};

// q, k [B, T, H, N]; v, value_precision [B, T, H, D]; a_bar, p_bar [H, N, D]; the carried state precision_in and
// info_mean_in [B, H, N, D] (null: λ_0 = 1, η_0 = 0, the authors' standard-normal prior). If precision_out /
// info_mean_out are non-null they receive λ_T, η_T, through which a later use's gradient flows back into every input.
KalmanScanResult kalman_scan(const Var& q, const Var& k, const Var& v, const Var& value_precision, const Var& a_bar,
                             const Var& p_bar, const Var& precision_in, const Var& info_mean_in, bool with_variance,
                             Var* precision_out, Var* info_mean_out);

}  // namespace primer::ag
