// `primer generate`: continue prompts with a trained model (recipes/inference_model.h loads it), decoding from
// carried state — the prompt prefilled in one forward, then one token per step, each layer carrying its recurrent
// state or key/value cache (layers::DecodeState) — so a recurrent layer's cost per token does not grow with the
// context. Greedy or sampled (recipes/token_sampler.h), ended by the tokenizer's end token, stop strings or a
// token budget; a lone prompt streams to the console.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "layers/decoder_lm.h"
#include "recipes/model_text.h"
#include "recipes/token_sampler.h"

namespace primer::recipes {

struct GenerationLimits {
  int64_t max_new_tokens = 128;
  std::vector<std::string> stop;  // the text ends before the first of these
  std::vector<int32_t> end_ids;   // tokens that end a generation (kept in ids, not in text)
};

struct Completion {
  std::vector<int32_t> ids;  // the generated tokens
  std::string text;          // their text, cut before a stop string
  std::string finish;        // "stop" (an end token or stop string) or "length"
};

// Continues prompts (of any token lengths) as one batch on `device` (the model's): each prompt is prefilled alone,
// then the rows decode together, each at its own positions (rows finish on their own; the batch runs until all
// have); each row's tokens are those it would get alone. With one prompt, on_text (when given) receives the
// completion's text piece by piece as it becomes final (never a part of a stop string, never half a UTF-8 character).
std::vector<Completion> generate(layers::DecoderLM& model, Device device, const ModelText& text,
                                 const std::vector<std::vector<int32_t>>& prompts, const GenerationLimits& limits,
                                 TokenSampler& sampler, const std::function<void(std::string_view)>& on_text = {});

struct GenerateOptions {
  std::string model;      // run directory, training checkpoint or Hugging Face directory
  std::string tokenizer;  // a tokenizer.json or its directory instead of the model's
  std::vector<std::string> prompts;
  std::string prompts_file;  // one prompt per line
  bool chat = false;         // wrap each prompt in Qwen3's chat format as a user message
  GenerationLimits limits;
  SamplingOptions sampling;
  int64_t batch_size = 8;      // prompts decoded together
  std::string device = "cpu";  // cpu, cuda or auto
};

// The command: completions on stdout (streamed for a lone prompt), a summary line on stderr. Returns 0.
int run_generate(const GenerateOptions& options);

}  // namespace primer::recipes
