// Hugging Face model directories as the commands take them: the check that one is there, and the non-weight files a
// converted checkpoint carries over.
#pragma once
#include <string>

namespace primer::recipes {

// Copies the tokenizer files of `from` (tokenizer.json, tokenizer_config.json, vocab.json, merges.txt,
// special_tokens_map.json, added_tokens.json, generation_config.json) into `to`; with all_auxiliary, every other
// regular file too except weights, config.json, README.md, LICENSE and .gitattributes (the reference's rule).
// Returns how many files were copied.
int copy_model_files(const std::string& from, const std::string& to, bool all_auxiliary);

// Checks that `dir` holds a Hugging Face model's config.json; otherwise fails saying what `dir` is instead (missing,
// a training checkpoint: with what to pass in its place, a directory without a model). `what` names the command or
// key that was given `dir`.
void check_model_dir(const std::string& dir, const std::string& what);

}  // namespace primer::recipes
