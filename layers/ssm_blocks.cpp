#include "layers/ssm_blocks.h"

#include <algorithm>

#include "core/autograd/checkpoint.h"
#include "core/autograd/functions.h"
#include "core/autograd/gla.h"
#include "core/check.h"
#include "core/ops/elementwise.h"

namespace primer::layers {

std::array<int64_t, 3> add_qkv_projections(ParameterRegistry& params, const std::string& prefix, const ModelConfig& c) {
  const int64_t hq = c.num_attention_heads, hk = c.num_key_value_heads, heads = std::max(hq, hk), D = c.head_dim;
  PRIMER_CHECK(heads % hq == 0 && heads % hk == 0,
               "{}: num_attention_heads {} and num_key_value_heads {} must divide the larger of the two", prefix, hq,
               hk);
  const std::array<int64_t, 3> channels = {hq * D, hk * D, hk * D};
  const char* names[] = {".q_proj.weight", ".k_proj.weight", ".v_proj.weight"};
  for (int i = 0; i < 3; ++i)
    params.add(prefix + names[i], {channels[size_t(i)], c.hidden_size}, InitRule::normal(c.initializer_range));
  return channels;
}

ag::Var short_conv(const ag::Var& x, const ag::Var& weight, const ag::Var& bias, bool silu, const ag::Var& state_in,
                   ag::Var* state_out, int64_t l2_head_dim, double l2_eps) {
  const Shape& w = weight->value.shape();
  PRIMER_CHECK(w.size() == 3 && w[1] == 1, "short_conv: weight '{}' is {}, expected [C, 1, K]", weight->name,
               weight->value.describe());
  const ag::Var taps = ag::reshape(weight, {w[0], w[2]});
  return l2_head_dim > 0 ? ag::causal_conv1d_l2(x, taps, bias, silu, state_in, state_out, l2_head_dim, l2_eps)
                         : ag::causal_conv1d(x, taps, bias, silu, state_in, state_out);
}

ag::Var conv_heads(const ag::Var& y, const ag::Var& conv_weight, const ag::Var& conv_bias, bool silu_without_conv,
                   int64_t heads, int64_t head_dim, size_t slot, const StateCarry& carry, double l2_eps) {
  // Under A2A the conv runs on the whole sequence for this rank's heads, with their rows of the weight and bias.
  const ag::Var h = carry.to_heads(ag::reshape(y, {y->value.size(0), y->value.size(1), heads, head_dim}));
  const Shape& s = h->value.shape();
  ag::Var out = ag::reshape(h, {s[0], s[1], s[2] * head_dim});
  const bool normed = l2_eps >= 0;
  if (conv_weight)
    return ag::reshape(short_conv(out, carry.own_heads(conv_weight, 0), carry.own_heads(conv_bias, 0), true,
                                  carry.conv_in(slot, out, conv_weight->value.size(2)), carry.conv_out(slot),
                                  normed ? head_dim : 0, l2_eps),
                       s);
  if (silu_without_conv) out = ag::unary(ops::Unary::Silu, out);
  return normed ? l2_normalize(ag::reshape(out, s), l2_eps) : ag::reshape(out, s);
}

ChunkSummary scalar_decay_summary(const ag::Var& k, const ag::Var& v, const ag::Var& g) {
  ag::Var final_state;
  const ag::NothingKept nothing_kept;               // the outputs are not needed, only S_T from zero,
  ag::gla(k, k, v, g, 1.0, nullptr, &final_state);  // so the recompute forms S_T again rather than hold both
  ag::Var log_decay = ag::sum(g, 1);
  if (log_decay->value.dtype() != final_state->value.dtype())
    log_decay = ag::cast(log_decay, final_state->value.dtype());
  return {final_state, log_decay};
}

ag::Var state_readout(const ag::Var& rows, const ag::Var& S) {
  const Shape& r = rows->value.shape();
  const int64_t R = r[0], T = r[1], H = r[2], K = r[3], V = S->value.size(3);
  const DType io = rows->value.dtype(), state = S->value.dtype();
  const ag::Var a = ag::reshape(ag::transpose(io == state ? rows : ag::cast(rows, state), 1, 2), {R * H, T, K});
  const ag::Var y = ag::transpose(ag::reshape(ag::matmul(a, ag::reshape(S, {R * H, K, V})), {R, H, T, V}), 1, 2);
  return io == state ? y : ag::cast(y, io);
}

Tensor identity_states(int64_t R, int64_t H, int64_t K, DType dtype, Device device) {
  // One K×K identity from the host, broadcast over [R, H] on the device (not R·H·K² values built and copied per call).
  std::vector<double> eye(size_t(K * K), 0.0);
  for (int64_t i = 0; i < K; ++i) eye[size_t(i * K + i)] = 1.0;
  return ops::add(Tensor::zeros({R, H, K, K}, dtype, device), Tensor::from_vector(eye, {K, K}, dtype, device));
}

ag::Var linear_state_output(const LinearStateCore& core, const ag::Var& v, const StateCarry& carry, size_t slot) {
  ag::Var from_zero, through_transition;
  const ag::Var s0 = carry.recurrent_in(slot, [&] {
    ChunkSummary summary;
    from_zero = core(v, nullptr, &summary.final_from_zero);
    const Tensor& e = summary.final_from_zero->value;
    const Shape& s = v->value.shape();
    PRIMER_CHECK(s[3] == e.size(2), "linear_state_output: values {} and state {} differ in width (P2P needs K = V)",
                 v->value.describe(), e.describe());
    const Tensor zero_values = Tensor::zeros(s, v->value.dtype(), v->value.device());
    through_transition =
        core(ag::constant(zero_values),
             ag::constant(identity_states(e.size(0), e.size(1), s[3], e.dtype(), e.device())), &summary.transition);
    return summary;
  });
  return from_zero ? ag::add(from_zero, state_readout(through_transition, s0)) : core(v, s0, carry.recurrent_out(slot));
}

ag::Var expand_heads(const ag::Var& x, int64_t groups) {
  PRIMER_CHECK(x->value.dim() == 4, "expand_heads: x is {}, expected [B, T, H, D]", x->value.describe());
  return ag::repeat_interleave(x, 2, groups);
}

ag::Var l2_normalize(const ag::Var& x, double eps) {
  return ag::rmsnorm(x, nullptr, nullptr, ops::NormSpec{eps, ops::NormGate::None, /*l2=*/true});
}

ag::Var gated_rmsnorm(const ag::Var& o, const ag::Var& w, const ag::Var& gate, double eps) {
  return ag::rmsnorm(o, w, gate, ops::NormSpec{eps, ops::NormGate::After});
}

ag::Var norm_gate_project(const ag::Var& o, const ag::Var& x, const ag::Var& o_norm, const ag::Var* g_proj,
                          const ag::Var& o_proj, double eps) {
  const Shape& s = o->value.shape();
  const int64_t B = s[0], T = s[1], H = s[2], D = s[3];
  const ag::Var y = g_proj ? gated_rmsnorm(o, o_norm, ag::reshape(ag::linear(x, *g_proj), {B, T, H, D}), eps)
                           : ag::rmsnorm(o, o_norm, eps);
  return ag::linear_kept(ag::reshape(y, {B, T, H * D}), o_proj);
}

}  // namespace primer::layers
