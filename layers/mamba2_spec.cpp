#include "layers/mamba2_mixer.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

// mamba2_config in the Mamba-in-Llama mapping: its shape entries derive from the model (d_inner = Hq·D,
// d_xb = Hkv·D, d_state = D, ngroups = Hq, expand 1).
const MixerSpec& mamba2_spec() {
  using C = Mamba2Config;
  constexpr auto m2 = &ModelConfig::mamba2;
  static const MixerSpec spec{
      .kind = MixerKind::Mamba2,
      .token = "M2",
      .module = "mamba",
      .is_ssm = true,
      .summary = "Mamba-2 (Mamba-in-Llama mapping)",
      .json_block = "mamba2_config",
      .recipe_section = "mamba2",
      .fields =
          {
              field(m2, "use_qk_norm", &C::use_qk_norm,
                    "Per-head RMSNorm of B (keys) and C (queries), initialised from QK-norm"),
              field(m2, "use_pos_emb", &C::use_pos_emb, "RoPE on B and C"),
          },
      .read_json_extra =
          [](const json::Node& block, ModelConfig& c) {
            expect_block_value(block, "d_model", c.hidden_size);
            expect_block_value(block, "d_inner", c.num_attention_heads * c.head_dim);
            expect_block_value(block, "d_xb", c.num_key_value_heads * c.head_dim);
            if (const auto ssm = block.find("ssm_cfg")) {
              expect_block_value(*ssm, "d_state", c.head_dim);
              expect_block_value(*ssm, "ngroups", c.num_attention_heads);
              expect_block_value(*ssm, "expand", 1);
            }
          },
      .write_json_extra =
          [](const ModelConfig& c, json::Value& b) {
            b["d_model"] = c.hidden_size;
            b["d_inner"] = c.num_attention_heads * c.head_dim;
            b["d_xb"] = c.num_key_value_heads * c.head_dim;
            b["intermediate_size"] = c.intermediate_size;
            b["hidden_act"] = "silu";
            b["rms_norm_eps"] = c.rms_norm_eps;
            b["n_layer"] = c.num_hidden_layers;
            json::Value& ssm = b["ssm_cfg"];
            ssm["expand"] = 1;
            ssm["ngroups"] = c.num_attention_heads;
            ssm["d_state"] = c.head_dim;
          },
      .make =
          [](const ModelConfig& c, const std::string& prefix, ParameterRegistry& params) {
            return std::unique_ptr<SequenceMixer>(new Mamba2Mixer(c, prefix, params));
          },
  };
  return spec;
}

}  // namespace primer::layers
