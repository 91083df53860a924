// The built-in default job: train a small ShortConvLM on a real English text read as bytes, log every step
// (loss, lr, grad norm, tokens/s, MFU, peak memory) to the console and to a JSONL metrics file, and report
// the held-out loss before and after training. Replaced by the Priming pipeline's default as it lands.
#pragma once
#include <cstdint>
#include <string>

namespace primer::recipes {

struct DefaultRunOptions {
  std::string corpus;           // empty: the first of the built-in candidates that exists
  std::string device = "auto";  // auto | cpu | cuda
  std::string out_dir = "runs/default";
  int64_t steps = 300;
  int64_t batch = 16;
  int64_t seq = 128;
  int64_t hidden = 256;
  int64_t layers = 4;
  double lr = 3e-3;
  uint64_t seed = 1234;
  int64_t log_every = 25;
  bool recompute = false;
};

// Returns 0 when the held-out loss fell; prints progress as it goes.
int run_default(const DefaultRunOptions& options);

}  // namespace primer::recipes
