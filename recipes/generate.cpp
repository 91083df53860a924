#include "recipes/generate.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "core/check.h"
#include "recipes/inference_model.h"
#include "recipes/train_setup.h"

namespace primer::recipes {
namespace {

// One row's completion as it grows: its text, where a stop string cut it, and how much of it is final.
class RowText {
 public:
  RowText(const ModelText& text, const GenerationLimits& limits) : text_(text), limits_(limits) {
    for (const std::string& s : limits.stop) holdback_ = std::max(holdback_, s.size());
  }

  // Adds a token; returns true when the row is finished (end token, stop string or budget).
  bool add(int32_t id) {
    c_.ids.push_back(id);
    if (std::find(limits_.end_ids.begin(), limits_.end_ids.end(), id) != limits_.end_ids.end()) {
      c_.finish = "stop";
      c_.text = text_.decode({c_.ids.data(), c_.ids.size() - 1});
      return true;
    }
    c_.text = text_.decode(c_.ids);
    size_t cut = std::string::npos;
    for (const std::string& s : limits_.stop) cut = std::min(cut, c_.text.find(s));
    if (cut != std::string::npos) {
      c_.text.resize(cut);
      c_.finish = "stop";
      return true;
    }
    if (int64_t(c_.ids.size()) < limits_.max_new_tokens) return false;
    c_.finish = "length";
    return true;
  }

  // The text that no later token can change: all of it once finished; before, short of what could still become a
  // stop string, of an unfinished UTF-8 character and of the replacement character an unfinished one decodes to.
  std::string_view final_part(bool finished) const {
    std::string_view t = c_.text;
    if (finished) return t;
    t.remove_suffix(std::min(t.size(), holdback_ > 0 ? holdback_ - 1 : 0));
    const std::string_view replacement = "\xEF\xBF\xBD";
    while (t.ends_with(replacement)) t.remove_suffix(replacement.size());
    while (!t.empty() && (uint8_t(t.back()) & 0xC0) == 0x80) t.remove_suffix(1);  // inside a character
    if (!t.empty() && uint8_t(t.back()) >= 0xC0) t.remove_suffix(1);              // a character's first byte
    return t;
  }

  Completion& completion() { return c_; }

 private:
  const ModelText& text_;
  const GenerationLimits& limits_;
  size_t holdback_ = 0;
  Completion c_;
};

std::vector<std::string> read_prompts(const GenerateOptions& o) {
  std::vector<std::string> prompts = o.prompts;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    PRIMER_CHECK(in.good(), "--prompts-file '{}': cannot read it", o.prompts_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  PRIMER_CHECK(!prompts.empty(), "generate: no prompt; expected --prompt TEXT (repeatable) or --prompts-file FILE");
  return prompts;
}

}  // namespace

std::vector<Completion> generate(layers::DecoderLM& model, Device device, const ModelText& text,
                                 const std::vector<std::vector<int32_t>>& prompts, const GenerationLimits& limits,
                                 TokenSampler& sampler, const std::function<void(std::string_view)>& on_text) {
  PRIMER_CHECK(!prompts.empty(), "generate: no prompt");
  PRIMER_CHECK(limits.max_new_tokens > 0, "--max-new-tokens {}: expected at least 1", limits.max_new_tokens);
  const int64_t B = int64_t(prompts.size());
  // Each prompt is prefilled alone (prompts may differ in length), then the rows decode together, each at its own
  // positions.
  std::vector<layers::DecodeState> prefilled(prompts.size());
  Tensor logits;
  for (size_t r = 0; r < prompts.size(); ++r) {
    const std::vector<int32_t>& p = prompts[r];
    PRIMER_CHECK(!p.empty(), "generate: a prompt needs at least one token (prompt {} has none)", r + 1);
    const Tensor last = model.decode(Tensor::from_vector(p, {1, int64_t(p.size())}, DType::I32, device), prefilled[r]);
    if (!logits.defined()) logits = Tensor::empty({B, last.size(1)}, last.dtype(), last.device());
    logits.slice(0, int64_t(r), int64_t(r) + 1).copy_from(last);
  }
  layers::DecodeState state = layers::stack_rows(prefilled);
  prefilled.clear();
  std::vector<RowText> rows(size_t(B), RowText(text, limits));
  std::vector<bool> finished(size_t(B), false);
  size_t streamed = 0;
  while (true) {
    const std::vector<int32_t> next = sampler.next(logits);
    bool all = true;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!finished[r]) finished[r] = rows[r].add(next[r]);
      all = all && finished[r];
    }
    if (on_text && B == 1) {
      const std::string_view part = rows[0].final_part(finished[0]);
      if (part.size() > streamed) on_text(part.substr(streamed));
      streamed = std::max(streamed, part.size());
    }
    if (all) break;
    logits = model.decode(Tensor::from_vector(next, {B, 1}, DType::I32, device), state);
  }
  std::vector<Completion> out;
  for (RowText& r : rows) out.push_back(std::move(r.completion()));
  return out;
}

int run_generate(const GenerateOptions& o) {
  const std::vector<std::string> prompts = read_prompts(o);
  PRIMER_CHECK(o.batch_size > 0, "--batch-size {}: expected at least 1", o.batch_size);
  const Device device = pick_device(o.device);
  // The CUDA kernels compute in bf16; the CPU in f32.
  InferenceModel m = load_inference_model(o.model, device, device.is_cuda() ? DType::BF16 : DType::F32);
  const ModelText text(o.tokenizer.empty() ? m.tokenizer_dir : o.tokenizer, m.config.vocab_size);
  GenerationLimits limits = o.limits;
  limits.end_ids = text.end_ids(o.chat);
  TokenSampler sampler(o.sampling);
  fmt::print(stderr, "generate: {} ({}, {}) on {}\n", m.source, model_name(m.config), text.describe(), device.str());

  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) {
    ids.push_back(text.encode(o.chat ? text.chat_prompt(p) : p));
    PRIMER_CHECK(!ids.back().empty(), "generate: prompt {} is empty", ids.size());
  }
  const bool stream = prompts.size() == 1;
  auto print = [](std::string_view part) {
    std::fwrite(part.data(), 1, part.size(), stdout);
    std::fflush(stdout);
  };
  std::vector<Completion> completions(prompts.size());
  int64_t generated = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t at = 0; at < ids.size(); at += size_t(o.batch_size)) {  // consecutive prompts, any lengths
    const std::vector<std::vector<int32_t>> batch(
        ids.begin() + ptrdiff_t(at), ids.begin() + ptrdiff_t(std::min(ids.size(), at + size_t(o.batch_size))));
    std::vector<Completion> done = generate(*m.model, device, text, batch, limits, sampler,
                                            stream ? std::function<void(std::string_view)>(print) : nullptr);
    for (size_t j = 0; j < done.size(); ++j) {
      generated += int64_t(done[j].ids.size());
      completions[at + j] = std::move(done[j]);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stream) {
    print("\n");
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) fmt::print(">>> {}\n{}\n", prompts[i], completions[i].text);
  }
  fmt::print(stderr, "generate: {} prompts, {} new tokens in {:.2f} s ({:.1f} tokens/s)\n", prompts.size(), generated,
             seconds, double(generated) / std::max(seconds, 1e-9));
  return 0;
}

}  // namespace primer::recipes
