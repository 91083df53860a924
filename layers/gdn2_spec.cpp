#include "layers/gdn2_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& gdn2_spec() {
  using C = Gdn2Config;
  constexpr auto gdn2 = &ModelConfig::gdn2;
  static const MixerSpec spec{
      .kind = MixerKind::GatedDeltaNet2,
      .token = "GDN2",
      .module = "gdn2",
      .is_ssm = true,
      .summary =
          "Gated DeltaNet-2 (channel-wise decay, erase gate on keys, write gate on values; or KDA's one gate per head)",
      .json_block = "gdn2_config",
      .recipe_section = "gdn2",
      .fields =
          {
              field(gdn2, "use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"),
              field(gdn2, "use_short_conv", &C::use_short_conv, "Short convolutions (and SiLU) on q, k and v"),
              field(gdn2, "allow_neg_eigval", &C::allow_neg_eigval,
                    "Erase gate b = 2σ(b_proj x) ∈ (0, 2): negative eigenvalues of the transition"),
              field(gdn2, "kda_gates", &C::kda_gates,
                    "Kimi Delta Attention: one gate per head for erase and write, b = w = σ(b_proj x), b_proj [H, d]"),
              field(gdn2, "conv_size", &C::conv_size, "Short convolution taps"),
              field(gdn2, "conv_bias", &C::conv_bias, "Bias on the short convolutions"),
              field(gdn2, "norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"),
          },
      .read_json_extra = [](const json::Node& block, ModelConfig& c) { check_mixer_heads(block, c); },
      .write_json_extra = [](const ModelConfig& c, json::Value& block) { write_mixer_heads(c, block); },
      .make =
          [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
            return std::unique_ptr<SequenceMixer>(new Gdn2Mixer(c, prefix, params));
          },
  };
  return spec;
}

}  // namespace primer::layers
