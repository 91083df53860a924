// `primer inspect PATH`: what a run directory (checkpoint-<step>/ directories, perhaps a Hugging Face export), one
// training checkpoint, a Hugging Face model directory (config.json + safetensors) or tokenized data (`primer
// tokenize`'s manifest.json + shards) holds: step, world size, parameters, the resolved recipe, the data cursor,
// the tokenizer and sources. With verify, every checksum the format has is checked (CRC32C of checkpoint files and
// token shards, HDF5's Fletcher32 of every checkpoint dataset) and non-finite values are counted.
#pragma once
#include <string>

#include "core/io/json.h"

namespace primer::recipes {

// The report as a JSON object ("kind", "path", then what that kind holds; "verify" sections with verify). Errors
// name the path and say which artifacts inspect recognises.
json::Value inspect_path(const std::string& path, bool verify);

// Prints the report (as text, or as JSON with as_json) and returns 0; after a verification that found problems,
// throws an error counting them (the report lists them).
int run_inspect(const std::string& path, bool verify, bool as_json);

}  // namespace primer::recipes
