// `primer unfuse <fused checkpoint>`: after Stage 1, drop the teacher attention of every converted layer and write
// the standalone hybrid ("*DA" → "*", "X*" → "X"), as the reference's prime-unfuse does.
#pragma once
#include <string>

namespace primer::recipes {

// Reads the fused Hugging Face directory `fused_dir`, writes the unfused hybrid to `out_dir` (default
// "<fused_dir>_unfused") in the checkpoint's dtype with its tokenizer files. Returns a process exit code.
int run_unfuse(std::string fused_dir, std::string out_dir);

}  // namespace primer::recipes
