#include "core/ops/cpu/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/dispatch.h"

// One (batch, head) pair per OpenMP iteration and one query row at a time: a row's scores live in a buffer of
// length Tk, so memory stays linear in the sequence length. Sums run in double for the f32 path too.
namespace primer::ops::cpu {
namespace {

struct Dims {
  int64_t B, Tq, Tk, Hq, Hkv, Dh;
  int64_t group() const { return Hq / Hkv; }
};

Dims dims_of(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
}

bool visible(const AttentionOptions& opt, int64_t i, int64_t j) {
  if (!opt.causal) return true;
  const int64_t qp = opt.q_offset + i, kp = opt.k_offset + j;
  return kp <= qp && (opt.window == 0 || kp > qp - opt.window);
}

// Scaled scores of query row `qi` (Dh values) against every key of one kv head; masked keys get -inf.
template <class T> void row_scores(std::vector<double>& s, const T* qi, const T* k, const Dims& d, int64_t i,
                                   const AttentionOptions& opt) {
  const int64_t k_row = d.Hkv * d.Dh;
  for (int64_t j = 0; j < d.Tk; ++j) {
    if (!visible(opt, i, j)) {
      s[size_t(j)] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const T* kj = k + j * k_row;
    double dot = 0;
    for (int64_t c = 0; c < d.Dh; ++c) dot += double(qi[c]) * double(kj[c]);
    s[size_t(j)] = dot * opt.scale;
  }
}

template <class T>
void forward(T* out, T* lse, const T* q, const T* k, const T* v, const Dims& d, const AttentionOptions& opt) {
  const int64_t q_row = d.Hq * d.Dh, k_row = d.Hkv * d.Dh;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.B * d.Hq; ++bh) {
    const int64_t b = bh / d.Hq, h = bh % d.Hq;
    const T* kb = k + (b * d.Tk * d.Hkv + h / d.group()) * d.Dh;
    const T* vb = v + (b * d.Tk * d.Hkv + h / d.group()) * d.Dh;
    std::vector<double> s(size_t(d.Tk)), acc(size_t(d.Dh));
    for (int64_t i = 0; i < d.Tq; ++i) {
      const int64_t qo = (b * d.Tq + i) * q_row + h * d.Dh;
      row_scores(s, q + qo, kb, d, i, opt);
      double m = -std::numeric_limits<double>::infinity();
      for (double x : s) m = std::max(m, x);
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      if (m > -std::numeric_limits<double>::infinity()) {
        for (int64_t j = 0; j < d.Tk; ++j) {
          const double p = std::exp(s[size_t(j)] - m);  // exp(-inf) = 0 for masked keys
          if (p == 0) continue;
          sum += p;
          for (int64_t c = 0; c < d.Dh; ++c) acc[size_t(c)] += p * double(vb[j * k_row + c]);
        }
      }
      for (int64_t c = 0; c < d.Dh; ++c) out[qo + c] = T(sum > 0 ? acc[size_t(c)] / sum : 0.0);
      lse[bh * d.Tq + i] = T(sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity());
    }
  }
}

// With P = exp(S - lse): dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with D_i = rowsum(dO_i * O_i),
// dQ = scale * dS K, dK = scale * dS^T Q. One iteration owns a kv head and all its query heads, so the GQA sums
// of dK/dV have a single writer.
template <class T> void backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                                 const T* lse, const Dims& d, const AttentionOptions& opt) {
  const int64_t q_row = d.Hq * d.Dh, k_row = d.Hkv * d.Dh;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    const int64_t kv_base = (b * d.Tk * d.Hkv + g) * d.Dh;
    std::vector<double> s(size_t(d.Tk)), dq_row(size_t(d.Dh));
    std::vector<double> dk_acc(size_t(d.Tk * d.Dh), 0.0), dv_acc(size_t(d.Tk * d.Dh), 0.0);
    for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
      for (int64_t i = 0; i < d.Tq; ++i) {
        const int64_t qo = (b * d.Tq + i) * q_row + h * d.Dh;
        const double row_lse = double(lse[(b * d.Hq + h) * d.Tq + i]);
        std::fill(dq_row.begin(), dq_row.end(), 0.0);
        if (row_lse > -std::numeric_limits<double>::infinity()) {
          row_scores(s, q + qo, k + kv_base, d, i, opt);
          double D = 0;
          for (int64_t c = 0; c < d.Dh; ++c) D += double(dout[qo + c]) * double(out[qo + c]);
          for (int64_t j = 0; j < d.Tk; ++j) {
            const double p = std::exp(s[size_t(j)] - row_lse);
            if (p == 0) continue;
            const T* kj = k + kv_base + j * k_row;
            const T* vj = v + kv_base + j * k_row;
            double dp = 0;
            for (int64_t c = 0; c < d.Dh; ++c) dp += double(dout[qo + c]) * double(vj[c]);
            const double ds = p * (dp - D) * opt.scale;
            for (int64_t c = 0; c < d.Dh; ++c) {
              dv_acc[size_t(j * d.Dh + c)] += p * double(dout[qo + c]);
              dk_acc[size_t(j * d.Dh + c)] += ds * double(q[qo + c]);
              dq_row[size_t(c)] += ds * double(kj[c]);
            }
          }
        }
        for (int64_t c = 0; c < d.Dh; ++c) dq[qo + c] = T(dq_row[size_t(c)]);
      }
    }
    for (int64_t j = 0; j < d.Tk; ++j)
      for (int64_t c = 0; c < d.Dh; ++c) {
        dk[kv_base + j * k_row + c] = T(dk_acc[size_t(j * d.Dh + c)]);
        dv[kv_base + j * k_row + c] = T(dv_acc[size_t(j * d.Dh + c)]);
      }
  }
}

}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& opt) {
  dispatch_cpu_float(q.dtype(), "attention", [&](auto tag) {
    using T = decltype(tag);
    forward<T>(out.data<T>(), lse.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(), dims_of(q, k), opt);
  });
}

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const AttentionOptions& opt) {
  dispatch_cpu_float(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    backward<T>(dq.data<T>(), dk.data<T>(), dv.data<T>(), dout.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(),
                out.data<T>(), lse.data<T>(), dims_of(q, k), opt);
  });
}

}  // namespace primer::ops::cpu
