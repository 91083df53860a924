// The CPU path of ops::kalman_scan (core/ops/kalman_scan.h), f32 or f64 throughout: per filter, the precision by
// chunks of Möbius products (trace-normalised 2×2 prefix products applied to the chunk's incoming λ, the arithmetic a
// GPU scan would do) and the information mean by its affine recursion; the backward recomputes the states and runs
// the two reverse scalar scans.
#pragma once
#include <cstdint>

namespace primer::ops::cpu {

struct KalmanDims {
  int64_t batch = 0, time = 0, heads = 0, slots = 0, channels = 0;  // B, T, H, N, D
};

// Dense layouts: q, k [B, T, H, N]; v, lv, y, y_var [B, T, H, D]; a, p [H, N, D]; states [B, H, N, D].
template <class T> void kalman_scan(const KalmanDims& d, const T* q, const T* k, const T* v, const T* lv, const T* a,
                                    const T* p, const T* lam0, const T* eta0, T* y, T* y_var, T* lam_out, T* eta_out);
template <class T> void kalman_scan_backward(const KalmanDims& d, const T* dy, const T* dy_var, const T* dlam_out,
                                             const T* deta_out, const T* q, const T* k, const T* v, const T* lv,
                                             const T* a, const T* p, const T* lam0, const T* eta0, T* dq, T* dk, T* dv,
                                             T* dlv, T* da, T* dp, T* dlam0, T* deta0);

}  // namespace primer::ops::cpu
