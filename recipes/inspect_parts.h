// The parts of `primer inspect` (recipes/inspect.h): one report per kind of artifact, and the verification record
// they share. Each report is a JSON object that inspect prints as text or JSON.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "core/io/json.h"
#include "core/tensor.h"

namespace primer::recipes::inspect {

// What a verification checked and found: checks run, problems (each naming the file or tensor), non-finite values.
class Verification {
 public:
  // Runs `check`; an error it raises becomes a problem (the report goes on with the next check).
  void run(const std::function<void()>& check);
  void problem(std::string text) { problems_.push_back(json::Value(std::move(text))); }
  void count(const std::string& what, int64_t n = 1);  // "files with CRC32C checked": +n
  // Counts the NaN/inf values of an f32 tensor on the CPU; any is a problem naming `name`.
  void count_nonfinite(const std::string& name, const Tensor& values);
  size_t problems() const { return problems_.size(); }
  json::Value to_json() const;

 private:
  json::Value counts_ = json::Object{};
  json::Array problems_;
  int64_t nonfinite_ = 0;
};

// A training checkpoint (checkpoint-<step>/ with manifest.json); errors when it is incomplete.
json::Value describe_checkpoint(const std::filesystem::path& dir, bool verify);
// A Hugging Face model directory (config.json + model.safetensors or its sharded index).
json::Value describe_hf_model(const std::filesystem::path& dir, bool verify);
// Tokenized data (manifest.json of format primer-token-data + shards).
json::Value describe_token_data(const std::filesystem::path& dir, bool verify);

}  // namespace primer::recipes::inspect
