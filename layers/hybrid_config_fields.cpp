#include "layers/hybrid_config_fields.h"

namespace primer {

const std::vector<ConfigField<GkaConfig>>& gka_fields() {
  using C = GkaConfig;
  static const std::vector<ConfigField<C>> fields = {
      {"use_alpha_connection", &C::use_alpha_connection,
       "Blend the solve with the query: q + σ(alpha_proj x)·(x̂ − q) (α-connection)"},
      {"use_v_conv", &C::use_v_conv, "Short convolution (and SiLU) on v as on q and k"},
      {"use_forgetting_gate", &C::use_forgetting_gate, "Decay the states: g = −exp(A_log)·softplus(a_proj x + dt_bias)"},
      {"gla_rescale", &C::gla_rescale, "Readout scale head_dim^-1/2 (else 1)"},
      {"bp_lambda", &C::bp_lambda, "Backpropagate through the adaptive ridge λ_t = ridge_strength·‖H_t‖_F"},
      {"num_iter", &C::num_iter, "Chebyshev iterations per token (the test-time compute knob)"},
      {"ridge_strength", &C::ridge_strength, "λ_t / ‖H_t‖_F (condition number ≤ (1 + r)/r)"},
      {"use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"},
      {"conv_size", &C::conv_size, "Short convolution taps"},
      {"norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"},
      {"use_forgetting_gate_kk", &C::use_forgetting_gate_kk, "Decay the key covariance H with the same gate"},
      {"use_beta_gate", &C::use_beta_gate, "Scale k and v by σ(b_proj x) + 1e-6 (the Priming paper's β)"},
      {"chunk_size", &C::chunk_size, "Chunk length of the chunked kernels"},
      {"kv_learnable_residual", &C::kv_learnable_residual, "Adaptive GQA: learn the residual replication matrix"},
  };
  return fields;
}

const std::vector<ConfigField<GdnConfig>>& gdn_fields() {
  using C = GdnConfig;
  static const std::vector<ConfigField<C>> fields = {
      {"use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"},
      {"use_short_conv", &C::use_short_conv, "Short convolutions (and SiLU) on q, k and v"},
      {"allow_neg_eigval", &C::allow_neg_eigval, "β = 2σ(b_proj x) ∈ (0, 2): negative eigenvalues of the transition"},
      {"conv_size", &C::conv_size, "Short convolution taps"},
      {"conv_bias", &C::conv_bias, "Bias on the short convolutions"},
      {"norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"},
      {"kv_learnable_residual", &C::kv_learnable_residual, "Adaptive GQA: learn the residual replication matrix"},
  };
  return fields;
}

const std::vector<ConfigField<Mamba2Config>>& mamba2_fields() {
  using C = Mamba2Config;
  static const std::vector<ConfigField<C>> fields = {
      {"use_qk_norm", &C::use_qk_norm, "Per-head RMSNorm of B (keys) and C (queries), initialised from QK-norm"},
      {"use_pos_emb", &C::use_pos_emb, "RoPE on B and C"},
  };
  return fields;
}

}  // namespace primer
