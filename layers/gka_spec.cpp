#include "layers/gka_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& gka_spec() {
  using C = GkaConfig;
  constexpr auto gka = &ModelConfig::gka;
  static const MixerSpec spec{
      .kind = MixerKind::GatedKalmaNet,
      .token = "GKA",
      .module = "gka",
      .is_ssm = true,
      .summary = "Gated KalmaNet (ridge-regression readout by Chebyshev iterations)",
      .json_block = "gka_config",
      .recipe_section = "gka",
      .fields =
          {
              field(gka, "use_alpha_connection", &C::use_alpha_connection,
                    "Blend the solve with the query: q + σ(alpha_proj x)·(x̂ − q) (α-connection)"),
              field(gka, "use_v_conv", &C::use_v_conv, "Short convolution (and SiLU) on v as on q and k"),
              field(gka, "use_forgetting_gate", &C::use_forgetting_gate,
                    "Decay the states: g = −exp(A_log)·softplus(a_proj x + dt_bias)"),
              field(gka, "gla_rescale", &C::gla_rescale, "Readout scale head_dim^-1/2 (else 1)"),
              field(gka, "bp_lambda", &C::bp_lambda,
                    "Backpropagate through the adaptive ridge λ_t = ridge_strength·‖H_t‖_F"),
              field(gka, "num_iter", &C::num_iter, "Chebyshev iterations per token (the test-time compute knob)"),
              field(gka, "ridge_strength", &C::ridge_strength, "λ_t / ‖H_t‖_F (condition number ≤ (1 + r)/r)"),
              field(gka, "precise_iterate", &C::precise_iterate,
                    "CUDA, bf16: the precise mode, the Chebyshev iterate as hi + lo bf16 tensor-core operands and the "
                    "solve's vectors kept in f32 (else one bf16 each: faster, but its rounding is amplified by up to "
                    "the condition number)"),
              field(gka, "iterate_fp16", &C::iterate_fp16,
                    "CUDA (Hopper), bf16, precise mode: the Chebyshev iteration's operands in fp16, one each (H_0 as a "
                    "pair), instead of bf16 hi + lo pairs: the layer ~12% faster, but its 2^-12 roundings, amplified "
                    "by up to the condition number, leave the gates' gradients up to 8e-2 off f64 (3.6e-2 without)"),
              field(gka, "use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"),
              field(gka, "conv_size", &C::conv_size, "Short convolution taps"),
              field(gka, "norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"),
              field(gka, "use_forgetting_gate_kk", &C::use_forgetting_gate_kk,
                    "Decay the key covariance H with the same gate"),
              field(gka, "use_beta_gate", &C::use_beta_gate,
                    "Scale k and v by σ(b_proj x) + 1e-6 (the Priming paper's β)"),
              field(gka, "chunk_size", &C::chunk_size, "Chunk length of the chunked kernels"),
              field(gka, "kv_proj_rank", &C::kv_proj_rank,
                    "Adaptive GQA rank of the K/V expansion; unset: plain GQA repetition", 1),
              field(gka, "kv_learnable_residual", &C::kv_learnable_residual,
                    "Adaptive GQA: learn the residual replication matrix"),
          },
      .read_json_extra =
          [](const json::Node& block, ModelConfig& c) {
            check_mixer_heads(block, c);
            if (const auto solver = block.find("solver_type"); solver && solver->as_string() != "chebyshev")
              solver->fail(
                  fmt::format("is '{}', expected chebyshev (the only solver of the reference)", solver->as_string()));
          },
      .write_json_extra =
          [](const ModelConfig& c, json::Value& block) {
            write_mixer_heads(c, block);
            block["solver_type"] = "chebyshev";
            block["conv_bias"] = false;
          },
      .make = [](const ModelConfig& c, const std::string& prefix,
                 ParameterRegistry& params) { return std::unique_ptr<SequenceMixer>(new GkaMixer(c, prefix, params)); },
  };
  return spec;
}

}  // namespace primer::layers
