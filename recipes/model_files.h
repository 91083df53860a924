// The non-weight files of a Hugging Face model directory that a converted checkpoint carries over.
#pragma once
#include <string>

namespace primer::recipes {

// Copies the tokenizer files of `from` (tokenizer.json, tokenizer_config.json, vocab.json, merges.txt,
// special_tokens_map.json, added_tokens.json, generation_config.json) into `to`; with all_auxiliary, every other
// regular file too except weights, config.json, README.md, LICENSE and .gitattributes (the reference's rule).
// Returns how many files were copied.
int copy_model_files(const std::string& from, const std::string& to, bool all_auxiliary);

}  // namespace primer::recipes
