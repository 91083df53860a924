// Moving models between primer and the Hugging Face / vLLM ecosystem. Every primer stage already reads and writes
// Hugging Face directories (config.json in the Priming reference's hybrid format + safetensors); these two commands
// cover the rest:
//   primer export recipe.yaml --out DIR   a training checkpoint (HDF5, fp32 masters) → a Hugging Face directory
//   primer import DIR --out DIR2          a Hugging Face checkpoint (a Transformer, or a hybrid from the reference
//                                         implementation or from primer) checked tensor by tensor and rewritten in
//                                         primer's canonical form and the chosen dtype, ready as model_name_or_path
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"

namespace primer::recipes {

// The recipe's model with the weights of `checkpoint` ("latest": the newest complete checkpoint in its output_dir;
// else a checkpoint directory), written to `out_dir` in `dtype` with the base model's tokenizer files.
int run_export(const std::string& recipe, const std::vector<std::string>& overrides, const std::string& checkpoint,
               const std::string& out_dir, DType dtype);

// Validates and rewrites a Hugging Face directory (see above). Prints the model's pattern and parameter counts.
int run_import(const std::string& in_dir, const std::string& out_dir, DType dtype);

// "bf16", "bfloat16", "fp16", "float16", "fp32", "float32" → the dtype; errors name the option.
DType parse_weights_dtype(const std::string& name, const std::string& option);

}  // namespace primer::recipes
