#include "layers/gdn_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

namespace {

// The options of the delta-rule layers (GDN, KZLA), bound to their block of ModelConfig.
std::vector<MixerField> delta_rule_fields(GdnConfig ModelConfig::*block) {
  using C = GdnConfig;
  return {
      field(block, "use_gate", &C::use_gate, "Output gate silu(g_proj x) after the per-head output RMSNorm"),
      field(block, "use_short_conv", &C::use_short_conv, "Short convolutions (and SiLU) on q, k and v"),
      field(block, "allow_neg_eigval", &C::allow_neg_eigval,
            "β (GDN) or η (KZLA) = 2σ(b_proj x) ∈ (0, 2): negative eigenvalues of the transition"),
      field(block, "conv_size", &C::conv_size, "Short convolution taps"),
      field(block, "conv_bias", &C::conv_bias, "Bias on the short convolutions"),
      field(block, "norm_eps", &C::norm_eps, "Epsilon of the output RMSNorm"),
      field(block, "kv_proj_rank", &C::kv_proj_rank,
            "Adaptive GQA rank of the K/V expansion; unset: plain GQA repetition", 1),
      field(block, "kv_learnable_residual", &C::kv_learnable_residual,
            "Adaptive GQA: learn the residual replication matrix"),
  };
}

void read_heads(const json::Node& block, ModelConfig& c) { check_mixer_heads(block, c); }
void write_heads(const ModelConfig& c, json::Value& block) { write_mixer_heads(c, block); }

}  // namespace

const MixerSpec& gdn_spec() {
  static const MixerSpec spec{
      .kind = MixerKind::GatedDeltaNet,
      .token = "GDN",
      .module = "gdn",
      .is_ssm = true,
      .summary = "Gated DeltaNet (delta rule with a scalar decay per head)",
      .json_block = "gdn_config",
      .recipe_section = "gdn",
      .fields = delta_rule_fields(&ModelConfig::gdn),
      .read_json_extra = read_heads,
      .write_json_extra = write_heads,
      .make = [](const ModelConfig& c, const std::string& prefix,
                 ParameterRegistry& params) { return std::unique_ptr<SequenceMixer>(new GdnMixer(c, prefix, params)); },
  };
  return spec;
}

const MixerSpec& kzla_spec() {
  static const MixerSpec spec{
      .kind = MixerKind::KaczmarzLinearAttention,
      .token = "KZLA",
      .module = "kzla",
      .is_ssm = true,
      .summary = "Kaczmarz linear attention (GDN with β = η/(‖k‖² + ε) on raw keys)",
      .json_block = "kzla_config",
      .recipe_section = "kzla",
      .fields = delta_rule_fields(&ModelConfig::kzla),
      .read_json_extra = read_heads,
      .write_json_extra = write_heads,
      .make =
          [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
            return std::unique_ptr<SequenceMixer>(new GdnMixer(c, prefix, params, DeltaStep::Kaczmarz));
          },
  };
  return spec;
}

}  // namespace primer::layers
