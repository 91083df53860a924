#include "core/check.h"
#include "layers/attention_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& attention_spec() {
  static const MixerSpec spec{
      .kind = MixerKind::Attention,
      .token = "*",
      .module = "self_attn",
      .is_ssm = false,
      .summary = "causal softmax attention (GQA, QK-norm, RoPE; the model's sliding_window)",
      .make =
          [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
            return std::unique_ptr<SequenceMixer>(new AttentionMixer(c, prefix, params, c.sliding_window));
          },
  };
  return spec;
}

const MixerSpec& sliding_window_spec() {
  static const MixerSpec spec{
      .kind = MixerKind::SlidingWindow,
      .token = "SWA",
      .module = "swa",
      .is_ssm = false,
      .summary = "sliding-window attention (window from swa_config)",
      .json_block = "swa_config",
      .recipe_section = "swa",
      .fields = {field(&ModelConfig::swa, "window_size", &SwaConfig::window_size,
                       "Sliding window of SWA layers (required when the pattern has SWA)", 1)},
      .validate =
          [](const ModelConfig& c, const std::string& source) {
            PRIMER_CHECK(c.swa.window_size > 0,
                         "{}: the hybrid pattern has SWA layers but swa_config.window_size is {}, expected > 0", source,
                         c.swa.window_size);
          },
      .make =
          [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
            return std::unique_ptr<SequenceMixer>(new AttentionMixer(c, prefix, params, c.swa.window_size));
          },
  };
  return spec;
}

}  // namespace primer::layers
