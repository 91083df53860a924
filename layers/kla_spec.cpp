#include "layers/kla_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& kla_spec() {
  using C = KlaConfig;
  constexpr auto kla = &ModelConfig::kla;
  static const MixerSpec spec{
      .kind = MixerKind::KalmanLinearAttention,
      .token = "KLA",
      .module = "kla",
      .is_ssm = true,
      .summary = "Kalman linear attention (per-element Kalman filters in information form)",
      .json_block = "kla_config",
      .recipe_section = "kla",
      .fields =
          {
              field(kla, "use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"),
              field(kla, "use_short_conv", &C::use_short_conv, "Short convolutions (and SiLU) on q, k and v"),
              field(kla, "conv_size", &C::conv_size, "Short convolution taps"),
              field(kla, "min_precision", &C::min_precision, "Value precision Λᵛ = softplus(lv_proj x) + this"),
              field(kla, "process_noise_init", &C::process_noise_init,
                    "Initial process noise p (OU σ): p̄ = p²(1 − ā²)/(2a)"),
              field(kla, "norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"),
          },
      .read_json_extra = [](const json::Node& block, ModelConfig& c) { check_mixer_heads(block, c); },
      .write_json_extra = [](const ModelConfig& c, json::Value& block) { write_mixer_heads(c, block); },
      .make = [](const ModelConfig& c, const std::string& prefix,
                 ParameterRegistry& params) { return std::unique_ptr<SequenceMixer>(new KlaMixer(c, prefix, params)); },
  };
  return spec;
}

}  // namespace primer::layers
