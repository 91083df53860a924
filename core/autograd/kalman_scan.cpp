#include "core/autograd/kalman_scan.h"

#include "core/check.h"
#include "core/ops/kalman_scan.h"

namespace primer::ag {

KalmanScanResult kalman_scan(const Var& q, const Var& k, const Var& v, const Var& value_precision, const Var& a_bar,
                             const Var& p_bar, const Var& precision_in, const Var& info_mean_in, bool with_variance,
                             Var* precision_out, Var* info_mean_out) {
  PRIMER_CHECK(q && v && q->value.dim() == 4 && v->value.dim() == 4 && a_bar && a_bar->value.dim() == 3,
               "kalman_scan: expected q [B, T, H, N], v [B, T, H, D] and a_bar [H, N, D]");
  const Shape state_shape = {q->value.size(0), q->value.size(2), q->value.size(3), v->value.size(3)};
  const DType dt = a_bar->value.dtype();  // the states' dtype: the dynamics'
  const Tensor lam0 = precision_in ? precision_in->value : Tensor::full(state_shape, 1.0, dt, q->value.device());
  const Tensor eta0 = info_mean_in ? info_mean_in->value : Tensor::zeros(state_shape, dt, q->value.device());
  const bool recording = needs_grad({&q, &k, &v, &value_precision, &a_bar, &p_bar, &precision_in, &info_mean_in});
  // On CUDA the forward keeps the states the backward would recompute (546 MB per layer at B 4, T 4096, 16 heads,
  // N = D = 128): one pass over the sequence fewer.
  const ops::KalmanScanOutputs o =
      ops::kalman_scan(q->value, k->value, v->value, value_precision->value, a_bar->value, p_bar->value, lam0, eta0,
                       with_variance, recording && !q->value.is_cpu());
  KalmanScanResult r{constant(o.y), with_variance ? constant(o.y_var) : nullptr};
  const Var lam_T = constant(o.precision), eta_T = constant(o.info_mean);
  if (precision_out) *precision_out = lam_T;
  if (info_mean_out) *info_mean_out = eta_T;
  if (recording) {
    std::vector<Var> outs{r.y, lam_T, eta_T};
    if (r.y_var) outs.push_back(r.y_var);
    record("kalman_scan", outs,
           [q, k, v, value_precision, a_bar, p_bar, precision_in, info_mean_in, lam0, eta0, y = r.y, y_var = r.y_var,
            lam_T, eta_T, checkpoints = o.checkpoints] {
             const ops::KalmanScanGrads g = ops::kalman_scan_backward(
                 y->grad, y_var ? y_var->grad : Tensor(), lam_T->grad, eta_T->grad, q->value, k->value, v->value,
                 value_precision->value, a_bar->value, p_bar->value, lam0, eta0, checkpoints);
             accumulate_grad(q, g.dq);
             accumulate_grad(k, g.dk);
             accumulate_grad(v, g.dv);
             accumulate_grad(value_precision, g.dvalue_precision);
             accumulate_grad(a_bar, g.da_bar);
             accumulate_grad(p_bar, g.dp_bar);
             if (precision_in) accumulate_grad(precision_in, g.dprecision_in);
             if (info_mean_in) accumulate_grad(info_mean_in, g.dinfo_mean_in);
           });
  }
  return r;
}

}  // namespace primer::ag
