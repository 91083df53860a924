#include "core/check.h"
#include "layers/bmf_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

const MixerSpec& bmf_spec() {
  using C = BmojoConfig;
  constexpr auto bmojo = &ModelConfig::bmojo;
  static const MixerSpec spec{
      .kind = MixerKind::BMojoF,
      .token = "BMF",
      .module = "bmojo_f",
      .is_ssm = true,
      .summary = "B'MOJO-F (an SSM's outputs attended beside a sliding window, one softmax)",
      .json_block = "bmojo_config",
      .recipe_section = "bmojo",
      .fields =
          {
              field(bmojo, "window_size", &C::window_size,
                    "W: each token attends to the last W tokens and to the SSM's outputs of the W before them", 1),
              field(bmojo, "tie_attn_weights", &C::tie_attn_weights,
                    "The fading path reuses q/k/v_proj and q/k_norm (else its own q/k/v_proj_, q/k_norm_)"),
              choice_field(bmojo, "ssm_mixer", &C::ssm_mixer,
                           "The SSM producing the fading tokens; its own block (mamba2, gdn, gka) sets its options",
                           {"mamba2", "gdn", "gated_deltanet", "gka", "gated_kalmanet"}),
          },
      .holds = [](const ModelConfig& c) { return std::vector<MixerKind>{bmojo_ssm_kind(c.bmojo.ssm_mixer)}; },
      .read_json_extra =
          [](const json::Node& block, ModelConfig& c) {
            expect_block_value(block, "hidden_size", c.hidden_size);
            expect_block_value(block, "num_heads", c.num_attention_heads);
            expect_block_value(block, "num_key_value_heads", c.num_key_value_heads);
            expect_block_value(block, "head_dim", c.head_dim);
          },
      .write_json_extra =
          [](const ModelConfig& c, json::Value& block) {
            block["hidden_size"] = c.hidden_size;
            block["num_heads"] = c.num_attention_heads;
            block["num_key_value_heads"] = c.num_key_value_heads;
            block["head_dim"] = c.head_dim;
            block["rms_norm_eps"] = c.rms_norm_eps;
          },
      .validate =
          [](const ModelConfig& c, const std::string& source) {
            PRIMER_CHECK(c.bmojo.window_size > 0, "{}: bmojo_config.window_size is {}, expected > 0", source,
                         c.bmojo.window_size);
            const MixerSpec& ssm = mixer_spec(bmojo_ssm_kind(c.bmojo.ssm_mixer, source + ": bmojo_config.ssm_mixer"));
            if (ssm.validate) ssm.validate(c, source);
          },
      .make = [](const ModelConfig& c, const std::string& prefix,
                 ParameterRegistry& params) { return std::unique_ptr<SequenceMixer>(new BmfMixer(c, prefix, params)); },
  };
  return spec;
}

}  // namespace primer::layers
