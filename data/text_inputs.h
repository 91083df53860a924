// Finding and cutting up the input files of a tokenize job: file lists from paths, directories and glob
// patterns, and line-aligned byte ranges of large JSONL files so that several workers share one file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace primer::data {

// Each entry is a file, a directory (every regular file below it, recursively, in path order) or a glob
// pattern (*, ?, [...]; matches in path order). An entry that matches nothing is an error naming `where`.
std::vector<std::string> expand_inputs(const std::vector<std::string>& entries, const std::string& where);

// [begin, end) byte ranges covering `text` (e.g. a memory-mapped file), each about `target_bytes` long and
// ending just after a '\n' (the last one at the end of the text).
std::vector<std::pair<size_t, size_t>> line_aligned_chunks(std::string_view text, size_t target_bytes);

}  // namespace primer::data
