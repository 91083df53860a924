#include "core/autograd/functions.h"

#include "core/autograd/checkpoint.h"
#include "core/check.h"
#include "core/ops/conv1d.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/reduce.h"
#include "core/ops/repeat_interleave.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rmsnorm_rope.h"
#include "core/ops/rope.h"
#include "core/ops/scale_heads.h"
#include "core/ops/sigmoid_gate.h"
#include "core/ops/ssm_decay.h"
#include "core/ops/softmax.h"
#include "core/ops/swiglu.h"

namespace primer::ag {
namespace {
Var output(const Tensor& value) { return constant(value); }

// The gradient x already holds, where a backward can add it in its own pass (a GEMM's epilogue, scale_heads) instead
// of accumulate_grad's separate sum: an activation's, in x's dtype and the incoming gradient's; else undefined.
Tensor addend_for(const Var& x, DType incoming) {
  const bool usable = x->requires_grad && !x->accumulates && x->grad.defined() && x->grad.dtype() == x->value.dtype() &&
                      incoming == x->value.dtype();
  return usable ? x->grad : Tensor();
}

// dx from a backward handed `addend` (addend_for): the new sum replaces x's gradient — a new tensor, as
// accumulate_grad's sum is; without an addend dx accumulates as usual.
void take_gradient(const Var& x, const Tensor& dx, const Tensor& addend) {
  if (addend.defined())
    x->grad = dx;
  else
    accumulate_grad(x, dx);
}
}  // namespace

Var add(const Var& a, const Var& b) {
  Var y = output(ops::add(a->value, b->value));
  if (needs_grad({&a, &b}))
    record("add", {y}, [a, b, y] {
      accumulate_grad(a, ops::sum_to_shape(y->grad, a->value.shape()));
      accumulate_grad(b, ops::sum_to_shape(y->grad, b->value.shape()));
    });
  return y;
}

Var mul(const Var& a, const Var& b) {
  Var y = output(ops::mul(a->value, b->value));
  if (needs_grad({&a, &b}))
    record("mul", {y}, [a, b, y] {
      if (a->requires_grad) accumulate_grad(a, ops::sum_to_shape(ops::mul(y->grad, b->value), a->value.shape()));
      if (b->requires_grad) accumulate_grad(b, ops::sum_to_shape(ops::mul(y->grad, a->value), b->value.shape()));
    });
  return y;
}

Var repeat_interleave(const Var& x, int dim, int64_t repeats) {
  const Tensor value = ops::repeat_interleave(x->value, dim, repeats);  // (validates dim and repeats)
  if (repeats == 1) return x;
  Var y = output(value);
  if (needs_grad({&x}))
    record("repeat_interleave", {y}, [x, y, dim, repeats] {
      // The copies' gradients summed (no product with the ones, as mul's backward would make).
      accumulate_grad(x, ops::sum_repeats(y->grad, dim, repeats));
    });
  return y;
}

Var scale_heads(const Var& x, const Var& s, const Var& base, int64_t heads, const ops::ScaleHeadsOptions& options) {
  Var y = output(ops::scale_heads(x->value, s->value, base ? base->value : Tensor(), heads, options));
  const bool lerp = options.base == ops::HeadBase::Lerp;
  if (needs_grad({&x, &s, &base}))
    // What reaches y by a second path (GKA's k: the solve's and the readout's gradients) is added as dout is read.
    record_summing("scale_heads", {y}, [x, s, base, y, lerp] {
      const Tensor part = take_grad_part(y);
      if (base && !lerp) {
        accumulate_grad(base, y->grad);
        accumulate_grad(base, part);  // (a no-op when undefined)
      }
      if (!x->requires_grad && !s->requires_grad && !lerp) return;
      // A gradient x already holds (its other use: Mamba-2's value and skip) is summed in the same pass.
      const Tensor addend = addend_for(x, x->value.dtype());
      const ops::ScaleHeadsGrads g =
          ops::scale_heads_backward(y->grad, x->value, s->value, addend, lerp ? base->value : Tensor(), part);
      take_gradient(x, g.dx, addend);
      accumulate_grad(s, g.ds);
      if (lerp) accumulate_grad(base, g.dbase);
    });
  return y;
}

Var ssm_decay(const Var& a, const Var& A_log, const Var& dt_bias, Var* delta) {
  Tensor step;
  Var g = output(ops::ssm_decay(a->value, A_log->value, dt_bias->value, delta ? &step : nullptr));
  const Var d = delta ? output(step) : nullptr;
  if (delta) *delta = d;
  if (needs_grad({&a, &A_log, &dt_bias})) {
    std::vector<Var> outs{g};
    if (d) outs.push_back(d);
    record("ssm_decay", outs, [a, A_log, dt_bias, g, d] {
      const ops::SsmDecayGrads grads =
          ops::ssm_decay_backward(g->grad, d ? d->grad : Tensor(), a->value, A_log->value, dt_bias->value);
      accumulate_grad(a, grads.da);
      accumulate_grad(A_log, grads.dA_log);
      accumulate_grad(dt_bias, grads.ddt_bias);
    });
  }
  return g;
}

Var scale(const Var& a, double s) {
  Var y = output(ops::scale(a->value, s));
  if (needs_grad({&a})) record("scale", {y}, [a, y, s] { accumulate_grad(a, ops::scale(y->grad, s)); });
  return y;
}

Var sigmoid_gate(const Var& a, const Var& bias, double offset) {
  Var y = output(ops::sigmoid_gate(a->value, bias ? bias->value : Tensor(), offset));
  if (needs_grad({&a, &bias}))
    record("sigmoid_gate", {y}, [a, bias, y] {
      ops::SigmoidGateGrads grads = ops::sigmoid_gate_backward(y->grad, a->value, bias ? bias->value : Tensor());
      accumulate_grad(a, grads.da);
      if (bias) accumulate_grad(bias, grads.dbias);
    });
  return y;
}

Var unary(ops::Unary op, const Var& x) {
  Var y = output(ops::unary(op, x->value));
  if (needs_grad({&x}))
    record("unary", {y}, [op, x, y] { accumulate_grad(x, ops::unary_backward(op, x->value, y->grad)); });
  return y;
}

Var reshape(const Var& x, const Shape& shape) {
  Var y = output(x->value.reshape(shape));
  if (needs_grad({&x})) record("reshape", {y}, [x, y] { accumulate_grad(x, y->grad.reshape(x->value.shape())); });
  return y;
}

Var transpose(const Var& x, int d0, int d1) {
  Var y = output(x->value.transpose(d0, d1).contiguous());
  if (needs_grad({&x}))
    record("transpose", {y}, [x, y, d0, d1] { accumulate_grad(x, y->grad.transpose(d0, d1).contiguous()); });
  return y;
}

Var matmul(const Var& a, const Var& b) {
  PRIMER_CHECK(a->value.dim() == 3 && b->value.dim() == 3 && a->value.size(0) == b->value.size(0) &&
                   a->value.size(2) == b->value.size(1),
               "matmul: expected [N, M, K] @ [N, K, P], got {} @ {}", a->value.describe(), b->value.describe());
  Var y = output(ops::matmul(a->value, b->value));
  if (needs_grad({&a, &b}))
    record("matmul", {y}, [a, b, y] {
      if (a->requires_grad) accumulate_grad(a, ops::matmul(y->grad, b->value, false, true));
      if (b->requires_grad) accumulate_grad(b, ops::matmul(a->value, y->grad, true, false));
    });
  return y;
}

Var sum(const Var& x, int dim) {
  const int d = dim < 0 ? dim + x->value.dim() : dim;
  Var y = output(ops::sum(x->value, d));
  if (needs_grad({&x}))
    record("sum", {y}, [x, y, d] {
      const Tensor zeros = Tensor::zeros(x->value.shape(), y->grad.dtype(), y->grad.device());
      accumulate_grad(x, ops::add(zeros, y->grad.contiguous().unsqueeze(d)));
    });
  return y;
}

Var cast(const Var& x, DType dtype) {
  Var y = output(x->value.to(dtype));
  // Where y's gradient arrives by two paths (GKA's f32 query: the solve's and the readout mix's), their sum is formed
  // in the cast's pass, rounded once as before.
  if (needs_grad({&x}))
    record_summing("cast", {y}, [x, y] {
      const Tensor part = take_grad_part(y);
      const DType to = x->value.dtype();
      accumulate_grad(x, part.defined() ? ops::add(y->grad, part, to) : y->grad.to(to));
    });
  return y;
}

namespace {
// y = x @ W[begin:end]^T; with `kept`, y's value is kept across a checkpointed block's recompute.
Var linear_block(const Var& x, const Var& W, int64_t begin, int64_t end, bool kept) {
  PRIMER_CHECK(W->value.dim() == 2 && 0 <= begin && begin < end && end <= W->value.size(0),
               "linear_rows: rows [{}, {}) of weight '{}' {}", begin, end, W->name, W->value.describe());
  const bool whole = begin == 0 && end == W->value.size(0);
  // A contiguous row block, taken again in backward: W's storage may be regathered in between (ZeRO-3).
  const auto block = [W, whole, begin, end] { return whole ? W->value : W->value.slice(0, begin, end); };
  Var y = output(kept ? kept_across_recompute("linear_kept",
                                              [&] { return std::vector<Tensor>{ops::linear(x->value, block())}; })[0]
                      : ops::linear(x->value, block()));
  if (needs_grad({&x, &W}))
    record("linear", {y}, [x, W, y, block, whole, begin, end] {
      // When x already holds a gradient (a second projection of the same input), the GEMM adds it in its epilogue.
      const Tensor addend = addend_for(x, y->grad.dtype());
      const Tensor dW = !W->requires_grad ? Tensor()
                        : whole           ? grad_accumulator(W)
                                          : grad_accumulator(W).slice(0, begin, end);
      Tensor dx;
      ops::linear_backward(y->grad, x->value, block(), x->requires_grad ? &dx : nullptr, dW, addend);
      take_gradient(x, dx, addend);
    });
  return y;
}
}  // namespace

Var linear(const Var& x, const Var& W) { return linear_block(x, W, 0, W->value.size(0), false); }

Var linear_kept(const Var& x, const Var& W) { return linear_block(x, W, 0, W->value.size(0), true); }

Var linear_rows(const Var& x, const Var& W, int64_t begin, int64_t end) {
  return linear_block(x, W, begin, end, false);
}

std::vector<Var> linear_joined(const Var& x, const std::vector<Var>& weights) {
  PRIMER_CHECK(!weights.empty(), "linear_joined: no weights");
  const int64_t in = x->value.size(-1);
  std::vector<int64_t> rows;
  int64_t total = 0;
  for (const Var& W : weights) {
    PRIMER_CHECK(W->value.dim() == 2 && W->value.size(1) == in && W->value.dtype() == weights[0]->value.dtype(),
                 "linear_joined: weight '{}' {} for x {}, expected [rows, {}] of one dtype", W->name,
                 W->value.describe(), x->value.describe(), in);
    rows.push_back(W->value.size(0));
    total += W->value.size(0);
  }
  if (weights.size() == 1) return {linear(x, weights[0])};
  // Joined again in backward: the weights' storage may be regathered in between (ZeRO-3).
  const auto joined = [weights, total, in] {
    const Tensor& first = weights[0]->value;
    Tensor w = Tensor::empty({total, in}, first.dtype(), first.device());
    int64_t at = 0;
    for (const Var& W : weights) {
      w.slice(0, at, at + W->value.size(0)).copy_from(W->value);
      at += W->value.size(0);
    }
    return w;
  };
  const Tensor y = ops::linear(x->value, joined());
  const int last = y.dim() - 1;
  std::vector<Var> outs;
  int64_t at = 0;
  for (const int64_t n : rows) {
    outs.push_back(output(y.slice(last, at, at + n).contiguous()));
    at += n;
  }
  bool wanted = needs_grad({&x});
  for (const Var& W : weights) wanted |= needs_grad({&W});
  if (wanted)
    record("linear_joined", outs, [x, weights, outs, rows, total, in, last, joined] {
      Shape dy_shape = x->value.shape();
      dy_shape.back() = total;
      Tensor dy = Tensor::empty(dy_shape, outs[0]->value.dtype(), x->value.device());
      int64_t at = 0;
      for (size_t i = 0; i < outs.size(); ++i) {
        dy.slice(last, at, at + rows[i]).copy_from(grad_or_zeros(outs[i]));
        at += rows[i];
      }
      bool want_dw = false;
      for (const Var& W : weights) want_dw |= W->requires_grad;
      const DType w_dtype = weights[0]->value.dtype();
      const Tensor dW =
          want_dw ? Tensor::zeros({total, in}, w_dtype == DType::F64 ? DType::F64 : DType::F32, x->value.device())
                  : Tensor();
      // As linear_rows: a gradient x already holds is summed in the GEMM's epilogue.
      const Tensor addend = addend_for(x, dy.dtype());
      Tensor dx;
      ops::linear_backward(dy, x->value, joined(), x->requires_grad ? &dx : nullptr, dW, addend);
      take_gradient(x, dx, addend);
      at = 0;
      for (size_t i = 0; i < weights.size(); ++i) {
        if (weights[i]->requires_grad) accumulate_grad(weights[i], dW.slice(0, at, at + rows[i]));
        at += rows[i];
      }
    });
  return outs;
}

Var rmsnorm(const Var& x, const Var& w, double eps) { return rmsnorm(x, w, nullptr, ops::NormSpec{eps}); }

Var rmsnorm(const Var& x, const Var& w, const Var& z, const ops::NormSpec& spec) {
  Tensor rstd;
  const Tensor w_value = w ? w->value : Tensor(), z_value = z ? z->value : Tensor();
  Var y = output(ops::rmsnorm(x->value, w_value, z_value, spec, &rstd));
  if (needs_grad({&x, &w, &z}))
    record("rmsnorm", {y}, [x, w, z, y, w_value, z_value, rstd, spec] {
      const Tensor dw = w ? grad_accumulator_or_scratch(w) : Tensor();
      const ops::NormGrads g = ops::rmsnorm_backward(y->grad, x->value, w_value, z_value, rstd, spec, dw);
      accumulate_grad(x, g.dx);
      if (z) accumulate_grad(z, g.dz);
    });
  return y;
}

Var rope(const Var& x, const Tensor& positions, const Tensor& inv_freq) {
  Var y = output(ops::rope(x->value, positions, inv_freq));
  if (needs_grad({&x}))
    record("rope", {y},
           [x, y, positions, inv_freq] { accumulate_grad(x, ops::rope_backward(y->grad, positions, inv_freq)); });
  return y;
}

Var rmsnorm_rope(const Var& x, const Var& w, double eps, const Tensor& positions, const Tensor& inv_freq) {
  Tensor rstd;
  Var y = output(ops::rmsnorm_rope(x->value, w->value, eps, positions, inv_freq, &rstd));
  if (needs_grad({&x, &w}))
    record("rmsnorm_rope", {y}, [x, w, y, rstd, positions, inv_freq] {
      accumulate_grad(x, ops::rmsnorm_rope_backward(y->grad, x->value, w->value, rstd, positions, inv_freq,
                                                    grad_accumulator_or_scratch(w)));
    });
  return y;
}

Var swiglu(const Var& gate, const Var& up) {
  Var y = output(ops::swiglu(gate->value, up->value));
  if (needs_grad({&gate, &up}))
    record("swiglu", {y}, [gate, up, y] {
      Tensor dg, du;
      ops::swiglu_backward(y->grad, gate->value, up->value, &dg, &du);
      accumulate_grad(gate, dg);
      accumulate_grad(up, du);
    });
  return y;
}

Var embedding(const Var& weight, const Tensor& ids) {
  Var y = output(ops::embedding(weight->value, ids));
  if (needs_grad({&weight}))
    record("embedding", {y}, [weight, y, ids] { ops::embedding_backward(y->grad, ids, grad_accumulator(weight)); });
  return y;
}

Var causal_conv1d(const Var& x, const Var& w, const Var& bias, bool silu) {
  return causal_conv1d(x, w, bias, silu, nullptr, nullptr);
}

namespace {
// The conv's gradients from dy (the gradient at its output) and dso (at its final state; may be undefined).
void conv_backward(const Tensor& dy, const Var& x, const Var& w, const Var& bias, bool silu, const Var& state_in,
                   const Tensor& dso) {
  const Tensor dw = grad_accumulator_or_scratch(w);
  const Tensor db = bias && bias->requires_grad ? grad_accumulator(bias) : Tensor();
  const Tensor b = bias ? bias->value : Tensor(), s = state_in ? state_in->value : Tensor();
  Tensor ds;
  const bool want_ds = state_in && state_in->requires_grad;
  accumulate_grad(
      x, ops::causal_conv1d_backward(dy, x->value, w->value, b, silu, s, dso, dw, db, want_ds ? &ds : nullptr));
  if (want_ds) accumulate_grad(state_in, ds);
}
}  // namespace

Var causal_conv1d(const Var& x, const Var& w, const Var& bias, bool silu, const Var& state_in, Var* state_out) {
  const Tensor b = bias ? bias->value : Tensor();
  const Tensor s = state_in ? state_in->value : Tensor();
  Tensor st;
  Var y = output(ops::causal_conv1d(x->value, w->value, b, silu, s, state_out ? &st : nullptr));
  Var so = state_out ? output(st) : nullptr;
  if (state_out) *state_out = so;
  if (needs_grad({&x, &w, &bias, &state_in})) {
    std::vector<Var> outs{y};
    if (so) outs.push_back(so);
    record("causal_conv1d", outs, [x, w, bias, y, so, state_in, silu] {
      conv_backward(grad_or_zeros(y), x, w, bias, silu, state_in, so ? so->grad : Tensor());
    });
  }
  return y;
}

Var causal_conv1d_l2(const Var& x, const Var& w, const Var& bias, bool silu, const Var& state_in, Var* state_out,
                     int64_t head_dim, double eps) {
  const Tensor b = bias ? bias->value : Tensor();
  const Tensor s = state_in ? state_in->value : Tensor();
  Tensor st, rstd;
  Var y =
      output(ops::causal_conv1d_l2(x->value, w->value, b, silu, s, state_out ? &st : nullptr, head_dim, eps, &rstd));
  Var so = state_out ? output(st) : nullptr;
  if (state_out) *state_out = so;
  if (needs_grad({&x, &w, &bias, &state_in})) {
    std::vector<Var> outs{y};
    if (so) outs.push_back(so);
    record("causal_conv1d_l2", outs, [x, w, bias, y, so, state_in, silu, head_dim, eps, rstd] {
      const Shape& shape = y->value.shape();
      const Shape heads{shape[0], shape[1], shape[2] / head_dim, head_dim};
      ops::NormSpec spec{eps, ops::NormGate::None, true};
      spec.from_output = true;
      const Tensor dy = ops::rmsnorm_backward(grad_or_zeros(y).contiguous().view(heads), y->value.view(heads), Tensor(),
                                              Tensor(), rstd, spec, Tensor())
                            .dx;
      conv_backward(dy.view(shape), x, w, bias, silu, state_in, so ? so->grad : Tensor());
    });
  }
  return y;
}

std::vector<Var> causal_conv1d_parts(const std::vector<Var>& parts, const Var& w, const Var& bias, bool silu,
                                     const Var& state_in, Var* state_out) {
  PRIMER_CHECK(!parts.empty() && w->value.dim() == 2, "causal_conv1d_parts: {} parts with weight {}", parts.size(),
               w->value.describe());
  std::vector<int64_t> offsets, widths;  // each part's first channel and channel count
  int64_t channels = 0;
  for (const Var& p : parts) {
    PRIMER_CHECK(p->value.dim() == 3, "causal_conv1d_parts: part {} is {}, expected [B, T, C]", offsets.size(),
                 p->value.describe());
    offsets.push_back(channels);
    widths.push_back(p->value.size(2));
    channels += p->value.size(2);
  }
  PRIMER_CHECK(channels == w->value.size(0), "causal_conv1d_parts: parts of {} channels in all for weight {}", channels,
               w->value.describe());
  // Part i's rows of a [C, ...] tensor (weights) or channels of a [B, C, K-1] one (states): views, no copies.
  auto rows = [offsets, widths](const Tensor& t, size_t i) {
    return t.defined() ? t.slice(0, offsets[i], offsets[i] + widths[i]) : Tensor();
  };
  auto state_channels = [offsets, widths](const Tensor& t, size_t i) {
    return t.defined() ? t.slice(1, offsets[i], offsets[i] + widths[i]) : Tensor();
  };
  const Tensor b = bias ? bias->value : Tensor(), s = state_in ? state_in->value : Tensor();
  std::vector<Var> ys;
  Tensor joined_state;
  for (size_t i = 0; i < parts.size(); ++i) {
    Tensor part_state;
    ys.push_back(output(ops::causal_conv1d(parts[i]->value, rows(w->value, i), rows(b, i), silu, state_channels(s, i),
                                           state_out ? &part_state : nullptr)));
    if (!state_out) continue;
    if (!joined_state.defined())
      joined_state =
          Tensor::empty({part_state.size(0), channels, part_state.size(2)}, part_state.dtype(), part_state.device());
    state_channels(joined_state, i).copy_from(part_state);
  }
  const Var so = state_out ? output(joined_state) : nullptr;
  if (state_out) *state_out = so;
  std::vector<const Var*> inputs{&w, &bias, &state_in};
  for (const Var& p : parts) inputs.push_back(&p);
  bool wanted = false;
  for (const Var* v : inputs) wanted |= needs_grad({v});
  if (wanted) {
    std::vector<Var> outs = ys;
    if (so) outs.push_back(so);
    record("causal_conv1d_parts", outs, [parts, w, bias, b, s, ys, so, state_in, silu, rows, state_channels] {
      const Tensor dw = grad_accumulator_or_scratch(w);
      const Tensor db = bias && bias->requires_grad ? grad_accumulator(bias) : Tensor();
      const Tensor dso = so ? so->grad : Tensor();
      const bool want_ds = state_in && state_in->requires_grad;
      const Tensor ds = want_ds ? Tensor::empty(s.shape(), s.dtype(), s.device()) : Tensor();
      for (size_t i = 0; i < parts.size(); ++i) {
        Tensor part_ds;
        accumulate_grad(
            parts[i], ops::causal_conv1d_backward(grad_or_zeros(ys[i]), parts[i]->value, rows(w->value, i), rows(b, i),
                                                  silu, state_channels(s, i), state_channels(dso, i), rows(dw, i),
                                                  rows(db, i), want_ds ? &part_ds : nullptr));
        if (want_ds) state_channels(ds, i).copy_from(part_ds);
      }
      if (want_ds) accumulate_grad(state_in, ds);
    });
  }
  return ys;
}

Var mse_loss(const Var& a, const Tensor& target) {
  PRIMER_CHECK(target.shape() == a->value.shape() && target.dtype() == a->value.dtype(),
               "mse_loss: target {} must match the prediction '{}' {}", target.describe(), a->name,
               a->value.describe());
  const Tensor diff = ops::sub(a->value, target);
  const double inv_n = 1.0 / double(diff.numel());
  Var y = output(ops::scale(ops::sumsq_all(diff), inv_n));
  if (needs_grad({&a}))
    record("mse_loss", {y}, [a, y, diff, inv_n] {
      accumulate_grad(a, ops::scale(ops::mul(diff, y->grad.to(diff.dtype())), 2.0 * inv_n));
    });
  return y;
}

Var softmax(const Var& x) {
  Var y = output(ops::softmax(x->value));
  if (needs_grad({&x}))
    record("softmax", {y}, [x, y] { accumulate_grad(x, ops::softmax_backward(y->value, y->grad)); });
  return y;
}

Var attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options) {
  // A checkpointed block's recompute is handed the first forward's output and log-sum-exp.
  const std::vector<Tensor> results = kept_across_recompute("attention", [&] {
    Tensor lse;
    Tensor out = ops::attention(q->value, k->value, v->value, options, &lse);
    return std::vector<Tensor>{out, lse};
  });
  const Tensor lse = results[1];
  Var out = output(results[0]);
  if (needs_grad({&q, &k, &v}))
    record("attention", {out}, [q, k, v, out, lse, options] {
      Tensor dq, dk, dv;
      ops::attention_backward(out->grad, q->value, k->value, v->value, out->value, lse, options, &dq, &dk, &dv);
      accumulate_grad(q, dq);
      accumulate_grad(k, dk);
      accumulate_grad(v, dv);
    });
  return out;
}

Var fused_linear_cross_entropy(const Var& x, const Var& W, const Tensor& targets, int64_t ignore_index,
                               double grad_scale) {
  const bool grad = needs_grad({&x, &W});
  Tensor dx;
  const Tensor dW = grad && W->requires_grad ? grad_accumulator(W) : Tensor();
  Var loss = output(ops::fused_linear_cross_entropy(x->value, W->value, targets, ignore_index, grad_scale,
                                                    grad && x->requires_grad ? &dx : nullptr, dW));
  if (grad) record("fused_linear_cross_entropy", {loss}, [x, dx] { accumulate_grad(x, dx); });
  return loss;
}

}  // namespace primer::ag
