#include "core/ops/kalman_scan.h"

#include <cstdint>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "core/ops/cpu/kalman_scan.h"
#include "core/ops/cuda/kalman_scan.h"
#include "core/ops/dispatch.h"

namespace primer::ops {
namespace {

struct Dims {
  int64_t B, T, H, N, D;
  int64_t qk(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * N; }
  int64_t vd(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
  int64_t dyn(int64_t h, int64_t n) const { return (h * N + n) * D; }                         // + d
  int64_t state(int64_t b, int64_t h, int64_t n) const { return ((b * H + h) * N + n) * D; }  // + d
};

// On the CPU every tensor is f32 or every tensor f64; on CUDA the per-token tensors are f32 or bf16 and the dynamics
// and states f32 (precisions span decades).
Dims check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lv,
                  const Tensor& a_bar, const Tensor& p_bar, const Tensor& lam0, const Tensor& eta0) {
  PRIMER_CHECK(q.defined() && q.dim() == 4, "{}: q is {}, expected [B, T, H, N]", op,
               q.defined() ? q.describe() : "undefined");
  const bool cuda = !q.is_cpu();
  if (cuda)
    expect(q, op, "q", q.device(), {DType::F32, DType::BF16});
  else
    expect(q, op, "q", q.device(), {DType::F32, DType::F64});
  const DType state_dtype = cuda ? DType::F32 : q.dtype();
  for (const auto& [t, name] : {std::pair{&k, "k"}, {&v, "v"}, {&lv, "value_precision"}})
    expect(*t, op, name, q.device(), {q.dtype()});
  for (const auto& [t, name] :
       {std::pair{&a_bar, "a_bar"}, {&p_bar, "p_bar"}, {&lam0, "precision_in"}, {&eta0, "info_mean_in"}})
    expect(*t, op, name, q.device(), {state_dtype});
  const Dims d{q.size(0), q.size(1), q.size(2), q.size(3), v.dim() == 4 ? v.size(3) : 0};
  expect_shape(k, op, "k", q.shape());
  expect_shape(v, op, "v", {d.B, d.T, d.H, d.D});
  expect_shape(lv, op, "value_precision", {d.B, d.T, d.H, d.D});
  expect_shape(a_bar, op, "a_bar", {d.H, d.N, d.D});
  expect_shape(p_bar, op, "p_bar", {d.H, d.N, d.D});
  expect_shape(lam0, op, "precision_in", {d.B, d.H, d.N, d.D});
  expect_shape(eta0, op, "info_mean_in", {d.B, d.H, d.N, d.D});
  PRIMER_CHECK(!cuda || (d.N % 16 == 0 && d.N > 0 && d.N <= 128),
               "{}: q is {}; on CUDA the state slots N (q's last dim) must be a multiple of 16 up to 128", op,
               q.describe());
  return d;
}

void check_output_grads(const char* op, const Tensor& dy, const Tensor& dy_var, const Tensor& dlam, const Tensor& deta,
                        const Tensor& v, const Tensor& lam0) {
  for (const auto& [t, name, like] : {std::tuple{&dy, "dy", &v},
                                      {&dy_var, "dy_var", &v},
                                      {&dlam, "dprecision_out", &lam0},
                                      {&deta, "dinfo_mean_out", &lam0}})
    if (t->defined()) {
      expect(*t, op, name, v.device(), {like->dtype()});
      expect_shape(*t, op, name, like->shape());
    }
}

template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
Tensor dense_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }

// The CUDA kernels load 4 slots at once (16 bytes of f32): a contiguous view that starts off that boundary is copied.
Tensor aligned(const Tensor& t) {
  const Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 ? c.clone() : c;
}
[[maybe_unused]] const void* raw_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
[[maybe_unused]] const float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

[[maybe_unused]] cuda_ops::KalmanScanShape cuda_shape(const Dims& s) { return {s.B, s.T, s.H, s.N, s.D}; }

KalmanScanOutputs kalman_scan_cuda([[maybe_unused]] const Dims& s, const Tensor& q_, const Tensor& k_, const Tensor& v_,
                                   const Tensor& lv_, const Tensor& a_, const Tensor& p_, const Tensor& lam0_,
                                   const Tensor& eta0_, bool with_variance, bool keep_checkpoints) {
  const Tensor q = aligned(q_), k = aligned(k_), v = v_.contiguous(), lv = lv_.contiguous(), a = a_.contiguous(),
               p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous();
  const Device dev = q.device();
  KalmanScanOutputs out{Tensor::empty(v.shape(), v.dtype(), dev),
                        with_variance ? Tensor::empty(v.shape(), v.dtype(), dev) : Tensor(),
                        Tensor::empty(lam0.shape(), DType::F32, dev), Tensor::empty(lam0.shape(), DType::F32, dev)};
  if (keep_checkpoints)
    out.checkpoints = Tensor::empty({cuda_ops::kalman_scan_checkpoint_floats(cuda_shape(s))}, DType::F32, dev);
  PRIMER_ON_CUDA(cuda_ops::kalman_scan_forward(
      cuda_shape(s), q.dtype(), q.data_ptr(), k.data_ptr(), v.data_ptr(), lv.data_ptr(), a.data<float>(),
      p.data<float>(), lam0.data<float>(), eta0.data<float>(), out.y.data_ptr(),
      with_variance ? out.y_var.data_ptr() : nullptr, out.precision.data<float>(), out.info_mean.data<float>(),
      keep_checkpoints ? out.checkpoints.data<float>() : nullptr));
  return out;
}

KalmanScanGrads kalman_scan_backward_cuda([[maybe_unused]] const Dims& s, const Tensor& dy_, const Tensor& dy_var_,
                                          const Tensor& dlam_, const Tensor& deta_, const Tensor& q_, const Tensor& k_,
                                          const Tensor& v_, const Tensor& lv_, const Tensor& a_, const Tensor& p_,
                                          const Tensor& lam0_, const Tensor& eta0_, const Tensor& kept) {
  const Tensor q = aligned(q_), k = aligned(k_), v = v_.contiguous(), lv = lv_.contiguous(), a = a_.contiguous(),
               p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous(), dy = dense_or_null(dy_),
               dy_var = dense_or_null(dy_var_), dlam = dense_or_null(dlam_), deta = dense_or_null(deta_);
  const Device dev = q.device();
  const DType dt = q.dtype();
  // dq and dk sum over the channels of several CTAs (f32 atomics); ā and p̄ over the batch.
  KalmanScanGrads g{Tensor::zeros(q.shape(), DType::F32, dev),
                    Tensor::zeros(k.shape(), DType::F32, dev),
                    Tensor::empty(v.shape(), dt, dev),
                    Tensor::empty(lv.shape(), dt, dev),
                    Tensor::zeros(a.shape(), DType::F32, dev),
                    Tensor::zeros(p.shape(), DType::F32, dev),
                    Tensor::empty(lam0.shape(), DType::F32, dev),
                    Tensor::empty(lam0.shape(), DType::F32, dev)};
  const int64_t checkpoint_floats = cuda_ops::kalman_scan_checkpoint_floats(cuda_shape(s));
  PRIMER_CHECK(!kept.defined() || (kept.dtype() == DType::F32 && kept.device() == dev && kept.is_contiguous() &&
                                   kept.numel() == checkpoint_floats),
               "kalman_scan_backward: checkpoints must be the forward's (f32, {} elements on {}), got {}",
               checkpoint_floats, dev.str(), kept.describe());
  const Tensor checkpoints = kept.defined() ? kept : Tensor::empty({checkpoint_floats}, DType::F32, dev);
  PRIMER_ON_CUDA(cuda_ops::kalman_scan_backward(
      cuda_shape(s), dt, raw_or_null(dy), raw_or_null(dy_var), f32_or_null(dlam), f32_or_null(deta), q.data_ptr(),
      k.data_ptr(), v.data_ptr(), lv.data_ptr(), a.data<float>(), p.data<float>(), lam0.data<float>(),
      eta0.data<float>(), g.dq.data<float>(), g.dk.data<float>(), g.dv.data_ptr(), g.dvalue_precision.data_ptr(),
      g.da_bar.data<float>(), g.dp_bar.data<float>(), g.dprecision_in.data<float>(), g.dinfo_mean_in.data<float>(),
      checkpoints.data<float>(), kept.defined()));
  if (dt != DType::F32) {
    g.dq = g.dq.to(dt);
    g.dk = g.dk.to(dt);
  }
  return g;
}

}  // namespace

KalmanScanOutputs kalman_scan(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& lv_, const Tensor& a_,
                              const Tensor& p_, const Tensor& lam0_, const Tensor& eta0_, bool with_variance,
                              bool keep_checkpoints) {
  const Dims s = check_inputs("kalman_scan", q_, k_, v_, lv_, a_, p_, lam0_, eta0_);
  if (!q_.is_cpu()) return kalman_scan_cuda(s, q_, k_, v_, lv_, a_, p_, lam0_, eta0_, with_variance, keep_checkpoints);
  const Tensor q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous(), lv = lv_.contiguous(),
               a = a_.contiguous(), p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous();
  const DType dt = q.dtype();
  KalmanScanOutputs out{Tensor::empty(v.shape(), dt), with_variance ? Tensor::empty(v.shape(), dt) : Tensor(),
                        Tensor::empty(lam0.shape(), dt), Tensor::empty(lam0.shape(), dt)};
  dispatch_cpu_float(dt, "kalman_scan", [&](auto tag) {
    using T = decltype(tag);
    cpu::kalman_scan<T>({s.B, s.T, s.H, s.N, s.D}, q.data<T>(), k.data<T>(), v.data<T>(), lv.data<T>(), a.data<T>(),
                        p.data<T>(), lam0.data<T>(), eta0.data<T>(), out.y.data<T>(), ptr<T>(out.y_var),
                        out.precision.data<T>(), out.info_mean.data<T>());
  });
  return out;
}

KalmanScanGrads kalman_scan_backward(const Tensor& dy_, const Tensor& dy_var_, const Tensor& dlam_, const Tensor& deta_,
                                     const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& lv_,
                                     const Tensor& a_, const Tensor& p_, const Tensor& lam0_, const Tensor& eta0_,
                                     const Tensor& checkpoints) {
  constexpr const char* op = "kalman_scan_backward";
  const Dims s = check_inputs(op, q_, k_, v_, lv_, a_, p_, lam0_, eta0_);
  check_output_grads(op, dy_, dy_var_, dlam_, deta_, v_, lam0_);
  if (!q_.is_cpu())
    return kalman_scan_backward_cuda(s, dy_, dy_var_, dlam_, deta_, q_, k_, v_, lv_, a_, p_, lam0_, eta0_, checkpoints);
  PRIMER_CHECK(!checkpoints.defined(),
               "kalman_scan_backward: checkpoints come from the CUDA forward; the CPU paths take "
               "none");
  const Tensor q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous(), lv = lv_.contiguous(),
               a = a_.contiguous(), p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous(),
               dy = dense_or_null(dy_), dy_var = dense_or_null(dy_var_), dlam = dense_or_null(dlam_),
               deta = dense_or_null(deta_);
  const DType dt = q.dtype();
  KalmanScanGrads g{Tensor::empty(q.shape(), dt),    Tensor::empty(k.shape(), dt),   Tensor::empty(v.shape(), dt),
                    Tensor::empty(lv.shape(), dt),   Tensor::empty(a.shape(), dt),   Tensor::empty(p.shape(), dt),
                    Tensor::empty(lam0.shape(), dt), Tensor::empty(lam0.shape(), dt)};
  dispatch_cpu_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    cpu::kalman_scan_backward<T>({s.B, s.T, s.H, s.N, s.D}, ptr<T>(dy), ptr<T>(dy_var), ptr<T>(dlam), ptr<T>(deta),
                                 q.data<T>(), k.data<T>(), v.data<T>(), lv.data<T>(), a.data<T>(), p.data<T>(),
                                 lam0.data<T>(), eta0.data<T>(), g.dq.data<T>(), g.dk.data<T>(), g.dv.data<T>(),
                                 g.dvalue_precision.data<T>(), g.da_bar.data<T>(), g.dp_bar.data<T>(),
                                 g.dprecision_in.data<T>(), g.dinfo_mean_in.data<T>());
  });
  return g;
}

namespace reference {
namespace {

void expect_f64(const char* op, const Tensor& q) {
  PRIMER_CHECK(q.dtype() == DType::F64, "{}: the reference computes in f64, got q {}", op, q.describe());
}

const double* at(const Tensor& t) { return t.data<double>(); }
const double* at_or_null(const Tensor& t) { return t.defined() ? t.contiguous().data<double>() : nullptr; }

// λ_t and η_t for t = 0..T of one filter (b, h, n, d).
void run_filter(const Dims& s, const double* k, const double* v, const double* lv, double a, double p, double lam0,
                double eta0, int64_t b, int64_t h, int64_t n, int64_t d, std::vector<double>& lam,
                std::vector<double>& eta) {
  lam.assign(size_t(s.T + 1), lam0);
  eta.assign(size_t(s.T + 1), eta0);
  for (int64_t t = 0; t < s.T; ++t) {
    const double kn = k[s.qk(b, t, h) + n], lvd = lv[s.vd(b, t, h) + d], vd = v[s.vd(b, t, h) + d];
    const double rho = 1 / (a * a + p * lam[size_t(t)]);
    lam[size_t(t + 1)] = rho * lam[size_t(t)] + kn * kn * lvd;
    eta[size_t(t + 1)] = a * rho * eta[size_t(t)] + kn * lvd * vd;
  }
}

}  // namespace

KalmanScanOutputs kalman_scan(const Tensor& q_, const Tensor& k_, const Tensor& v_, const Tensor& lv_, const Tensor& a_,
                              const Tensor& p_, const Tensor& lam0_, const Tensor& eta0_, bool with_variance) {
  const Dims s = check_inputs("reference::kalman_scan", q_, k_, v_, lv_, a_, p_, lam0_, eta0_);
  expect_f64("reference::kalman_scan", q_);
  const Tensor q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous(), lv = lv_.contiguous(),
               a = a_.contiguous(), p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous();
  KalmanScanOutputs out{Tensor::zeros(v.shape(), DType::F64),
                        with_variance ? Tensor::zeros(v.shape(), DType::F64) : Tensor(),
                        Tensor::empty(lam0.shape(), DType::F64), Tensor::empty(lam0.shape(), DType::F64)};
  std::vector<double> lam, eta;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t d = 0; d < s.D; ++d) {
          const int64_t st = s.state(b, h, n) + d;
          run_filter(s, at(k), at(v), at(lv), at(a)[s.dyn(h, n) + d], at(p)[s.dyn(h, n) + d], at(lam0)[st],
                     at(eta0)[st], b, h, n, d, lam, eta);
          for (int64_t t = 0; t < s.T; ++t) {
            const double qn = at(q)[s.qk(b, t, h) + n], l = lam[size_t(t + 1)];
            out.y.data<double>()[s.vd(b, t, h) + d] += qn * eta[size_t(t + 1)] / l;
            if (with_variance) out.y_var.data<double>()[s.vd(b, t, h) + d] += qn * qn / l;
          }
          out.precision.data<double>()[st] = lam[size_t(s.T)];
          out.info_mean.data<double>()[st] = eta[size_t(s.T)];
        }
  return out;
}

KalmanScanGrads kalman_scan_backward(const Tensor& dy_, const Tensor& dy_var_, const Tensor& dlam_out_,
                                     const Tensor& deta_out_, const Tensor& q_, const Tensor& k_, const Tensor& v_,
                                     const Tensor& lv_, const Tensor& a_, const Tensor& p_, const Tensor& lam0_,
                                     const Tensor& eta0_) {
  constexpr const char* op = "reference::kalman_scan_backward";
  const Dims s = check_inputs(op, q_, k_, v_, lv_, a_, p_, lam0_, eta0_);
  expect_f64(op, q_);
  check_output_grads(op, dy_, dy_var_, dlam_out_, deta_out_, v_, lam0_);
  const Tensor q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous(), lv = lv_.contiguous(),
               a = a_.contiguous(), p = p_.contiguous(), lam0 = lam0_.contiguous(), eta0 = eta0_.contiguous();
  const double *dy = at_or_null(dy_), *dy_var = at_or_null(dy_var_), *dlam_out = at_or_null(dlam_out_),
               *deta_out = at_or_null(deta_out_);
  KalmanScanGrads g{Tensor::zeros(q.shape(), DType::F64),    Tensor::zeros(k.shape(), DType::F64),
                    Tensor::zeros(v.shape(), DType::F64),    Tensor::zeros(lv.shape(), DType::F64),
                    Tensor::zeros(a.shape(), DType::F64),    Tensor::zeros(p.shape(), DType::F64),
                    Tensor::empty(lam0.shape(), DType::F64), Tensor::empty(lam0.shape(), DType::F64)};
  std::vector<double> lam, eta;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t d = 0; d < s.D; ++d) {
          const int64_t st = s.state(b, h, n) + d, dy_at = s.dyn(h, n) + d;
          const double A = at(a)[dy_at], P = at(p)[dy_at];
          run_filter(s, at(k), at(v), at(lv), A, P, at(lam0)[st], at(eta0)[st], b, h, n, d, lam, eta);
          // What reaches η_t and λ_t from later tokens (and from the final-state gradient at t = T).
          double carry_eta = deta_out ? deta_out[st] : 0, carry_lam = dlam_out ? dlam_out[st] : 0;
          double ga = 0, gp = 0;
          for (int64_t t = s.T - 1; t >= 0; --t) {
            const int64_t iq = s.qk(b, t, h) + n, iv = s.vd(b, t, h) + d;
            const double l = lam[size_t(t + 1)], l_prev = lam[size_t(t)], e_prev = eta[size_t(t)];
            const double mu = eta[size_t(t + 1)] / l, qn = at(q)[iq], kn = at(k)[iq], lvd = at(lv)[iv], vd = at(v)[iv];
            const double gy = dy ? dy[iv] : 0, gvar = dy_var ? dy_var[iv] : 0;
            // Readouts y = Σ q η/λ and y_var = Σ q²/λ.
            g.dq.data<double>()[iq] += gy * mu + 2 * qn * gvar / l;
            const double g_mu = qn * gy;
            const double G_eta = g_mu / l + carry_eta;
            const double G_lam = -g_mu * mu / l - qn * qn * gvar / (l * l) + carry_lam;
            // λ_t = ρ λ_{t−1} + φ, η_t = f η_{t−1} + b with φ = k²Λᵛ, b = kΛᵛv, f = āρ, ρ = 1/(ā² + p̄λ_{t−1}).
            const double rho = 1 / (A * A + P * l_prev), f = A * rho, g_f = G_eta * e_prev;
            g.dk.data<double>()[iq] += 2 * kn * lvd * G_lam + lvd * vd * G_eta;
            g.dvalue_precision.data<double>()[iv] += kn * kn * G_lam + kn * vd * G_eta;
            g.dv.data<double>()[iv] += kn * lvd * G_eta;
            gp += G_lam * (-l_prev * l_prev * rho * rho) + g_f * (-A * l_prev * rho * rho);
            ga += G_lam * (-2 * A * l_prev * rho * rho) + g_f * (rho - 2 * A * A * rho * rho);
            // Into step t − 1: ∂η_t/∂η_{t−1} = f, ∂λ_t/∂λ_{t−1} = ā²ρ², ∂f/∂λ_{t−1} = −āp̄ρ².
            carry_eta = f * G_eta;
            carry_lam = A * A * rho * rho * G_lam - A * P * rho * rho * g_f;
          }
          g.da_bar.data<double>()[dy_at] += ga;
          g.dp_bar.data<double>()[dy_at] += gp;
          g.dprecision_in.data<double>()[st] = carry_lam;
          g.dinfo_mean_in.data<double>()[st] = carry_eta;
        }
  return g;
}

}  // namespace reference
}  // namespace primer::ops
