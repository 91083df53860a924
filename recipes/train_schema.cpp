#include "recipes/train_schema.h"

#include "core/check.h"

namespace primer::recipes {
namespace {

void check_exclusive(const config::Config& cfg, const std::string& a, const std::string& b) {
  PRIMER_CHECK(!(cfg.has(a) && cfg.has(b)),
               "{}: '{}' and '{}' are mutually exclusive ('{}' is set at {}); set only one", cfg.where(a), a, b, b,
               cfg.where(b));
}

void check_one_of(const config::Config& cfg, const std::string& a, const std::string& b, const std::string& what) {
  PRIMER_CHECK(cfg.has(a) || cfg.has(b), "{}: set '{}' or '{}' ({})", cfg.path(), a, b, what);
}

// Whether a key holds something other than its default (a resolved config spells defaults out, so where() alone
// cannot tell).
bool differs_from_default(const config::Config& cfg, const std::string& key) {
  const config::Field& f = *cfg.schema().find(key);
  if (!cfg.has(key)) return false;
  if (!f.default_value) return true;
  switch (f.type) {
    case config::FieldType::Bool: return cfg.get_bool(key) != std::get<bool>(*f.default_value);
    case config::FieldType::Int: return cfg.get_int(key) != std::get<int64_t>(*f.default_value);
    case config::FieldType::Float: return cfg.get_float(key) != std::get<double>(*f.default_value);
    case config::FieldType::String:
    case config::FieldType::Enum: return cfg.get_string(key) != std::get<std::string>(*f.default_value);
    default: return true;
  }
}

// Keys that shape the tokenized stream mean nothing for the byte corpus, and some only with another key.
void check_data_keys(const config::Config& cfg) {
  if (!cfg.has("tokenized_path")) {
    for (const char* key : {"packing", "packing_method", "neat_packing", "drop_exceed_length_data", "mix_strategy",
                            "interleave_probs", "length_weighted_sampling"})
      PRIMER_CHECK(!differs_from_default(cfg, key), "{}: '{}' applies to tokenized data (tokenized_path) only",
                   cfg.where(key), key);
    PRIMER_CHECK(cfg.get_float("val_size") > 0, "{}: a byte corpus needs val_size > 0 (its held-out end)",
                 cfg.where("val_size"));
  }
  const bool interleave = cfg.get_string("mix_strategy") == "interleave_over";
  PRIMER_CHECK(interleave == cfg.has("interleave_probs"),
               "{}: interleave_probs goes with mix_strategy: interleave_over",
               interleave ? cfg.where("mix_strategy") : cfg.where("interleave_probs"));
  PRIMER_CHECK(!cfg.get_bool("length_weighted_sampling") || interleave,
               "{}: length_weighted_sampling needs mix_strategy: interleave_over",
               cfg.where("length_weighted_sampling"));
}

config::Schema build_train_schema() {
  config::Schema s;
  // Model.
  s.add_string("model_name_or_path", "Hugging Face checkpoint directory (config.json + safetensors) to start from")
      .optional();
  s.add_map("model_config", "Inline Hugging Face config.json to train from scratch (e.g. a small Qwen3)").optional();
  s.add_map("config_overrides_json",
            "Applied to the model config after loading; dotted keys reach nested entries, e.g. "
            "{\"rope_parameters.rope_theta\": 5000000}; saved in the checkpoint's config.json")
      .optional();
  // Method.
  s.add_enum("stage", {"pt", "sft", "hkd"},
             "pt: (continued) pretraining; sft: supervised fine-tuning on responses; hkd: Priming Stage-1 "
             "distillation")
      .defaults("pt");
  s.add_string_list("hybrid_learnable_params",
                    "Name substrings (e.g. gka,norm): a parameter trains iff its name contains one; unset: all train")
      .optional();
  s.add_bool("hybrid_distill_pre_lm_head",
             "hkd: match the student's final-norm hidden states to the teacher's (MSE, mean over elements)")
      .defaults(true);
  s.add_enum("hybrid_lw_distill_target", {"none", "decoder"},
             "hkd: also match every decoder layer's output (MSE averaged over layers); none: end-to-end only")
      .defaults("none");
  // Data.
  s.add_string_list("dataset",
                    "A text file or directory read as bytes (vocabulary 256); tokenized_path takes precedence")
      .optional();
  s.add_string_list("tokenized_path",
                    "Tokenized-data directories written by `primer tokenize` (manifest.json + shards); their "
                    "sources are numbered in order")
      .optional();
  s.add_int("cutoff_len", "Tokens per training sequence").at_least(1).defaults(2048);
  s.add_float(
       "val_size",
       "Held-out fraction: the end of a byte corpus, or tokenized documents chosen by a fixed hash of their index")
      .at_least(0)
      .below(1)
      .defaults(0.05);
  s.add_bool("packing",
             "sft: pack whole samples into cutoff_len rows (packing_method); off: one padded sample per "
             "row. pt data is always concatenated (EOS-separated) and cut, the remainder dropped")
      .defaults(false);
  s.add_enum("packing_method", {"greedy", "best_fit", "random"},
             "sft packing: greedy (each row takes the longest remaining sample that fits), best_fit (best-fit "
             "decreasing) or random (shuffled order, next fit)")
      .defaults("greedy");
  s.add_bool("neat_packing",
             "Reset positions and drop cross-sample targets at every document start (needs "
             "document-aware attention and mixers, which the model does not have yet)")
      .defaults(false);
  s.add_bool("drop_exceed_length_data", "sft: drop samples longer than cutoff_len instead of truncating them")
      .defaults(false);
  s.add_enum("mix_strategy", {"concat", "interleave_over"},
             "concat: every training document once per epoch; interleave_over: each document drawn from source i "
             "with probability interleave_probs[i], each source cycling through its own shuffled passes")
      .defaults("concat");
  s.add_string_list("interleave_probs", "interleave_over: one sampling weight per source (normalised), e.g. 0.7,0.3")
      .optional();
  s.add_bool("length_weighted_sampling",
             "interleave_over: draw source i with ρ_i = p_i·L̄_i / Σ_j p_j·L̄_j (L̄_i its mean document length; "
             "the Priming paper's up-weighting of long sources)")
      .defaults(false);
  s.add_string("template", "Prompt template (e.g. qwen3, qwen3_nothink_pt); unset: plain text + EOS").optional();
  // Optimisation.
  s.add_int("per_device_train_batch_size", "Sequences per rank per micro-step").at_least(1).defaults(8);
  s.add_int("gradient_accumulation_steps", "Micro-steps per optimizer step").at_least(1).defaults(1);
  s.add_float("learning_rate", "Peak learning rate (AdamW)").above(0).defaults(5e-5);
  s.add_enum("lr_scheduler_type", {"constant_with_warmup", "cosine", "linear"},
             "Learning-rate schedule after warmup (linear and cosine decay to 0 at max_steps)")
      .defaults("linear");
  s.add_int("warmup_steps", "Linear warmup steps; exclusive with warmup_ratio; neither: no warmup")
      .at_least(0)
      .optional();
  s.add_float("warmup_ratio", "Warmup as a fraction of max_steps; exclusive with warmup_steps")
      .at_least(0)
      .at_most(1)
      .optional();
  s.add_int("max_steps", "Optimizer steps to train").at_least(1).required();
  s.add_float("max_grad_norm", "Clip the global gradient norm to this; 0 disables clipping").at_least(0).defaults(1.0);
  s.add_enum("nan_policy", {"stop", "skip"},
             "A step whose gradient holds NaN or inf (checked every step): stop ends the run naming the step and the "
             "first parameter affected; skip leaves that step's update out (logged), up to nan_skip_limit times")
      .defaults("stop");
  s.add_int("nan_skip_limit",
            "nan_policy skip: steps the run may skip, counted across resumes (checkpointed); the next non-finite step "
            "ends the run")
      .at_least(0)
      .defaults(10);
  s.add_float("loss_spike_factor",
              "Warn when a logged training loss exceeds this many times the mean of the previous 20 logged losses "
              "(from the 6th logged loss on); 0: never")
      .at_least(0)
      .defaults(3.0);
  s.add_float("weight_decay", "AdamW decoupled weight decay (parameters flagged for decay only)")
      .at_least(0)
      .defaults(0.0);
  s.add_float("adam_beta1", "AdamW first-moment decay").at_least(0).below(1).defaults(0.9);
  s.add_float("adam_beta2", "AdamW second-moment decay").at_least(0).below(1).defaults(0.999);
  s.add_float("adam_epsilon", "AdamW denominator epsilon").above(0).defaults(1e-8);
  s.add_int("seed", "Seed of initialisation, data order and dropout").at_least(0).defaults(42);
  // Parallelism, precision, device.
  s.add_int("sequence_parallel_size",
            "Ranks that share one sequence (sequence parallelism; docs/distributed.md); the world is data-parallel x "
            "sequence-parallel ranks")
      .at_least(1)
      .defaults(1);
  s.add_enum("sequence_parallel_mode", {"zigzag-ring", "ring", "all-gather", "ulysses"},
             "Attention under sequence parallelism: zigzag-ring (ring over the zig-zag layout, the reference's "
             "default), ring (contiguous layout), all-gather (K/V gathered once) or ulysses (heads scattered; the "
             "key/value heads must divide sequence_parallel_size)")
      .defaults("zigzag-ring");
  s.add_enum("sequence_parallel_layout", {"zigzag", "contiguous"},
             "How a row is split over the sequence-parallel ranks (default: contiguous for ring, zigzag otherwise)")
      .optional();
  s.add_enum("sequence_parallel_ssm_mode", {"p2p", "usp", "a2a"},
             "Recurrent mixers under sequence parallelism: p2p (conv halos and state passing; KLA and BMF run usp), "
             "usp (the whole sequence gathered into each mixer) or a2a (heads scattered by all-to-all, each rank runs "
             "its heads over the whole sequence; the query and key/value heads must divide sequence_parallel_size)")
      .defaults("p2p");
  s.add_enum("sequence_parallel_state_passing", {"log-depth", "serial"},
             "How P2P composes the chunks' states over the ranks: log-depth (a parallel prefix) or serial (chunk after "
             "chunk, as the reference)")
      .defaults("log-depth");
  s.add_int(
       "zero_stage",
       "FSDP/ZeRO sharding over the data-parallel ranks: 0 replicated, 1 optimizer state, 2 also gradients, 3 also "
       "weights (docs/distributed.md)")
      .at_least(0)
      .at_most(3)
      .optional();
  s.add_string("deepspeed",
               "A DeepSpeed JSON config (the reference's recipes name one); its zero_optimization.stage is the ZeRO "
               "stage unless zero_stage is set")
      .optional();
  s.add_float("collective_timeout",
              "Seconds a rank waits for a collective before the job ends, naming the collective, the step and the "
              "ranks that did not arrive")
      .above(0)
      .defaults(600.0);
  s.add_bool("bf16", "Compute in bf16 on CUDA with fp32 master weights (CPU runs compute in fp32)").defaults(true);
  s.add_bool("disable_gradient_checkpointing", "Keep all activations instead of recomputing each block")
      .defaults(false);
  s.add_bool("selective_gradient_checkpointing",
             "Under gradient checkpointing, keep from the forward what costs most to recompute and little to hold: "
             "attention's output and log-sum-exp (2·head_dim + 4 bytes per token and query head in bf16), GKA's "
             "Chebyshev solve (4·head_dim per token and head), the Mamba-2/GKA readout and the GDN/KZLA core's output "
             "(2·head_dim each) and the o_proj and down_proj outputs (2·hidden_size per token each); false: recompute "
             "whole blocks")
      .defaults(true);
  s.add_float("selective_gradient_checkpointing_budget_gb",
              "GB that selective_gradient_checkpointing's kept results may hold at once per rank; past it the later "
              "blocks recompute them (the first blocks keep theirs); unset: no limit")
      .at_least(0)
      .optional();
  s.add_enum("device", {"auto", "cpu", "cuda"}, "Where to train; auto: CUDA when a GPU is usable").defaults("auto");
  // Output, evaluation, checkpoints.
  s.add_string("output_dir", "Run directory: checkpoints, resolved_config.yaml, metrics").required();
  s.add_bool("overwrite_output_dir",
             "A fresh run (nothing resumed) into an output_dir that holds another run's checkpoints removes them; "
             "false: such a run is refused")
      .defaults(false);
  s.add_int("logging_steps", "Log loss, learning rate, grad norm and throughput every N steps")
      .at_least(1)
      .defaults(10);
  s.add_string_list("resume_allow_changes",
                    "Keys a resume may change although they make it another run (dataset, cutoff_len, the model, the "
                    "stage, the trainable set, ...): without them such a change is refused (docs/checkpoints.md)")
      .optional();
  s.add_string("metrics_file", "JSONL metrics log; unset: <output_dir>/metrics.jsonl").optional();
  s.add_int("eval_steps", "Evaluate held-out loss every N steps; 0: only before and after training")
      .at_least(0)
      .defaults(0);
  s.add_int("eval_batches", "Held-out batches per evaluation").at_least(1).defaults(8);
  s.add_int("save_steps", "Save a checkpoint every N steps; 0: only at the end").at_least(0).defaults(500);
  s.add_int("save_total_limit", "Keep only the last N checkpoints; unset: keep all").at_least(1).optional();
  s.add_bool("save_hf_model",
             "At the end, write the model as a Hugging Face checkpoint (config.json + safetensors + tokenizer files) "
             "into output_dir, which later stages load as model_name_or_path")
      .defaults(true);
  s.add_string("resume_from_checkpoint",
               "Unset: start fresh; auto: the latest checkpoint in output_dir (fresh if none); else a checkpoint path")
      .optional();

  s.add_check([](const config::Config& cfg) {
    check_exclusive(cfg, "warmup_steps", "warmup_ratio");
    check_exclusive(cfg, "model_name_or_path", "model_config");
    check_one_of(cfg, "model_name_or_path", "model_config", "the model to start from, or to build from scratch");
    check_one_of(cfg, "dataset", "tokenized_path", "the training data");
    check_data_keys(cfg);
  });
  return s;
}

}  // namespace

const config::Schema& train_schema() {
  static const config::Schema schema = build_train_schema();
  return schema;
}

std::string train_recipe_reference() {
  return R"(# Recipe reference: `primer train run.yaml`

<!-- Generated by primer::recipes::train_recipe_reference() from recipes/train_schema.cpp; do not edit.
     Regenerate: PRIMER_UPDATE_DOCS=1 build/tests/primer_tests --gtest_filter='TrainSchema.DocsAreUpToDate' -->

A recipe is a YAML mapping of the keys below. They are the flat keys of the reference Priming implementation
(hybrid-model-factory, a LlamaFactory fork) with the same meanings, so its recipes carry over; the keys it
lacks take Hugging Face Trainer names (`save_total_limit`, `eval_steps`) or are primer's own (`model_config`,
`eval_batches`, `device`, `metrics_file`).

- **Types.** Integers and numbers are plain YAML scalars (`1e-4` is a number; `"10"` in quotes is a string).
  A string list is a YAML list or a comma-separated string: `hybrid_learnable_params: gka,norm` equals
  `[gka, norm]`. A mapping is a YAML mapping or a string holding a JSON object. `null` (or `~`) leaves an
  optional key unset.
- **Inheritance.** `base: other.yaml` (relative to the file naming it) loads that file first; the child's
  keys replace the base's whole values (a mapping is replaced, not merged). Cycles are an error.
- **Overrides.** `--set key=value` on the command line, applied after the files and validated the same way;
  the value is YAML: `--set max_steps=100`, `--set 'dataset=[a, b]'`, `--set 'model_config={hidden_size: 64}'`.
- **Errors** name the file, line and key: an unknown key suggests the closest valid one (inside `model_config`
  too, whose keys are those of a config.json that primer reads); a wrong type or an out-of-range value says what
  was expected.
- **Resolved config.** The trainer writes every key with its final value to `<output_dir>/resolved_config.yaml`
  (and into checkpoints); it loads back as a recipe that reproduces the run.
- **Cross-key rules.** Exactly one of `model_name_or_path` and `model_config`; at least one of `dataset` and
  `tokenized_path` (with both, the tokenized data is used); at most one of `warmup_steps` and `warmup_ratio`.
  The stream keys (`packing`, `packing_method`, `neat_packing`, `drop_exceed_length_data`, `mix_strategy`,
  `interleave_probs`, `length_weighted_sampling`) need `tokenized_path`; `interleave_probs` goes with
  `mix_strategy: interleave_over`, as does `length_weighted_sampling`.
- **Run directory.** One run at a time per `output_dir`: rank 0 holds `<output_dir>/.primer-run.lock` (host and
  pid) for the whole run; a second run there is refused naming the holder, and a lock left by a killed run on the
  same host is taken over with a warning. A fresh run (no `resume_from_checkpoint`, or `auto` finding nothing
  usable) into a directory holding another run's checkpoints is refused unless `overwrite_output_dir: true` (the
  reference's key), which removes them first; that refusal comes before the model is built. A fresh run starts a
  new metrics file: an existing one (the overwritten run's, or that of a run that left no checkpoint) is kept as
  `<metrics file>.previous`, replacing an older one, with a warning.
- **Data.** docs/data.md ("Tokenized data and the loader") defines the stream these keys shape: the held-out
  split, the epoch order, packing, targets and loss masks, mixing, and the resume cursor.
- **Divergence.** Every step checks the global gradient norm. A NaN or inf stops the run (`nan_policy: stop`)
  naming the step and the first parameter, with its layer, whose gradient holds one; under `nan_policy: skip` that
  step's update is left out, the log says so and the step's loss is not logged, until more than `nan_skip_limit`
  steps of the run were skipped (the count is checkpointed: a resumed run continues it). A logged loss above
  `loss_spike_factor` × the mean of the previous 20 is warned about. `PRIMER_FAULT=<rank>:step:<step>:nan` puts a
  NaN into one gradient of that rank at that step to try it (recipes/fault_injection.h). Each training line also
  shows the elapsed time and an ETA (the median of the last 20 steps times the steps left).

)" + config::render_schema_markdown(train_schema());
}

}  // namespace primer::recipes
