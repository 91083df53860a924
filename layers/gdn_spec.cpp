#include "layers/gdn_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& gdn_spec() {
  using C = GdnConfig;
  constexpr auto gdn = &ModelConfig::gdn;
  static const MixerSpec spec{
      .kind = MixerKind::GatedDeltaNet,
      .token = "GDN",
      .module = "gdn",
      .is_ssm = true,
      .summary = "Gated DeltaNet (delta rule with a scalar decay per head)",
      .json_block = "gdn_config",
      .recipe_section = "gdn",
      .fields =
          {
              field(gdn, "use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"),
              field(gdn, "use_short_conv", &C::use_short_conv, "Short convolutions (and SiLU) on q, k and v"),
              field(gdn, "allow_neg_eigval", &C::allow_neg_eigval,
                    "β = 2σ(b_proj x) ∈ (0, 2): negative eigenvalues of the transition"),
              field(gdn, "conv_size", &C::conv_size, "Short convolution taps"),
              field(gdn, "conv_bias", &C::conv_bias, "Bias on the short convolutions"),
              field(gdn, "norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"),
              field(gdn, "kv_proj_rank", &C::kv_proj_rank,
                    "Adaptive GQA rank of the K/V expansion; unset: plain GQA repetition", 1),
              field(gdn, "kv_learnable_residual", &C::kv_learnable_residual,
                    "Adaptive GQA: learn the residual replication matrix"),
          },
      .read_json_extra = [](const json::Node& block, ModelConfig& c) { check_mixer_heads(block, c); },
      .write_json_extra = [](const ModelConfig& c, json::Value& block) { write_mixer_heads(c, block); },
      .make = [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
        return std::unique_ptr<SequenceMixer>(new GdnMixer(c, prefix, params));
      },
  };
  return spec;
}

}  // namespace primer::layers
