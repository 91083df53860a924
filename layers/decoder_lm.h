// The decoder language model: embedding, N pre-norm blocks (RMSNorm → mixer → residual → RMSNorm → SwiGLU MLP
// → residual), final RMSNorm, LM head (tied to the embedding or not) and the fused linear + cross-entropy.
// Configured from a Hugging Face config (Qwen3, Llama, Mistral, and their hybrids); each layer's mixer comes from
// the hybrid pattern (layers/mixer_factory.h). Names follow Hugging Face and the Priming reference.
// A fused config (Stage 0/1) also keeps every layer's teacher attention (`self_attn`) and runs a second,
// gradient-free teacher stream through the shared weights: the Stage 1 distillation model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/checkpoint.h"
#include "core/autograd/unit_hooks.h"
#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer::layers {

struct DecoderOptions {
  bool recompute = false;  // activation checkpointing per block
  // Under recompute, keep the results that cost most to recompute and least to hold (attention's output and
  // log-sum-exp, GKA's Chebyshev solve, the GLA readouts, the gated delta rule's o, the o_proj and down_proj outputs:
  // ag::kept_across_recompute) instead of recomputing them.
  bool selective_recompute = true;
  // The bytes those kept results may hold at once over all blocks (ag::KeepBudget); past it, later blocks recompute
  // them. Negative: no limit.
  int64_t selective_recompute_budget_bytes = -1;
  // FSDP's hooks around each unit of units() (null: one process holding every weight).
  ag::UnitHooks* hooks = nullptr;
  // Sequence parallelism (null: whole rows): each rank holds its part of every row; forward calls then need the
  // tokens' global positions.
  ag::SequenceExchange* sequence = nullptr;
};

// Stage 1 objective (the reference's hybrid_distill_pre_lm_head and hybrid_lw_distill_target: none | decoder).
struct DistillOptions {
  bool pre_lm_head = true;  // MSE of the final-norm hidden states
  bool layerwise = false;   // plus the mean over layers of the MSE of each decoder layer's output
};

// What decoding carries from one call to the next: every layer's state after the tokens seen so far (a recurrent
// mixer's conv and recurrent state, attention's key/value cache per row), and how many tokens each row has seen.
struct DecodeState {
  std::vector<MixerState> layers;
  std::vector<int64_t> tokens;  // per row: the position of its next token (empty: a fresh state)
};

// The rows of several decode states of one model as one batch, in order (prompts of different lengths, each
// prefilled alone, then decoded together).
DecodeState stack_rows(const std::vector<DecodeState>& parts);

class DecoderLM {
 public:
  DecoderLM(const ModelConfig& config, ParameterRegistry& params, DecoderOptions options = {});

  // ids, positions: i32 [B, T] (positions undefined: 0..T-1 per row). Final-norm hidden states [B, T, D].
  ag::Var hidden_states(const Tensor& ids, const Tensor& positions = Tensor());
  // Summed token cross-entropy of next-token targets i32 [B, T] (-100 ignored); gradients are those of
  // grad_scale * loss (see ag::fused_linear_cross_entropy).
  ag::Var loss(const Tensor& ids, const Tensor& targets, double grad_scale, const Tensor& positions = Tensor());
  // f32 logits [B, T, V] without recording (evaluation and parity checks; small inputs only).
  Tensor logits(const Tensor& ids, const Tensor& positions = Tensor());

  // Decoding: runs ids i32 [B, T] after the tokens `state` holds (a fresh state: a prompt, prefilled in one forward;
  // then one token per call), advances the state and returns the f32 logits [B, V] of each row's last token.
  // Nothing is recorded. Each row's tokens continue at its own position (rows of a stacked state may have seen
  // different numbers of tokens); a fused model decodes with its student.
  Tensor decode(const Tensor& ids, DecodeState& state);

  // Fused models: the teacher stream's final-norm hidden states [B, T, D] and (layerwise) each layer's output;
  // no gradients, nothing recorded.
  struct TeacherTargets {
    Tensor final_hidden;
    std::vector<Tensor> layers;
  };
  TeacherTargets teacher_targets(const Tensor& ids, const DistillOptions& options, const Tensor& positions = Tensor());
  // The Stage 1 loss: MSE (mean over elements) of the student stream against the detached teacher's targets.
  ag::Var distill_loss(const Tensor& ids, const TeacherTargets& targets, const DistillOptions& options,
                       const Tensor& positions = Tensor());
  ag::Var distill_loss(const Tensor& ids, const DistillOptions& options, const Tensor& positions = Tensor()) {
    return distill_loss(ids, teacher_targets(ids, options, positions), options, positions);
  }

  // The model's sharding units in the order it uses them: the embedding, each decoder block (a fused model's teacher
  // attention included), the final norm with the LM head (with tied embeddings the head is the embedding unit).
  std::vector<ag::UnitSpec> units() const;
  void set_unit_hooks(ag::UnitHooks* hooks) { options_.hooks = hooks; }
  void set_sequence_exchange(ag::SequenceExchange* sequence) { options_.sequence = sequence; }

  // 6·(dense parameters) + attention FLOPs per token at sequence length T, forward + backward (for MFU).
  double flops_per_token(int64_t seq_len) const;
  const ModelConfig& config() const { return config_; }
  const DecoderOptions& options() const { return options_; }
  SequenceMixer& mixer(size_t layer) { return *mixers_.at(layer); }  // the student's
  std::string head_name() const;                                     // "lm_head.weight" or the tied embedding

 private:
  // One decoder block; with state_out (decoding), its mixer runs from state_in and leaves its state there.
  ag::Var block(size_t layer, const ag::Var& h, const MixerContext& ctx, SequenceMixer& mixer,
                const MixerState* state_in = nullptr, MixerState* state_out = nullptr);
  // fn(x) as a use of the head unit (and of the embedding unit, whose weight a tied head reads).
  ag::Var in_head_unit(const ag::Var& x, const std::function<ag::Var(const ag::Var&)>& fn);
  ag::Var final_norm(const ag::Var& h);
  MixerContext context(const Tensor& ids, const Tensor& positions) const;
  // The residual stream through every layer (before the final norm), the student's mixers or the teacher's;
  // each layer's output is appended to layer_outputs when given.
  ag::Var stream(const Tensor& ids, const MixerContext& ctx, bool teacher, std::vector<ag::Var>* layer_outputs);
  ag::Var weight(const std::string& name) { return params_.get(name).var; }

  ModelConfig config_;
  ParameterRegistry& params_;
  DecoderOptions options_;
  std::shared_ptr<ag::KeepBudget> keep_budget_;           // options_.selective_recompute_budget_bytes (null: no limit)
  std::vector<std::unique_ptr<SequenceMixer>> mixers_;    // the student's (the only ones when not fused)
  std::vector<std::unique_ptr<SequenceMixer>> teachers_;  // fused: the teacher attention of non-attention layers
  Tensor inv_freq_cpu_;
  std::vector<std::vector<std::string>> unit_parameters_;  // registered names per unit, in units() order
};

}  // namespace primer::layers
