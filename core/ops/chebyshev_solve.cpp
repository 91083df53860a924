#include "core/ops/chebyshev_solve.h"

#include <cmath>

#include "core/ops/chebyshev_solve_check.h"
#include "core/ops/cpu/chebyshev_solve.h"
#include "core/ops/cuda/chebyshev_solve.h"
#include "core/ops/dispatch.h"

namespace primer::ops {

namespace {

// The state's dtype: the inputs' on the CPU (f64 beside the f64 path), f32 on CUDA.
DType state_dtype(const Tensor& q) { return q.is_cpu() ? q.dtype() : DType::F32; }
Shape state_shape(const ChebyshevDims& d) { return {d.batch, d.heads, d.dim, d.dim}; }
Tensor contiguous_or_null(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }
template <class T> T* ptr(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

#ifdef PRIMER_WITH_CUDA
// The forward's workspace is the chunk-start states: handed over through chunk_states when asked for (and computed:
// a solve with num_iter 0 skips them).
void solve_cuda(const ChebyshevDims& d, const Tensor& q, const Tensor& k, const Tensor& gk, const Tensor& state_in,
                const Tensor& x, const Tensor& state_out, Tensor* chunk_states) {
  Tensor ws = Tensor::empty({d.heads_total(), d.chunks() + 1, d.dim, d.dim}, DType::F32, q.device());
  PRIMER_CHECK(size_t(ws.numel()) == cuda_ops::chebyshev_forward_workspace_floats(d), "chebyshev_solve: workspace");
  cuda_ops::chebyshev_solve(d, q.dtype(), q.data_ptr(), k.data_ptr(), ptr<float>(gk), ptr<float>(state_in),
                            x.data_ptr(), ptr<float>(state_out), ws.data<float>());
  if (chunk_states && d.num_iter > 0) *chunk_states = std::move(ws);
}

void backward_cuda(const ChebyshevDims& d, const Tensor& dx, const Tensor& x, const Tensor& k, const Tensor& gk,
                   const Tensor& state_in, const Tensor& dstate_out, const Tensor& chunk_states,
                   const ChebyshevGrads& g) {
  const bool given = chunk_states.defined();
  const Tensor ws =
      Tensor::empty({int64_t(cuda_ops::chebyshev_backward_workspace_floats(d, given))}, DType::F32, x.device());
  cuda_ops::chebyshev_solve_backward(d, x.dtype(), dx.data_ptr(), x.data_ptr(), k.data_ptr(), ptr<float>(gk),
                                     ptr<float>(state_in), ptr<float>(dstate_out), ptr<float>(chunk_states),
                                     g.dq.data_ptr(), g.dk.data_ptr(), ptr<float>(g.dgk), ptr<float>(g.dstate_in),
                                     ws.data<float>());
}
#endif

}  // namespace

ChebyshevDims chebyshev_check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& gk,
                                     const ChebyshevOptions& options, const Tensor& state_in) {
  PRIMER_CHECK(q.defined() && q.dim() == 4, "{}: argument 'q' is {}, expected [B, T, H, D]", op,
               q.defined() ? q.describe() : "undefined");
  if (q.is_cpu())
    expect(q, op, "q", q.device(), {DType::F32, DType::F64});
  else
    expect(q, op, "q", q.device(), {DType::BF16, DType::F32});
  expect(k, op, "k", q.device(), {q.dtype()});
  expect_shape(k, op, "k", q.shape());
  ChebyshevDims d;
  d.batch = q.size(0);
  d.time = q.size(1);
  d.heads = q.size(2);
  d.dim = q.size(3);
  PRIMER_CHECK(d.batch > 0 && d.time > 0 && d.heads > 0 && d.dim > 0, "{}: argument 'q' is {}, expected every size > 0",
               op, q.describe());
  if (q.is_cuda())
    PRIMER_CHECK(d.dim == 64 || d.dim == 128, "{}: argument 'q' is {}, the CUDA path supports head_dim 64 or 128", op,
                 q.describe());
  if (gk.defined()) {
    expect(gk, op, "gk", q.device(), {state_dtype(q)});
    expect_shape(gk, op, "gk", {d.batch, d.time, d.heads});
  }
  if (state_in.defined()) {
    expect(state_in, op, "state_in", q.device(), {state_dtype(q)});
    expect_shape(state_in, op, "state_in", state_shape(d));
  }
  PRIMER_CHECK(std::isfinite(options.ridge) && options.ridge > 0,
               "{}: ridge is {}, expected a finite value > 0 (λ_t = ridge·‖H_t‖_F keeps the system conditioned)", op,
               options.ridge);
  PRIMER_CHECK(options.num_iter >= 0, "{}: num_iter is {}, expected >= 0", op, options.num_iter);
  d.ridge = options.ridge;
  d.num_iter = options.num_iter;
  d.bp_lambda = options.bp_lambda;
  d.precise_iterate = options.precise_iterate;
  d.f16_operands = options.f16_operands;
  d.has_gk = gk.defined();
  d.has_state_in = state_in.defined();
  return d;
}

void chebyshev_check_backward(const char* op, const ChebyshevDims& d, const Tensor& q, const Tensor& dx,
                              const Tensor& x, const Tensor& dstate_out) {
  expect(dx, op, "dx", q.device(), {q.dtype()});
  expect_shape(dx, op, "dx", q.shape());
  expect(x, op, "x", q.device(), {q.dtype()});
  expect_shape(x, op, "x", q.shape());
  if (dstate_out.defined()) {
    expect(dstate_out, op, "dstate_out", q.device(), {state_dtype(q)});
    expect_shape(dstate_out, op, "dstate_out", state_shape(d));
  }
}

Tensor chebyshev_solve(const Tensor& q, const Tensor& k, const Tensor& gk, const ChebyshevOptions& options,
                       const Tensor& state_in, Tensor* state_out, [[maybe_unused]] Tensor* chunk_states) {
  constexpr const char* op = "chebyshev_solve";
  const ChebyshevDims d = chebyshev_check_inputs(op, q, k, gk, options, state_in);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), gc = contiguous_or_null(gk), sc = contiguous_or_null(state_in);
  Tensor x = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor st = state_out ? Tensor::empty(state_shape(d), state_dtype(q), q.device()) : Tensor();
  if (q.is_cpu()) {
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::chebyshev_solve<T>(d, qc.data<T>(), kc.data<T>(), ptr<T>(gc), ptr<T>(sc), x.data<T>(), ptr<T>(st));
    });
  } else {
    PRIMER_ON_CUDA(solve_cuda(d, qc, kc, gc, sc, x, st, chunk_states));
  }
  if (state_out) *state_out = st;
  return x;
}

ChebyshevGrads chebyshev_solve_backward(const Tensor& dx, const Tensor& x, const Tensor& q, const Tensor& k,
                                        const Tensor& gk, const ChebyshevOptions& options, const Tensor& state_in,
                                        const Tensor& dstate_out, const Tensor& chunk_states) {
  constexpr const char* op = "chebyshev_solve_backward";
  const ChebyshevDims d = chebyshev_check_inputs(op, q, k, gk, options, state_in);
  chebyshev_check_backward(op, d, q, dx, x, dstate_out);
  if (chunk_states.defined()) {
    PRIMER_CHECK(q.is_cuda(), "{}: chunk_states come from the CUDA forward; the CPU paths recompute them", op);
    const Shape kept{d.heads_total(), d.chunks() + 1, d.dim, d.dim};
    PRIMER_CHECK(chunk_states.dtype() == DType::F32 && chunk_states.is_contiguous() &&
                     chunk_states.device() == q.device() && chunk_states.shape() == kept,
                 "{}: chunk_states must be the forward's, f32 [{}, {}, {}, {}] on {}, got {}", op, d.heads_total(),
                 d.chunks() + 1, d.dim, d.dim, q.device().str(), chunk_states.describe());
  }
  const Tensor dxc = dx.contiguous(), xc = x.contiguous(), kc = k.contiguous(), gc = contiguous_or_null(gk),
               sc = contiguous_or_null(state_in), dsc = contiguous_or_null(dstate_out);
  ChebyshevGrads g;
  g.dq = Tensor::empty(q.shape(), q.dtype(), q.device());
  g.dk = Tensor::empty(k.shape(), k.dtype(), k.device());
  if (gk.defined()) g.dgk = Tensor::empty(gk.shape(), gk.dtype(), gk.device());
  if (state_in.defined()) g.dstate_in = Tensor::empty(state_in.shape(), state_in.dtype(), state_in.device());
  if (q.is_cpu()) {
    dispatch_cpu_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      cpu::chebyshev_solve_backward<T>(d, dxc.data<T>(), xc.data<T>(), kc.data<T>(), ptr<T>(gc), ptr<T>(sc),
                                       ptr<T>(dsc), g.dq.data<T>(), g.dk.data<T>(), ptr<T>(g.dgk), ptr<T>(g.dstate_in));
    });
  } else {
    PRIMER_ON_CUDA(backward_cuda(d, dxc, xc, kc, gc, sc, dsc, chunk_states, g));
  }
  return g;
}

}  // namespace primer::ops
